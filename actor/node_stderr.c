/* actor/node_stderr.c — what the node's starting processes wrote to stderr, kept for their
 * failure reports.
 *
 * A zygote runs the user's program up to ct_init() and can die there (a missing shared library,
 * an exec error, the program's own message): its stderr is a pipe the node copies to its own
 * stderr, keeping the last ZYG_TAIL bytes, which a death before serving quotes to the creator.
 * The zygote puts its own stderr back when it serves (worker.c), which ends the pipe. An actor's
 * stderr is a memfd while its class's create runs (its zygote hands it to the node with the
 * SPAWNED record); one that dies before reporting has the memfd copied to the node's stderr
 * and its last lines quoted in ActorExited.stderr_tail.
 *
 * Not in here: when a zygote or an actor is reported (node_zygote.c, node_actors.c). */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include "actor/node_shared.h"

void ct__node_zygote_stderr(zygote *z)
{
    char buf[4096];
    while (z->err_fd >= 0) {
        ssize_t got = read(z->err_fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (got <= 0) {
            close(z->err_fd);
            z->err_fd = -1;
            return;
        }
        (void)!write(STDERR_FILENO, buf, got); /* where it went before; none: the tail only */
        if (got >= ZYG_TAIL) {
            memcpy(z->tail, buf + got - ZYG_TAIL, ZYG_TAIL);
            z->tail_len = ZYG_TAIL;
            continue;
        }
        int keep = ZYG_TAIL - (int)got;
        if (z->tail_len > keep) {
            memmove(z->tail, z->tail + z->tail_len - keep, keep);
            z->tail_len = keep;
        }
        memcpy(z->tail + z->tail_len, buf, got);
        z->tail_len += (int)got;
    }
}

/* The actor, dead, did not put it on its stderr: the node does. */
void ct__node_actor_stderr(int fd, char *tail, size_t cap)
{
    char buf[4096];
    ssize_t k;
    off_t end = 0;
    for (; (k = pread(fd, buf, sizeof buf, end)) > 0; end += k)
        (void)!write(STDERR_FILENO, buf, k);
    off_t from = end > ZYG_TAIL ? end - ZYG_TAIL : 0;
    if ((k = pread(fd, buf, end - from, from)) > 0)
        ct__node_tail_lines(buf, (int)k, tail, cap);
}

/* " | " between the lines; control bytes made spaces. */
void ct__node_tail_lines(const char *tail, int len, char *out, size_t cap)
{
    int end = len, nl = 0;
    while (end > 0 && (tail[end - 1] == '\n' || tail[end - 1] == ' '))
        end--;
    int start = end;
    while (start > 0 && !(tail[start - 1] == '\n' && ++nl == 3))
        start--;
    if (end - start > 300)
        start = end - 300;
    size_t o = 0;
    for (int i = start; i < end && o + 4 < cap; i++) {
        char c = tail[i];
        if (c == '\n') {
            memcpy(out + o, " | ", 3);
            o += 3;
        } else {
            out[o++] = (unsigned char)c < 32 || c == 127 ? ' ' : c;
        }
    }
    out[o] = 0;
}
