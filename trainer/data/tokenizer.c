/* trainer/data/tokenizer.c — a byte-level BPE tokenizer (minbpe's BasicTokenizer): ids 0..255
 * are the bytes, id 256 + i is merge i, the pair (a, b) of earlier ids. The byte-level
 * tokenizer is the one with no merges (vocabulary 256).
 *
 *   learn:  repeatedly merge the most frequent adjacent pair of the current sequence (pairs
 *           counted overlapping, as minbpe's get_stats; ties: the smallest (a, b)), replacing
 *           its occurrences left to right. Each merge recounts the sequence in one pass into a
 *           dense (V, V) count table, tracking the maximum as it counts, and zeroes only the
 *           entries it touched: O(n) per merge, no scan of the table.
 *   encode: the merges applied in order, one pass each; the same ids as minbpe's encode (a
 *           merge can only make pairs that contain its new id, which rank after it).
 *   file:   text, header `ct-bpe 1 <n_merges>`, then one merge per line `a b` (decimal ids).
 *
 * Not here: regex pre-splitting (GPT-2/4 style), special tokens, token files (text.c). */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/data.h"

enum { MAX_TOKEN_BYTES = 1 << 16, MAX_LEARN_VOCAB = 8192 };

struct ct_tokenizer {
    int n_merges;
    int32_t *merges; /* (n_merges, 2) */
    uint32_t *off;   /* (vocab + 1): token id's bytes are bytes[off[id] .. off[id + 1]) */
    unsigned char *bytes;
};

/* Makes a tokenizer from merges (taken: freed on failure too), building each token's bytes.
 * Merges are checked: ids below 256 + i, tokens at most MAX_TOKEN_BYTES long. On a bad merge
 * returns CT_EINVAL with *bad set to its index and the reason in ct_last_error's form
 * "merge i: ..." left to the caller to prefix. */
static int build(int32_t *merges, int n, ct_tokenizer **out, int *bad, char *why, size_t wn)
{
    int v = 256 + n;
    ct_tokenizer *tk = calloc(1, sizeof *tk);
    uint32_t *off = malloc(sizeof(uint32_t) * ((size_t)v + 1));
    if (!tk || !off) {
        free(tk), free(off), free(merges);
        return ct__error(CT_ENOMEM, "tokenizer: out of memory");
    }
    uint64_t total = 256;
    for (int i = 0; i <= 256; i++)
        off[i] = (uint32_t)i;
    for (int i = 0; i < n; i++) {
        int32_t a = merges[2 * i], b = merges[2 * i + 1];
        if (a < 0 || b < 0 || a >= 256 + i || b >= 256 + i) {
            snprintf(why, wn, "merge %d (id %d) names id %d, not below %d", i, 256 + i,
                     a < 0 || a >= 256 + i ? a : b, 256 + i);
            goto bad;
        }
        uint64_t len = (uint64_t)(off[a + 1] - off[a]) + (off[b + 1] - off[b]);
        if (len > MAX_TOKEN_BYTES) {
            snprintf(why, wn, "merge %d makes a token of %llu bytes, over %d", i,
                     (unsigned long long)len, MAX_TOKEN_BYTES);
            goto bad;
        }
        total += len;
        off[257 + i] = (uint32_t)total;
        continue;
    bad:
        *bad = i;
        free(tk), free(off), free(merges);
        return CT_EINVAL;
    }
    unsigned char *bytes = malloc(total);
    if (!bytes) {
        free(tk), free(off), free(merges);
        return ct__error(CT_ENOMEM, "tokenizer: out of memory");
    }
    for (int i = 0; i < 256; i++)
        bytes[i] = (unsigned char)i;
    for (int i = 0; i < n; i++) {
        int32_t a = merges[2 * i], b = merges[2 * i + 1];
        uint32_t la = off[a + 1] - off[a];
        memcpy(bytes + off[256 + i], bytes + off[a], la);
        memcpy(bytes + off[256 + i] + la, bytes + off[b], off[b + 1] - off[b]);
    }
    *tk = (ct_tokenizer){.n_merges = n, .merges = merges, .off = off, .bytes = bytes};
    *out = tk;
    return 0;
}

int ct_tokenizer_new_bytes(ct_tokenizer **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "tokenizer: out is NULL");
    *out = NULL;
    int bad = 0;
    char why[8];
    return build(NULL, 0, out, &bad, why, sizeof why);
}

