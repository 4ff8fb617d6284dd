/* fuzz/fuzz_envelope.c — libFuzzer target: the control envelope (proto/msg.c, with its capped
 * allocator) and the head's handling of what decodes (head/loop.c dispatch and every handler,
 * the object directory's included), on a fresh head per input.
 *
 * Input: records, each [peer: 1 byte][n: 2 bytes little-endian][n bytes: one message], the
 * last one cut short if the input is; peer names the sender's routing id, so a sequence can
 * register a driver and then use what it created. Replies go to a ROUTER bound nowhere, which
 * drops them. Not covered: paths that need a node's token (drawn at random by the head). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <zmq.h>

#include "head/head.h"
#include "proto/msg.h"

#define MAX_RECORDS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static void *ctx, *sock;
    if (!sock) {
        ctx = zmq_ctx_new();
        sock = ctx ? zmq_socket(ctx, ZMQ_ROUTER) : NULL;
        if (!sock)
            return 0;
    }
    /* the whole input as one envelope, with the default caps of every other receiver */
    Ct__Envelope *e = NULL;
    ct__msg_decode(data, size, &e, "fuzz");
    ct__msg_free(e);

    ct__head *h = ct__head_new_detached(sock);
    if (!h)
        return 0;
    size_t at = 0;
    for (int r = 0; r < MAX_RECORDS && size - at >= 3; r++) {
        ct__rid rid;
        rid.len = (size_t)snprintf((char *)rid.id, sizeof rid.id, "peer-%u", data[at]);
        size_t n = (size_t)data[at + 1] | (size_t)data[at + 2] << 8;
        at += 3;
        if (n > size - at)
            n = size - at;
        ct__head_handle_bytes(h, &rid, data + at, n);
        at += n;
    }
    ct__head_destroy_detached(&h);
    return 0;
}
