/* trainer/train/ckpt.c — the checkpoint codec: a replica's state (model parameters and
 * buffers, optimizer and scheduler state, epoch, step, creator names, config) to and from the
 * bytes of a safetensors file, with a small JSON writer and parser for its header.
 *
 * Layout: u64 little-endian header length N (a multiple of 8: padded with spaces), N bytes of
 * JSON {"__metadata__": {string: string}, "<name>": {"dtype", "shape", "data_offsets"}, ...},
 * then the tensors back to back in header order (model state dict in PyTorch's order, then
 * "optim.<entry>" tensors). Non-tensor optimizer / scheduler entries go into the metadata
 * strings "optimizer_state" / "scheduler_state" as JSON objects (numbers printed with 17
 * significant digits: exact round trip). Not here: where the bytes are stored. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "internal.h"

#define CKPT_FORMAT "ct-checkpoint"
#define CKPT_VERSION "1"

/* ---- a growing string ---- */

typedef struct sbuf {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *p, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = 0;
}

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        sb_add(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_add(b, big, (size_t)n);
    free(big);
}

/* A JSON string literal of s. */
static void sb_json_str(sbuf *b, const char *s)
{
    sb_add(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_add(b, e, 2);
        } else if (c < 0x20) {
            sb_printf(b, "\\u%04x", c);
        } else {
            sb_add(b, (const char *)&c, 1);
        }
    }
    sb_add(b, "\"", 1);
}

/* A JSON number, exact for doubles; non-finite values as Python's json writes them. */
static void sb_json_num(sbuf *b, double v)
{
    if (isnan(v))
        sb_add(b, "NaN", 3);
    else if (isinf(v))
        sb_printf(b, "%sInfinity", v < 0 ? "-" : "");
    else
        sb_printf(b, "%.17g", v);
}

/* ---- a small JSON parser (objects, arrays, strings, numbers, true/false/null) ---- */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
    jtype type;
    double num;
    char *str;          /* J_STR */
    int n;              /* J_ARR, J_OBJ: items */
    char **keys;        /* J_OBJ */
    struct jval *items; /* J_ARR, J_OBJ */
} jval;

typedef struct jparser {
    const char *p, *end;
    int depth;
    char err[160];
} jparser;

static void jfree(jval *v)
{
    if (!v)
        return;
    free(v->str);
    for (int i = 0; i < v->n; i++) {
        if (v->keys)
            free(v->keys[i]);
        jfree(&v->items[i]);
    }
    free(v->keys);
    free(v->items);
    memset(v, 0, sizeof *v);
}

static void jws(jparser *j)
{
    while (j->p < j->end && isspace((unsigned char)*j->p))
        j->p++;
}

static int jfail(jparser *j, const char *what)
{
    if (!j->err[0])
        snprintf(j->err, sizeof j->err, "%s at byte %ld", what, (long)(j->end - j->p));
    return -1;
}

static int jparse(jparser *j, jval *v);

static int jstring(jparser *j, char **out)
{
    if (j->p >= j->end || *j->p != '"')
        return jfail(j, "expected a string");
    j->p++;
    sbuf b = {0};
    while (j->p < j->end && *j->p != '"') {
        char c = *j->p++;
        if (c == '\\') {
            if (j->p >= j->end)
                break;
            char e = *j->p++;
            const char *map = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
            const char *m = strchr(map, e);
            if (e == 'u') {
                if (j->end - j->p < 4) {
                    free(b.s);
                    return jfail(j, "bad \\u escape");
                }
                char hex[5] = {j->p[0], j->p[1], j->p[2], j->p[3], 0};
                unsigned u = (unsigned)strtoul(hex, NULL, 16);
                j->p += 4;
                if (u < 0x80) {
                    char ch = (char)u;
                    sb_add(&b, &ch, 1);
                } else if (u < 0x800) {
                    char ch[2] = {(char)(0xc0 | (u >> 6)), (char)(0x80 | (u & 0x3f))};
                    sb_add(&b, ch, 2);
                } else {
                    char ch[3] = {(char)(0xe0 | (u >> 12)), (char)(0x80 | ((u >> 6) & 0x3f)),
                                  (char)(0x80 | (u & 0x3f))};
                    sb_add(&b, ch, 3);
                }
            } else if (m && e) {
                sb_add(&b, &to[m - map], 1);
            } else {
                free(b.s);
                return jfail(j, "bad escape");
            }
        } else {
            sb_add(&b, &c, 1);
        }
    }
    if (j->p >= j->end || b.oom) {
        free(b.s);
        return jfail(j, "unterminated string");
    }
    j->p++;
    *out = b.s ? b.s : strdup("");
    return *out ? 0 : jfail(j, "out of memory");
}

