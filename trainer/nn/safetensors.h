/* trainer/nn/safetensors.h — the one safetensors codec of ct (internal, ct__ names): a growing
 * string, a small JSON writer and parser, and the safetensors header on top of them. Used by
 * ct_module_save / ct_module_load (trainer/nn/module.c) and by the trainer's checkpoints
 * (trainer/train/ckpt.c).
 *
 * File layout: u64 little-endian header length N, N bytes of JSON
 * {"__metadata__": {string: string}, "<name>": {"dtype", "shape", "data_offsets": [b, e]}, ...}
 * (ct pads N to a multiple of 8 with spaces), then the data section; offsets are relative to it.
 * Not here: which tensors go in, reading files (callers hand over bytes). Thread-safe: no state. */
#ifndef CT_NN_SAFETENSORS_H
#define CT_NN_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct/dtype.h"
#include "ct/tensor.h"

/* ---- a growing string (s is NUL-terminated; oom set once an allocation failed) ---- */
typedef struct ct__sbuf {
    char *s;
    size_t len, cap;
    int oom;
} ct__sbuf;
void ct__sb_add(ct__sbuf *b, const char *p, size_t n);
__attribute__((format(printf, 2, 3))) void ct__sb_printf(ct__sbuf *b, const char *fmt, ...);
/* A JSON string literal of s. */
void ct__sb_json_str(ct__sbuf *b, const char *s);
/* A JSON number, exact for doubles (17 digits); NaN / Infinity as Python's json writes them. */
void ct__sb_json_num(ct__sbuf *b, double v);

/* ---- JSON values (objects, arrays, strings, numbers, true/false/null) ---- */
typedef enum { CT__J_NULL, CT__J_BOOL, CT__J_NUM, CT__J_STR, CT__J_ARR, CT__J_OBJ } ct__jtype;
typedef struct ct__jval {
    ct__jtype type;
    double num;             /* CT__J_NUM, CT__J_BOOL (0/1) */
    char *str;              /* CT__J_STR */
    int n;                  /* CT__J_ARR, CT__J_OBJ: items */
    char **keys;            /* CT__J_OBJ */
    struct ct__jval *items; /* CT__J_ARR, CT__J_OBJ */
} ct__jval;
/* Parses len bytes at p into *v (owned: ct__json_free). 0, or -1 with the reason in err. */
int ct__json_parse(const char *p, size_t len, ct__jval *v, char *err, size_t errcap);
void ct__json_free(ct__jval *v);
/* The value under key in an object; NULL when absent or obj is no object. Borrowed. */
const ct__jval *ct__json_get(const ct__jval *obj, const char *key);
/* The string under key in an object; NULL when absent or not a string. Borrowed. */
const char *ct__json_get_str(const ct__jval *obj, const char *key);

/* ---- safetensors ---- */
/* The trainer's checkpoints (trainer/train/ckpt.c) are safetensors files whose metadata
 * "format" is this; a single model's optimizer tensors there are named with this prefix
 * (ct_module_load skips them). */
#define CT__CKPT_FORMAT "ct-checkpoint"
#define CT__CKPT_OPTIM_PREFIX "optim."
/* Appends "<name>":{"dtype","shape","data_offsets":[off, off+bytes]} to a header being built,
 * with a comma before it unless first. */
void ct__st_add_tensor(ct__sbuf *hdr, bool first, const char *name, ct_dtype dt, int ndim,
                       const int64_t *shape, size_t off, size_t bytes);
/* Pads a finished header with spaces to a multiple of 8 bytes (the data section's alignment). */
void ct__st_pad(ct__sbuf *hdr);

/* One tensor entry of a parsed file: its name (borrowed from the root), dtype, shape and where
 * its bytes are (data points into the caller's buffer). */
typedef struct ct__st_entry {
    const char *name;
    ct_dtype dtype;
    int ndim;
    int64_t shape[CT_MAX_DIMS];
    const void *data;
    size_t bytes;
} ct__st_entry;

/* Parses the header of the safetensors bytes buf[0, len) into *root (a JSON object, owned:
 * ct__json_free) and sets *data / *data_len to the data section. what names the source in
 * errors ("checkpoint", a path). */
int ct__st_parse(const void *buf, size_t len, const char *what, ct__jval *root,
                 const unsigned char **data, size_t *data_len);
/* Entry i of root (0 <= i < root->n), checked: a known dtype, a shape, offsets inside the data
 * section that match dtype × shape. Returns 1 for "__metadata__" (not a tensor), 0 when *out is
 * set, or CT_EINVAL naming the entry. */
int ct__st_entry_at(const ct__jval *root, int i, const unsigned char *data, size_t data_len,
                    const char *what, ct__st_entry *out);

#endif
