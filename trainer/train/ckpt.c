/* trainer/train/ckpt.c — the checkpoint codec: a replica's state (model parameters and
 * buffers, optimizer and scheduler state, epoch, step, creator names, config) to and from the
 * bytes of a safetensors file (the codec itself is trainer/nn/safetensors.c, shared with
 * ct_module_save/load).
 *
 * Layout: u64 little-endian header length N (a multiple of 8: padded with spaces), N bytes of
 * JSON {"__metadata__": {string: string}, "<name>": {"dtype", "shape", "data_offsets"}, ...},
 * then the tensors back to back in header order (model state dict in PyTorch's order, then
 * "optim.<entry>" tensors; several models: every model's state dict with "m<i>." before each
 * name, then every optimizer's tensors as "optim<i>.<entry>", also the prefix of optimizer i's
 * keys in "optimizer_state"). Non-tensor optimizer / scheduler entries go into the metadata
 * strings "optimizer_state" / "scheduler_state" as JSON objects (numbers printed with 17
 * significant digits: exact round trip). With precision f16 the loss scaler's state is the
 * metadata string "grad_scaler" ({"scale", "growth_tracker"}, torch's GradScaler names) and
 * "skipped_steps"; a checkpoint without them loads with a fresh scaler. Not here: where the
 * bytes are stored. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "internal.h"
#include "objectstore/crc32c.h"
#include "trainer/backend/backend.h"
#include "trainer/nn/safetensors.h"

#define CKPT_FORMAT CT__CKPT_FORMAT
/* version 2 added "batch" (a checkpoint within an epoch) and per-batch random draws; a
 * version-1 file (always at an epoch's end) still loads */
#define CKPT_VERSION "2"

/* ---- writing ---- */

typedef struct piece {
    const void *data;
    size_t bytes;
    const ct__backend *staged; /* data is host staging of this device's (freed with the plan) */
} piece;

struct tr_ckpt_plan {
    ct__sbuf hdr; /* padded to a multiple of 8 */
    piece *pieces;
    int npieces;
    size_t data_bytes;
};

/* The prefix of model m's entries ("m<m>.") and of optimizer m's ("optim<m>."; also its keys in
 * "optimizer_state") in a checkpoint of n models; one model: "" and "optim." (version 2's). */
static void prefixes(int m, int n, char *model, char *optim)
{
    if (n == 1) {
        model[0] = 0;
        snprintf(optim, 16, "%s", CT__CKPT_OPTIM_PREFIX);
    } else {
        snprintf(model, 16, "m%d.", m % TR_MAX_MODELS);
        snprintf(optim, 16, "optim%d.", m % TR_MAX_MODELS);
    }
}

/* "name": number-or-string of the non-tensor entries, prefixed with pre (the object's braces
 * are the caller's); *k counts the entries written. */
static void state_json(ct__sbuf *b, const ct_state_entry *e, int n, const char *pre, int *k)
{
    for (int i = 0; i < n; i++) {
        if (e[i].kind == CT_STATE_TENSOR)
            continue;
        if ((*k)++)
            ct__sb_add(b, ",", 1);
        char name[300];
        snprintf(name, sizeof name, "%s%s", pre, e[i].name);
        ct__sb_json_str(b, name);
        ct__sb_add(b, ":", 1);
        if (e[i].kind == CT_STATE_SCALAR)
            ct__sb_json_num(b, e[i].scalar);
        else
            ct__sb_json_str(b, e[i].str ? e[i].str : "");
    }
}

static void meta_kv(ct__sbuf *b, const char *k, const char *v, bool first)
{
    if (!first)
        ct__sb_add(b, ",", 1);
    ct__sb_json_str(b, k);
    ct__sb_add(b, ":", 1);
    ct__sb_json_str(b, v);
}

