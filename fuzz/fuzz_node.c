/* fuzz/fuzz_node.c — libFuzzer target: ct-node's handling of what it receives (actor/node.c):
 * envelopes from the head (StartActor up to the spawn, KillActor, Error, the rest ignored) and
 * the records of its zygotes (spawned, ready, failed), on a fresh detached node per input
 * (ct__node_new_detached: no head, no fork, no exec, no signal; a zygote is a socketpair).
 *
 * Input: records, each [kind: 1 byte][n: 2 bytes little-endian][n bytes], the last one cut
 * short if the input is. kind even: n bytes are one envelope from the head; kind odd: one
 * record from zygote (kind >> 1) % zygotes (skipped while there is none). What the node sends
 * the head goes to a DEALER connected nowhere, which refuses it. The object node's handlers
 * (ObjPull, ObjDelete: actor/objnode.c) run detached on a small shard holding one object (put
 * back after each input): a pull order that passes their checks is answered instead of pulled.
 * Not covered: the pulls and code shipping (they fetch from other nodes over the network),
 * reaping. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <zmq.h>

#include "actor/runtime.h"
#include "objectstore/store.h"

#define MAX_RECORDS 64

static ct_store *store;

static void teardown(void)
{
    ct__objnode_stop_detached();
    ct_store_destroy(&store);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static void *ctx, *sock;
    static const ct_object_id held = {{0x01}};
    if (!sock) {
        char name[64];
        snprintf(name, sizeof name, "fuzz-node-%d", (int)getpid());
        store = ct_store_new(&(ct_store_opts){.name = name, .memory_cap = 1 << 20});
        ctx = zmq_ctx_new();
        sock = ctx ? zmq_socket(ctx, ZMQ_DEALER) : NULL;
        if (!sock || !store)
            return 0;
        ct__objnode_start_detached(store);
        atexit(teardown);
    }
    if (!ct_store_contains(store, &held))
        ct_store_put(store, &held, "held", 4);
    ct__node *n = ct__node_new_detached(sock);
    if (!n)
        return 0;
    size_t at = 0;
    for (int r = 0; r < MAX_RECORDS && size - at >= 3; r++) {
        uint8_t kind = data[at];
        size_t len = (size_t)data[at + 1] | (size_t)data[at + 2] << 8;
        at += 3;
        if (len > size - at)
            len = size - at;
        if (!(kind & 1))
            ct__node_handle_bytes(n, data + at, len);
        else if (ct__node_zygotes(n) > 0)
            ct__node_zygote_bytes(n, (kind >> 1) % ct__node_zygotes(n), data + at, len);
        at += len;
    }
    ct__node_destroy_detached(&n);
    return 0;
}
