/* trainer/train/builtins.c — the creators every program has without registering them:
 * optimizers "adam", "adamw", "sgd"; losses "cross_entropy", "nll" (i64 labels), "mse", "l1",
 * "bce_with_logits" (f32 targets); schedulers "steplr", "multistep", "exponential", "cosine",
 * "warmup_cosine", "plateau"; data "fashion_mnist" (decoded once
 * per cluster and shared through the object store). Each reads its hyper-parameters from the config
 * (keys listed in ct/trainer.h). Not here: models (the user's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "common/common.h"
#include "internal.h"

/* nanoGPT's groups: weight decay on the matrices (parameters of 2 or more dims) only, none on
 * biases, norms' weights and other vectors (group 1) */
static ct_optim *make_adam_split(ct_module *model, const ct_param_ref *ps, int np,
                                 const ct_adam_opts *o, bool adamw)
{
    const ct_named_tensor *sd;
    int nsd;
    ct_param_ref *mat = calloc((size_t)np + 1, sizeof *mat),
                 *vec = calloc((size_t)np + 1, sizeof *vec);
    int nm = 0, nv = 0;
    ct_optim *opt = NULL;
    if (!mat || !vec || ct_module_state_dict(model, &sd, &nsd) < 0)
        goto out;
    for (int i = 0; i < np; i++) {
        int nd = 1;
        for (int j = 0; j < nsd; j++)
            if (!strcmp(sd[j].name, ps[i].name))
                nd = ct_tensor_ndim(sd[j].tensor);
        if (nd >= 2)
            mat[nm++] = ps[i];
        else
            vec[nv++] = ps[i];
    }
    ct_adam_opts none = *o;
    none.weight_decay = CT_ZERO;
    opt = adamw ? ct_optim_adamw_new(mat, nm, o) : ct_optim_adam_new(mat, nm, o);
    if (opt && nv && ct_optim_add_group(opt, vec, nv, &none) < 0)
        ct_optim_destroy(&opt);
out:
    free(mat);
    free(vec);
    return opt;
}

static ct_optim *make_adam_like(trainer_ctx *ctx, ct_module *model, bool adamw)
{
    const ct_param_ref *ps;
    int np;
    if (ct_module_params(model, &ps, &np) < 0)
        return NULL;
    ct_adam_opts o = {
        .lr = trainer_config_double(ctx, "lr", 1e-3),
        .beta1 = trainer_config_double(ctx, "beta1", 0.9),
        .beta2 = trainer_config_double(ctx, "beta2", 0.999),
        .eps = trainer_config_double(ctx, "eps", 1e-8),
        .weight_decay = trainer_config_double(ctx, "weight_decay", adamw ? 1e-2 : 0.0),
    };
    if (o.beta1 == 0)
        o.beta1 = CT_ZERO;
    if (o.weight_decay == 0)
        o.weight_decay = CT_ZERO;
    if (ct_adam_opts_check(&o) < 0) {
        trainer_ctx_fail(ctx, "%s", ct_last_error());
        return NULL;
    }
    if (!trainer_config_bool(ctx, "decay_matrices_only", false))
        return adamw ? ct_optim_adamw_new(ps, np, &o) : ct_optim_adam_new(ps, np, &o);
    return make_adam_split(model, ps, np, &o, adamw);
}

static ct_optim *make_adam(trainer_ctx *ctx, ct_module *model)
{
    return make_adam_like(ctx, model, false);
}

static ct_optim *make_adamw(trainer_ctx *ctx, ct_module *model)
{
    return make_adam_like(ctx, model, true);
}

static ct_optim *make_sgd(trainer_ctx *ctx, ct_module *model)
{
    const ct_param_ref *ps;
    int np;
    if (ct_module_params(model, &ps, &np) < 0)
        return NULL;
    ct_sgd_opts o = {.lr = trainer_config_double(ctx, "lr", 1e-2),
                     .momentum = trainer_config_double(ctx, "momentum", 0),
                     .weight_decay = trainer_config_double(ctx, "weight_decay", 0),
                     .nesterov = trainer_config_bool(ctx, "nesterov", false)};
    if (ct_sgd_opts_check(&o) < 0) {
        trainer_ctx_fail(ctx, "%s", ct_last_error());
        return NULL;
    }
    return ct_optim_sgd_new(ps, np, &o);
}