void ct_tokenizer_destroy(ct_tokenizer **tk)
{
    if (!tk || !*tk)
        return;
    free((*tk)->merges);
    free((*tk)->off);
    free((*tk)->bytes);
    free(*tk);
    *tk = NULL;
}

int ct_tokenizer_vocab_size(const ct_tokenizer *tk)
{
    return tk ? 256 + tk->n_merges : 0;
}

int ct_tokenizer_merge(const ct_tokenizer *tk, int i, int32_t *a, int32_t *b)
{
    if (!tk || i < 0 || i >= tk->n_merges)
        return ct__error(CT_ERANGE, "tokenizer: no merge %d", i);
    *a = tk->merges[2 * i];
    *b = tk->merges[2 * i + 1];
    return 0;
}

int64_t ct_tokenizer_token_bytes(const ct_tokenizer *tk, int32_t id, const unsigned char **bytes)
{
    if (!tk || id < 0 || id >= 256 + tk->n_merges)
        return ct__error(CT_ERANGE, "tokenizer: no token id %d", (int)id);
    if (bytes)
        *bytes = tk->bytes + tk->off[id];
    return (int64_t)(tk->off[id + 1] - tk->off[id]);
}

/* Replaces (a, b) by id in ids[0..n) left to right, in place; returns the new length. */
static int64_t merge_pass(int32_t *ids, int64_t n, int32_t a, int32_t b, int32_t id)
{
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] == a && i + 1 < n && ids[i + 1] == b) {
            ids[j++] = id;
            i++;
        } else {
            ids[j++] = ids[i];
        }
    }
    return j;
}

int64_t ct_tokenizer_encode(const ct_tokenizer *tk, const unsigned char *text, int64_t n,
                            int32_t *ids)
{
    if (!tk || n < 0 || (n > 0 && (!text || !ids)))
        return ct__error(CT_EINVAL, "tokenizer: encode needs a tokenizer, text and ids");
    for (int64_t i = 0; i < n; i++)
        ids[i] = text[i];
    for (int k = 0; k < tk->n_merges && n > 1; k++)
        n = merge_pass(ids, n, tk->merges[2 * k], tk->merges[2 * k + 1], 256 + k);
    return n;
}

int64_t ct_tokenizer_decode(const ct_tokenizer *tk, const int32_t *ids, int64_t n,
                            unsigned char *out, int64_t cap)
{
    if (!tk || n < 0 || (n > 0 && !ids) || cap < 0 || (cap > 0 && !out))
        return ct__error(CT_EINVAL, "tokenizer: decode needs a tokenizer and ids");
    int64_t len = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= 256 + tk->n_merges)
            return ct__error(CT_ERANGE, "tokenizer: decode: ids[%lld] = %d is not below %d",
                             (long long)i, (int)ids[i], 256 + tk->n_merges);
        uint32_t l = tk->off[ids[i] + 1] - tk->off[ids[i]];
        if (len + l <= cap)
            memcpy(out + len, tk->bytes + tk->off[ids[i]], l);
        len += l;
    }
    return len;
}

int ct_tokenizer_learn(const unsigned char *text, int64_t n, int n_merges, ct_tokenizer **out)
{
    if (out)
        *out = NULL;
    if (!out || n < 0 || (n > 0 && !text) || n_merges < 0 || n_merges > MAX_LEARN_VOCAB - 256)
        return ct__error(CT_EINVAL, "tokenizer: learn needs text and 0 <= n_merges <= %d",
                         MAX_LEARN_VOCAB - 256);
    size_t v = 256 + (size_t)n_merges;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    int32_t *merges = malloc(sizeof(int32_t) * 2 * (size_t)(n_merges > 0 ? n_merges : 1));
    uint32_t *count = calloc(v * v, sizeof(uint32_t)); /* zero pages: only touched ones cost */
    if (!ids || !merges || !count) {
        free(ids), free(merges), free(count);
        return ct__error(CT_ENOMEM, "tokenizer: out of memory learning %d merges", n_merges);
    }
    for (int64_t i = 0; i < n; i++)
        ids[i] = text[i];
    int k = 0;
    for (; k < n_merges && n > 1; k++) {
        size_t best = 0;
        uint32_t best_c = 0;
        for (int64_t i = 0; i + 1 < n; i++) {
            size_t key = (size_t)ids[i] * v + (size_t)ids[i + 1];
            uint32_t c = ++count[key];
            if (c > best_c || (c == best_c && key < best))
                best_c = c, best = key;
        }
        for (int64_t i = 0; i + 1 < n; i++)
            count[(size_t)ids[i] * v + (size_t)ids[i + 1]] = 0;
        merges[2 * k] = (int32_t)(best / v);
        merges[2 * k + 1] = (int32_t)(best % v);
        n = merge_pass(ids, n, merges[2 * k], merges[2 * k + 1], 256 + k);
    }
    free(ids);
    free(count);
    int bad = 0;
    char why[160];
    int rc = build(merges, k, out, &bad, why, sizeof why);
    return rc == CT_EINVAL ? ct__error(rc, "tokenizer: learn: %s", why) : rc;
}

