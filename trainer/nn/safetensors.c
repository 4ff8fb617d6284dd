/* trainer/nn/safetensors.c — the one safetensors codec of ct: a growing string, a small JSON
 * writer and parser (objects, arrays, strings, numbers, true/false/null, NaN/Infinity as
 * Python's json writes them; nesting at most 32 deep), and the safetensors header on top.
 * See safetensors.h. Used by ct_module_save/load and by the trainer's checkpoints. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "trainer/nn/safetensors.h"

/* ---- a growing string ---- */

void ct__sb_add(ct__sbuf *b, const char *p, size_t n)
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

void ct__sb_printf(ct__sbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        ct__sb_add(b, tmp, (size_t)n);
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
    ct__sb_add(b, big, (size_t)n);
    free(big);
}

/* A JSON string literal of s. */
void ct__sb_json_str(ct__sbuf *b, const char *s)
{
    ct__sb_add(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            ct__sb_add(b, e, 2);
        } else if (c < 0x20) {
            ct__sb_printf(b, "\\u%04x", c);
        } else {
            ct__sb_add(b, (const char *)&c, 1);
        }
    }
    ct__sb_add(b, "\"", 1);
}

/* A JSON number, exact for doubles; non-finite values as Python's json writes them. */
void ct__sb_json_num(ct__sbuf *b, double v)
{
    if (isnan(v))
        ct__sb_add(b, "NaN", 3);
    else if (isinf(v))
        ct__sb_printf(b, "%sInfinity", v < 0 ? "-" : "");
    else
        ct__sb_printf(b, "%.17g", v);
}

/* ---- a small JSON parser (objects, arrays, strings, numbers, true/false/null) ---- */

typedef struct jparser {
    const char *p, *end;
    int depth;
    char err[160];
} jparser;

void ct__json_free(ct__jval *v)
{
    if (!v)
        return;
    free(v->str);
    for (int i = 0; i < v->n; i++) {
        if (v->keys)
            free(v->keys[i]);
        ct__json_free(&v->items[i]);
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

static int jparse(jparser *j, ct__jval *v);

static int jstring(jparser *j, char **out)
{
    if (j->p >= j->end || *j->p != '"')
        return jfail(j, "expected a string");
    j->p++;
    ct__sbuf b = {0};
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
                    ct__sb_add(&b, &ch, 1);
                } else if (u < 0x800) {
                    char ch[2] = {(char)(0xc0 | (u >> 6)), (char)(0x80 | (u & 0x3f))};
                    ct__sb_add(&b, ch, 2);
                } else {
                    char ch[3] = {(char)(0xe0 | (u >> 12)), (char)(0x80 | ((u >> 6) & 0x3f)),
                                  (char)(0x80 | (u & 0x3f))};
                    ct__sb_add(&b, ch, 3);
                }
            } else if (m && e) {
                ct__sb_add(&b, &to[m - map], 1);
            } else {
                free(b.s);
                return jfail(j, "bad escape");
            }
        } else {
            ct__sb_add(&b, &c, 1);
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

static int jpush(ct__jval *v, char *key, ct__jval *item)
{
    ct__jval *items = realloc(v->items, sizeof *items * (size_t)(v->n + 1));
    if (!items)
        return -1;
    v->items = items;
    if (v->type == CT__J_OBJ) {
        char **keys = realloc(v->keys, sizeof *keys * (size_t)(v->n + 1));
        if (!keys)
            return -1;
        v->keys = keys;
        keys[v->n] = key;
    }
    items[v->n++] = *item;
    return 0;
}

static int jparse(jparser *j, ct__jval *v)
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
        v->type = obj ? CT__J_OBJ : CT__J_ARR;
        j->p++;
        jws(j);
        if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
            j->p++;
        } else {
            for (;;) {
                char *key = NULL;
                ct__jval item;
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
                    ct__json_free(&item);
                    rc = -1;
                    break;
                }
                if (jpush(v, key, &item) < 0) {
                    free(key);
                    ct__json_free(&item);
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
        v->type = CT__J_STR;
        rc = jstring(j, &v->str);
    } else if (j->end - j->p >= 4 && !strncmp(j->p, "true", 4)) {
        v->type = CT__J_BOOL;
        v->num = 1;
        j->p += 4;
    } else if (j->end - j->p >= 5 && !strncmp(j->p, "false", 5)) {
        v->type = CT__J_BOOL;
        j->p += 5;
    } else if (j->end - j->p >= 4 && !strncmp(j->p, "null", 4)) {
        j->p += 4;
    } else if (j->end - j->p >= 3 && !strncmp(j->p, "NaN", 3)) {
        v->type = CT__J_NUM;
        v->num = NAN;
        j->p += 3;
    } else if (j->end - j->p >= 8 && !strncmp(j->p, "Infinity", 8)) {
        v->type = CT__J_NUM;
        v->num = INFINITY;
        j->p += 8;
    } else if (j->end - j->p >= 9 && !strncmp(j->p, "-Infinity", 9)) {
        v->type = CT__J_NUM;
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
        v->type = CT__J_NUM;
        v->num = strtod(tmp, &end);
        if (!n || *end)
            rc = jfail(j, "bad value");
        else
            j->p += n;
    }
    j->depth--;
    if (rc < 0)
        ct__json_free(v);
    return rc;
}