static float label_smoothing; /* per process: one trainer's loss at a time */

static ct_tensor *loss_ce(ct_tensor *out, ct_tensor *target)
{
    return ct_nn_cross_entropy(out, target, label_smoothing);
}

static trainer_loss_fn make_ce(trainer_ctx *ctx)
{
    double ls = trainer_config_double(ctx, "label_smoothing", 0);
    if (ls < 0 || ls > 1) {
        trainer_ctx_fail(ctx, "trainer config: key \"label_smoothing\": %g not in [0, 1]", ls);
        return NULL;
    }
    label_smoothing = (float)ls;
    return loss_ce;
}

static ct_tensor *loss_nll(ct_tensor *out, ct_tensor *target)
{
    return ct_nn_nll_loss(out, target);
}

static trainer_loss_fn make_nll(trainer_ctx *ctx)
{
    (void)ctx;
    return loss_nll;
}

static ct_tensor *loss_mse(ct_tensor *out, ct_tensor *target)
{
    return ct_nn_mse_loss(out, target);
}

static ct_tensor *loss_l1(ct_tensor *out, ct_tensor *target)
{
    return ct_nn_l1_loss(out, target);
}

static ct_tensor *loss_bce_logits(ct_tensor *out, ct_tensor *target)
{
    return ct_nn_bce_with_logits_loss(out, target);
}

static trainer_loss_fn make_mse(trainer_ctx *ctx)
{
    (void)ctx;
    return loss_mse;
}

static trainer_loss_fn make_l1(trainer_ctx *ctx)
{
    (void)ctx;
    return loss_l1;
}

static trainer_loss_fn make_bce_logits(trainer_ctx *ctx)
{
    (void)ctx;
    return loss_bce_logits;
}

static ct_sched *make_steplr(trainer_ctx *ctx, ct_optim *o)
{
    ct_steplr_opts so = {.step_size = (int)trainer_config_int(ctx, "step_size", 1),
                         .gamma = trainer_config_double(ctx, "gamma", 0.1)};
    return ct_sched_steplr_new(o, &so);
}

static ct_sched *make_multistep(trainer_ctx *ctx, ct_optim *o)
{
    ct_multistep_opts mo = {.gamma = trainer_config_double(ctx, "gamma", 0.1)};
    const char *ms = trainer_config_str(ctx, "milestones", "");
    for (const char *p = ms; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || mo.num_milestones == CT_SCHED_MAX_MILESTONES) {
            trainer_ctx_fail(ctx, "trainer config: key \"milestones\": \"%s\" is not n:n:...", ms);
            return NULL;
        }
        mo.milestones[mo.num_milestones++] = (int)v;
        p = *end == ':' ? end + 1 : end;
        if (*end && *end != ':') {
            trainer_ctx_fail(ctx, "trainer config: key \"milestones\": \"%s\" is not n:n:...", ms);
            return NULL;
        }
    }
    return ct_sched_multistep_new(o, &mo);
}

static ct_sched *make_exponential(trainer_ctx *ctx, ct_optim *o)
{
    return ct_sched_exponential_new(
        o, &(ct_exponential_opts){.gamma = trainer_config_double(ctx, "gamma", 0.9)});
}

static ct_sched *make_cosine(trainer_ctx *ctx, ct_optim *o)
{
    ct_cosine_opts co = {
        .t_max = (int)trainer_config_int(ctx, "t_max", ctx->epochs > 0 ? ctx->epochs : 1),
        .eta_min = trainer_config_double(ctx, "eta_min", 0)};
    return ct_sched_cosine_new(o, &co);
}

static ct_sched *make_warmup_cosine(trainer_ctx *ctx, ct_optim *o)
{
    ct_warmup_cosine_opts wo = {.warmup_steps = (int)trainer_config_int(ctx, "warmup_steps", 1),
                                .total_steps = (int)trainer_config_int(
                                    ctx, "total_steps", ctx->epochs > 0 ? ctx->epochs : 1),
                                .start_factor = trainer_config_double(ctx, "start_factor", 0),
                                .eta_min = trainer_config_double(ctx, "eta_min", 0)};
    return ct_sched_warmup_cosine_new(o, &wo);
}

/* ReduceLROnPlateau; the trainer steps it with the value named by plateau_metric (read in
 * registry.c, for a user's plateau scheduler too). */