static int jpush(jval *v, char *key, jval *item)
{
    jval *items = realloc(v->items, sizeof *items * (size_t)(v->n + 1));
    if (!items)
        return -1;
    v->items = items;
    if (v->type == J_OBJ) {
        char **keys = realloc(v->keys, sizeof *keys * (size_t)(v->n + 1));
        if (!keys)
            return -1;
        v->keys = keys;
        keys[v->n] = key;
    }
    items[v->n++] = *item;
    return 0;
}

static int jparse(jparser *j, jval *v)
{
    memset(v, 0, sizeof *v);
    if (++j->depth > 32)
        return jfail(j, "nested too deeply");
    jws(j);
    int rc = 0;
    if (j->p >= j->end) {
        rc = jfail(j, "unexpected end");
    } else if (*j->p == '{' || *j->p == '[') {
        bool obj = *j->p == '{';
        v->type = obj ? J_OBJ : J_ARR;
        j->p++;
        jws(j);
        if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
            j->p++;
        } else {
            for (;;) {
                char *key = NULL;
                jval item;
                jws(j);
                if (obj) {
                    if (jstring(j, &key) < 0) {
                        rc = -1;
                        break;
                    }
                    jws(j);
                    if (j->p >= j->end || *j->p != ':') {
                        free(key);
                        rc = jfail(j, "expected ':'");
                        break;
                    }
                    j->p++;
                }
                if (jparse(j, &item) < 0) {
                    free(key);
                    jfree(&item);
                    rc = -1;
                    break;
                }
                if (jpush(v, key, &item) < 0) {
                    free(key);
                    jfree(&item);
                    rc = jfail(j, "out of memory");
                    break;
                }
                jws(j);
                if (j->p < j->end && *j->p == ',') {
                    j->p++;
                    continue;
                }
                if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
                    j->p++;
                    break;
                }
                rc = jfail(j, obj ? "expected ',' or '}'" : "expected ',' or ']'");
                break;
            }
        }
    } else if (*j->p == '"') {
        v->type = J_STR;
        rc = jstring(j, &v->str);
    } else if (j->end - j->p >= 4 && !strncmp(j->p, "true", 4)) {
        v->type = J_BOOL;
        v->num = 1;
        j->p += 4;
    } else if (j->end - j->p >= 5 && !strncmp(j->p, "false", 5)) {
        v->type = J_BOOL;
        j->p += 5;
    } else if (j->end - j->p >= 4 && !strncmp(j->p, "null", 4)) {
        j->p += 4;
    } else if (j->end - j->p >= 3 && !strncmp(j->p, "NaN", 3)) {
        v->type = J_NUM;
        v->num = NAN;
        j->p += 3;
    } else if (j->end - j->p >= 8 && !strncmp(j->p, "Infinity", 8)) {
        v->type = J_NUM;
        v->num = INFINITY;
        j->p += 8;
    } else if (j->end - j->p >= 9 && !strncmp(j->p, "-Infinity", 9)) {
        v->type = J_NUM;
        v->num = -INFINITY;
        j->p += 9;
    } else {
        char tmp[64];
        size_t n = 0;
        while (j->p + n < j->end && n < sizeof tmp - 1 && strchr("+-.eE0123456789", j->p[n]))
            n++;
        memcpy(tmp, j->p, n);
        tmp[n] = 0;
        char *end;
        v->type = J_NUM;
        v->num = strtod(tmp, &end);
        if (!n || *end)
            rc = jfail(j, "bad value");
        else
            j->p += n;
    }
    j->depth--;
    if (rc < 0)
        jfree(v);
    return rc;
}

