/* common/host.c — the TCP links between ranks and stages (the collective's ring and the
 * pipeline's stage links): the address this host listens on, for peers to dial
 * ($CT_COMM_HOST when set, else the first non-loopback IPv4 address that is up, else
 * 127.0.0.1), and the dial itself, retried until the peer's listener is up. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/common.h"
#include "common/env.h"

void ct__listen_host(char *out, size_t cap)
{
    const char *env = ct__env(CT__ENV_COMM_HOST);
    snprintf(out, cap, "127.0.0.1");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return;
    }
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) < 0)
        return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK)) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, (socklen_t)cap);
            break;
        }
    freeifaddrs(ifs);
}

static int ms_left(int64_t deadline)
{
    int64_t ms = (deadline - ct__now_ns() + 999999) / 1000000;
    return ms < 0 ? 0 : ms > 1000 ? 1000 : (int)ms;
}

int ct__tcp_connect(const char *hostport, int bufsize, int64_t deadline, const char *who, int *out)
{
    char host[320];
    snprintf(host, sizeof host, "%s", hostport);
    char *colon = strrchr(host, ':');
    if (!colon)
        return ct__error(CT_EPROTO, "%s: bad address '%s'", who, hostport);
    *colon = 0;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(host, colon + 1, &hints, &ai);
    if (g != 0)
        return ct__error(CT_EIO, "%s: resolve %s: %s", who, hostport, gai_strerror(g));
    int rc = 0, fd = -1, one = 1;
    for (;;) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            rc = ct__error(-errno, "%s: socket: %s", who, strerror(errno));
            break;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (bufsize > 0) { /* before the handshake, which fixes the window scale */
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            int err = 0;
            socklen_t el = sizeof err;
            while (poll(&pf, 1, ms_left(deadline)) == 0 && ct__now_ns() < deadline)
                ;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
            if (pf.revents && err == 0)
                break;
            errno = err ? err : ETIMEDOUT;
        }
        int e = errno;
        close(fd);
        fd = -1;
        if (ct__now_ns() >= deadline) {
            rc = ct__error(CT_ETIMEDOUT, "%s: connect %s: %s", who, hostport, strerror(e));
            break;
        }
        usleep(2000); /* refused: the listener may not be up yet */
    }
    freeaddrinfo(ai);
    if (fd >= 0)
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    *out = fd;
    return rc;
}