static ct_sched *make_plateau(trainer_ctx *ctx, ct_optim *o)
{
    const char *mode = trainer_config_str(ctx, "mode", "min");
    const char *tmode = trainer_config_str(ctx, "threshold_mode", "rel");
    int64_t patience = trainer_config_int(ctx, "patience", 10);
    double threshold = trainer_config_double(ctx, "threshold", 1e-4);
    double eps = trainer_config_double(ctx, "eps", 1e-8);
    ct_plateau_opts po = {.mode = !strcmp(mode, "max") ? CT_PLATEAU_MAX : CT_PLATEAU_MIN,
                          .factor = trainer_config_double(ctx, "factor", 0.1),
                          .patience = patience == 0 ? CT_PATIENCE_ZERO : (int)patience,
                          .threshold = threshold == 0 ? CT_ZERO : threshold,
                          .threshold_mode =
                              !strcmp(tmode, "abs") ? CT_THRESHOLD_ABS : CT_THRESHOLD_REL,
                          .cooldown = (int)trainer_config_int(ctx, "cooldown", 0),
                          .min_lr = trainer_config_double(ctx, "min_lr", 0),
                          .eps = eps == 0 ? CT_ZERO : eps};
    if (strcmp(mode, "min") && strcmp(mode, "max")) {
        trainer_ctx_fail(ctx, "trainer config: key \"mode\": \"%s\" is not min or max", mode);
        return NULL;
    }
    if (strcmp(tmode, "rel") && strcmp(tmode, "abs")) {
        trainer_ctx_fail(ctx, "trainer config: key \"threshold_mode\": \"%s\" is not rel or abs",
                         tmode);
        return NULL;
    }
    if (patience < 0 || po.cooldown < 0 || po.factor <= 0) {
        trainer_ctx_fail(ctx, "trainer config: key \"%s\" must be %s",
                         patience < 0      ? "patience"
                         : po.cooldown < 0 ? "cooldown"
                                           : "factor",
                         po.factor <= 0 ? "> 0" : ">= 0");
        return NULL;
    }
    return ct_sched_plateau_new(o, &po);
}

static const float fmnist_mean[] = {0.2860f}, fmnist_std[] = {0.3530f};

/* ---- Fashion-MNIST, decoded once per cluster ----
 * Inflating the gzip'd IDX files costs ~250 ms, paid by every replica a group starts (after a
 * failure too). So the first process that decodes a split (the driver's check-run) stores the
 * decoded bytes in the object store ("CTFM", u32 n, h, w, n labels, n*h*w pixels) and names the
 * object in the head's KV under the file's path, size and mtime; replicas find it there and
 * read the pixels zero-copy from their node's shard (pulled once per node). A driver with no
 * ct-node on its host uploads it to a node and reads back a private copy (ct.h, remote
 * driver). Without a store at all a process decodes for itself. The object lives until the cluster
 * ends. Samples are x / 255.0f, as ct_dataset_open_mnist. */

typedef struct fm_data {
    ct_object_view view; /* pinned while the dataset lives, or */
    uint8_t *own;        /* a private copy */
    const uint8_t *labels, *pixels;
    int64_t hw;
} fm_data;

static int fm_get(void *self, int64_t i, float *x, int64_t *label)
{
    fm_data *d = self;
    const uint8_t *p = d->pixels + i * d->hw;
    for (int64_t k = 0; k < d->hw; k++)
        x[k] = p[k] / 255.0f;
    *label = d->labels[i];
    return 0;
}

static void fm_destroy(void *self)
{
    fm_data *d = self;
    ct_object_release(&d->view);
    free(d->own);
    free(d);
}

static int fm_wrap(fm_data *d, const uint8_t *buf, size_t len, ct_dataset **out)
{
    uint32_t hdr[4];
    if (len < 16 || (memcpy(hdr, buf, 16), memcmp(hdr, "CTFM", 4)))
        return ct__error(CT_EINVAL, "fashion_mnist cache: bad object");
    int64_t n = hdr[1], h = hdr[2], w = hdr[3];
    if ((size_t)(16 + n + n * h * w) != len)
        return ct__error(CT_EINVAL, "fashion_mnist cache: %zu bytes for %lld x %lld x %lld", len,
                         (long long)n, (long long)h, (long long)w);
    d->labels = buf + 16;
    d->pixels = buf + 16 + n;
    d->hw = h * w;
    int64_t shape[3] = {1, h, w};
    return ct_dataset_new(&(ct_dataset_ops){.get = fm_get, .destroy = fm_destroy}, d, n, 3, shape,
                          out);
}

