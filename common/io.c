/* common/io.c — writing a whole buffer to a file descriptor: write(2) to files and pipes,
 * send(2) to sockets (no SIGPIPE; optional flags such as MSG_MORE; on a non-blocking socket,
 * a bounded wait for room). Both retry after EINTR and after short writes.
 * Not here: reading (each reader treats end-of-file its own way), framing, timeouts set with
 * SO_SNDTIMEO (the caller's socket options). */
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/common.h"

/* One write(2) or send(2) is at most 1 GiB: Linux moves at most 2 GiB - 4 KiB per call. */
#define MAX_CHUNK ((size_t)1 << 30)

/* The loop of both: send when sock, else write. */
static int put_all(int fd, const void *buf, size_t n, bool sock, int flags, int wait_ms)
{
    const char *p = buf;
    while (n) {
        size_t k = n > MAX_CHUNK ? MAX_CHUNK : n;
        ssize_t w = sock ? send(fd, p, k, MSG_NOSIGNAL | flags) : write(fd, p, k);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && sock && wait_ms > 0) {
            struct pollfd pf = {fd, POLLOUT, 0};
            int r = poll(&pf, 1, wait_ms);
            if (r > 0 || (r < 0 && errno == EINTR))
                continue;
            if (r == 0)
                errno = ETIMEDOUT;
            return -1;
        }
        if (w == 0)
            errno = EIO; /* no progress */
        return -1;
    }
    return 0;
}

int ct__write_all(int fd, const void *buf, size_t n)
{
    return put_all(fd, buf, n, false, 0, 0);
}

int ct__send_all(int fd, const void *buf, size_t n, int flags, int wait_ms)
{
    return put_all(fd, buf, n, true, flags, wait_ms);
}