/* One tensor of the checkpoint: its header entry and its bytes. */
static int plan_tensor(tr_ckpt_plan *p, const char *name, ct_tensor *t, size_t *off)
{
    ct_dtype dt = ct_tensor_dtype(t);
    if ((dt != CT_F32 && dt != CT_I64) || !ct_tensor_is_contiguous(t) || !ct_tensor_is_plain(t))
        return ct__error(CT_EINVAL, "checkpoint: state entry \"%s\" is not plain F32/I64", name);
    size_t bytes = (size_t)ct_tensor_numel(t) * ct_dtype_size(dt);
    ct__st_add_tensor(&p->hdr, false, name, dt, ct_tensor_ndim(t), ct_tensor_shape(t), *off, bytes);
    ct_device dev = ct_tensor_device(t);
    if (dev == CT_CPU) {
        p->pieces[p->npieces++] = (piece){ct_tensor_data(t), bytes, NULL};
    } else { /* a device's tensor: into host staging (pinned on CUDA), the same bytes */
        const ct__backend *bk = ct__backend_of(dev);
        void *h = NULL;
        int rc = bk ? bk->host_alloc(&h, bytes) : CT_ENOSYS;
        if (rc == 0 && (rc = ct_tensor_copy_to(t, h, bytes)) < 0)
            bk->host_free(h);
        if (rc < 0)
            return ct__error(rc, "checkpoint: state entry \"%s\" from device %s: %s", name,
                             bk ? bk->name : "?", ct_last_error());
        p->pieces[p->npieces++] = (piece){h, bytes, bk};
    }
    *off += bytes;
    return 0;
}