/* Reads a whole IDX file (gzip or raw) with its expected magic; *dims filled, data malloc'd. */
static int idx_read(const char *path, uint32_t magic, uint32_t *dims, int ndims, uint8_t **data,
                    size_t *len)
{
    gzFile f = gzopen(path, "rb");
    if (!f)
        return ct__error(CT_ENOENT, "fashion_mnist: cannot open %s", path);
    unsigned char h[16];
    int rc = 0, want = 4 + 4 * ndims;
    *data = NULL;
    if (gzread(f, h, (unsigned)want) != want) {
        rc = ct__error(CT_EIO, "fashion_mnist: %s: truncated header", path);
        goto out;
    }
    uint32_t m = (uint32_t)h[0] << 24 | h[1] << 16 | h[2] << 8 | h[3];
    if (m != magic) {
        rc = ct__error(CT_EINVAL, "fashion_mnist: %s: magic 0x%08x, expected 0x%08x", path, m,
                       magic);
        goto out;
    }
    size_t n = 1;
    for (int i = 0; i < ndims; i++) {
        const unsigned char *q = h + 4 + 4 * i;
        dims[i] = (uint32_t)q[0] << 24 | q[1] << 16 | q[2] << 8 | q[3];
        n *= dims[i];
    }
    if (n > ((size_t)1 << 32) || !(*data = malloc(n ? n : 1))) {
        rc = ct__error(CT_ENOMEM, "fashion_mnist: %s: %zu bytes", path, n);
        goto out;
    }
    if ((size_t)gzread(f, *data, (unsigned)n) != n) {
        rc = ct__error(CT_EIO, "fashion_mnist: %s: data ends early", path);
        goto out;
    }
    *len = n;
out:
    if (rc < 0) {
        free(*data);
        *data = NULL;
    }
    gzclose(f);
    return rc;
}

/* path of a split's file, .gz preferred */
static int split_path(const char *dir, const char *stem, char *out, size_t cap, struct stat *st)
{
    snprintf(out, cap, "%s/%s.gz", dir, stem);
    if (stat(out, st) == 0)
        return 0;
    snprintf(out, cap, "%s/%s", dir, stem);
    if (stat(out, st) == 0)
        return 0;
    return ct__error(CT_ENOENT, "fashion_mnist: no %s[.gz] in %s", stem, dir);
}

