/* fuzz/fuzz_dataport.c — libFuzzer target: the transfer server's two request paths
 * (objectstore/), against a small real shard holding three objects (0, 100 and 5000 bytes; ids
 * 01.., 02.., 03..):
 *   - the data port's requests after the handshake (xfer_data.c, ct__xdata_serve_bytes), the
 *     replies and chunks written into a socketpair and drained; uploads (CT_XD_FLAG_PUT) read
 *     their chunks from the input's bytes after the requests, then EOF; what they sealed is
 *     deleted after each input;
 *   - the ZeroMQ chunk server (transfer.c): a request sent over CURVE from a DEALER to a real
 *     ct_xfer_server, whose one reply is awaited (none in 10 s aborts: a lost request).
 *
 * Input: [mode: 1 byte][rest]. mode even: rest is the data port's byte stream (at most 16
 * requests, then the client's upload bytes). mode odd: rest is one ObjXfer request, sent as (mode
 * >> 1) % 3 + 1 frames (the rest split evenly; the server must refuse extra frames). The shard is
 * named "fuzz-dp-<pid>" and removed at exit (those of runs that crashed, at the next start). Not
 * the handshake (fuzz_auth) nor the puller. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <zmq.h>

#include "common/auth.h"
#include "common/common.h"
#include "objectstore/transfer.h"
#include "objectstore/xfer_data.h"

#define MAX_REQS 16

static ct_store *store;
static ct_xfer_server *srv;
static ct__xdata_server *xd;
static ct_xfer_server_stats xd_stats;
static void *zctx, *dealer;

static void teardown(void)
{
    if (dealer)
        zmq_close(dealer);
    ct_xfer_server_destroy(&srv);
    ct__xdata_server_destroy(&xd);
    if (zctx)
        zmq_ctx_term(zctx);
    ct_store_destroy(&store);
}

/* Removes the shards of earlier runs that died (a crash skips atexit): /dev/shm/ct.fuzz-dp-PID.* */
static void purge_dead_runs(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        int pid;
        char name[64];
        if (sscanf(de->d_name, "ct.fuzz-dp-%d.", &pid) != 1 || pid <= 0 || kill(pid, 0) == 0 ||
            errno != ESRCH) /* not ours, or its process lives (EPERM: another user's) */
            continue;
        snprintf(name, sizeof name, "fuzz-dp-%d", pid);
        ct_store_purge(name);
    }
    if (d)
        closedir(d);
}

static int setup(void)
{
    purge_dead_runs();
    static const uint8_t secret[CT_SECRET_LEN] = "ct-fuzz-secret-0123456789abcdef";
    ct__auth_set(secret);
    char name[64];
    snprintf(name, sizeof name, "fuzz-dp-%d", (int)getpid());
    store = ct_store_new(&(ct_store_opts){.name = name, .memory_cap = 1 << 20});
    if (!store)
        return -1;
    atexit(teardown);
    static uint8_t bytes[5000];
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (uint8_t)(i * 7);
    const uint64_t sizes[3] = {0, 100, sizeof bytes};
    for (int k = 0; k < 3; k++) {
        ct_object_id id;
        memset(&id, 0, sizeof id);
        id.b[0] = (uint8_t)(k + 1);
        if (ct_store_put(store, &id, bytes, sizes[k]))
            return -1;
    }
    srv = ct_xfer_server_new(store, &(ct_xfer_server_opts){.sender = "fuzz"});
    xd = ct__xdata_server_new(store, "tcp://127.0.0.1:1", "fuzz-dp", 0, &xd_stats);
    zctx = zmq_ctx_new();
    dealer = zctx ? zmq_socket(zctx, ZMQ_DEALER) : NULL;
    int zero = 0;
    if (!srv || !xd || !dealer || ct__auth_zmq_client(dealer) ||
        zmq_setsockopt(dealer, ZMQ_LINGER, &zero, sizeof zero) ||
        zmq_connect(dealer, ct_xfer_server_endpoint(srv)))
        return -1;
    return 0;
}

/* Deletes every object but the three of setup (what uploads sealed), so that inputs stay
 * independent. */
static void drop_uploads(void)
{
    ct_store_entry *e = NULL;
    size_t n = 0;
    if (ct_store_list(store, &e, &n))
        return;
    for (size_t i = 0; i < n; i++) {
        static const uint8_t zero[CT_OBJECT_ID_LEN];
        bool base = e[i].id.b[0] >= 1 && e[i].id.b[0] <= 3 &&
                    !memcmp(e[i].id.b + 1, zero, CT_OBJECT_ID_LEN - 1);
        if (!base)
            ct_store_delete(store, &e[i].id);
    }
    free(e);
}

/* The first MAX_REQS requests' bytes are the requests; what follows is what the client sends
 * after them (an upload's chunks and trailers), then it stops sending (EOF). */
static void data_port(const uint8_t *data, size_t size)
{
    size_t reqs = size < MAX_REQS * CT_XD_REQ_LEN ? size : MAX_REQS * CT_XD_REQ_LEN;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
        return;
    int big = 1 << 20; /* the replies and the client's bytes fit in the socket's buffers */
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    /* a short write (or none) is a cut upload: the server sees EOF after what got through */
    ssize_t sent = size > reqs ? write(sv[1], data + reqs, size - reqs) : 0;
    (void)sent;
    shutdown(sv[1], SHUT_WR);
    ct__xdata_serve_bytes(xd, sv[0], data, reqs);
    close(sv[0]);
    close(sv[1]);
    drop_uploads();
}

static void zmq_request(int frames, const uint8_t *data, size_t size)
{
    size_t part = size / (size_t)frames;
    for (int f = 0; f < frames; f++) {
        size_t n = f == frames - 1 ? size - part * (size_t)f : part;
        zmq_send(dealer, data + part * (size_t)f, n, f < frames - 1 ? ZMQ_SNDMORE : 0);
    }
    /* libFuzzer's timeout check is a SIGALRM: an interrupted poll waits again, for the rest */
    zmq_pollitem_t it = {dealer, 0, ZMQ_POLLIN, 0};
    int64_t deadline = ct__now_ms() + 10000;
    int r;
    do
        r = zmq_poll(&it, 1, deadline - ct__now_ms() > 0 ? deadline - ct__now_ms() : 0);
    while (r < 0 && zmq_errno() == EINTR && ct__now_ms() < deadline);
    if (r != 1) {
        fprintf(stderr, "fuzz_dataport: no reply from the transfer server in 10 s (%s)\n",
                r < 0 ? zmq_strerror(zmq_errno()) : "timed out");
        abort();
    }
    zmq_msg_t m;
    zmq_msg_init(&m);
    int more = 1;
    while (more) { /* the reply's frames: header, and for a chunk its bytes */
        if (zmq_msg_recv(&m, dealer, 0) < 0) {
            if (zmq_errno() == EINTR)
                continue;
            break;
        }
        more = zmq_msg_more(&m);
    }
    zmq_msg_close(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int state; /* 1 once set up */
    if (!state) {
        if (setup()) { /* no shard or server: nothing to fuzz, and the run must say so */
            fprintf(stderr, "fuzz_dataport: setup failed: %s\n", ct_last_error());
            exit(1);
        }
        state = 1;
    }
    if (size < 1 || size > 60000)
        return 0;
    if (!(data[0] & 1))
        data_port(data + 1, size - 1);
    else
        zmq_request((data[0] >> 1) % 3 + 1, data + 1, size - 1);
    return 0;
}