int ct__ckpt_plan(const tr_state *st, const tr_spec *spec, int world, const tr_zero_state *full,
                  tr_ckpt_plan **out)
{
    *out = NULL;
    const ct_named_tensor *sd[TR_MAX_MODELS];
    const ct_state_entry *oe[TR_MAX_MODELS], *se = NULL;
    int nsd[TR_MAX_MODELS], noe[TR_MAX_MODELS], nse = 0, rc, n = st->nmodels, total = 0;
    for (int m = 0; m < n; m++) {
        if ((rc = ct_module_state_dict(st->models[m], &sd[m], &nsd[m])) < 0)
            return rc;
        if (full) { /* ZeRO: the shards gathered (zero.c) */
            oe[m] = full[m].e;
            noe[m] = full[m].n;
        } else if ((rc = ct_optim_state_dict(st->optims[m], &oe[m], &noe[m])) < 0) {
            return rc;
        }
        total += nsd[m] + noe[m];
    }
    if (st->sched && (rc = ct_sched_state_dict(st->sched, &se, &nse)) < 0)
        return rc;
    tr_ckpt_plan *p = calloc(1, sizeof *p);
    if (!p || !(p->pieces = calloc((size_t)(total + 1), sizeof *p->pieces))) {
        free(p);
        return ct__error(CT_ENOMEM, "checkpoint: out of memory");
    }
    ct__sbuf *b = &p->hdr, js = {0};
    char num[32], mpre[16], opre[16];
    ct__sb_add(b, "{\"__metadata__\":{", 17);
    meta_kv(b, "format", CKPT_FORMAT, true);
    meta_kv(b, "format_version", CKPT_VERSION, false);
    snprintf(num, sizeof num, "%lld", (long long)st->epoch);
    meta_kv(b, "epoch", num, false);
    snprintf(num, sizeof num, "%lld", (long long)st->step);
    meta_kv(b, "step", num, false);
    snprintf(num, sizeof num, "%lld", (long long)st->batch);
    meta_kv(b, "batch", num, false);
    if (st->offset > 0) { /* a live recovery re-sharded this epoch (tr_state.offset) */
        snprintf(num, sizeof num, "%lld", (long long)st->offset);
        meta_kv(b, "offset", num, false);
    }
    snprintf(num, sizeof num, "%d", world);
    meta_kv(b, "world_size", num, false);
    if (st->epoch_samples > 0) { /* a train_loss plateau's sums within the epoch */
        snprintf(num, sizeof num, "%.17g", st->epoch_loss_sum);
        meta_kv(b, "plateau_loss_sum", num, false);
        snprintf(num, sizeof num, "%lld", (long long)st->epoch_samples);
        meta_kv(b, "plateau_samples", num, false);
    }
    if (st->scaler) { /* f16's loss scaler: torch's GradScaler state_dict entries */
        char sc[96];
        snprintf(sc, sizeof sc, "{\"scale\":%.9g,\"growth_tracker\":%d}",
                 (double)ct_grad_scaler_scale(st->scaler),
                 ct_grad_scaler_growth_tracker(st->scaler));
        meta_kv(b, "grad_scaler", sc, false);
        snprintf(num, sizeof num, "%lld", (long long)st->skipped);
        meta_kv(b, "skipped_steps", num, false);
    }
    snprintf(num, sizeof num, "%llu", (unsigned long long)spec->seed);
    meta_kv(b, "seed", num, false);
    meta_kv(b, "rng",
            "reseeded per batch: generator seed = f(seed, epoch, rank, batch); loader "
            "permutation = seed + epoch",
            false);
    meta_kv(b, "model", spec->model, false);
    meta_kv(b, "data", spec->data, false);
    meta_kv(b, "optimizer", spec->optimizer, false);
    meta_kv(b, "loss", spec->loss, false);
    meta_kv(b, "scheduler", spec->scheduler, false);
    meta_kv(b, "config", spec->config, false);
    int k = 0;
    ct__sb_add(&js, "{", 1);
    for (int m = 0; m < n; m++) {
        prefixes(m, n, mpre, opre);
        state_json(&js, oe[m], noe[m], n == 1 ? "" : opre, &k);
    }
    ct__sb_add(&js, "}", 1);
    meta_kv(b, "optimizer_state", js.s ? js.s : "{}", false);
    js.len = 0;
    if (st->sched) {
        k = 0;
        ct__sb_add(&js, "{", 1);
        state_json(&js, se, nse, "", &k);
        ct__sb_add(&js, "}", 1);
        meta_kv(b, "scheduler_state", js.s ? js.s : "{}", false);
    }
    if (js.oom)
        b->oom = 1;
    free(js.s);
    ct__sb_add(b, "}", 1);
    size_t off = 0;
    for (int m = 0; m < n; m++) { /* every model's state dict, then every optimizer's */
        prefixes(m, n, mpre, opre);
        for (int i = 0; i < nsd[m]; i++) {
            char name[300];
            snprintf(name, sizeof name, "%s%s", mpre, sd[m][i].name);
            if ((rc = plan_tensor(p, name, sd[m][i].tensor, &off)) < 0)
                goto fail;
        }
    }
    for (int m = 0; m < n; m++) {
        prefixes(m, n, mpre, opre);
        for (int i = 0; i < noe[m]; i++) {
            if (oe[m][i].kind != CT_STATE_TENSOR)
                continue;
            char name[300];
            snprintf(name, sizeof name, "%s%s", opre, oe[m][i].name);
            size_t bytes = (size_t)oe[m][i].numel * sizeof(float);
            int64_t shape[1] = {oe[m][i].numel};
            ct__st_add_tensor(b, false, name, CT_F32, 1, shape, off, bytes);
            p->pieces[p->npieces++] = (piece){oe[m][i].data, bytes};
            off += bytes;
        }
    }
    ct__sb_add(b, "}", 1);
    ct__st_pad(b);
    if (b->oom) {
        rc = ct__error(CT_ENOMEM, "checkpoint: out of memory");
        goto fail;
    }
    p->data_bytes = off;
    *out = p;
    return 0;
fail:
    ct__ckpt_plan_free(&p);
    return rc;
}

size_t ct__ckpt_size(const tr_ckpt_plan *p)
{
    return 8 + p->hdr.len + p->data_bytes;
}