static int fm_open(const char *dir, bool train, ct_dataset **out)
{
    char ip[600], lp[600], key[1400];
    struct stat si, sl;
    const char *pre = train ? "train" : "t10k";
    char stem[64];
    int rc;
    snprintf(stem, sizeof stem, "%s-images-idx3-ubyte", pre);
    if ((rc = split_path(dir, stem, ip, sizeof ip, &si)) < 0)
        return rc;
    snprintf(stem, sizeof stem, "%s-labels-idx1-ubyte", pre);
    if ((rc = split_path(dir, stem, lp, sizeof lp, &sl)) < 0)
        return rc;
    snprintf(key, sizeof key, "trainer/fmnist/%s/%lld.%lld/%s/%lld.%lld", ip, (long long)si.st_size,
             (long long)si.st_mtime, lp, (long long)sl.st_size, (long long)sl.st_mtime);
    fm_data *d = calloc(1, sizeof *d);
    if (!d)
        return CT_ENOMEM;
    /* cached by another process of the cluster? */
    void *v = NULL;
    size_t vlen = 0;
    ct_object_id id;
    if (ct_kv_get(key, &v, &vlen, 0) == 0 && vlen == sizeof id) {
        memcpy(&id, v, sizeof id);
        if (ct_get(&id, 0, &d->view) == 0) {
            free(v);
            if ((rc = fm_wrap(d, d->view.data, d->view.size, out)) < 0)
                fm_destroy(d);
            return rc;
        }
    }
    free(v);
    /* decode */
    uint32_t idims[3] = {0}, ldims[1] = {0};
    uint8_t *px = NULL, *lab = NULL;
    size_t npx = 0, nlab = 0;
    if ((rc = idx_read(ip, 0x00000803u, idims, 3, &px, &npx)) < 0 ||
        (rc = idx_read(lp, 0x00000801u, ldims, 1, &lab, &nlab)) < 0)
        goto fail;
    if (idims[0] != ldims[0]) {
        rc = ct__error(CT_EINVAL, "fashion_mnist: %u images but %u labels", idims[0], ldims[0]);
        goto fail;
    }
    size_t len = 16 + nlab + npx;
    uint32_t hdr[4] = {0, idims[0], idims[1], idims[2]};
    memcpy(hdr, "CTFM", 4);
    void *dst = NULL;
    if (ct_object_create(len, &id, &dst) == 0) {
        memcpy(dst, hdr, 16);
        memcpy((char *)dst + 16, lab, nlab);
        memcpy((char *)dst + 16 + nlab, px, npx);
        if (ct_object_seal(&id, NULL) == 0 && ct_get(&id, 0, &d->view) == 0) {
            ct_kv_put(key, &id, sizeof id);
            free(px);
            free(lab);
            if ((rc = fm_wrap(d, d->view.data, d->view.size, out)) < 0)
                fm_destroy(d);
            return rc;
        }
        ct_object_abort(&id);
    }
    /* no store: a private copy */
    if (!(d->own = malloc(len))) {
        rc = CT_ENOMEM;
        goto fail;
    }
    memcpy(d->own, hdr, 16);
    memcpy(d->own + 16, lab, nlab);
    memcpy(d->own + 16 + nlab, px, npx);
    free(px);
    free(lab);
    if ((rc = fm_wrap(d, d->own, len, out)) < 0)
        fm_destroy(d);
    return rc;
fail:
    free(px);
    free(lab);
    fm_destroy(d);
    return rc;
}

static int make_fashion_mnist(trainer_ctx *ctx, trainer_data *d)
{
    const char *dir = trainer_config_str(ctx, "data_dir", CT_FASHION_MNIST_DIR);
    int64_t limit = trainer_config_int(ctx, "limit", 0);
    int64_t val_limit = trainer_config_int(ctx, "val_limit", 0);
    /* augmentation of the training batches (validation batches are never augmented) */
    int64_t crop_pad = trainer_config_int(ctx, "crop_pad", 0);
    double hflip = trainer_config_double(ctx, "hflip", 0);
    if (!ctx->err[0] && (crop_pad < 0 || crop_pad > 14 || hflip < 0 || hflip > 1))
        trainer_ctx_fail(ctx, "fashion_mnist: crop_pad must be 0..14 and hflip 0..1");
    if (ctx->err[0])
        return CT_EINVAL;
    ct_dataset *train = NULL, *test = NULL;
    int rc;
    if ((rc = fm_open(dir, true, &train)) < 0)
        return rc;
    if ((rc = fm_open(dir, false, &test)) < 0) {
        ct_dataset_destroy(&train);
        return rc;
    }
    d->keep[0] = train;
    d->keep[1] = test;
    int64_t n = ct_dataset_length(train), nv = ct_dataset_length(test);
    if (limit > 0 && limit < n)
        n = limit;
    if (val_limit > 0 && val_limit < nv)
        nv = val_limit;
    if ((rc = ct_dataset_subset(train, 0, n, &d->train)) < 0 ||
        (rc = ct_dataset_subset(test, 0, nv, &d->val)) < 0)
        return rc; /* the trainer frees what was filled */
    d->transform = (ct_transform_opts){.mean = fmnist_mean, .std = fmnist_std};
    if (crop_pad > 0) {
        d->transform.crop_h = d->transform.crop_w = 28;
        d->transform.crop_pad = (int)crop_pad;
    }
    d->transform.hflip_p = (float)hflip;
    d->num_classes = 10;
    return 0;
}

/* model "gpt" (nanoGPT's, ct_nn_gpt_new): n_layer [4], n_head [4], n_embd [128], block_size
 * [64], vocab_size [256: bytes], dropout [0] */
