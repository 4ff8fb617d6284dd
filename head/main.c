/* head/main.c — ct-head: the command-line front of ct__head_run (head/loop.c).
 * Contract (stable): ct-head --port P [--host H] [--heartbeat-ms N] [--dead-after-ms N]
 * [--heartbeat-rate N] [--watch-port N] [--state-dir DIR] [--secret-file F] [--supervise]
 * [--dashboard-port N
 * [--dashboard-host H]] [--max-nodes N] [--max-actors N] [--max-placement-groups N]
 * [--max-objects N] [--max-kv-keys N] [--max-subscribers N] prints exactly "listening on H:P" once
 * it serves. ct-head
 * --dashboard-token prints the HTTP endpoint's bearer token of the secret and exits. The cluster
 * secret comes from --secret-file or CT_SECRET_FILE; without one it refuses to start. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "common/auth.h"
#include "common/common.h"
#include "head/head.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: ct-head --port P [--host H] [--heartbeat-ms N] [--dead-after-ms N]\n"
               "               [--heartbeat-rate N] [--watch-port N] [--state-dir DIR]\n"
               "               [--secret-file F]\n"
               "               [--supervise] [--dashboard-port N [--dashboard-host H]]\n"
               "       ct-head --dashboard-token [--secret-file F]\n"
               "  --port P           port to listen on (0: pick a free one)\n"
               "  --host H           address to bind (default 127.0.0.1; 0.0.0.0 for all)\n"
               "  --heartbeat-ms N   period nodes heartbeat at (default 100); a floor: doubled\n"
               "                     while the nodes would send over the heartbeat rate\n"
               "  --heartbeat-rate N node heartbeats a second the head sizes the period for\n"
               "                     (default 20000; each costs it a few us of CPU)\n"
               "  --dead-after-ms N  a silent node is dead after N ms without heartbeat\n"
               "                     (default 10000, and 10 periods once the period grew;\n"
               "                     a process that ends is seen at once)\n"
               "  --watch-port N     TCP port of the death watch (default 0: any free one)\n"
               "  --state-dir DIR    keep KV, jobs and placement groups in DIR/head.wal and load\n"
               "                     them at start (a restarted head has them again)\n"
               "  --supervise        run the head as a child and start it again whenever it\n"
               "                     ends, on the same port, with the same secret and state\n"
               "  --secret-file F    the cluster secret (default $CT_SECRET_FILE; required)\n"
               "  --dashboard-port N serve /metrics (Prometheus) and /api/{nodes,actors,jobs}\n"
               "                     (JSON), read only, on port N (0: a free one, logged)\n"
               "  --dashboard-host H its address (default 127.0.0.1); other than loopback\n"
               "                     peers need \"Authorization: Bearer TOKEN\"\n"
               "  --dashboard-token  print TOKEN (derived from the secret) and exit\n"
               "  --max-nodes N, --max-actors N, --max-placement-groups N, --max-objects N,\n"
               "  --max-kv-keys N, --max-subscribers N\n"
               "                     what peers may make the head hold; beyond it, refused\n"
               "                     (defaults 10000, 100000, 20000, 1048576, 262144, 16384)\n"
               "prints \"listening on H:P\" once it serves.\n");
}

static int parse_int(const char *flag, const char *v, int lo, int hi, int *out)
{
    char *end;
    if (!v) {
        fprintf(stderr, "ct-head: %s needs a value\n", flag);
        return -1;
    }
    long x = strtol(v, &end, 10);
    if (*v == 0 || *end || x < lo || x > hi) {
        fprintf(stderr, "ct-head: %s: '%s' is not an integer in [%d, %d]\n", flag, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* The --max-* flags: one row each, {flag, its field in o->limits}. */
