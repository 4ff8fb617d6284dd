/* head/http.c — the head's read-only HTTP endpoint (http.h): libmicrohttpd (Debian's
 * libmicrohttpd-dev), one internal polling thread, bounded connections, memory and idle time,
 * so that a slow or hostile client costs a slot, never the head's loop. It serves copies of the
 * pages the loop published (ct__http_publish, under a mutex); it reads no table of the head.
 *
 * Who may read: loopback peers (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104) always; any other
 * address only with "Authorization: Bearer <token>", the token derived from the cluster secret
 * (common/auth.h), compared in constant time; else 403. The dashboard page (/) is served to
 * anyone: it is static and holds no data; its script asks /api/... with the token from its URL's
 * fragment (#token=..., never sent to the server in the request line). GET and HEAD only
 * (405); unknown paths 404. Not here: what the pages say (metrics.c), when they are rendered
 * (loop.c). */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/auth.h"
#include "common/common.h"
#include "head/http.h"

#define HTTP_CONNS 64            /* connections at once */
#define HTTP_CONNS_PER_IP 32     /* of them from one address */
#define HTTP_TIMEOUT_S 10        /* an idle (or slowly sent) connection is closed after this */
#define HTTP_CONN_MEM (32 << 10) /* per connection: request line and headers must fit */

static const struct {
    const char *path, *type;
} pages[CT_PAGES] = {
    [CT_PAGE_METRICS] = {"/metrics", "text/plain; version=0.0.4; charset=utf-8"},
    [CT_PAGE_NODES] = {"/api/nodes", "application/json"},
    [CT_PAGE_ACTORS] = {"/api/actors", "application/json"},
    [CT_PAGE_JOBS] = {"/api/jobs", "application/json"},
    [CT_PAGE_EVENTS] = {"/api/events", "application/json"},
};

/* The dashboard page (head/dashboard.html, built in by head/embed.cmake): static, no data. Its
 * policy lets it reach this head only: no script, style or request from anywhere else. */
extern const unsigned char ct__dashboard_html[];
extern const size_t ct__dashboard_html_len;
#define DASHBOARD_CSP                                                                              \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "                  \
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "              \
    "frame-ancestors 'none'"

static enum MHD_Result answer_dashboard(struct MHD_Connection *c)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        ct__dashboard_html_len, (void *)ct__dashboard_html, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "Content-Security-Policy", DASHBOARD_CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

struct ct__http {
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    char *page[CT_PAGES]; /* under mu */
    size_t len[CT_PAGES];
    bool asked; /* under mu: a page was asked for since the last publish */
};

static bool is_loopback(const struct sockaddr *sa)
{
    if (!sa)
        return false;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}

/* Whether the request carries the bearer token. */
static bool has_token(struct MHD_Connection *c)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!v || strncasecmp(v, "Bearer ", 7))
        return false;
    v += 7;
    while (*v == ' ')
        v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    return ct__auth_dashboard_token_ok(v, n);
}

/* A short text answer with status code. */
static enum MHD_Result answer_text(struct MHD_Connection *c, unsigned code, const char *text)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (code == MHD_HTTP_FORBIDDEN)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result rc = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)version, (void)upload, (void)con_cls;
    ct__http *s = cls;
    if (*upload_size) { /* a body: not read, not wanted */
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
        return answer_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "read only: GET or HEAD\n");
    if (!strcmp(url, "/") || !strcmp(url, "/index.html"))
        return answer_dashboard(c); /* no data in it: no token needed (its requests need one) */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!is_loopback(ci ? ci->client_addr : NULL) && !has_token(c))
        return answer_text(c, MHD_HTTP_FORBIDDEN,
                           "forbidden: from this address the endpoint needs "
                           "\"Authorization: Bearer <token>\" (the cluster's dashboard token)\n");
    int p = 0;
    while (p < CT_PAGES && strcmp(url, pages[p].path))
        p++;
    if (p == CT_PAGES)
        return answer_text(c, MHD_HTTP_NOT_FOUND, "not found\n");
    pthread_mutex_lock(&s->mu);
    s->asked = true;
    size_t n = s->len[p];
    char *copy = s->page[p] ? malloc(n ? n : 1) : NULL;
    if (copy)
        memcpy(copy, s->page[p], n);
    bool have = s->page[p] != NULL;
    pthread_mutex_unlock(&s->mu);
    if (!copy)
        return answer_text(c, MHD_HTTP_SERVICE_UNAVAILABLE,
                           have ? "out of memory\n" : "not ready yet\n");
    struct MHD_Response *r = MHD_create_response_from_buffer(n, copy, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(copy);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, pages[p].type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

int ct__http_new(const char *host, int port, ct__http **out)
{
    *out = NULL;
    if (!host || !*host)
        host = "127.0.0.1";
    struct sockaddr_storage ss = {0};
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
    if (inet_pton(AF_INET, host, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
        ((struct sockaddr_in *)&ss)->sin_family = AF_INET;
        ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
        ((struct sockaddr_in6 *)&ss)->sin6_family = AF_INET6;
        ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
        flags |= MHD_USE_IPv6;
    } else {
        return ct__error(CT_EINVAL, "dashboard: '%s' is not a numeric IPv4 or IPv6 address", host);
    }
    ct__http *s = calloc(1, sizeof *s);
    if (!s)
        return ct__error(CT_ENOMEM, "dashboard: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    s->d =
        MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                         (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_CONNS,
                         MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)HTTP_CONNS_PER_IP,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_TIMEOUT_S,
                         MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONN_MEM, MHD_OPTION_END);
    if (!s->d) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return ct__error(CT_EIO,
                         "dashboard: cannot listen on %s:%d (in use, or not an address "
                         "of this host)",
                         host, port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : port;
    *out = s;
    return 0;
}

int ct__http_port(const ct__http *s)
{
    return s ? s->port : 0;
}

void ct__http_publish(ct__http *s, char *pg[CT_PAGES])
{
    char *old[CT_PAGES] = {0};
    size_t len[CT_PAGES];
    for (int i = 0; i < CT_PAGES; i++)
        len[i] = pg[i] ? strlen(pg[i]) : 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < CT_PAGES; i++)
        if (pg[i]) {
            old[i] = s->page[i];
            s->page[i] = pg[i];
            s->len[i] = len[i];
        }
    s->asked = false;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < CT_PAGES; i++)
        free(old[i]);
}

bool ct__http_asked(ct__http *s)
{
    pthread_mutex_lock(&s->mu);
    bool asked = s->asked;
    pthread_mutex_unlock(&s->mu);
    return asked;
}

void ct__http_destroy(ct__http **sp)
{
    if (!sp || !*sp)
        return;
    ct__http *s = *sp;
    MHD_stop_daemon(s->d);
    for (int i = 0; i < CT_PAGES; i++)
        free(s->page[i]);
    pthread_mutex_destroy(&s->mu);
    free(s);
    *sp = NULL;
}
