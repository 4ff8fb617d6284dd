/* head/http.h — the head's read-only HTTP endpoint (ct-head --dashboard-port): libmicrohttpd on
 * a thread of its own, serving the pages the head's loop last published. The HTTP thread never
 * touches the head's tables: the loop renders the pages (head/metrics.c) and hands them over
 * with ct__http_publish; a request copies the latest one. Not the renderer, not the tables. */
#ifndef CT_HEAD_HTTP_H
#define CT_HEAD_HTTP_H

#include <stdbool.h>
#include <stddef.h>

/* The pages, each one path: /metrics (Prometheus text format 0.0.4), /api/nodes, /api/actors,
 * /api/jobs, /api/events (JSON). Besides them the dashboard page itself, / (static HTML and
 * JavaScript built into the binary, head/dashboard.html, which polls /api/...). Any other path is
 * 404. */
enum { CT_PAGE_METRICS, CT_PAGE_NODES, CT_PAGE_ACTORS, CT_PAGE_JOBS, CT_PAGE_EVENTS, CT_PAGES };

typedef struct ct__http ct__http;

/* Starts serving on host:port (a numeric IPv4 or IPv6 address; NULL: 127.0.0.1; port 0: a free
 * one). Requests from any address but loopback need "Authorization: Bearer <token>"
 * (common/auth.h ct__auth_dashboard_token), except for the static dashboard page, which holds
 * no data (its script sends the token it finds in the URL's #token=...). Bounded: 64 connections
 * (32 per client address), 10 s per idle connection, 32 KiB per connection (longer headers are
 * refused). Until the first publish every page is 503. 0 and *out (caller owns), or a CT_E* code
 * with the reason. */
int ct__http_new(const char *host, int port, ct__http **out);
/* The port it serves on. */
int ct__http_port(const ct__http *s);
/* Replaces the pages: takes ownership of pages[i] (malloc'd, NUL-terminated; NULL: keeps the
 * old one). Thread-safe; the previous pages are freed here, on the caller's thread. */
void ct__http_publish(ct__http *s, char *pages[CT_PAGES]);
/* Whether a page was asked for since the last publish (the loop renders when one was, and
 * otherwise seldom). Thread-safe. */
bool ct__http_asked(ct__http *s);
/* Stops serving (waits for the HTTP thread) and frees; accepts NULL, clears *s. */
void ct__http_destroy(ct__http **s);

#endif
