/* tests/head/endpoint.h — the head tests' side of the HTTP endpoint (test_dashboard.c,
 * test_scrape.c): a ct-head started with it, a free loopback port, a GET or raw request read
 * to EOF with its status code, and a sample's value in a /metrics page. Blocking sockets with
 * 10 s timeouts; no HTTP library, so that a test sends exactly the bytes it means (hostile
 * requests too). Header-only: each test is one executable. */
#ifndef CT_TESTS_HEAD_ENDPOINT_H
#define CT_TESTS_HEAD_ENDPOINT_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "tests/runtime/harness.h"

__attribute__((unused)) static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

__attribute__((unused)) static int dial(const char *ip, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    struct timeval tv = {10, 0};
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

__attribute__((unused)) static bool send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Sends req (raw bytes) and reads the answer to EOF into body (its body after the headers,
 * NUL-terminated, cap bytes at most). The status code, or -1 when no answer came. */
__attribute__((unused)) static int http_raw(const char *ip, int port, const char *req,
                                            size_t reqlen, char *body, size_t cap)
{
    int fd = dial(ip, port);
    if (fd < 0)
        return -1;
    size_t bufcap = 1 << 22, n = 0;
    char *buf = malloc(bufcap);
    int code = -1;
    if (buf && send_all(fd, req, reqlen)) {
        ssize_t r;
        while (n + 1 < bufcap && (r = recv(fd, buf + n, bufcap - n - 1, 0)) > 0)
            n += (size_t)r;
        buf[n] = 0;
        if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
            code = -1;
        const char *b = strstr(buf, "\r\n\r\n");
        if (body && cap)
            snprintf(body, cap, "%s", b ? b + 4 : "");
    }
    free(buf);
    close(fd);
    return code;
}

/* GET path with an optional extra header line ("Name: value", or NULL). */
__attribute__((unused)) static int http_get(const char *ip, int port, const char *path,
                                            const char *header, char *body, size_t cap)
{
    char req[1024];
    int n =
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s%s\r\n",
                 path, ip, header ? header : "", header ? "\r\n" : "");
    return http_raw(ip, port, req, (size_t)n, body, cap);
}

/* How a test's ct-head is started (zero: the default). */
typedef struct dash_head {
    int port;             /* the endpoint's (--dashboard-port) */
    const char *host;     /* ... on this address (NULL: 127.0.0.1) */
    const char *dead_ms;  /* a node or driver dead after this silence (NULL: "10000") */
    const char *log_path; /* its log (stderr) to this file (NULL: this process's stderr) */
    bool supervise;       /* under its supervisor (ct-head --supervise): the pid is its */
} dash_head;

/* A ct-head (heartbeats every 100 ms) with its endpoint as o says. Fills addr ("127.0.0.1:P");
 * the pid, or -1. */
__attribute__((unused)) static pid_t start_dash_head(dash_head o, char *addr, size_t cap)
{
    char port[16];
    snprintf(port, sizeof port, "%d", o.port);
    char *argv[16] = {(char *)h_bin("ct-head")};
    int n = 1;
    if (o.supervise)
        argv[n++] = "--supervise";
    char *rest[] = {"--port",           "0",
                    "--heartbeat-ms",   "100",
                    "--dead-after-ms",  (char *)(o.dead_ms ? o.dead_ms : "10000"),
                    "--dashboard-port", port,
                    "--dashboard-host", (char *)(o.host ? o.host : "127.0.0.1")};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
        argv[n++] = rest[i];
    fflush(stderr);
    int saved = o.log_path ? dup(2) : -1;
    int logfd = o.log_path ? open(o.log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    if (logfd >= 0)
        dup2(logfd, 2);
    pid_t pid = h_spawn_head(argv, addr, cap);
    if (saved >= 0) {
        dup2(saved, 2);
        close(saved);
    }
    if (logfd >= 0)
        close(logfd);
    return pid;
}

/* The value of line "name value" in a /metrics page (labels included in name); NAN if absent. */
__attribute__((unused)) static double metric(const char *page, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = page; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, name, n) && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return NAN;
}

#endif
