/* fuzz/fuzz_yaml_config.c — libFuzzer target: ctup's cluster YAML parser and checker
 * (cluster/yaml_config.c) on arbitrary text, through ct_cluster_config_parse (the same code
 * ct_cluster_config_load runs on a file's bytes). */
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ct_cluster_config *cfg = NULL;
    if (ct_cluster_config_parse("fuzz.yaml", (const char *)data, size, &cfg) == 0)
        ct_cluster_config_destroy(&cfg);
    return 0;
}