static int *limit_of(ct_head_opts *o, const char *flag)
{
    const struct {
        const char *flag;
        int *field;
    } rows[] = {
        {"--max-nodes", &o->limits.nodes},          {"--max-actors", &o->limits.actors},
        {"--max-placement-groups", &o->limits.pgs}, {"--max-objects", &o->limits.objects},
        {"--max-kv-keys", &o->limits.kv_keys},      {"--max-subscribers", &o->limits.subscribers}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (!strcmp(rows[i].flag, flag))
            return rows[i].field;
    return NULL;
}

int main(int argc, char **argv)
{
    ct_head_opts o = {.port = -1, .ready_fd = -1, .watch_fd = -1};
    const char *secret_file = NULL;
    bool supervise = false, print_token = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--port")) {
            if (parse_int(a, v, 0, 65535, &o.port))
                return 2;
            i++;
        } else if (!strcmp(a, "--host")) {
            if (!v) {
                fprintf(stderr, "ct-head: --host needs a value\n");
                return 2;
            }
            o.host = v;
            i++;
        } else if (!strcmp(a, "--secret-file")) {
            if (!v || !*v) {
                fprintf(stderr, "ct-head: --secret-file needs a value\n");
                return 2;
            }
            secret_file = v;
            i++;
        } else if (!strcmp(a, "--heartbeat-ms")) {
            if (parse_int(a, v, 1, 60000, &o.heartbeat_ms))
                return 2;
            i++;
        } else if (!strcmp(a, "--heartbeat-rate")) {
            if (parse_int(a, v, 1, 10000000, &o.heartbeat_rate))
                return 2;
            i++;
        } else if (!strcmp(a, "--watch-port")) {
            if (parse_int(a, v, 0, 65535, &o.watch_port))
                return 2;
            i++;
        } else if (!strcmp(a, "--supervise")) {
            supervise = true;
        } else if (!strcmp(a, "--dashboard-port")) {
            if (parse_int(a, v, 0, 65535, &o.dashboard_port))
                return 2;
            if (o.dashboard_port == 0)
                o.dashboard_port = -1; /* a free one */
            i++;
        } else if (!strcmp(a, "--dashboard-host")) {
            if (!v || !*v) {
                fprintf(stderr, "ct-head: --dashboard-host needs a value\n");
                return 2;
            }
            o.dashboard_host = v;
            i++;
        } else if (!strcmp(a, "--dashboard-token")) {
            print_token = true;
        } else if (!strcmp(a, "--restarts")) { /* given by the supervisor (supervise.c) */
            if (parse_int(a, v, 0, 1 << 30, &o.restarts))
                return 2;
            i++;
        } else if (!strcmp(a, "--restart-reason")) { /* given by the supervisor too */
            if (!v) {
                fprintf(stderr, "ct-head: --restart-reason needs a value\n");
                return 2;
            }
            o.restart_reason = v;
            i++;
        } else if (!strcmp(a, "--state-dir")) {
            if (!v || !*v) {
                fprintf(stderr, "ct-head: --state-dir needs a value\n");
                return 2;
            }
            o.state_dir = v;
            i++;
        } else if (limit_of(&o, a)) {
            if (parse_int(a, v, 1, 1 << 24, limit_of(&o, a)))
                return 2;
            i++;
        } else if (!strcmp(a, "--dead-after-ms")) {
            if (parse_int(a, v, 1, 3600000, &o.dead_after_ms))
                return 2;
            i++;
        } else {
            fprintf(stderr, "ct-head: unknown argument '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (print_token) {
        char tok[CT_DASH_TOKEN_LEN + 1];
        if (ct__auth_load(secret_file) || ct__auth_dashboard_token(tok)) {
            fprintf(stderr, "ct-head: %s\n", ct_last_error());
            return 2;
        }
        printf("%s\n", tok);
        return 0;
    }
    if (o.port < 0) {
        fprintf(stderr, "ct-head: --port is required (0 picks a free port; see --help)\n");
        return 2;
    }
    if (!ct__auth_off() && ct__auth_load(secret_file)) {
        fprintf(stderr, "ct-head: %s\n", ct_last_error());
        return 2;
    }
    /* a descriptor per node's connection and one per its death watch: the hard limit, not the
     * soft one (often 1,024), bounds the cluster */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (supervise)
        return ct__head_supervise(argc, argv);
    int rc = ct__head_run(&o);
    if (rc) {
        fprintf(stderr, "ct-head: %s\n", ct_last_error());
        return 1;
    }
    return 0;
}
