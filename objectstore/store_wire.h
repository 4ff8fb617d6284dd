/* objectstore/store_wire.h — internal: the messages between a shard and its same-node clients.
 *
 * One SOCK_SEQPACKET datagram per request and per reply, fixed-size structs in host byte
 * order (both ends are on the same machine and built from the same source). Every request but
 * RELEASE gets exactly one reply, in order. Not an external protocol: cross-node traffic uses
 * proto/ct.proto (see transfer.c). */
#ifndef CT_OBJECTSTORE_STORE_WIRE_H
#define CT_OBJECTSTORE_STORE_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "objectstore/store.h"

#define CT_STORE_NAME_MAX 64

enum {
    CT__STORE_OP_HELLO = 1, /* reply: path = arena shm name, size = arena size */
    CT__STORE_OP_GET,       /* pin; reply: off, size, kind (+ path of the spill file) */
    CT__STORE_OP_RELEASE,   /* unpin; no reply */
    CT__STORE_OP_CONTAINS,  /* reply: size = 1 if present and sealed */
    CT__STORE_OP_CREATE,    /* request size; reply: off, size */
    CT__STORE_OP_SEAL,
    CT__STORE_OP_ABORT,
    CT__STORE_OP_DELETE,
};

enum { CT__STORE_KIND_ARENA = 0, CT__STORE_KIND_FILE = 1 };

typedef struct ct__store_req {
    uint32_t op;
    uint32_t reserved;
    uint64_t size;
    ct_object_id id;
    uint32_t reserved2;
} ct__store_req;

typedef struct ct__store_rep {
    int32_t status; /* 0 or CT_E* */
    uint32_t kind;
    uint64_t off;
    uint64_t size;
    char path[256];
    char err[256]; /* ct_last_error() of the shard when status != 0 */
} ct__store_rep;

int ct__store_check_name(const char *name);
void ct__store_shm_name(char *out, size_t n, const char *name);
socklen_t ct__store_sockaddr(struct sockaddr_un *sa, const char *name);
/* Maps size bytes of a file read-only; *map NULL for size 0. */
int ct__map_file(const char *path, uint64_t size, void **map, uint64_t *maplen);

#endif
