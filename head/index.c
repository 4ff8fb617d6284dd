/* head/index.c — the head's key -> slot index (index.h): linear probing over a power-of-two
 * array of entries that hold their key, with tombstones for deletions; grown (and tombstones
 * dropped) when used and deleted entries pass 1/2 of it. Not in here: what the slots mean. */
#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "head/index.h"

enum { E_EMPTY, E_USED, E_GONE };

typedef struct entry {
    uint8_t state, len;
    uint8_t key[CT__INDEX_KEY];
    int slot;
} entry;

struct ct__index {
    entry *e;
    size_t cap, used, gone;
    uint8_t k[crypto_shorthash_KEYBYTES];
};

static size_t hash(const ct__index *x, const void *key, size_t len)
{
    uint8_t out[crypto_shorthash_BYTES];
    crypto_shorthash(out, key, len, x->k);
    uint64_t v;
    memcpy(&v, out, sizeof v);
    return (size_t)v;
}

/* The entry holding key, or (absent) NULL; *free_at: where it would go. */
static entry *find(const ct__index *x, const void *key, size_t len, entry **free_at)
{
    size_t m = x->cap - 1, i = hash(x, key, len) & m;
    entry *tomb = NULL;
    for (;; i = (i + 1) & m) {
        entry *e = &x->e[i];
        if (e->state == E_EMPTY) {
            if (free_at)
                *free_at = tomb ? tomb : e;
            return NULL;
        }
        if (e->state == E_GONE) {
            if (!tomb)
                tomb = e;
        } else if (e->len == len && !memcmp(e->key, key, len)) {
            return e;
        }
    }
}

/* Rebuilt at cap entries (tombstones dropped). 0 or CT_ENOMEM. */
static int rehash(ct__index *x, size_t cap)
{
    entry *old = x->e;
    size_t oldcap = x->cap;
    x->e = calloc(cap, sizeof *x->e);
    if (!x->e) {
        x->e = old;
        return CT_ENOMEM;
    }
    x->cap = cap;
    x->used = x->gone = 0;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].state == E_USED) {
            entry *at = NULL;
            find(x, old[i].key, old[i].len, &at);
            *at = old[i];
            x->used++;
        }
    free(old);
    return 0;
}

int ct__index_put(ct__index **xp, const void *key, size_t len, int slot)
{
    if (len > CT__INDEX_KEY)
        return CT_EINVAL;
    ct__index *x = *xp;
    entry *e = x ? find(x, key, len, NULL) : NULL;
    if (e) { /* a key it has: its slot changes, nothing is allocated (cannot fail) */
        e->slot = slot;
        return 0;
    }
    if (!x) {
        if (sodium_init() < 0 || !(x = calloc(1, sizeof *x)))
            return CT_ENOMEM;
        crypto_shorthash_keygen(x->k);
        if (rehash(x, 64)) {
            free(x);
            return CT_ENOMEM;
        }
        *xp = x;
    }
    if (2 * (x->used + x->gone + 1) > x->cap &&
        rehash(x, 2 * (x->used + 1) > x->cap / 2 ? 2 * x->cap : x->cap))
        return CT_ENOMEM;
    entry *at = NULL;
    find(x, key, len, &at);
    if (at->state == E_GONE)
        x->gone--;
    at->state = E_USED;
    at->len = (uint8_t)len;
    memcpy(at->key, key, len);
    at->slot = slot;
    x->used++;
    return 0;
}

int ct__index_get(const ct__index *x, const void *key, size_t len)
{
    if (!x || len > CT__INDEX_KEY)
        return -1;
    entry *e = find(x, key, len, NULL);
    return e ? e->slot : -1;
}

void ct__index_del(ct__index *x, const void *key, size_t len)
{
    if (!x || len > CT__INDEX_KEY)
        return;
    entry *e = find(x, key, len, NULL);
    if (!e)
        return;
    e->state = E_GONE;
    x->used--;
    x->gone++;
}

void ct__index_free(ct__index **xp)
{
    if (!xp || !*xp)
        return;
    free((*xp)->e);
    free(*xp);
    *xp = NULL;
}
