/* actor/node_main.c — ct-node: the command-line front of ct__node_run (actor/node.c).
 * Contract (stable): ct-node --head H:P [--cpus N] [--gpus N] [--resources name=n,...]
 * [--host ADDR] [--store-memory BYTES[K|M|G]] [--spill-dir DIR] [--cpuset LIST]
 * [--head-grace-ms MS] [--drain-ms MS] [--secret-file F] (or CT_SECRET_FILE; required);
 * ct-node --purge PID (what `ctup down` runs on a node's host: the shard, node directory and spill
 * files that node PID left when it was killed; needs no secret). */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "actor/runtime.h"
#include "common/auth.h"
#include "common/common.h"

/* "0-3,6" -> a CPU set; 0, or -1 with the reason on stderr. */
static int parse_cpuset(const char *v, cpu_set_t *set)
{
    CPU_ZERO(set);
    const char *p = v;
    while (p && *p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0 || a >= CPU_SETSIZE)
            goto bad;
        if (*end == '-') {
            p = end + 1;
            b = strtol(p, &end, 10);
            if (end == p || b < a || b >= CPU_SETSIZE)
                goto bad;
        }
        for (long c = a; c <= b; c++)
            CPU_SET((int)c, set);
        if (*end == ',')
            end++;
        else if (*end)
            goto bad;
        p = end;
    }
    if (CPU_COUNT(set))
        return 0;
bad:
    fprintf(stderr, "ct-node: --cpuset: '%s' is not a CPU list such as 0-3,6\n", v ? v : "");
    return -1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ct-node --head H:P [--cpus N] [--gpus N] [--resources name=n,...] "
            "[--host ADDR]\n"
            "  --head H:P            the head's address (as ct-head printed it)\n"
            "  --cpus N              CPUs to offer (default: detected)\n"
            "  --gpus N              GPUs to offer (default: counted by NVML, 0 without a driver)\n"
            "  --resources n=v,...   custom resources, e.g. disk=2,tpu=1\n"
            "  --host ADDR           address actors bind to (default: the one that reaches "
            "the head)\n"
            "  --store-memory B      object store memory, suffix K/M/G allowed (default: RAM/4,\n"
            "                        at most 2G)\n"
            "  --cpuset LIST         run the node and its actors on these CPUs only, e.g. 0-3,6\n"
            "                        (then --cpus defaults to their count)\n"
            "  --secret-file F       the cluster secret (default $CT_SECRET_FILE; required)\n"
            "  --head-grace-ms MS    head gone this long: kill the actors and exit 1; until\n"
            "                        then keep them and register again with a restarted head\n"
            "                        (default 60000; --head-dead-after-ms is the same)\n"
            "  --drain-ms MS         SIGTERM: wait this long for the actors of jobs that save\n"
            "                        their work first (NODE_DRAINING; default 60000); a second\n"
            "                        SIGTERM stops at once\n"
            "  --spill-dir DIR       where the store spills (made 0700 when missing; refused "
            "when\n"
            "                        not this user's or group/other-writable; default\n"
            "                        /tmp/ct-node.<pid>.XXXXXX, removed at exit)\n"
            "       ct-node --purge PID\n"
            "  removes what node PID, killed, left on this host (its shard, node directory and\n"
            "  spill files); refuses while PID runs\n");
}

/* 1 while pid runs (a zombie does not: it has closed its sockets, its shard is unused). */
static bool runs(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

/* ct-node --purge PID. A node killed with SIGKILL leaves its shard and directory behind until
 * the next node starts on the host, which may be never: ctup down runs this for each node it
 * stopped or found gone. Waits up to 2 s for PID to end (down may have just sent SIGKILL). */
static int purge(const char *v)
{
    char *end;
    long pid = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || pid <= 0 || pid > INT32_MAX) {
        fprintf(stderr, "ct-node: --purge: '%s' is not a pid\n", v ? v : "");
        return 2;
    }
    for (int i = 0; i < 40 && runs((int)pid); i++)
        usleep(50000);
    if (runs((int)pid)) {
        fprintf(stderr, "ct-node: --purge: pid %ld still runs; nothing removed\n", pid);
        return 1;
    }
    ct__objnode_purge_pid((int)pid);
    return 0;
}