int ct_tokenizer_save(const ct_tokenizer *tk, const char *path)
{
    if (!tk || !path)
        return ct__error(CT_EINVAL, "tokenizer: save needs a tokenizer and a path");
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return ct__error(CT_EIO, "tokenizer: cannot write %s: %s", tmp, strerror(errno));
    fprintf(f, "ct-bpe 1 %d\n", tk->n_merges);
    for (int i = 0; i < tk->n_merges; i++)
        fprintf(f, "%d %d\n", (int)tk->merges[2 * i], (int)tk->merges[2 * i + 1]);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        remove(tmp);
        return ct__error(CT_EIO, "tokenizer: cannot write %s: %s", path, strerror(errno));
    }
    return 0;
}

/* Parses a line of exactly `want` non-negative decimal integers separated by single blanks
 * (the header's prefix already skipped); returns 0 or -1. */
static int parse_ints(const char *s, long *v, int want)
{
    for (int i = 0; i < want; i++) {
        if (i > 0 && *s++ != ' ')
            return -1;
        if (*s < '0' || *s > '9')
            return -1;
        char *end;
        errno = 0;
        v[i] = strtol(s, &end, 10);
        if (errno || v[i] > 1 << 20)
            return -1;
        s = end;
    }
    return *s == '\n' || *s == 0 ? 0 : -1;
}

int ct_tokenizer_load(const char *path, ct_tokenizer **out)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return ct__error(CT_EINVAL, "tokenizer: load needs a path");
    FILE *f = fopen(path, "r");
    if (!f)
        return ct__error(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path,
                         strerror(errno));
    char line[256];
    long h[1], m[2];
    int32_t *merges = NULL;
    int rc = 0, n = 0;
    if (!fgets(line, sizeof line, f) || strncmp(line, "ct-bpe 1 ", 9) != 0 ||
        parse_ints(line + 9, h, 1) < 0 || h[0] > 65536 - 256) {
        rc = ct__error(CT_EINVAL,
                       "%s:1: not a ct BPE vocabulary: the first line must be `ct-bpe 1 "
                       "<n_merges>` with 0 <= n_merges <= 65280",
                       path);
        goto done;
    }
    n = (int)h[0];
    merges = malloc(sizeof(int32_t) * 2 * (size_t)(n > 0 ? n : 1));
    if (!merges) {
        rc = ct__error(CT_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        if (!fgets(line, sizeof line, f)) {
            rc = ct__error(CT_EINVAL,
                           "%s:%d: the file ends after %d merges of the %d its "
                           "header says",
                           path, i + 2, i, n);
            goto done;
        }
        if (parse_ints(line, m, 2) < 0 || (!strchr(line, '\n') && !feof(f))) {
            line[strcspn(line, "\n")] = 0;
            rc = ct__error(CT_EINVAL, "%s:%d: a merge must be two ids `a b`, not \"%.40s\"", path,
                           i + 2, line);
            goto done;
        }
        merges[2 * i] = (int32_t)m[0];
        merges[2 * i + 1] = (int32_t)m[1];
    }
    if (fgets(line, sizeof line, f)) {
        rc = ct__error(CT_EINVAL, "%s:%d: more lines than the %d merges the header says", path,
                       n + 2, n);
        goto done;
    }
    int bad = 0;
    char why[160];
    rc = build(merges, n, out, &bad, why, sizeof why);
    merges = NULL; /* taken */
    if (rc == CT_EINVAL)
        rc = ct__error(rc, "%s:%d: %s", path, bad + 2, why);
done:
    free(merges);
    fclose(f);
    return rc;
}
