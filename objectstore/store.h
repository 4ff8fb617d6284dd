/* objectstore/store.h — the node-local object store shard and its same-node client.
 *
 * A shard holds immutable objects addressed by 20-byte ids in one POSIX shared-memory arena
 * ("/dev/shm/ct.<name>.arena", sized to the memory cap, pages faulted on first use and reused
 * after a delete), so local processes read them zero-copy. Lifecycle of an object:
 *
 *     ct_store_create(s, &id, size, &p)   writable buffer, invisible to readers
 *     ... write size bytes at p ...
 *     ct_store_seal(s, &id)               now visible and immutable
 *     ct_store_get(s, &id, &view)         pinned read-only view: view.data, view.size
 *     ct_store_release(s, &view)          unpin
 *     ct_store_delete(s, &id)             gone (freed when the last pin goes)
 *
 * Memory cap: a create (or a restore) that does not fit evicts sealed, unpinned objects, least
 * recently used first, by spilling them to the shard's own directory "<spill_dir>/ct.<name>"
 * (file "<40 hex id>", written to "<hex>.tmp", fsync'd, renamed; the directory is emptied when
 * a shard of that name starts and removed when it is destroyed, so shards may share a
 * spill_dir). A get of a spilled object copies it back into the arena; if
 * it cannot fit, the view maps the spill file read-only instead. Pinned and unsealed objects
 * are never evicted; if not enough can be evicted, create fails with CT_ENOSPC and nothing
 * stored is lost. Placement is first-fit in the arena, so pinned objects can fragment it.
 *
 * Other processes of the node use ct_store_client: it connects to the shard over a unix
 * socket in the abstract namespace ("@ct-store.<name>"), maps the arena read-only, and asks
 * the shard to pin/unpin. Pins held by a client are dropped when its connection closes (also
 * when the process dies), and objects it created but did not seal are discarded.
 *
 * What this is not: the cross-node transfer (objectstore/transfer.h) and the cluster-wide
 * directory (head). Store names must be unique per machine: a second ct_store_new with a live
 * name fails with CT_EEXIST; a name left behind by a killed process is reclaimed.
 *
 * Threads: every ct_store_* function is thread-safe (one mutex per shard; spilling runs
 * under it). The shard serves clients from one background thread it owns. A ct_store_client
 * is thread-safe too (calls are serialized). */
#ifndef CT_OBJECTSTORE_STORE_H
#define CT_OBJECTSTORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An object id: 20 opaque bytes (typically a content hash or a random id). Also defined by
 * include/ct/ct.h, identically. */
#ifndef CT_OBJECT_ID_DEFINED
#define CT_OBJECT_ID_DEFINED
#define CT_OBJECT_ID_LEN 20
typedef struct ct_object_id {
    uint8_t b[CT_OBJECT_ID_LEN];
} ct_object_id;
#endif

/* Writes the 40 lower-case hex digits and a NUL into out (41 bytes); returns out. */
char *ct_object_id_hex(const ct_object_id *id, char out[2 * CT_OBJECT_ID_LEN + 1]);
/* Parses 40 hex digits; returns 0 or CT_EINVAL. */
int ct_object_id_parse(ct_object_id *id, const char *hex);

typedef struct ct_store ct_store;

typedef struct ct_store_opts {
    const char *name;      /* required: [A-Za-z0-9_.-]{1,64}, unique on this machine */
    uint64_t memory_cap;   /* bytes of shared memory for objects; 0 = 1 GiB */
    const char *spill_dir; /* where evicted objects go; NULL or "" = no spilling (ENOSPC) */
    bool prefault;         /* fault in the whole arena at start (put at memcpy speed at once) */
    /* Keep this many bytes past the highest arena range ever used allocated and mapped, ahead
     * of need, by a background thread at the lowest CPU priority: a create into never-used
     * space (e.g. an incoming pull) then finds its pages ready instead of having the kernel
     * allocate and zero them on the spot (~1.5 GB/s, against ~15 GB/s for reused pages).
     * Costs that much shared memory beyond use. 0 = off (pages are faulted by the create). */
    uint64_t populate_ahead;
    /* Called when an object is sealed (by this process, a client or a pull) or deleted, so
     * the node can tell the head's directory. Runs on the thread that sealed/deleted (the
     * shard's client thread for clients), without the shard's lock: it may call ct_store_*,
     * and must be quick. event: CT_STORE_SEALED or CT_STORE_DELETED. NULL = none. */
    void (*on_event)(void *arg, int event, const ct_object_id *id, uint64_t size);
    void *event_arg;
} ct_store_opts;

enum { CT_STORE_SEALED = 1, CT_STORE_DELETED = 2 };

/* A pinned, read-only view of a sealed object. data stays valid until the view is released.
 * Fields after size are private. A zeroed view is "empty"; release of an empty view is a no-op. */
typedef struct ct_store_view {
    const void *data;
    uint64_t size;
    ct_object_id id;
    void *obj_;       /* private: pinned object (shard) */
    void *map_;       /* private: own mapping of a spill file or client mapping, or NULL */
    uint64_t maplen_; /* private */
} ct_store_view;

/* One row of ct_store_list. */
typedef struct ct_store_entry {
    ct_object_id id;
    uint64_t size;
    bool spilled; /* on disk in spill_dir, not in shared memory */
    int pins;
} ct_store_entry;