static ct_module *make_gpt(trainer_ctx *ctx)
{
    ct_gpt_config c = {.n_layer = (int)trainer_config_int(ctx, "n_layer", 4),
                       .n_head = (int)trainer_config_int(ctx, "n_head", 4),
                       .n_embd = trainer_config_int(ctx, "n_embd", 128),
                       .block_size = trainer_config_int(ctx, "block_size", 64),
                       .vocab_size = trainer_config_int(ctx, "vocab_size", 256),
                       .dropout = (float)trainer_config_double(ctx, "dropout", 0.0)};
    ct_module *m = ct_nn_gpt_new(&c);
    if (!m)
        trainer_ctx_fail(ctx, "gpt: %s", ct_last_error());
    return m;
}

/* data "text" (ct_dataset_open_text, sharded): text_file (byte-level) or token_file (a token
 * file, ct_dataset_open_tokens: the vocabulary is its header's), block_size [64],
 * val_fraction [0.1] */
static int make_text(trainer_ctx *ctx, trainer_data *d)
{
    const char *path = trainer_config_str(ctx, "text_file", "");
    const char *tokens = trainer_config_str(ctx, "token_file", "");
    ct_text_opts o = {.block_size = trainer_config_int(ctx, "block_size", 64),
                      .rank = trainer_ctx_rank(ctx),
                      .world_size = trainer_ctx_world_size(ctx),
                      .val_fraction = trainer_config_double(ctx, "val_fraction", 0.1)};
    if (!path[0] == !tokens[0]) {
        trainer_ctx_fail(ctx, "text: one of the config keys text_file and token_file is required");
        return CT_EINVAL;
    }
    int (*open)(const char *, const ct_text_opts *, ct_dataset **) =
        tokens[0] ? ct_dataset_open_tokens : ct_dataset_open_text;
    ct_tokens_info info = {.vocab_size = 256};
    int rc = tokens[0] ? ct_tokens_read_info(tokens, &info) : 0;
    path = tokens[0] ? tokens : path;
    d->sharded = true;
    if (rc == 0)
        rc = open(path, &o, &d->train);
    if (rc == 0 && o.val_fraction > 0) {
        o.val = true;
        rc = open(path, &o, &d->val);
    }
    d->num_classes = info.vocab_size;
    d->tokens = true; /* validation reports perplexity */
    return rc;
}

/* A built-in creator. paths: the config keys whose values it opens as files or directories
 * (comma-separated), which the driver makes absolute before the spec goes to the replicas: they
 * run in their node's working directory, not the driver's (ct__trainer_absolute_paths). */
typedef struct builtin {
    tr_kind kind;
    const char *name;
    void *fn;
    const char *paths;
} builtin;

static const builtin builtins[] = {
    {TR_OPTIM, "adam", (void *)make_adam},
    {TR_OPTIM, "adamw", (void *)make_adamw},
    {TR_OPTIM, "sgd", (void *)make_sgd},
    {TR_LOSS, "cross_entropy", (void *)make_ce},
    {TR_LOSS, "nll", (void *)make_nll},
    {TR_LOSS, "mse", (void *)make_mse},
    {TR_LOSS, "l1", (void *)make_l1},
    {TR_LOSS, "bce_with_logits", (void *)make_bce_logits},
    {TR_SCHED, "steplr", (void *)make_steplr},
    {TR_SCHED, "multistep", (void *)make_multistep},
    {TR_SCHED, "exponential", (void *)make_exponential},
    {TR_SCHED, "cosine", (void *)make_cosine},
    {TR_SCHED, "warmup_cosine", (void *)make_warmup_cosine},
    {TR_SCHED, "plateau", (void *)make_plateau},
    {TR_DATA, "fashion_mnist", (void *)make_fashion_mnist, "data_dir"},
    {TR_MODEL, "gpt", (void *)make_gpt},
    {TR_DATA, "text", (void *)make_text, "text_file,token_file"},
};

void *ct__trainer_builtin(tr_kind kind, const char *name)
{
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (builtins[i].kind == kind && !strcmp(builtins[i].name, name))
            return builtins[i].fn;
    return NULL;
}

const char *ct__trainer_builtin_paths(tr_kind kind, const char *name)
{
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (builtins[i].kind == kind && !strcmp(builtins[i].name, name))
            return builtins[i].paths ? builtins[i].paths : "";
    return "";
}

const char *ct__trainer_builtin_name(tr_kind kind, int i)
{
    for (size_t k = 0; k < sizeof builtins / sizeof builtins[0]; k++)
        if (builtins[k].kind == kind && i-- == 0)
            return builtins[k].name;
    return NULL;
}
