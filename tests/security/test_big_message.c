/* tests/security/test_big_message.c — a message costs the head about its size, not a multiple
 * of it. A real ct-head; a raw peer sends a 2 MB PgCreate of 1M empty bundles (2 wire bytes
 * each; protobuf-c made ~80 heap bytes of each: +88 MB before). The head answers with an
 * Error (the decoded size is over its limit), stays up, and its peak resident memory (VmHWM of
 * /proc/PID/status) grows by less than 4 MB, over five such messages. A 6 MB message (over the
 * head's maximum message size) only costs that peer its connection: the head serves on. */
#include "sec.h"

/* What the head's peak may grow by. Under ASan freed blocks wait in a quarantine (the 2 MB
 * receive buffers too), so a peak counts them: a looser bound, still far below +88 MB each. */
#if defined(__SANITIZE_ADDRESS__)
#define GROWTH_KB (64 << 10)
#else
#define GROWTH_KB 4096
#endif

static size_t varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    do {
        p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* An Envelope of req_id with a PgCreate body of nb empty bundles, as a hostile peer writes
 * it by hand; *len its size (malloc'd). */
static uint8_t *empty_bundles(uint64_t req_id, size_t nb, size_t *len)
{
    uint8_t *p = malloc(2 * nb + 64);
    if (!p)
        return NULL;
    size_t n = 0;
    p[n++] = 0x08; /* major */
    p[n++] = CT_PROTO_MAJOR;
    p[n++] = 0x18; /* req_id */
    n += varint(p + n, req_id);
    p[n++] = 0x22; /* sender */
    p[n++] = 3;
    memcpy(p + n, "big", 3);
    n += 3;
    n += varint(p + n, (29 << 3) | 2); /* pg_create */
    n += varint(p + n, 2 * nb);
    for (size_t i = 0; i < nb; i++) {
        p[n++] = 0x0a; /* bundles, length 0 */
        p[n++] = 0;
    }
    *len = n;
    return p;
}

int main(void)
{
    h_init();
    char addr[128];
    pid_t head = h_start_head(addr, sizeof addr, "100", "1000");
    if (head < 0)
        return 1;
    peer big, other;
    CHECK_OK(peer_open(&big, addr, "big", NULL));
    CHECK_OK(peer_open(&other, addr, "other", "job"));
    for (int i = 0; i < 3; i++) /* warm: connections, first replies */
        CHECK(ping(&big) == 0 && ping(&other) == 0);
    long before = vm_hwm_kb(head);
    CHECK(before > 0);

    size_t len = 0;
    for (int round = 0; round < 5; round++) {
        uint8_t *msg = empty_bundles(1000 + round, 1000000, &len); /* 2 MB, under 2 MiB */
        CHECK(msg && len > 2000000);
        if (!msg)
            break;
        CHECK_EQ_INT(zmq_send(big.s, msg, len, 0), (long long)len);
        free(msg);
        /* undecoded, so its request id is unknown: the error carries 0 */
        Ct__Envelope *r = peer_wait(&big, 0, 0, 5000);
        CHECK_ERR(r, CT_EPROTO, "envelope", "decoding them would take more than");
    }
    CHECK(ping(&big) == 0);
    long after = vm_hwm_kb(head);
    printf("head VmHWM: %ld kB before, %ld kB after 5 x %zu-byte PgCreate (+%ld kB)\n", before,
           after, len, after - before);
    CHECK(after > 0 && after - before < GROWTH_KB);

    /* over the maximum message size: that connection is cut, nothing is answered */
    size_t huge = (size_t)6 << 20;
    uint8_t *msg = calloc(1, huge);
    CHECK(msg != NULL);
    if (msg) {
        CHECK_EQ_INT(zmq_send(big.s, msg, huge, 0), (long long)huge);
        free(msg);
        CHECK_NOTHING(&big, 0, 500);
    }
    CHECK(ping(&other) == 0);
    long last = vm_hwm_kb(head);
    printf("head VmHWM after a %zu-byte message: %ld kB\n", huge, last);
    CHECK(last > 0 && last - before < GROWTH_KB);
    CHECK(!h_gone(head));
    peer_close(&big);
    peer_close(&other);
    return sec_finish("security_big_message", head);
}
