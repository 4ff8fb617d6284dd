/* cluster/provider_local.c — the `local` provider's transport: a host's script runs as
 * /bin/sh -c SCRIPT on this machine, and ct-head / ct-node are taken from ct.bin_dir or from
 * the directory ctup itself lives in (build/bin). Every node is its own process with its own
 * object store shard, spill directory and ports (ct-node picks free ones).
 *
 * Not in here: the scripts themselves (provider.c), ssh (provider_ssh.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cluster/cluster.h"
#include "common/common.h"

int ct__local_argv(const char *script, char **argv, int max_argv)
{
    if (max_argv < 4)
        return ct__error(CT_EINVAL, "ct__local_argv: argv too small");
    argv[0] = "/bin/sh";
    argv[1] = "-c";
    argv[2] = (char *)script;
    argv[3] = NULL;
    return 0;
}

int ct__local_bin_dir(const ct_cluster_config *cfg, char *out, size_t cap)
{
    int n;
    const char *home = getenv("HOME");
    if (cfg->bin_dir && !strncmp(cfg->bin_dir, "~/", 2) && home) {
        n = snprintf(out, cap, "%s/%s", home, cfg->bin_dir + 2); /* no shell to expand ~ here */
    } else if (cfg->bin_dir) {
        n = snprintf(out, cap, "%s", cfg->bin_dir);
    } else {
        char self[PATH_MAX];
        ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
        if (k <= 0)
            return ct__error(-errno, "readlink /proc/self/exe: %s", strerror(errno));
        self[k] = 0;
        n = snprintf(out, cap, "%s", dirname(self));
    }
    if (n < 0 || (size_t)n >= cap)
        return ct__error(CT_ERANGE, "bin_dir path too long");
    for (int i = 0; i < 2; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", out, i ? "ct-node" : "ct-head");
        if (access(p, X_OK))
            return ct__error(CT_ENOENT,
                             "%s: %s (set ct.bin_dir to the folder with ct-head and "
                             "ct-node)",
                             p, strerror(errno));
    }
    return 0;
}
