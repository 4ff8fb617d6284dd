/* head/index.h — a key -> table slot index for the head's tables that are looked up by id or
 * token on every message (nodes by id and by token, objects by id): O(1) where a scan of
 * 10,000 nodes or a million objects was O(n), which made a heartbeat or an ObjAdded cost the
 * whole table. Keys are at most CT__INDEX_KEY bytes. Open addressing, hashed with keyed SipHash
 * (libsodium's crypto_shorthash, a random key per index), so that peers who choose ids cannot
 * choose collisions. Not thread-safe (the head's thread only). */
#ifndef CT_HEAD_INDEX_H
#define CT_HEAD_INDEX_H

#include <stddef.h>

#define CT__INDEX_KEY 40

typedef struct ct__index ct__index;

/* Sets key -> slot (replacing what key had), creating *x when NULL. 0, or CT_ENOMEM (then the
 * index is unchanged), or CT_EINVAL for a key longer than CT__INDEX_KEY. Changing the slot of a
 * key it has allocates nothing and cannot fail. */
int ct__index_put(ct__index **x, const void *key, size_t len, int slot);
/* key's slot, or -1 (also for a NULL index). */
int ct__index_get(const ct__index *x, const void *key, size_t len);
void ct__index_del(ct__index *x, const void *key, size_t len); /* nothing when absent */
void ct__index_free(ct__index **x);                            /* accepts NULL; clears *x */

#endif
