/* actor/watch_dial.c — the client end of the head's death watch (head/watch.h, which has the
 * wire): nodes and drivers open one connection to the head's watch port and keep it open for as
 * long as their process lives, so that their death is seen at once when their kernel closes it.
 *
 * Not in here: the head's side (head/watch.c), what a node does on 'D' (node.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "actor/runtime.h"
#include "common/auth.h"
#include "common/common.h"
#include "head/watch.h"

int ct__watch_dial(const char *head_addr, unsigned port, const char *ticket, int timeout_ms)
{
    char host[160], ps[16];
    snprintf(host, sizeof host, "%s", head_addr ? head_addr : "");
    char *colon = strrchr(host, ':');
    if (!colon || !port || !ct__token_valid(ticket))
        return ct__error(CT_EINVAL, "watch: no port or ticket for head %s", host);
    *colon = 0;
    snprintf(ps, sizeof ps, "%u", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(host, ps, &hints, &ai);
    if (gai)
        return ct__error(CT_EINVAL, "watch: %s: %s", host, gai_strerror(gai));
    int rc = 0, fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        rc = ct__error(-errno, "watch: socket: %s", strerror(errno));
        goto out;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
        rc = ct__error(-errno, "watch %s:%s: connect: %s", host, ps, strerror(errno));
        goto out;
    }
    struct pollfd p = {fd, POLLOUT, 0};
    int r, soerr = 0;
    socklen_t sl = sizeof soerr;
    do
        r = poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    if (r <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) || soerr) {
        rc = ct__error(r == 0 ? CT_ETIMEDOUT : CT_EIO, "watch %s:%s: connect: %s", host, ps,
                       r == 0 ? "timed out" : strerror(soerr ? soerr : errno));
        goto out;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if ((rc = ct__auth_connect(fd, timeout_ms))) {
        rc = ct__error(rc, "watch %s:%s: %s", host, ps, ct_last_error());
        goto out;
    }
    char hello[CT__WATCH_HELLO_LEN];
    memcpy(hello, CT__WATCH_MAGIC, 4);
    memcpy(hello + 4, ticket, CT_TOKEN_LEN);
    if (send(fd, hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello) {
        rc = ct__error(CT_EIO, "watch %s:%s: send: %s", host, ps, strerror(errno));
        goto out;
    }
out:
    freeaddrinfo(ai);
    if (rc && fd >= 0)
        close(fd);
    return rc ? rc : fd;
}