static int parse_num(const char *flag, const char *v, double *out)
{
    char *end;
    if (!v) {
        fprintf(stderr, "ct-node: %s needs a value\n", flag);
        return -1;
    }
    double x = strtod(v, &end);
    if (!*v || *end || x < 0) {
        fprintf(stderr, "ct-node: %s: '%s' is not a number >= 0\n", flag, v);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_bytes(const char *v, uint64_t *out)
{
    if (!v || !*v) {
        fprintf(stderr, "ct-node: --store-memory needs a value\n");
        return -1;
    }
    if (ct__parse_size(v, out)) {
        fprintf(stderr, "ct-node: --store-memory: '%s' is not a size of at least 1M (e.g. 512M)\n",
                v);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    /* big pull buffers straight from mmap and no trimming churn: ~25% less pull CPU */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    ct_node_opts o = {.cpus = -1, .gpus = -1, .watch_fd = -1, .ready_fd = -1};
    const char *secret_file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--purge")) {
            if (argc != 3) {
                fprintf(stderr, "ct-node: --purge PID takes no other argument\n");
                return 2;
            }
            return purge(v);
        } else if (!strcmp(a, "--head") || !strcmp(a, "--host") || !strcmp(a, "--resources")) {
            if (!v) {
                fprintf(stderr, "ct-node: %s needs a value\n", a);
                return 2;
            }
            if (!strcmp(a, "--head"))
                o.head = v;
            else if (!strcmp(a, "--host"))
                o.host = v;
            else
                o.resources = v;
            i++;
        } else if (!strcmp(a, "--store-memory")) {
            if (parse_bytes(v, &o.store_memory))
                return 2;
            i++;
        } else if (!strcmp(a, "--secret-file")) {
            if (!v || !*v) {
                fprintf(stderr, "ct-node: --secret-file needs a value\n");
                return 2;
            }
            secret_file = v;
            i++;
        } else if (!strcmp(a, "--spill-dir")) {
            if (!v || !*v) {
                fprintf(stderr, "ct-node: --spill-dir needs a value\n");
                return 2;
            }
            o.spill_dir = v;
            i++;
        } else if (!strcmp(a, "--head-grace-ms") || !strcmp(a, "--head-dead-after-ms")) {
            double ms = 0;
            if (parse_num(a, v, &ms))
                return 2;
            if (ms < 1 || ms > 3600e3) {
                fprintf(stderr, "ct-node: %s: %s is not in [1, 3600000]\n", a, v);
                return 2;
            }
            o.head_dead_ms = (int)ms;
            i++;
        } else if (!strcmp(a, "--drain-ms")) {
            double ms = 0;
            if (parse_num(a, v, &ms))
                return 2;
            if (ms < 1 || ms > 3600e3) {
                fprintf(stderr, "ct-node: --drain-ms: %s is not in [1, 3600000]\n", v);
                return 2;
            }
            o.drain_ms = (int)ms;
            i++;
        } else if (!strcmp(a, "--cpuset")) {
            cpu_set_t set;
            if (!v) {
                fprintf(stderr, "ct-node: --cpuset needs a value\n");
                return 2;
            }
            if (parse_cpuset(v, &set))
                return 2;
            if (sched_setaffinity(0, sizeof set, &set) != 0) {
                fprintf(stderr, "ct-node: --cpuset %s: %s\n", v, strerror(errno));
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--cpus")) {
            if (parse_num(a, v, &o.cpus))
                return 2;
            i++;
        } else if (!strcmp(a, "--gpus")) {
            if (parse_num(a, v, &o.gpus))
                return 2;
            i++;
        } else {
            fprintf(stderr, "ct-node: unknown argument '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!o.head) {
        fprintf(stderr, "ct-node: --head H:P is required (see --help)\n");
        return 2;
    }
    if (!strchr(o.head, ':')) {
        fprintf(stderr, "ct-node: --head: '%s' is not host:port\n", o.head);
        return 2;
    }
    ct_resource res[32];
    int n;
    char *store;
    if (ct__parse_resources(o.resources, res, 32, &n, &store)) {
        fprintf(stderr, "ct-node: --%s\n", ct_last_error());
        return 2;
    }
    free(store);
    if (!ct__auth_off() && ct__auth_load(secret_file)) {
        fprintf(stderr, "ct-node: %s\n", ct_last_error());
        return 2;
    }
    int rc = ct__node_run(&o);
    if (rc) {
        fprintf(stderr, "ct-node: %s\n", ct_last_error());
        return 1;
    }
    return 0;
}