const ct__jval *ct__json_get(const ct__jval *obj, const char *key)
{
    for (int i = 0; obj && obj->type == CT__J_OBJ && i < obj->n; i++)
        if (!strcmp(obj->keys[i], key))
            return &obj->items[i];
    return NULL;
}

int ct__json_parse(const char *p, size_t len, ct__jval *v, char *err, size_t errcap)
{
    jparser j = {.p = p, .end = p + len};
    int rc = jparse(&j, v);
    if (rc < 0 && err && errcap)
        snprintf(err, errcap, "%s", j.err);
    return rc;
}

const char *ct__json_get_str(const ct__jval *obj, const char *key)
{
    const ct__jval *v = ct__json_get(obj, key);
    return v && v->type == CT__J_STR ? v->str : NULL;
}

/* ---- safetensors ---- */

void ct__st_add_tensor(ct__sbuf *hdr, bool first, const char *name, ct_dtype dt, int ndim,
                       const int64_t *shape, size_t off, size_t bytes)
{
    if (!first)
        ct__sb_add(hdr, ",", 1);
    ct__sb_json_str(hdr, name);
    ct__sb_printf(hdr, ":{\"dtype\":\"%s\",\"shape\":[", ct_dtype_name(dt));
    for (int d = 0; d < ndim; d++)
        ct__sb_printf(hdr, "%s%lld", d ? "," : "", (long long)shape[d]);
    ct__sb_printf(hdr, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
}

void ct__st_pad(ct__sbuf *hdr)
{
    while (!hdr->oom && hdr->len % 8)
        ct__sb_add(hdr, " ", 1);
}

int ct__st_parse(const void *buf, size_t len, const char *what, ct__jval *root,
                 const unsigned char **data, size_t *data_len)
{
    const unsigned char *bytes = buf;
    uint64_t hl;
    memset(root, 0, sizeof *root);
    if (len < 8)
        return ct__error(CT_EINVAL, "%s: %zu bytes, shorter than the 8-byte header length", what,
                         len);
    memcpy(&hl, bytes, 8); /* little-endian host (x86-64, aarch64) */
    if (hl > len - 8)
        return ct__error(CT_EINVAL, "%s: header length %llu past the end (%zu bytes)", what,
                         (unsigned long long)hl, len);
    char err[160] = "";
    if (ct__json_parse((const char *)bytes + 8, (size_t)hl, root, err, sizeof err) < 0 ||
        root->type != CT__J_OBJ) {
        ct__json_free(root);
        return ct__error(CT_EINVAL, "%s: header is not a JSON object%s%s", what, err[0] ? ": " : "",
                         err);
    }
    *data = bytes + 8 + hl;
    *data_len = len - 8 - (size_t)hl;
    return 0;
}

static int dtype_of(const char *name)
{
    for (int d = CT_F32; d <= CT_U8; d++)
        if (!strcmp(ct_dtype_name((ct_dtype)d), name))
            return d;
    return -1;
}

/* Whether v is a whole number in [0, max]: not NaN, an infinity or a fraction (the JSON
 * parser accepts those, and casting them to an integer is undefined: found by
 * fuzz/fuzz_safetensors.c). */
static bool whole(const ct__jval *v, double max)
{
    return v->type == CT__J_NUM && v->num >= 0 && v->num <= max && v->num == floor(v->num);
}

int ct__st_entry_at(const ct__jval *root, int i, const unsigned char *data, size_t data_len,
                    const char *what, ct__st_entry *out)
{
    const char *name = root->keys[i];
    if (!strcmp(name, "__metadata__"))
        return 1;
    const ct__jval *e = &root->items[i];
    const ct__jval *dt = ct__json_get(e, "dtype"), *shape = ct__json_get(e, "shape"),
                   *offs = ct__json_get(e, "data_offsets");
    if (!dt || dt->type != CT__J_STR || !shape || shape->type != CT__J_ARR ||
        shape->n > CT_MAX_DIMS || !offs || offs->type != CT__J_ARR || offs->n != 2)
        return ct__error(CT_EINVAL, "%s: entry \"%s\": bad dtype, shape or data_offsets", what,
                         name);
    int dtype = dtype_of(dt->str);
    /* in doubles: dimensions up to 2^53 are exact, and a product past 2^53 (rounded or not)
     * cannot equal a byte count of the buffer, so it needs no overflow check */
    double numel = 1;
    for (int d = 0; d < shape->n; d++) {
        if (!whole(&shape->items[d], 9007199254740992.0))
            return ct__error(CT_EINVAL, "%s: entry \"%s\": bad shape", what, name);
        out->shape[d] = (int64_t)shape->items[d].num;
        numel *= shape->items[d].num;
    }
    double b0 = offs->items[0].num, b1 = offs->items[1].num;
    if (dtype < 0 || !whole(&offs->items[0], (double)data_len) ||
        !whole(&offs->items[1], (double)data_len) || b1 < b0 ||
        b1 - b0 != numel * (double)ct_dtype_size((ct_dtype)dtype))
        return ct__error(CT_EINVAL,
                         "%s: entry \"%s\": dtype %s, %.0f elements, offsets [%.0f, %.0f] of %zu "
                         "data bytes do not agree",
                         what, name, dt->str, numel, b0, b1, data_len);
    out->name = name;
    out->dtype = (ct_dtype)dtype;
    out->ndim = shape->n;
    out->data = data + (size_t)b0;
    out->bytes = (size_t)(b1 - b0);
    return 0;
}
