/* tests/objectstore/test_upload.c — uploads through a node's data port (CT_XD_FLAG_PUT,
 * ct_xfer_push) and pulls into private memory (ct_xfer_pull_mem), the object path of a driver
 * with no node on its host. A forked "node" (a shard of 32 MiB and its transfer server):
 *   - an upload of 5 MiB + 7 bytes comes back identical through ct_xfer_pull_mem;
 *   - the same id again: CT_EEXIST, saying so; 40 MiB: CT_ENOSPC naming the 32 MiB limit;
 *   - a chunk sent with a wrong checksum (the test fault xfer_corrupt_put) is refused and the
 * upload sent again, and the bytes stored are the right ones;
 *   - an upload cut after its first chunk leaves no object (sealed or not: the id uploads
 *     again), and one from a peer that fails the handshake stores nothing; the node keeps
 *     serving after both. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "objectstore/xfer_data.h"
#include "tests/objectstore/os_node.h"

#define MB (1ull << 20)
#define OSIZE (5 * MB + 7)

/* Whether the node has id: a pull of it into memory succeeds (and gives n bytes). */
static int node_has(const os_node *n, const ct_object_id *id, uint64_t want)
{
    const char *h[] = {n->endpoint};
    void *data = NULL;
    uint64_t size = 0;
    int rc =
        ct_xfer_pull_mem(id, h, 1, &(ct_xfer_pull_opts){.timeout_ms = 2000}, &data, &size, NULL);
    free(data);
    return rc == 0 && size == want;
}

int main(void)
{
#ifndef CT_FAULTS
    return 77; /* it arms test faults (common/fault.h): a build with CT_FAULTS runs it */
#endif
    os_purge_stale();
    os_node a = {0};
    unsigned char *buf = malloc(40 * MB);
    CHECK(buf);
    os_fill(buf, 40 * MB, 9);
    CHECK_EQ(os_node_start(&a, "uA", NULL, 0, 32 * MB, 0), 0);
    CHECK(a.data_port > 0);
    ct_object_id id, id2, id3, id4;
    os_id(&id, 1);
    os_id(&id2, 2);
    os_id(&id3, 3);
    os_id(&id4, 4);

    /* round trip */
    CHECK_EQ(ct_xfer_push(a.endpoint, a.data_port, &id, buf, OSIZE, 5000), 0);
    const char *h[] = {a.endpoint};
    uint16_t ports[] = {a.data_port};
    void *data = NULL;
    uint64_t size = 0;
    CHECK_EQ(
        ct_xfer_pull_mem(&id, h, 1,
                         &(ct_xfer_pull_opts){.size_known = 1, .size = OSIZE, .data_ports = ports},
                         &data, &size, NULL),
        0);
    CHECK_EQ(size, OSIZE);
    CHECK(data && memcmp(data, buf, OSIZE) == 0);
    free(data);

    /* refusals, each with its reason */
    CHECK_EQ(ct_xfer_push(a.endpoint, a.data_port, &id, buf, OSIZE, 5000), CT_EEXIST);
    CHECK(strstr(ct_last_error(), "holds the object already"));
    CHECK_EQ(ct_xfer_push(a.endpoint, a.data_port, &id2, buf, 40 * MB, 5000), CT_ENOSPC);
    CHECK(strstr(ct_last_error(), "41943040 bytes, over its limit of 33554432"));
    CHECK(!node_has(&a, &id2, 40 * MB));

    /* a damaged chunk: refused by the node, sent again */
    setenv("CT_TEST_FAULTS", "xfer_corrupt_put=2", 1);
    CHECK_EQ(ct_xfer_push(a.endpoint, a.data_port, &id2, buf + 7, 9 * MB, 5000), 0);
    unsetenv("CT_TEST_FAULTS");
    CHECK_EQ(ct_xfer_pull_mem(&id2, h, 1, NULL, &data, &size, NULL), 0);
    CHECK(data && size == 9 * MB && memcmp(data, buf + 7, 9 * MB) == 0);
    free(data);

    /* an upload cut after its first chunk: nothing is left of it */
    int fd = ct__xdata_connect(a.endpoint, a.data_port, 2000);
    CHECK(fd >= 0);
    ct_xd_req rq = {CT_XD_REQ_MAGIC, CT_XD_FLAG_PUT, {0}, 0, 0, 2 * MB};
    memcpy(rq.id, id3.b, CT_OBJECT_ID_LEN);
    ct_xd_rep rp = {0};
    CHECK_EQ(ct__xdata_send_all(fd, &rq, sizeof rq, 0), 0);
    CHECK_EQ(ct__xdata_recv_all(fd, &rp, sizeof rp), 0);
    CHECK_EQ(rp.status, 0);
    CHECK_EQ(ct__xdata_send_all(fd, buf, 1 * MB, 0), 0);
    close(fd);
    usleep(200000);
    CHECK(!node_has(&a, &id3, 2 * MB));
    /* dropped, not left unsealed: the same id uploads again (CT_EBUSY otherwise) */
    CHECK_EQ(ct_xfer_push(a.endpoint, a.data_port, &id3, buf, 2 * MB, 5000), 0);
    CHECK(node_has(&a, &id3, 2 * MB));

    /* a peer without the secret: an upload request instead of the handshake, and garbage for
     * the proof; the node closes the connection and stores nothing */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(a.data_port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    memcpy(rq.id, id4.b, CT_OBJECT_ID_LEN);
    rq.size = 1 * MB;
    unsigned char junk[64] = {0};
    send(fd, &rq, sizeof rq, MSG_NOSIGNAL);
    send(fd, junk, 16, MSG_NOSIGNAL); /* C1 (32) + C2 (32) = the request and these 16 bytes */
    send(fd, buf, 1 * MB, MSG_NOSIGNAL);
    char b[256];
    ssize_t k;
    size_t total = 0;
    while ((k = recv(fd, b, sizeof b, 0)) > 0)
        total += (size_t)k;
    CHECK(total < sizeof b); /* at most S1: never a reply to the request */
    close(fd);
    CHECK(!node_has(&a, &id4, 1 * MB));

    /* still serving */
    CHECK_EQ(ct_xfer_push(a.endpoint, a.data_port, &id4, buf, 1 * MB, 5000), 0);
    CHECK(node_has(&a, &id4, 1 * MB));

    os_node_stop(&a);
    free(buf);
    printf("ok\n");
    return 0;
fail:
    os_kill_all();
    ct_store_purge(a.name);
    free(buf);
    return 1;
}
