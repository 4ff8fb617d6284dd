/* fuzz/fuzz_safetensors.c — libFuzzer target: ct's safetensors codec (trainer/nn/safetensors.c)
 * on arbitrary bytes, as ct_module_load and the trainer's checkpoint loader feed it: the
 * header and its JSON, then every entry checked against the data section. Not the checkpoint's
 * metadata checks (ct__ckpt_load needs a trainer's state). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "trainer/nn/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ct__jval root;
    const unsigned char *body;
    size_t body_len;
    if (ct__st_parse(data, size, "fuzz", &root, &body, &body_len) < 0)
        return 0;
    for (int i = 0; i < root.n; i++) {
        ct__st_entry e;
        if (ct__st_entry_at(&root, i, body, body_len, "fuzz", &e) != 0)
            continue;
        /* touch the first and last byte: the entry must lie inside the buffer */
        volatile unsigned char sink = 0;
        if (e.bytes)
            sink =
                ((const unsigned char *)e.data)[0] ^ ((const unsigned char *)e.data)[e.bytes - 1];
        (void)sink;
    }
    ct__json_get_str(ct__json_get(&root, "__metadata__"), "format");
    ct__json_free(&root);
    return 0;
}
