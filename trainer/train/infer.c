/* trainer/train/infer.c — ct_module_from_checkpoint (ct/infer.h): a model built from a
 * trainer's checkpoint alone. The checkpoint's metadata names the model's creator and holds
 * the run's config (ckpt.c writes both); the creator runs as in the driver's check-run (rank 0
 * of 1), then the weights load strictly (trainer/nn/module.c).
 *
 * Not here: the checkpoint format (ckpt.c), predict and generate (trainer/nn/generate.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/common.h"
#include "ct/infer.h"
#include "internal.h"
#include "trainer/nn/nn_impl.h"
#include "trainer/nn/safetensors.h"

/* The bytes of file path (caller frees *buf). */
static int slurp(const char *path, unsigned char **buf, size_t *len)
{
    *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct__error(CT_ENOENT, "module_from_checkpoint: cannot open %s: %s", path,
                         strerror(errno));
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    int rc = 0;
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0)
        rc = ct__error(CT_EIO, "module_from_checkpoint: %s: cannot size the file", path);
    else if (!(*buf = malloc((size_t)n + 1)))
        rc = ct__error(CT_ENOMEM, "module_from_checkpoint: out of memory");
    else if (fread(*buf, 1, (size_t)n, f) != (size_t)n)
        rc = ct__error(CT_EIO, "module_from_checkpoint: %s: read failed", path);
    fclose(f);
    if (rc < 0) {
        free(*buf);
        *buf = NULL;
    }
    *len = (size_t)(n > 0 ? n : 0);
    return rc;
}

int ct_module_from_checkpoint(const char *path, ct_module **out)
{
    char file[4400], what[4500];
    unsigned char *buf = NULL;
    size_t len = 0;
    ct__jval root = {0};
    trainer_ctx ctx;
    bool have_ctx = false;
    ct_module *m = NULL;
    int rc;
    if (out)
        *out = NULL;
    if (!path || !out)
        return ct__error(CT_EINVAL, "module_from_checkpoint: NULL %s", !path ? "path" : "out");
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* a checkpoint_dir: its latest */
        if ((rc = ct__ckptdir_latest(path, file, sizeof file)) < 0)
            return ct__trainer_error_prefix(rc, "module_from_checkpoint");
        if (rc == 1)
            return ct__error(CT_ENOENT, "module_from_checkpoint: directory %s holds no checkpoint",
                             path);
    } else {
        snprintf(file, sizeof file, "%s", path);
    }
    snprintf(what, sizeof what, "module_from_checkpoint: %s", file);
    if ((rc = slurp(file, &buf, &len)) < 0)
        goto out;
    const unsigned char *data;
    size_t data_len;
    if ((rc = ct__st_parse(buf, len, file, &root, &data, &data_len)) < 0)
        goto out;
    const ct__jval *meta = ct__json_get(&root, "__metadata__");
    const char *fmt = ct__json_get_str(meta, "format"), *name = ct__json_get_str(meta, "model");
    const char *config = ct__json_get_str(meta, "config"), *seed = ct__json_get_str(meta, "seed");
    if (!fmt || strcmp(fmt, CT__CKPT_FORMAT) || !name || !*name) {
        rc = ct__error(CT_EINVAL,
                       "%s: no trainer metadata (format \"%s\", model \"%s\"): not a trainer's "
                       "checkpoint (a ct_module_save file? build its model and ct_module_load "
                       "it)",
                       what, fmt ? fmt : "", name ? name : "");
        goto out;
    }
    if (strchr(name, ',')) {
        rc = ct__error(CT_EINVAL,
                       "%s: a checkpoint of several models (\"%s\"); this builds one: make them "
                       "with their creators and load m<i>.* with ct_module_load_state_dict",
                       what, name);
        goto out;
    }
    trainer_model_creator mc = (trainer_model_creator)ct__trainer_lookup(TR_MODEL, name);
    if (!mc) {
        rc = ct__trainer_not_registered(TR_MODEL, name, what);
        goto out;
    }
    if ((rc = ct__trainer_ctx_init(&ctx, config ? config : "", 0, 1,
                                   seed ? strtoull(seed, NULL, 10) : 0, 0, 0, true)) < 0) {
        rc = ct__trainer_error_prefix(rc, "%s: metadata \"config\"", what);
        goto out;
    }
    have_ctx = true;
    if (!(m = mc(&ctx)) || ctx.err[0]) {
        const char *why = ctx.err[0] ? ctx.err : ct_last_error();
        char msg[700];
        snprintf(msg, sizeof msg, "%s", why && *why ? why : "no message");
        rc = ct__error(CT_EINVAL, "%s: model creator \"%s\" failed: %s", what, name, msg);
        goto out;
    }
    if ((rc = ct__module_load_bytes(m, buf, len, file, true)) < 0) {
        rc = ct__trainer_error_prefix(rc, "module_from_checkpoint: model \"%s\" from its config",
                                      name);
        goto out;
    }
    *out = m;
    m = NULL;
out:
    if (have_ctx)
        ct__trainer_ctx_free(&ctx);
    ct_module_destroy(&m);
    ct__json_free(&root);
    free(buf);
    return rc;
}
