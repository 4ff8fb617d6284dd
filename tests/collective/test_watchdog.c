/* tests/collective/test_watchdog.c — the communicator's watchdog (trainer/collective/watchdog.c)
 * on its polled path, the one the NCCL backend uses (an op's event polled by the watchdog's
 * thread, never by the caller), with CPU stand-ins for the op: a flag another thread sets.
 *
 *  - an op that completes: ct__watch_wait returns 0 once the flag is set, not before;
 *  - an op whose poll fails: its failure, with the poll's message, is what ct__watch_error
 *    reports when nobody waits for the op;
 *  - an op that never completes: at its deadline the watchdog breaks the communicator
 *    (CT_ETIMEDOUT) and the wait fails naming the op; a ring call then fails at once.
 * One rank (world size 1, the ring backend). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "harness.h"
#include "trainer/collective/internal.h"

struct fake_op {
    atomic_int done; /* 1: complete; -1: failed */
    atomic_int polls;
};

static int fake_poll(void *ctx)
{
    struct fake_op *op = ctx;
    atomic_fetch_add(&op->polls, 1);
    int d = atomic_load(&op->done);
    if (d < 0)
        return ct__error(CT_EIO, "fake op: the device said no");
    return d;
}

static void *complete_later(void *arg)
{
    struct fake_op *op = arg;
    while (atomic_load(&op->polls) < 3) /* the watchdog has looked, and seen it running */
        usleep(1000);
    atomic_store(&op->done, 1);
    return NULL;
}

int main(void)
{
    if (t_rdv_init() < 0)
        return 1;
    ct_rendezvous *rdv = ct_rendezvous_file_new(t_rdv_dir);
    CHECK(rdv);
    ct_comm *c = NULL;
    CHECK_RC(ct_comm_new(&(ct_comm_opts){.rendezvous = rdv,
                                         .group_id = "watchdog",
                                         .rank = 0,
                                         .world_size = 1,
                                         .timeout_ms = 20000},
                         &c));

    /* completes: the wait returns once the poll says so */
    struct fake_op a = {0};
    int ta = ct__watch_begin(c, "fake op a", ct__comm_deadline(c, 30000), fake_poll, &a, true);
    CHECK(ta >= 0);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, complete_later, &a) == 0);
    CHECK_RC(ct__watch_wait(c, ta));
    pthread_join(th, NULL);
    CHECK(atomic_load(&a.done) == 1 && atomic_load(&a.polls) >= 3);
    CHECK_RC(ct__watch_error(c)); /* nothing failed */

    /* fails, nobody waits: kept for ct__watch_error */
    struct fake_op b = {0};
    atomic_store(&b.done, -1);
    CHECK(ct__watch_begin(c, "fake op b", ct__comm_deadline(c, 30000), fake_poll, &b, false) >= 0);
    int rc = 0;
    for (int i = 0; i < 30000 && (rc = ct__watch_error(c)) == 0; i++)
        usleep(1000);
    CHECK(rc == CT_EIO);
    CHECK(strstr(ct_last_error(), "the device said no"));
    CHECK(ct_comm_status(c) == 0); /* a poll's own failure: the backend breaks the comm */

    /* never completes: the deadline */
    struct fake_op h = {0};
    int th2 = ct__watch_begin(c, "fake op h (never done)", ct__comm_deadline(c, 300), fake_poll, &h,
                              true);
    CHECK(th2 >= 0);
    rc = ct__watch_wait(c, th2);
    const char *msg = ct_last_error();
    fprintf(stderr, "watchdog: wait = %d: %s\n", rc, msg);
    CHECK(rc == CT_ETIMEDOUT);
    CHECK(strstr(msg, "collective watchdog: fake op h (never done) did not complete in"));
    CHECK(strstr(msg, "communicator aborted"));
    CHECK(ct_comm_status(c) == CT_ETIMEDOUT);
    float x = 1.0f;
    CHECK(ct_comm_allreduce(c, &x, 1, CT_F32, CT_COMM_SUM, 0) == CT_ETIMEDOUT);

    ct_comm_destroy(&c); /* stops the watchdog's thread */
    ct_rendezvous_file_destroy(&rdv);
    t_rdv_cleanup();
    fprintf(stderr, "watchdog: ok\n");
    return 0;
}