uint32_t ct__ckpt_write(const tr_ckpt_plan *p, void *dst)
{
    uint64_t hl = p->hdr.len; /* little-endian host (x86-64, aarch64) */
    char *d = dst;
    uint32_t crc = ct__crc32c_copy(0, d, &hl, 8);
    crc = ct__crc32c_copy(crc, d + 8, p->hdr.s, p->hdr.len);
    d += 8 + p->hdr.len;
    for (int i = 0; i < p->npieces; i++) { /* the CRC rides along with the copy, memory bound */
        crc = ct__crc32c_copy(crc, d, p->pieces[i].data, p->pieces[i].bytes);
        d += p->pieces[i].bytes;
    }
    return crc;
}

void ct__ckpt_plan_free(tr_ckpt_plan **pp)
{
    if (!pp || !*pp)
        return;
    free((*pp)->hdr.s);
    for (int i = 0; (*pp)->pieces && i < (*pp)->npieces; i++)
        if ((*pp)->pieces[i].staged)
            (*pp)->pieces[i].staged->host_free((void *)(*pp)->pieces[i].data);
    free((*pp)->pieces);
    free(*pp);
    *pp = NULL;
}

/* ---- reading ---- */

/* Entries of a state JSON object (scalars and strings), appended to e[*n]. */
static int state_entries(const char *json, const char *what, ct_state_entry *e, int *n, int cap,
                         ct__jval *keep)
{
    char err[160] = "";
    if (ct__json_parse(json, strlen(json), keep, err, sizeof err) < 0 || keep->type != CT__J_OBJ)
        return ct__error(CT_EINVAL, "checkpoint: metadata \"%s\" is not a JSON object: %s", what,
                         err);
    for (int i = 0; i < keep->n; i++) {
        const ct__jval *v = &keep->items[i];
        if (*n == cap)
            return ct__error(CT_EINVAL, "checkpoint: \"%s\" has too many entries", what);
        if (v->type == CT__J_NUM || v->type == CT__J_BOOL)
            e[(*n)++] =
                (ct_state_entry){.name = keep->keys[i], .kind = CT_STATE_SCALAR, .scalar = v->num};
        else if (v->type == CT__J_STR)
            e[(*n)++] =
                (ct_state_entry){.name = keep->keys[i], .kind = CT_STATE_STRING, .str = v->str};
        else
            return ct__error(CT_EINVAL, "checkpoint: \"%s\" entry \"%s\" is not a number or string",
                             what, keep->keys[i]);
    }
    return 0;
}

/* Which model's (or optimizer's, with opt) entry name is in a checkpoint of n models: the
 * index, with *rest the name without its prefix; -1 when it has none of them. */
static int owner(const char *name, int n, bool opt, const char **rest)
{
    char mpre[16], opre[16];
    for (int m = 0; m < n; m++) {
        prefixes(m, n, mpre, opre);
        const char *pre = opt ? opre : mpre;
        size_t len = strlen(pre);
        if (!strncmp(name, pre, len)) {
            *rest = name + len;
            return m;
        }
    }
    return -1;
}

static int check_name(const ct__jval *meta, const char *key, const char *want)
{
    const char *got = ct__json_get_str(meta, key);
    if (!got)
        return ct__error(CT_EINVAL, "checkpoint: metadata \"%s\" missing", key);
    if (strcmp(got, want))
        return ct__error(CT_EINVAL, "checkpoint: made with %s \"%s\", this trainer's %s is \"%s\"",
                         key, got, key, want);
    return 0;
}