static const jval *jget(const jval *obj, const char *key)
{
    for (int i = 0; obj && obj->type == J_OBJ && i < obj->n; i++)
        if (!strcmp(obj->keys[i], key))
            return &obj->items[i];
    return NULL;
}

/* ---- writing ---- */

typedef struct piece {
    const void *data;
    size_t bytes;
} piece;

struct tr_ckpt_plan {
    sbuf hdr; /* padded to a multiple of 8 */
    piece *pieces;
    int npieces;
    size_t data_bytes;
};

static void add_tensor_hdr(sbuf *b, const char *name, const char *dtype, int ndim,
                           const int64_t *shape, size_t off, size_t bytes)
{
    sb_add(b, ",", 1);
    sb_json_str(b, name);
    sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", dtype);
    for (int d = 0; d < ndim; d++)
        sb_printf(b, "%s%lld", d ? "," : "", (long long)shape[d]);
    sb_printf(b, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
}

/* {"name": number-or-string, ...} of the non-tensor entries. */
static void state_json(sbuf *b, const ct_state_entry *e, int n)
{
    sb_add(b, "{", 1);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].kind == CT_STATE_TENSOR)
            continue;
        if (k++)
            sb_add(b, ",", 1);
        sb_json_str(b, e[i].name);
        sb_add(b, ":", 1);
        if (e[i].kind == CT_STATE_SCALAR)
            sb_json_num(b, e[i].scalar);
        else
            sb_json_str(b, e[i].str ? e[i].str : "");
    }
    sb_add(b, "}", 1);
}

static void meta_kv(sbuf *b, const char *k, const char *v, bool first)
{
    if (!first)
        sb_add(b, ",", 1);
    sb_json_str(b, k);
    sb_add(b, ":", 1);
    sb_json_str(b, v);
}