typedef struct ct_store_stats {
    uint64_t memory_cap;    /* arena size */
    uint64_t memory_used;   /* bytes of the arena in use (objects rounded up to 4 KiB) */
    uint64_t objects;       /* sealed + unsealed objects indexed */
    uint64_t spilled;       /* of which on disk */
    uint64_t spilled_bytes; /* their bytes */
    uint64_t spill_count;   /* evictions to disk so far */
    uint64_t restore_count; /* copies back from disk so far */
    uint64_t spill_bytes;   /* bytes written to spill_dir so far */
} ct_store_stats;

/* Creates a shard: binds its client socket, creates the arena, starts the client thread.
 * Returns an owned shard, or NULL (ct_last_error() says why; CT_EEXIST-like message when the
 * name is in use). */
ct_store *ct_store_new(const ct_store_opts *opts);

/* Stops the client thread, unmaps and unlinks the arena, removes this shard's spill files.
 * Outstanding views of this process become invalid. Accepts NULL; sets *s to NULL. */
void ct_store_destroy(ct_store **s);

/* Creates an unsealed object of size bytes and returns its writable buffer in *data (valid
 * until seal or abort). CT_EEXIST if the id is present (sealed or not), CT_ENOSPC if it does
 * not fit even after spilling every evictable object (nothing is evicted then), CT_EIO if a
 * spill write fails. */
int ct_store_create(ct_store *s, const ct_object_id *id, uint64_t size, void **data);

/* Makes an unsealed object visible and immutable. CT_ENOENT if absent, CT_EINVAL if sealed. */
int ct_store_seal(ct_store *s, const ct_object_id *id);

/* Discards an unsealed object (a failed write). CT_ENOENT if absent, CT_EINVAL if sealed. */
int ct_store_abort(ct_store *s, const ct_object_id *id);

/* create + copy + seal. Same errors as ct_store_create. */
int ct_store_put(ct_store *s, const ct_object_id *id, const void *data, uint64_t size);

/* Pins a sealed object and fills *view. CT_ENOENT if absent or not sealed yet; CT_ENOSPC/CT_EIO
 * only if a spilled object can be neither restored nor mapped from its file. */
int ct_store_get(ct_store *s, const ct_object_id *id, ct_store_view *view);

/* Unpins a view from ct_store_get and zeroes it. Accepts an empty view. */
void ct_store_release(ct_store *s, ct_store_view *view);

/* Deletes a sealed object. It disappears from get/contains/list at once; its memory or spill
 * file is freed when the last pin is released. CT_ENOENT if absent, CT_EBUSY if not sealed yet
 * (its writer still writes into it: only the writer drops it, with abort). */
int ct_store_delete(ct_store *s, const ct_object_id *id);

/* True if a sealed object with this id is present (in memory or spilled). */
bool ct_store_contains(ct_store *s, const ct_object_id *id);

/* Size of a sealed object into *size. CT_ENOENT if absent or unsealed. */
int ct_store_size(ct_store *s, const ct_object_id *id, uint64_t *size);

/* Lists sealed objects: *out is a malloc'd array the caller frees, *n its length. */
int ct_store_list(ct_store *s, ct_store_entry **out, size_t *n);

void ct_store_get_stats(ct_store *s, ct_store_stats *st);
const char *ct_store_name(const ct_store *s); /* borrowed while s lives */

/* Unlinks the shared memory a shard named name left behind (after its process was killed).
 * Refuses with CT_EBUSY while a live shard holds the name. Returns 0 if nothing was left. */
int ct_store_purge(const char *name);

/* Internal (objectstore/transfer): the arena's shm file and the offset of a view's bytes in it,
 * so the transfer server can sendfile() them. The fd is borrowed while s lives. CT_EINVAL for
 * a view that is not in the arena (mapped from a spill file) or empty. Thread-safe. */
int ct__store_view_file(ct_store *s, const ct_store_view *v, int *fd, uint64_t *off);

/* ---- same-node client (another process) ---- */
typedef struct ct_store_client ct_store_client;

/* Connects to the shard called store_name on this machine and maps its arena read-only.
 * Returns an owned client or NULL (CT_ENOENT message when no such shard runs). */
ct_store_client *ct_store_client_new(const char *store_name);

/* Closes the connection (the shard drops this client's pins) and unmaps. Views obtained from
 * this client become invalid. Accepts NULL; sets *c to NULL. */
void ct_store_client_destroy(ct_store_client **c);

/* Like ct_store_get: a zero-copy, read-only view into the shard's arena (or of its spill
 * file). CT_ENOENT if absent or unsealed; CT_ECONNRESET if the shard went away. */
int ct_store_client_get(ct_store_client *c, const ct_object_id *id, ct_store_view *view);
void ct_store_client_release(ct_store_client *c, ct_store_view *view);

/* Writes through the shard: create gives a writable mapping of the new object (the arena is
 * mapped read-write on first use), seal publishes it. Unsealed objects of a client that
 * disconnects are discarded. Errors as for ct_store_create/seal/abort/delete. */
int ct_store_client_create(ct_store_client *c, const ct_object_id *id, uint64_t size, void **data);
int ct_store_client_seal(ct_store_client *c, const ct_object_id *id);
int ct_store_client_abort(ct_store_client *c, const ct_object_id *id);
int ct_store_client_delete(ct_store_client *c, const ct_object_id *id);
/* 1 if present and sealed, 0 if not, negative on a connection error. */
int ct_store_client_contains(ct_store_client *c, const ct_object_id *id);

#endif