int ct__ckpt_load(tr_state *st, const tr_spec *spec, const void *buf, size_t len)
{
    ct__jval root = {0}, ojs = {0}, sjs = {0}, gjs = {0};
    ct_named_tensor *model_in = NULL, *part = NULL;
    ct_state_entry *oe = NULL, *se = NULL, *opart = NULL;
    int *model_of = NULL, *optim_of = NULL;
    float **ocopies = NULL;
    int nmodel = 0, noe = 0, nse = 0, rc = 0, ncopies = 0, n = st->nmodels;
    const unsigned char *data;
    size_t data_len;
    if ((rc = ct__st_parse(buf, len, "checkpoint", &root, &data, &data_len)) < 0)
        return rc;
    const ct__jval *meta = ct__json_get(&root, "__metadata__");
    const char *fmt = ct__json_get_str(meta, "format"),
               *ver = ct__json_get_str(meta, "format_version");
    if (!fmt || strcmp(fmt, CKPT_FORMAT) || !ver ||
        (strcmp(ver, CKPT_VERSION) && strcmp(ver, "1"))) {
        rc = ct__error(CT_EINVAL,
                       "checkpoint: metadata format \"%s\" version \"%s\", expected \"%s\" \"1\" "
                       "or \"%s\"",
                       fmt ? fmt : "(none)", ver ? ver : "(none)", CKPT_FORMAT, CKPT_VERSION);
        goto out;
    }
    if ((rc = check_name(meta, "model", spec->model)) < 0 ||
        (rc = check_name(meta, "optimizer", spec->optimizer)) < 0 ||
        (rc = check_name(meta, "scheduler", spec->scheduler)) < 0)
        goto out;
    const char *ep = ct__json_get_str(meta, "epoch"), *sp = ct__json_get_str(meta, "step");
    if (!ep || !sp) {
        rc = ct__error(CT_EINVAL, "checkpoint: metadata \"%s\" missing", !ep ? "epoch" : "step");
        goto out;
    }
    const char *bp = ct__json_get_str(meta, "batch"), *wp = ct__json_get_str(meta, "world_size");
    int64_t batch = bp ? strtoll(bp, NULL, 10) : 0; /* version 1: at an epoch's end */
    if (batch < 0) {
        rc = ct__error(CT_EINVAL, "checkpoint: metadata \"batch\" is \"%s\"", bp);
        goto out;
    }
    const char *offp = ct__json_get_str(meta, "offset");
    int64_t offset = offp ? strtoll(offp, NULL, 10) : 0; /* absent: no live re-shard */
    if (offset < 0) {
        rc = ct__error(CT_EINVAL, "checkpoint: metadata \"offset\" is \"%s\"", offp);
        goto out;
    }
    model_in = calloc((size_t)root.n + 1, sizeof *model_in);
    part = calloc((size_t)root.n + 1, sizeof *part);
    model_of = calloc((size_t)root.n + 1, sizeof *model_of);
    oe = calloc((size_t)root.n + 256, sizeof *oe);
    opart = calloc((size_t)root.n + 256, sizeof *opart);
    optim_of = calloc((size_t)root.n + 256, sizeof *optim_of);
    ocopies = calloc((size_t)root.n + 1, sizeof *ocopies);
    se = calloc(256, sizeof *se);
    if (!model_in || !part || !model_of || !oe || !opart || !optim_of || !ocopies || !se) {
        rc = ct__error(CT_ENOMEM, "checkpoint: out of memory");
        goto out;
    }
    for (int i = 0; i < root.n; i++) {
        const char *name = root.keys[i], *rest = NULL;
        ct__st_entry e;
        int r = ct__st_entry_at(&root, i, data, data_len, "checkpoint", &e);
        if (r == 1)
            continue;
        if (r < 0) {
            rc = r;
            goto out;
        }
        ct_dtype dtype = e.dtype;
        int64_t numel = (int64_t)(e.bytes / ct_dtype_size(dtype));
        if (dtype != CT_F32 && dtype != CT_I64) {
            rc = ct__error(CT_EINVAL, "checkpoint: entry \"%s\" is %s, not F32 or I64", name,
                           ct_dtype_name(dtype));
            goto out;
        }
        const void *src = e.data;
        /* aligned (ct's checkpoints are: the header is padded to 8 bytes, tensors are whole
         * elements), the tensors are read where they lie: the loads below copy them once, where
         * a copy here first cost a heal of 279 MB about a third of its load */
        bool in_place = (uintptr_t)src % ct_dtype_size(dtype) == 0;
        int m = owner(name, n, true, &rest);
        if (m >= 0) {
            if (dtype != CT_F32) {
                rc = ct__error(CT_EINVAL, "checkpoint: entry \"%s\" is not F32", name);
                goto out;
            }
            const float *c = src;
            if (!in_place) {
                float *copy = malloc((size_t)numel * sizeof(float) + 1);
                if (!copy) {
                    rc = ct__error(CT_ENOMEM, "checkpoint: out of memory");
                    goto out;
                }
                memcpy(copy, src, (size_t)numel * sizeof(float));
                ocopies[ncopies++] = copy;
                c = copy;
            }
            optim_of[noe] = m;
            oe[noe++] =
                (ct_state_entry){.name = rest, .kind = CT_STATE_TENSOR, .data = c, .numel = numel};
        } else if ((m = owner(name, n, false, &rest)) >= 0) {
            /* wrapped, read only: ct_module_load_state_dict copies from it */
            ct_tensor *t = in_place ? ct_tensor_wrap(dtype, e.ndim, e.shape, (void *)src)
                                    : ct_tensor_new(dtype, e.ndim, e.shape);
            if (!t) {
                rc = ct__error(CT_EINVAL, "checkpoint: entry \"%s\": bad shape", name);
                goto out;
            }
            if (!in_place)
                memcpy(ct_tensor_data(t), src, (size_t)numel * ct_dtype_size(dtype));
            model_of[nmodel] = m;
            model_in[nmodel++] = (ct_named_tensor){rest, t};
        } else {
            rc = ct__error(CT_EINVAL,
                           "checkpoint: entry \"%s\" belongs to none of the %d models (no "
                           "\"m<i>.\" or \"optim<i>.\" prefix)",
                           name, n);
            goto out;
        }
    }
    const char *os = ct__json_get_str(meta, "optimizer_state"),
               *ss = ct__json_get_str(meta, "scheduler_state");
    if (!os) {
        rc = ct__error(CT_EINVAL, "checkpoint: metadata \"optimizer_state\" missing");
        goto out;
    }
    int noe0 = noe;
    if ((rc = state_entries(os, "optimizer_state", oe, &noe, root.n + 256, &ojs)) < 0)
        goto out;
    for (int i = noe0; i < noe; i++) { /* several optimizers: keys "optim<i>.<entry>" */
        const char *rest = oe[i].name;
        optim_of[i] = n == 1 ? 0 : owner(oe[i].name, n, true, &rest);
        oe[i].name = rest;
        if (optim_of[i] < 0) {
            rc = ct__error(CT_EINVAL,
                           "checkpoint: \"optimizer_state\" entry \"%s\" belongs to none of "
                           "the %d optimizers",
                           rest, n);
            goto out;
        }
    }
    if (!ss != !st->sched) {
        rc = ct__error(CT_EINVAL, "checkpoint: metadata \"scheduler_state\" %s",
                       ss ? "present but this trainer has no scheduler" : "missing");
        goto out;
    }
    if (ss && (rc = state_entries(ss, "scheduler_state", se, &nse, 256, &sjs)) < 0)
        goto out;
    /* the loss scaler's state: checked before anything is loaded; a checkpoint without it (f32
     * or bf16, or before the trainer kept one) gives a fresh scaler; a trainer without a
     * scaler ignores it */
    const char *gs = ct__json_get_str(meta, "grad_scaler");
    double g_scale = 0, g_tracker = 0;
    if (st->scaler && gs) {
        char err[160] = "";
        const ct__jval *vs = NULL, *vt = NULL;
        if (ct__json_parse(gs, strlen(gs), &gjs, err, sizeof err) < 0 || gjs.type != CT__J_OBJ ||
            !(vs = ct__json_get(&gjs, "scale")) || vs->type != CT__J_NUM ||
            !(vt = ct__json_get(&gjs, "growth_tracker")) || vt->type != CT__J_NUM) {
            rc = ct__error(CT_EINVAL,
                           "checkpoint: metadata \"grad_scaler\" is not {\"scale\": number, "
                           "\"growth_tracker\": number}: %s",
                           err[0] ? err : gs);
            goto out;
        }
        g_scale = vs->num;
        g_tracker = vt->num;
        if (!(g_scale > 0 && g_scale <= 3.4e38) || !(g_tracker >= 0 && g_tracker <= 1e9) ||
            g_tracker != (double)(int)g_tracker) {
            rc = ct__error(CT_EINVAL,
                           "checkpoint: metadata \"grad_scaler\": scale %g, growth_tracker %g: "
                           "not a finite f32 > 0 and an integer >= 0",
                           g_scale, g_tracker);
            goto out;
        }
        /* the tracker must fit this trainer's growth_interval (ct_grad_scaler_load checks) */
        ct_grad_scaler *probe = ct_grad_scaler_new(&st->scaler_opts);
        rc = probe ? ct_grad_scaler_load(probe, (float)g_scale, (int)g_tracker) : CT_ENOMEM;
        ct_grad_scaler_destroy(&probe);
        if (rc < 0) {
            rc = ct__trainer_error_prefix(CT_EINVAL, "checkpoint: metadata \"grad_scaler\"");
            goto out;
        }
    }
    /* models first (each checked fully before anything is copied), then optimizers,
     * scheduler */
    for (int m = 0; m < n; m++) {
        int np = 0;
        for (int i = 0; i < nmodel; i++)
            if (model_of[i] == m)
                part[np++] = model_in[i];
        if ((rc = ct_module_load_state_dict(st->models[m], part, np, true)) < 0) {
            if (n == 1)
                rc = ct__trainer_error_prefix(rc, "checkpoint");
            else
                rc = ct__trainer_error_prefix(rc, "checkpoint: model %d", m);
            goto out;
        }
    }
    for (int m = 0; m < n; m++) {
        int np = 0;
        for (int i = 0; i < noe; i++)
            if (optim_of[i] == m)
                opart[np++] = oe[i];
        if ((rc = ct_optim_load_state_dict(st->optims[m], opart, np)) < 0) {
            if (n == 1)
                rc = ct__trainer_error_prefix(rc, "checkpoint: optimizer");
            else
                rc = ct__trainer_error_prefix(rc, "checkpoint: optimizer %d", m);
            goto out;
        }
    }
    if (st->sched && (rc = ct_sched_load_state_dict(st->sched, se, nse)) < 0) {
        rc = ct__trainer_error_prefix(rc, "checkpoint: scheduler");
        goto out;
    }
    st->epoch = strtoll(ep, NULL, 10);
    st->step = strtoll(sp, NULL, 10);
    st->batch = batch;
    st->offset = offset;
    st->world = wp ? atoi(wp) : 0;
    const char *pl = ct__json_get_str(meta, "plateau_loss_sum"),
               *pn = ct__json_get_str(meta, "plateau_samples");
    st->epoch_loss_sum = pl && pn ? strtod(pl, NULL) : 0;
    st->epoch_samples = pl && pn ? strtoll(pn, NULL, 10) : 0;
    if (st->scaler) {
        const char *sk = ct__json_get_str(meta, "skipped_steps");
        st->skipped = gs && sk ? strtoll(sk, NULL, 10) : 0;
        if (gs)
            ct_grad_scaler_load(st->scaler, (float)g_scale, (int)g_tracker); /* checked above */
        else
            ct_grad_scaler_load(st->scaler, (float)st->scaler_opts.init_scale, 0);
    }
out:
    for (int i = 0; i < nmodel; i++)
        ct_tensor_release(&model_in[i].tensor);
    for (int i = 0; i < ncopies; i++)
        free(ocopies[i]);
    free(ocopies);
    free(model_in);
    free(part);
    free(model_of);
    free(oe);
    free(opart);
    free(optim_of);
    free(se);
    ct__json_free(&root);
    ct__json_free(&ojs);
    ct__json_free(&sjs);
    ct__json_free(&gjs);
    return rc;
}