int ct__ckpt_plan(const tr_state *st, const tr_spec *spec, int world, tr_ckpt_plan **out)
{
    *out = NULL;
    const ct_named_tensor *sd;
    const ct_state_entry *oe = NULL, *se = NULL;
    int nsd, noe = 0, nse = 0, rc;
    if ((rc = ct_module_state_dict(st->model, &sd, &nsd)) < 0)
        return rc;
    if ((rc = ct_optim_state_dict(st->optim, &oe, &noe)) < 0)
        return rc;
    if (st->sched && (rc = ct_sched_state_dict(st->sched, &se, &nse)) < 0)
        return rc;
    tr_ckpt_plan *p = calloc(1, sizeof *p);
    if (!p || !(p->pieces = calloc((size_t)(nsd + noe + 1), sizeof *p->pieces))) {
        free(p);
        return ct__error(CT_ENOMEM, "checkpoint: out of memory");
    }
    sbuf *b = &p->hdr, js = {0};
    char num[32];
    sb_add(b, "{\"__metadata__\":{", 17);
    meta_kv(b, "format", CKPT_FORMAT, true);
    meta_kv(b, "format_version", CKPT_VERSION, false);
    snprintf(num, sizeof num, "%lld", (long long)st->epoch);
    meta_kv(b, "epoch", num, false);
    snprintf(num, sizeof num, "%lld", (long long)st->step);
    meta_kv(b, "step", num, false);
    snprintf(num, sizeof num, "%d", world);
    meta_kv(b, "world_size", num, false);
    snprintf(num, sizeof num, "%llu", (unsigned long long)spec->seed);
    meta_kv(b, "seed", num, false);
    meta_kv(b, "rng",
            "reseeded per epoch: generator seed = f(seed, epoch, rank); loader "
            "permutation = seed + epoch",
            false);
    meta_kv(b, "model", spec->model, false);
    meta_kv(b, "data", spec->data, false);
    meta_kv(b, "optimizer", spec->optimizer, false);
    meta_kv(b, "loss", spec->loss, false);
    meta_kv(b, "scheduler", spec->scheduler, false);
    meta_kv(b, "config", spec->config, false);
    state_json(&js, oe, noe);
    meta_kv(b, "optimizer_state", js.s ? js.s : "{}", false);
    js.len = 0;
    if (st->sched) {
        state_json(&js, se, nse);
        meta_kv(b, "scheduler_state", js.s ? js.s : "{}", false);
    }
    if (js.oom)
        b->oom = 1;
    free(js.s);
    sb_add(b, "}", 1);
    size_t off = 0;
    for (int i = 0; i < nsd; i++) {
        ct_tensor *t = sd[i].tensor;
        ct_dtype dt = ct_tensor_dtype(t);
        if ((dt != CT_F32 && dt != CT_I64) || !ct_tensor_is_contiguous(t) ||
            !ct_tensor_is_plain(t)) {
            rc = ct__error(CT_EINVAL, "checkpoint: state entry \"%s\" is not plain F32/I64",
                           sd[i].name);
            goto fail;
        }
        size_t bytes = (size_t)ct_tensor_numel(t) * ct_dtype_size(dt);
        add_tensor_hdr(b, sd[i].name, dt == CT_F32 ? "F32" : "I64", ct_tensor_ndim(t),
                       ct_tensor_shape(t), off, bytes);
        p->pieces[p->npieces++] = (piece){ct_tensor_data(t), bytes};
        off += bytes;
    }
    for (int i = 0; i < noe; i++) {
        if (oe[i].kind != CT_STATE_TENSOR)
            continue;
        char name[300];
        snprintf(name, sizeof name, "optim.%s", oe[i].name);
        size_t bytes = (size_t)oe[i].numel * sizeof(float);
        int64_t shape[1] = {oe[i].numel};
        add_tensor_hdr(b, name, "F32", 1, shape, off, bytes);
        p->pieces[p->npieces++] = (piece){oe[i].data, bytes};
        off += bytes;
    }
    sb_add(b, "}", 1);
    while (!b->oom && b->len % 8)
        sb_add(b, " ", 1);
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

void ct__ckpt_write(const tr_ckpt_plan *p, void *dst)
{
    uint64_t hl = p->hdr.len; /* little-endian host (x86-64, aarch64) */
    char *d = dst;
    memcpy(d, &hl, 8);
    memcpy(d + 8, p->hdr.s, p->hdr.len);
    d += 8 + p->hdr.len;
    for (int i = 0; i < p->npieces; i++) {
        memcpy(d, p->pieces[i].data, p->pieces[i].bytes);
        d += p->pieces[i].bytes;
    }
}

void ct__ckpt_plan_free(tr_ckpt_plan **pp)
{
    if (!pp || !*pp)
        return;
    free((*pp)->hdr.s);
    free((*pp)->pieces);
    free(*pp);
    *pp = NULL;
}

/* ---- reading ---- */

static const char *meta_str(const jval *meta, const char *key)
{
    const jval *v = jget(meta, key);
    return v && v->type == J_STR ? v->str : NULL;
}

/* Entries of a state JSON object (scalars and strings), appended to e[*n]. */
static int state_entries(const char *json, const char *what, ct_state_entry *e, int *n, int cap,
                         jval *keep)
{
    jparser j = {.p = json, .end = json + strlen(json)};
    if (jparse(&j, keep) < 0 || keep->type != J_OBJ)
        return ct__error(CT_EINVAL, "checkpoint: metadata \"%s\" is not a JSON object: %s", what,
                         j.err);
    for (int i = 0; i < keep->n; i++) {
        const jval *v = &keep->items[i];
        if (*n == cap)
            return ct__error(CT_EINVAL, "checkpoint: \"%s\" has too many entries", what);
        if (v->type == J_NUM || v->type == J_BOOL)
            e[(*n)++] =
                (ct_state_entry){.name = keep->keys[i], .kind = CT_STATE_SCALAR, .scalar = v->num};
        else if (v->type == J_STR)
            e[(*n)++] =
                (ct_state_entry){.name = keep->keys[i], .kind = CT_STATE_STRING, .str = v->str};
        else
            return ct__error(CT_EINVAL, "checkpoint: \"%s\" entry \"%s\" is not a number or string",
                             what, keep->keys[i]);
    }
    return 0;
}

static int check_name(const jval *meta, const char *key, const char *want)
{
    const char *got = meta_str(meta, key);
    if (!got)
        return ct__error(CT_EINVAL, "checkpoint: metadata \"%s\" missing", key);
    if (strcmp(got, want))
        return ct__error(CT_EINVAL, "checkpoint: made with %s \"%s\", this trainer's %s is \"%s\"",
                         key, got, key, want);
    return 0;
}

int ct__ckpt_load(tr_state *st, const tr_spec *spec, const void *buf, size_t len)
{
    const unsigned char *bytes = buf;
    jval root = {0}, ojs = {0}, sjs = {0};
    ct_named_tensor *model_in = NULL;
    ct_state_entry *oe = NULL, *se = NULL;
    float **ocopies = NULL;
    int nmodel = 0, noe = 0, nse = 0, rc = 0, ncopies = 0;
    uint64_t hl;
    if (len < 8)
        return ct__error(CT_EINVAL, "checkpoint: %zu bytes, shorter than the 8-byte header length",
                         len);
    memcpy(&hl, bytes, 8);
    if (hl > len - 8)
        return ct__error(CT_EINVAL, "checkpoint: header length %llu past the end (%zu bytes)",
                         (unsigned long long)hl, len);
    jparser j = {.p = (const char *)bytes + 8, .end = (const char *)bytes + 8 + hl};
    if (jparse(&j, &root) < 0 || root.type != J_OBJ) {
        rc = ct__error(CT_EINVAL, "checkpoint: header is not a JSON object: %s", j.err);
        goto out;
    }
    const unsigned char *data = bytes + 8 + hl;
    size_t data_len = len - 8 - hl;
    const jval *meta = jget(&root, "__metadata__");
    const char *fmt = meta_str(meta, "format"), *ver = meta_str(meta, "format_version");
    if (!fmt || strcmp(fmt, CKPT_FORMAT) || !ver || strcmp(ver, CKPT_VERSION)) {
        rc = ct__error(CT_EINVAL,
                       "checkpoint: metadata format \"%s\" version \"%s\", expected \"%s\" \"%s\"",
                       fmt ? fmt : "(none)", ver ? ver : "(none)", CKPT_FORMAT, CKPT_VERSION);
        goto out;
    }
    if ((rc = check_name(meta, "model", spec->model)) < 0 ||
        (rc = check_name(meta, "optimizer", spec->optimizer)) < 0 ||
        (rc = check_name(meta, "scheduler", spec->scheduler)) < 0)
        goto out;
    const char *ep = meta_str(meta, "epoch"), *sp = meta_str(meta, "step");
    if (!ep || !sp) {
        rc = ct__error(CT_EINVAL, "checkpoint: metadata \"%s\" missing", !ep ? "epoch" : "step");
        goto out;
    }
    model_in = calloc((size_t)root.n + 1, sizeof *model_in);
    oe = calloc((size_t)root.n + 256, sizeof *oe);
    ocopies = calloc((size_t)root.n + 1, sizeof *ocopies);
    se = calloc(256, sizeof *se);
    if (!model_in || !oe || !ocopies || !se) {
        rc = ct__error(CT_ENOMEM, "checkpoint: out of memory");
        goto out;
    }
    for (int i = 0; i < root.n; i++) {
        const char *name = root.keys[i];
        if (!strcmp(name, "__metadata__"))
            continue;
        const jval *e = &root.items[i];
        const jval *dt = jget(e, "dtype"), *shape = jget(e, "shape"),
                   *offs = jget(e, "data_offsets");
        if (!dt || dt->type != J_STR || !shape || shape->type != J_ARR || shape->n > CT_MAX_DIMS ||
            !offs || offs->type != J_ARR || offs->n != 2) {
            rc = ct__error(CT_EINVAL, "checkpoint: entry \"%s\": bad dtype, shape or data_offsets",
                           name);
            goto out;
        }
        ct_dtype dtype = !strcmp(dt->str, "F32") ? CT_F32 : !strcmp(dt->str, "I64") ? CT_I64 : -1;
        int64_t sh[CT_MAX_DIMS], numel = 1;
        for (int d = 0; d < shape->n; d++) {
            sh[d] = (int64_t)shape->items[d].num;
            numel *= sh[d];
        }
        double b0 = offs->items[0].num, b1 = offs->items[1].num;
        if ((int)dtype < 0 || b0 < 0 || b1 < b0 || b1 > (double)data_len ||
            (size_t)(b1 - b0) != (size_t)numel * ct_dtype_size(dtype)) {
            rc =
                ct__error(CT_EINVAL,
                          "checkpoint: entry \"%s\": dtype %s, %lld elements, offsets [%.0f, %.0f] "
                          "of %zu data bytes do not agree",
                          name, dt->str, (long long)numel, b0, b1, data_len);
            goto out;
        }
        const void *src = data + (size_t)b0;
        if (!strncmp(name, "optim.", 6)) {
            if (dtype != CT_F32) {
                rc = ct__error(CT_EINVAL, "checkpoint: entry \"%s\" is not F32", name);
                goto out;
            }
            float *c = malloc((size_t)numel * sizeof(float) + 1);
            if (!c) {
                rc = ct__error(CT_ENOMEM, "checkpoint: out of memory");
                goto out;
            }
            memcpy(c, src, (size_t)numel * sizeof(float));
            ocopies[ncopies++] = c;
            oe[noe++] = (ct_state_entry){
                .name = name + 6, .kind = CT_STATE_TENSOR, .data = c, .numel = numel};
        } else {
            ct_tensor *t = ct_tensor_new(dtype, shape->n, sh);
            if (!t) {
                rc = ct__error(CT_EINVAL, "checkpoint: entry \"%s\": bad shape", name);
                goto out;
            }
            memcpy(ct_tensor_data(t), src, (size_t)numel * ct_dtype_size(dtype));
            model_in[nmodel++] = (ct_named_tensor){name, t};
        }
    }
    const char *os = meta_str(meta, "optimizer_state"), *ss = meta_str(meta, "scheduler_state");
    if (!os) {
        rc = ct__error(CT_EINVAL, "checkpoint: metadata \"optimizer_state\" missing");
        goto out;
    }
    if ((rc = state_entries(os, "optimizer_state", oe, &noe, root.n + 256, &ojs)) < 0)
        goto out;
    if (!ss != !st->sched) {
        rc = ct__error(CT_EINVAL, "checkpoint: metadata \"scheduler_state\" %s",
                       ss ? "present but this trainer has no scheduler" : "missing");
        goto out;
    }
    if (ss && (rc = state_entries(ss, "scheduler_state", se, &nse, 256, &sjs)) < 0)
        goto out;
    /* model first (checked fully before anything is copied), then optimizer, scheduler */
    if ((rc = ct_module_load_state_dict(st->model, model_in, nmodel, true)) < 0) {
        rc = ct__trainer_error_prefix(rc, "checkpoint");
        goto out;
    }
    if ((rc = ct_optim_load_state_dict(st->optim, oe, noe)) < 0) {
        rc = ct__trainer_error_prefix(rc, "checkpoint: optimizer");
        goto out;
    }
    if (st->sched && (rc = ct_sched_load_state_dict(st->sched, se, nse)) < 0) {
        rc = ct__trainer_error_prefix(rc, "checkpoint: scheduler");
        goto out;
    }
    st->epoch = strtoll(ep, NULL, 10);
    st->step = strtoll(sp, NULL, 10);
out:
    for (int i = 0; i < nmodel; i++)
        ct_tensor_release(&model_in[i].tensor);
    for (int i = 0; i < ncopies; i++)
        free(ocopies[i]);
    free(ocopies);
    free(model_in);
    free(oe);
    free(se);
    jfree(&root);
    jfree(&ojs);
    jfree(&sjs);
    return rc;
}
