/* trainer/collective/comm_fail.c — a communicator's failure: the first error breaks it for
 * good (ct__comm_fail: its status, and the peers told at once through the shared segment and
 * the ring's sockets), a break from another thread (ct__comm_break: the watchdog, ct_comm_abort)
 * also wakes the call in progress, and ct_comm_status reads it. The calls (comm.c), the
 * watchdog (watchdog.c) and NCCL (nccl.c) come here; nothing here calls them. */
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/common.h"
#include "internal.h"

int ct__comm_fail(ct_comm *c, int err)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&c->status, &expected, err)) {
        /* first failure: make peers notice at once instead of at their deadline */
        if (c->shm)
            ct__shm_mark_failed(c);
        if (c->fd_next >= 0)
            shutdown(c->fd_next, SHUT_RDWR);
        if (c->fd_prev >= 0)
            shutdown(c->fd_prev, SHUT_RDWR);
        CT_LOG(CT_LOG_INFO, "collective", "rank %d: group %s broken: %s", c->rank, c->group,
               ct_strerror(err));
        return err;
    }
    return expected;
}

void ct__comm_break(ct_comm *c, int err)
{
    ct__comm_fail(c, err);
    uint64_t one = 1;
    ssize_t n = write(c->abort_fd, &one, sizeof one); /* wakes a poll() in progress */
    (void)n;
}

void ct_comm_abort(ct_comm *c)
{
    if (c)
        ct__comm_break(c, CT_ECANCELED);
}

int ct_comm_status(const ct_comm *c)
{
    return c ? ct__comm_aborted(c) : CT_EINVAL;
}
