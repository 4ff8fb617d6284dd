/* tests/scale/test_scale_nodes.c — the head holds 2,000 nodes. A real ct-head at its default
 * heartbeat period (100 ms, which the head sizes to 400 ms for 2,001 nodes: asserted from the
 * period the nodes were given, and from the log of one real ct-node started first, with no
 * CPUs) and dead-after time (10 s), and 2,000 nodes simulated by one
 * ct-simnodes process (actor/simnodes.c: each its own CURVE connection and death-watch
 * connection, two heartbeats a period, its store announced). A raw driver peer (sec.h) then:
 * 1. creates 4,000 actors of CPU=1 (pipelined: all sent, then every reply read) and asserts
 *    every one answered CreateActorReply (the simulated node answered StartActor);
 * 1b. calls 300 of them once each over the driver's actor transport (actor/zmtp.c's client, as
 *    ct_actor_call: a connection per actor to the address its CreateActorReply gave, the
 *    cluster secret's challenge-response, a Call envelope) and asserts every reply's bytes are
 *    the arguments sent ("echo"), then 10 more rounds on the open connections (calls_per_s for
 *    bench/scale), and that a method the actor lacks is refused with CT_ENOENT naming it;
 * 2. creates 1,000 single-bundle placement groups and waits on each: every one Ok (ready);
 * 3. keeps the cluster heartbeating past the dead-after time, then asserts from the status
 *    that all 2,000 nodes are alive and the actors ALIVE, and from ct-simnodes' counters that
 *    the head refused no heartbeat (it declared no node dead) and sent no error.
 * With --restart (bench/scale) the head keeps a state file, and after the hold is killed with
 * SIGKILL and started again on it: the nodes register again with their actors (resume), and
 * the status must show them all alive again. It prints what it measured, one "metric" line
 * each, for bench/scale/run.sh.
 * Nothing here asserts a time: on a loaded machine it takes longer, and the head counts only
 * the silence of time it ran (head/nodes.c). */
#include "../security/sec.h"
#include "actor/zmtp.h"
#include "head/head.h"
#include "simnodes_out.h"
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>

/* The test's sizes; bench/scale/run.sh runs this program with larger ones (--nodes ...). */
typedef struct sizes {
    int nodes;
    int actors; /* nodes have CPU=4: half the cluster by default */
    int pgs;
    int calls;   /* actors called (each its own connection: a descriptor each) */
    int hold_ms; /* past the default dead-after time (10 s) */
    int sims;    /* ct-simnodes processes (descriptors: two a node, three with the watch) */
    int cpus;    /* each node's CPUs */
    int objects; /* objects each simulated node announces (ct-simnodes --objects) */
    int hb_ms;   /* the head's --heartbeat-ms (100: its default) */
    bool watch;
    bool restart; /* then kill -9 the head and start it again on its state file */
    int kill;     /* nodes that die at once (deaths_step); 0: none */
    int waiting;  /* creations that wait for room meanwhile */
} sizes;

/* The driver's heartbeats go on a connection of their own (as libct's do): behind 50,000
 * pipelined creations on the driver's, they waited past the dead-after time. */
static peer beat;

/* A driver's heartbeat: the head follows the job (a restarted head ends a job whose driver does
 * not heartbeat within its dead-after time, killing its actors). */
static void driver_beat(peer *drv)
{
    (void)drv;
    Ct__Envelope e;
    Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
    ct__envelope__init(&e);
    hb.driver = 1;
    e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    peer_send(&beat, &e);
}

/* The next message within timeout_ms, heartbeating as the driver meanwhile (a wait longer than
 * the head's dead-after time would end the job); NULL on timeout. */
static Ct__Envelope *wait_beating(peer *drv, uint64_t req_id, int timeout_ms)
{
    for (double until = h_now_ms() + timeout_ms; h_now_ms() < until;) {
        Ct__Envelope *r = peer_wait(drv, req_id, 0, 200);
        if (r)
            return r;
        driver_beat(drv);
    }
    return NULL;
}

/* An actor the test calls: its id and the address its CreateActorReply gave. */
typedef struct called {
    char id[32];
    char addr[64];
    ct__zconn zc;
} called;

/* Sends n CreateActor (CPU=1) without waiting, then reads until every one is answered or
 * timeout_ms passed; the number answered CreateActorReply. The first ncall answered go to
 * call[]. */
static int create_many(peer *drv, int n, int timeout_ms, called *call, int ncall)
{
    uint64_t first = 0;
    for (int i = 0; i < n; i++) {
        create_msg m;
        uint64_t id = peer_send(drv, create_actor_msg(&m, "Sim", "CPU", 1));
        if (!first)
            first = id;
    }
    int ok = 0, other = 0;
    for (int got = 0; got < n; got++) {
        Ct__Envelope *r = wait_beating(drv, 0, timeout_ms);
        if (!r)
            break;
        if (got % 1000 == 0)
            driver_beat(drv);
        if (r->body_case == CT__ENVELOPE__BODY_CREATE_ACTOR_REPLY && r->req_id >= first) {
            if (ok < ncall) {
                snprintf(call[ok].id, sizeof call[ok].id, "%s", r->create_actor_reply->actor_id);
                snprintf(call[ok].addr, sizeof call[ok].addr, "%s", r->create_actor_reply->address);
            }
            ok++;
        } else if (other++ < 5)
            fprintf(stderr, "create: got %s (%s)\n", ct__msg_body_name(r->body_case),
                    r->body_case == CT__ENVELOPE__BODY_ERROR ? r->error->message : "");
        ct__msg_free(r);
    }
    return ok;
}

/* Sends one Call of method with args on c (flushed; held back until the actor's side of the
 * challenge-response arrived, as the driver's first call); 0 or a CT_E* code. */
static int call_send(ct__zconn *c, uint64_t req, const char *method, const char *args)
{
    Ct__Envelope e;
    Ct__Call call = CT__CALL__INIT;
    ct__env_init(&e, req, "drv", 0);
    call.method = (char *)method;
    call.args.data = (uint8_t *)args;
    call.args.len = strlen(args);
    e.body_case = CT__ENVELOPE__BODY_CALL;
    e.call = &call;
    uint8_t buf[512];
    size_t n = ct__envelope__get_packed_size(&e);
    if (n > sizeof buf)
        return CT_EINVAL;
    ct__envelope__pack(&e, buf);
    return ct__zconn_send(c, buf, n, true);
}

/* The next envelope on c within timeout_ms (the handshake completed on the way); NULL when
 * none came or the connection broke. */
static Ct__Envelope *call_reply(ct__zconn *c, int timeout_ms)
{
    for (double until = h_now_ms() + timeout_ms; h_now_ms() < until;) {
        const uint8_t *data;
        size_t len;
        int r = ct__zconn_parse(c, &data, &len);
        if (r < 0)
            return NULL;
        if (r == 1) {
            Ct__Envelope *e = NULL;
            int rc = ct__msg_decode(data, len, &e, "driver");
            ct__zconn_compact(c);
            if (rc) {
                ct__msg_free(e);
                return NULL;
            }
            return e;
        }
        ct__zconn_compact(c);
        struct pollfd p = {c->fd, POLLIN, 0};
        poll(&p, 1, 100);
        if (p.revents && ct__zconn_fill(c))
            return NULL;
    }
    return NULL;
}

/* Calls each of the n actors "echo" once (all sent, then every reply read), then rounds more on
 * the open connections; the replies whose bytes were the arguments sent. *rounds_ms: the time
 * of the rounds after the first. */
static int call_many(called *a, int n, int rounds, double *rounds_ms)
{
    int ok = 0, bad = 0;
    double t0 = 0;
    for (int round = 0; round <= rounds; round++) {
        if (round == 1)
            t0 = h_now_ms();
        char args[128];
        for (int i = 0; i < n; i++) {
            snprintf(args, sizeof args, "echo %d of round %d to %s", i, round, a[i].id);
            if (a[i].zc.fd >= 0 && call_send(&a[i].zc, 1 + round, "echo", args))
                ct__zconn_close(&a[i].zc);
        }
        for (int i = 0; i < n; i++) {
            snprintf(args, sizeof args, "echo %d of round %d to %s", i, round, a[i].id);
            Ct__Envelope *r = a[i].zc.fd >= 0 ? call_reply(&a[i].zc, 30000) : NULL;
            bool same = r && r->body_case == CT__ENVELOPE__BODY_CALL_REPLY &&
                        r->req_id == (uint64_t)(1 + round) &&
                        r->call_reply->result.len == strlen(args) &&
                        !memcmp(r->call_reply->result.data, args, strlen(args));
            if (!same && bad++ < 5)
                fprintf(stderr, "call %d of round %d (%s at %s): %s\n", i, round, a[i].id,
                        a[i].addr, r ? ct__msg_body_name(r->body_case) : "no reply");
            ok += same;
            ct__msg_free(r);
        }
    }
    *rounds_ms = h_now_ms() - t0;
    return ok;
}

/* Creates n groups of one bundle (CPU=1), then waits on each; the number ready. */
static int pgs_many(peer *drv, int n, int timeout_ms)
{
    char(*ids)[32] = calloc(n, sizeof *ids);
    const char *cpu = "CPU";
    double one = 1;
    int made = 0, ready = 0;
    for (int i = 0; ids && i < n; i++) {
        Ct__Envelope e;
        Ct__PgCreate p = CT__PG_CREATE__INIT;
        Ct__Bundle b = CT__BUNDLE__INIT, *bp = &b;
        Ct__Resource r, *rp;
        res_list(&r, &rp, 1, &cpu, &one);
        b.n_resources = 1;
        b.resources = &rp;
        ct__envelope__init(&e);
        p.n_bundles = 1;
        p.bundles = &bp;
        e.body_case = CT__ENVELOPE__BODY_PG_CREATE;
        e.pg_create = &p;
        Ct__Envelope *rep = wait_beating(drv, peer_send(drv, &e), timeout_ms);
        if (i % 1000 == 0)
            driver_beat(drv);
        if (rep && rep->body_case == CT__ENVELOPE__BODY_PG_CREATE_REPLY)
            snprintf(ids[made++], sizeof ids[0], "%s", rep->pg_create_reply->pg_id);
        ct__msg_free(rep);
    }
    for (int i = 0; i < made; i++) {
        Ct__Envelope e;
        Ct__PgWait w = CT__PG_WAIT__INIT;
        ct__envelope__init(&e);
        w.pg_id = ids[i];
        w.wait_ms = timeout_ms;
        e.body_case = CT__ENVELOPE__BODY_PG_WAIT;
        e.pg_wait = &w;
        Ct__Envelope *rep = wait_beating(drv, peer_send(drv, &e), timeout_ms);
        if (i % 1000 == 0)
            driver_beat(drv);
        ready += rep && rep->body_case == CT__ENVELOPE__BODY_OK;
        ct__msg_free(rep);
    }
    free(ids);
    return ready;
}

/* pid's CPU time (user + system) in ms, -1 unreadable. */
static double cpu_ms_of(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

/* Whether file path holds text, waiting up to timeout_ms for it. */
static bool file_has(const char *path, const char *text, int timeout_ms)
{
    double until = h_now_ms() + timeout_ms;
    do {
        char buf[1 << 16];
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = 0;
        if (strstr(buf, text))
            return true;
        usleep(100000);
    } while (h_now_ms() < until);
    return false;
}

/* Sleeps ms, heartbeating as the driver every 100 ms. */
static void hold(peer *drv, int ms)
{
    for (double until = h_now_ms() + ms; h_now_ms() < until; usleep(100000))
        driver_beat(drv);
}

/* Polls the status until nodes are alive and actors ALIVE (or timeout_ms); the last counts. */
static void wait_cluster(peer *drv, int nodes, int actors, int timeout_ms, int *alive,
                         int *actors_alive, int *n_nodes)
{
    double until = h_now_ms() + timeout_ms;
    do {
        Ct__Envelope *st = status(drv);
        *alive = *actors_alive = 0;
        *n_nodes = st ? (int)st->status_reply->n_nodes : -1;
        for (size_t i = 0; st && i < st->status_reply->n_nodes; i++)
            *alive += st->status_reply->nodes[i]->alive;
        for (size_t i = 0; st && i < st->status_reply->n_actors; i++)
            *actors_alive += !strcmp(st->status_reply->actors[i]->state, "ALIVE");
        ct__msg_free(st);
        if (*alive == nodes && *actors_alive == actors)
            return;
        hold(drv, 300);
    } while (h_now_ms() < until);
}

/* The machine's load average over the last minute (printed beside wall times); -1 unknown. */
static double h_load1(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", &l) != 1)
        l = -1;
    if (f)
        fclose(f);
    return l;
}

/* A round trip to the head that costs it little (a status at 10,000 nodes and 50,000 actors
 * costs it much): a KvGet of a key nobody put. Whatever this driver sent before is handled once
 * the answer comes (one connection, in order). */
static void head_sync(peer *drv)
{
    Ct__Envelope e;
    Ct__KvGet g = CT__KV_GET__INIT;
    ct__envelope__init(&e);
    g.key = "scale/sync";
    e.body_case = CT__ENVELOPE__BODY_KV_GET;
    e.kv_get = &g;
    ct__msg_free(wait_beating(drv, peer_send(drv, &e), 60000));
}

/* --kill K: the K nodes of the ct-simnodes process `doomed` (the last to register, full like
 * every node: --actors is N * cpus) die at once (SIGKILL: their death-watch connections close)
 * while z->waiting creations wait for room; then one live actor is killed, and the first
 * waiting creation alone takes its CPU; then K fresh nodes with room for the rest join.
 * Asserts every actor of the dead nodes reported dead to its owner (this driver), no waiting
 * creation answered before room came, one once the kill freed a CPU, and every one in the end.
 * Prints the head's CPU and the time from the kill until the deaths were handled, and until every
 * waiting actor was placed. The fresh process into *fresh, *fresh_fd. */
static void deaths_step(peer *drv, const sizes *z, const char *addr, pid_t head, pid_t doomed,
                        pid_t *fresh, int *fresh_fd)
{
    uint64_t first = 0;
    for (int i = 0; i < z->waiting; i++) {
        create_msg m;
        uint64_t id = peer_send(drv, create_actor_msg(&m, "Sim", "CPU", 1));
        if (!first)
            first = id;
    }
    head_sync(drv); /* all queued: no node has room */
    int lost = z->kill * z->cpus, dead = 0, placed = 0;
    double cpu0 = cpu_ms_of(head), t0 = h_now_ms();
    kill(doomed, SIGKILL);
    while (dead < lost) {
        Ct__Envelope *r = wait_beating(drv, 0, 120000);
        if (!r)
            break;
        dead += r->body_case == CT__ENVELOPE__BODY_EVENT &&
                r->event->type == CT__EVENT_TYPE__ACTOR_DEAD;
        placed += r->body_case == CT__ENVELOPE__BODY_CREATE_ACTOR_REPLY && r->req_id >= first;
        ct__msg_free(r);
    }
    head_sync(drv); /* the last death's scheduling is done */
    double cpu1 = cpu_ms_of(head), t1 = h_now_ms();
    printf("%d nodes died at once with %d creations waiting: %d actors reported dead, head CPU "
           "%.0f ms, %.0f ms (load %.1f)\n",
           z->kill, z->waiting, dead, cpu1 - cpu0, t1 - t0, h_load1());
    printf("metric deaths_cpu_ms=%.0f\n", cpu1 - cpu0);
    printf("metric deaths_ms=%.0f\n", t1 - t0);
    CHECK_EQ_INT(dead, lost);
    CHECK_EQ_INT(placed, 0);
    /* a live actor killed: its CPU goes to the first waiting creation (the scheduler runs on
     * what its exit freed), and to no other */
    Ct__Envelope *st = status(drv);
    const char *victim = NULL;
    for (size_t i = 0; st && !victim && i < st->status_reply->n_actors; i++)
        if (!strcmp(st->status_reply->actors[i]->state, "ALIVE"))
            victim = st->status_reply->actors[i]->actor_id;
    CHECK(victim != NULL);
    if (victim) {
        Ct__Envelope e;
        Ct__KillActor k = CT__KILL_ACTOR__INIT;
        ct__envelope__init(&e);
        k.actor_id = (char *)victim;
        e.body_case = CT__ENVELOPE__BODY_KILL_ACTOR;
        e.kill_actor = &k;
        peer_send(drv, &e);
    }
    ct__msg_free(st);
    bool victim_dead = false;
    while (victim && (!victim_dead || placed < 1)) {
        Ct__Envelope *r = wait_beating(drv, 0, 60000);
        if (!r)
            break;
        victim_dead |= r->body_case == CT__ENVELOPE__BODY_EVENT &&
                       r->event->type == CT__EVENT_TYPE__ACTOR_DEAD;
        if (r->body_case == CT__ENVELOPE__BODY_CREATE_ACTOR_REPLY && r->req_id >= first) {
            CHECK(r->req_id == first); /* the first waiting one, in creation order */
            placed++;
        }
        ct__msg_free(r);
    }
    head_sync(drv);
    CHECK(victim_dead);
    CHECK_EQ_INT(placed, 1);
    char n[16], cpus[16], line[256] = "";
    snprintf(n, sizeof n, "%d", z->kill);
    snprintf(cpus, sizeof cpus, "%d", (z->waiting + z->kill - 1) / z->kill);
    char *argv[] = {
        (char *)h_bin("ct-simnodes"), "--head", (char *)addr, "--nodes", n, "--cpus", cpus, NULL};
    *fresh_fd = -1;
    cpu1 = cpu_ms_of(head); /* the fresh nodes' window: from their start */
    t1 = h_now_ms();
    *fresh = h_spawn(argv, fresh_fd);
    CHECK(*fresh > 0);
    while (placed < z->waiting) {
        Ct__Envelope *r = wait_beating(drv, 0, 120000 + 30 * z->kill);
        if (!r)
            break;
        placed += r->body_case == CT__ENVELOPE__BODY_CREATE_ACTOR_REPLY && r->req_id >= first;
        ct__msg_free(r);
    }
    double cpu2 = cpu_ms_of(head), t2 = h_now_ms();
    CHECK(*fresh > 0 && !h_read_line(*fresh_fd, line, sizeof line, 120000 + 30 * z->kill) &&
          atoi(line + 11) == z->kill);
    printf("%d waiting actors placed (1 on a killed actor's CPU, the rest on %d fresh nodes): "
           "head CPU %.0f ms and %.0f ms from the fresh nodes' start (load %.1f)\n",
           placed, z->kill, cpu2 - cpu1, t2 - t1, h_load1());
    printf("metric placed_cpu_ms=%.0f\n", cpu2 - cpu1);
    printf("metric placed_ms=%.0f\n", t2 - t1);
    CHECK_EQ_INT(placed, z->waiting);
}

static int parse_args(int argc, char **argv, sizes *z)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--watch") || !strcmp(a, "--no-watch"))
            z->watch = !strcmp(a, "--watch");
        else if (!strcmp(a, "--restart"))
            z->restart = true;
        else if (!strcmp(a, "--nodes") && atoi(v) > 0)
            z->nodes = atoi(argv[++i]);
        else if (!strcmp(a, "--actors") && atoi(v) >= 0)
            z->actors = atoi(argv[++i]);
        else if (!strcmp(a, "--pgs") && atoi(v) >= 0)
            z->pgs = atoi(argv[++i]);
        else if (!strcmp(a, "--calls") && atoi(v) >= 0)
            z->calls = atoi(argv[++i]);
        else if (!strcmp(a, "--hold-ms") && atoi(v) >= 0)
            z->hold_ms = atoi(argv[++i]);
        else if (!strcmp(a, "--sims") && atoi(v) > 0)
            z->sims = atoi(argv[++i]);
        else if (!strcmp(a, "--cpus") && atoi(v) > 0)
            z->cpus = atoi(argv[++i]);
        else if (!strcmp(a, "--heartbeat-ms") && atoi(v) > 0)
            z->hb_ms = atoi(argv[++i]);
        else if (!strcmp(a, "--objects") && atoi(v) >= 0)
            z->objects = atoi(argv[++i]);
        else if (!strcmp(a, "--kill") && atoi(v) > 0)
            z->kill = atoi(argv[++i]);
        else if (!strcmp(a, "--waiting") && atoi(v) > 0)
            z->waiting = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "test_scale_nodes: bad argument '%s' (--nodes N --actors A --pgs P "
                    "--calls C --hold-ms H --sims K --cpus C --heartbeat-ms T --watch|--no-watch "
                    "--restart --kill K --waiting W --objects O)\n",
                    a);
            return -1;
        }
    }
    /* deaths_step's counts assume a full cluster: every node's CPUs taken by an actor */
    if (z->kill && (z->kill >= z->nodes || z->actors != z->nodes * z->cpus || z->pgs ||
                    z->restart || !z->waiting)) {
        fprintf(stderr, "test_scale_nodes: --kill K needs K < N, --actors N*cpus, --pgs 0, "
                        "--waiting W > 0 and no --restart\n");
        return -1;
    }
    return 0;
}

#define MAX_SIMS 16

int main(int argc, char **argv)
{
    sizes z = {.nodes = 2000,
               .actors = 4000,
               .pgs = 1000,
               .calls = 300,
               .hold_ms = 12000,
               .sims = 1,
               .cpus = 4,
               .objects = 1,
               .hb_ms = 100,
               .watch = true};
    if (parse_args(argc, argv, &z) || z.sims > MAX_SIMS)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0); /* each line as it comes (bench/scale reads them) */
    h_init();
    alarm(110 + z.hold_ms / 1000 + z.nodes / 40 + z.actors / 200 + z.waiting / 100 + z.kill);
    struct rlimit rl; /* this process needs few; the head and ct-simnodes raise their own */
    int per_node = z.watch ? 3 : 2;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
        rl.rlim_max < (rlim_t)per_node * z.nodes / z.sims + 256) {
        fprintf(stderr, "test_scale_nodes: needs %d file descriptors, the hard limit is %llu\n",
                per_node * z.nodes / z.sims + 256, (unsigned long long)rl.rlim_max);
        return 77;
    }
    char addr[128], state[] = "/tmp/ct_scale_XXXXXX";
    if (z.restart && !mkdtemp(state)) {
        perror("mkdtemp");
        return 1;
    }
    char hb[16];
    snprintf(hb, sizeof hb, "%d", z.hb_ms);
    pid_t head = h_start_head_on("0", addr, sizeof addr, hb, "10000", z.restart ? state : NULL);
    CHECK(head > 0);
    if (head <= 0)
        return sec_finish("scale_nodes", -1);
    long head_rss0 = rss_kb_of(head);
    /* one real ct-node first (no CPUs: nothing is placed there), given the configured period:
     * it must follow the period the head sizes for the whole cluster (HeartbeatPeriod), which
     * it logs; not with --restart, whose counts are the simulated nodes', nor where it would
     * take the last place in the head's node table (10,000 nodes: a simulated node refused) */
    char node_log[] = "/tmp/ct_scale_node_XXXXXX";
    int real = 0;
    if (!z.restart && z.nodes < 10000) {
        int lf = mkstemp(node_log);
        CHECK(lf >= 0);
        close(lf);
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "CT_LOG_LEVEL=info exec '%s' --head %s --cpus 0 2>'%s'",
                 h_bin("ct-node"), addr, node_log);
        char *argv[] = {"/bin/sh", "-c", cmd, NULL};
        real = h_spawn(argv, NULL) > 0;
        bool joined = real && file_has(node_log, "registered as node-", 30000);
        CHECK(joined);
        if (!joined) { /* what it said instead */
            char cmd[300];
            snprintf(cmd, sizeof cmd, "tail -n 20 '%s' >&2", node_log);
            if (system(cmd))
                fprintf(stderr, "cannot read %s\n", node_log);
        }
    }
    pid_t sim[MAX_SIMS + 1]; /* and --kill's fresh nodes last */
    int fd[MAX_SIMS + 1];
    char line[512] = "";
    double t0 = h_now_ms();
    int spread = z.nodes - z.kill; /* --kill: the doomed nodes in a process of their own */
    for (int k = 0; k < z.sims; k++) {
        char n[16], cpus[16], objs[16];
        snprintf(n, sizeof n, "%d", spread / z.sims + (k < spread % z.sims));
        snprintf(cpus, sizeof cpus, "%d", z.cpus);
        snprintf(objs, sizeof objs, "%d", z.objects);
        char *argv[] = {(char *)h_bin("ct-simnodes"),
                        "--head",
                        addr,
                        "--nodes",
                        n,
                        "--cpus",
                        cpus,
                        "--objects",
                        objs,
                        z.watch ? "--watch" : NULL,
                        NULL};
        fd[k] = -1;
        sim[k] = h_spawn(argv, &fd[k]);
    }
    int registered = 0;
    for (int k = 0; k < z.sims; k++)
        if (sim[k] > 0 && !h_read_line(fd[k], line, sizeof line, 120000 + 30 * z.nodes) &&
            !strncmp(line, "registered ", 11))
            registered += atoi(line + 11);
    pid_t doomed = -1, fresh = -1;
    int doomed_fd = -1, fresh_fd = -1;
    if (z.kill) { /* last, with death watches: their SIGKILL is seen at once */
        char n[16], cpus[16], objs[16];
        snprintf(n, sizeof n, "%d", z.kill);
        snprintf(cpus, sizeof cpus, "%d", z.cpus);
        snprintf(objs, sizeof objs, "%d", z.objects);
        char *argv[] = {(char *)h_bin("ct-simnodes"),
                        "--head",
                        addr,
                        "--nodes",
                        n,
                        "--cpus",
                        cpus,
                        "--objects",
                        objs,
                        "--watch",
                        NULL};
        doomed = h_spawn(argv, &doomed_fd);
        if (doomed > 0 && !h_read_line(doomed_fd, line, sizeof line, 120000 + 30 * z.kill) &&
            !strncmp(line, "registered ", 11))
            registered += atoi(line + 11);
    }
    CHECK_EQ_INT(registered, z.nodes);
    double reg_ms = h_now_ms() - t0;
    long head_rss_nodes = rss_kb_of(head);
    printf("%d simulated nodes registered in %.0f ms\n", z.nodes, reg_ms);
    printf("metric register_ms=%.0f\n", reg_ms);
    peer drv;
    CHECK_OK(peer_open(&drv, addr, "drv", "job"));
    CHECK_OK(peer_open(&beat, addr, "drv", drv.token)); /* the same driver: name and job */
    driver_beat(&drv);

    t0 = h_now_ms();
    if (z.calls > z.actors)
        z.calls = z.actors;
    called *call = calloc(z.calls + 1, sizeof *call);
    CHECK(call != NULL);
    if (!call)
        return sec_finish("scale_nodes", -1);
    double create_cpu0 = cpu_ms_of(head);
    int placed = create_many(&drv, z.actors, 60000 + z.actors, call, z.calls);
    double act_ms = h_now_ms() - t0;
    /* the head's CPU for them (a loaded machine stretches the wall time, not this much) */
    printf("metric create_cpu_ms=%.0f\n", cpu_ms_of(head) - create_cpu0);
    printf("%d actors created (answered) in %.0f ms\n", placed, act_ms);
    printf("metric actors_per_s=%.0f\n", placed * 1000.0 / (act_ms > 1 ? act_ms : 1));
    CHECK_EQ_INT(placed, z.actors);
    long head_rss_actors = rss_kb_of(head);

    /* calls to simulated actors, as a driver makes them: a connection each, echo's bytes back */
    int connected = 0, ncall = z.calls < placed ? z.calls : placed;
    for (int i = 0; i < z.calls; i++)
        call[i].zc.fd = -1;
    for (int i = 0; i < ncall; i++) {
        if (!ct__zconn_connect(&call[i].zc, call[i].addr))
            connected++;
        else
            fprintf(stderr, "actor %s at '%s': %s\n", call[i].id, call[i].addr, ct_last_error());
    }
    CHECK_EQ_INT(connected, z.calls);
    int rounds = 10;
    double calls_ms = 0;
    driver_beat(&drv);
    int echoed = call_many(call, ncall, rounds, &calls_ms);
    driver_beat(&drv);
    printf("%d calls to %d simulated actors answered with their arguments\n", echoed, connected);
    CHECK_EQ_INT(echoed, z.calls * (rounds + 1));
    printf("metric calls_per_s=%.0f\n", ncall * rounds * 1000.0 / (calls_ms > 1 ? calls_ms : 1));
    if (ncall && call[0].zc.fd >= 0) { /* a method the actor lacks: refused with the method named */
        CHECK_OK(call_send(&call[0].zc, 99, "nosuch", "x"));
        Ct__Envelope *r = call_reply(&call[0].zc, 30000);
        CHECK(r && r->body_case == CT__ENVELOPE__BODY_ERROR);
        CHECK(r && r->body_case == CT__ENVELOPE__BODY_ERROR && r->error->code == CT_ENOENT &&
              r->req_id == 99 && strstr(r->error->message, "no method 'nosuch'"));
        ct__msg_free(r);
    }
    for (int i = 0; i < z.calls; i++)
        ct__zconn_close(&call[i].zc);
    free(call);
    t0 = h_now_ms();
    int ready = pgs_many(&drv, z.pgs, 30000 + z.pgs * 10);
    double pg_ms = h_now_ms() - t0;
    printf("%d placement groups ready in %.0f ms\n", ready, pg_ms);
    printf("metric pgs_per_s=%.0f\n", ready * 1000.0 / (pg_ms > 1 ? pg_ms : 1));
    CHECK_EQ_INT(ready, z.pgs);
    if (z.kill) {
        deaths_step(&drv, &z, addr, head, doomed, &fresh, &fresh_fd);
        h_wait_gone(doomed, 10000);
        close(doomed_fd);
    }

    double cpu0 = cpu_ms_of(head), w0 = h_now_ms();
    hold(&drv, z.hold_ms);
    double cpu1 = cpu_ms_of(head), w1 = h_now_ms();
    /* the head's CPU while only heartbeats arrive: ms of CPU a second, per 1,000 nodes */
    printf("metric hb_cpu_ms_per_s_per_1k=%.1f\n",
           (cpu1 - cpu0) / ((w1 - w0) / 1000.0) / (z.nodes / 1000.0));
    t0 = h_now_ms();
    Ct__Envelope *st = status(&drv);
    printf("metric status_ms=%.0f\n", h_now_ms() - t0);
    ct__msg_free(st);
    int alive = 0, actors_alive = 0, n_nodes = 0;
    /* --kill: the dead nodes listed (for GONE_AFTER_MS), their actors dead, the fresh nodes
     * alive with the actors that waited */
    int live_actors = z.actors - z.kill * z.cpus + (z.kill ? z.waiting - 1 : 0); /* 1 killed */
    wait_cluster(&drv, z.nodes + real, live_actors, 0, &alive, &actors_alive, &n_nodes);
    int listed = z.nodes + real + z.kill; /* the head's table full: fresh nodes take dead slots */
    CHECK_EQ_INT(n_nodes, listed < CT_HEAD_DEFAULT_NODES ? listed : CT_HEAD_DEFAULT_NODES);
    CHECK_EQ_INT(alive, z.nodes + real);
    CHECK_EQ_INT(actors_alive, live_actors);
    printf("metric head_kb_per_node=%.1f\n", (double)(head_rss_nodes - head_rss0) / z.nodes);
    if (z.actors)
        printf("metric head_kb_per_actor=%.2f\n",
               (double)(head_rss_actors - head_rss_nodes) / z.actors);
    printf("metric head_rss_kb=%ld\n", rss_kb_of(head));

    if (z.restart) { /* the head killed, started again on its state file on the same port */
        char wal[300], port[16];
        snprintf(wal, sizeof wal, "%s/head.wal", state);
        struct stat sb;
        printf("metric wal_bytes=%lld\n", stat(wal, &sb) ? -1LL : (long long)sb.st_size);
        snprintf(port, sizeof port, "%s", strrchr(addr, ':') + 1);
        kill(head, SIGKILL);
        h_wait_gone(head, 10000);
        t0 = h_now_ms();
        /* the port may stay taken a moment by the dead head's closing connections */
        head = -1;
        for (int tries = 0; head < 0 && tries < 20; tries++)
            if ((head = h_start_head_on(port, addr, sizeof addr, hb, "10000", state)) < 0)
                usleep(250000);
        printf("metric replay_ms=%.0f\n", h_now_ms() - t0); /* the state loads before it listens */
        CHECK(head > 0);
        wait_cluster(&drv, z.nodes, z.actors, 60000 + z.nodes * 10, &alive, &actors_alive,
                     &n_nodes);
        printf("metric back_ms=%.0f\n", h_now_ms() - t0);
        CHECK_EQ_INT(alive, z.nodes);
        CHECK_EQ_INT(actors_alive, z.actors);
    }

    /* ct-simnodes' counters: no heartbeat refused (no node declared dead, the head did not
     * restart), no error */
    long calls_answered = 0, calls_refused = 0;
    long starts = 0, refused = 0, errors = 0, resumed = 0, rss = 0, hb_max = 0, hb_min = 0;
    int nsims = z.sims;
    if (fresh > 0) {
        sim[nsims] = fresh;
        fd[nsims++] = fresh_fd;
    }
    for (int k = 0; k < nsims; k++) {
        kill(sim[k], SIGTERM);
        line[0] = 0;
        while (!h_read_line(fd[k], line, sizeof line, 20000) && strncmp(line, "simnodes ", 9))
            ;
        printf("%s\n", line);
        starts += counter(line, "starts");
        calls_answered += counter(line, "calls");
        calls_refused += counter(line, "call_errors");
        refused += counter(line, "refused_heartbeats");
        resumed += counter(line, "resumed");
        errors += counter(line, "errors");
        rss += counter(line, "rss_kb") - counter(line, "base_rss_kb");
        long hb = counter(line, "heartbeat_ms"), lo = counter(line, "heartbeat_ms_min");
        hb_max = hb > hb_max ? hb : hb_max;
        hb_min = !hb_min || lo < hb_min ? lo : hb_min;
        close(fd[k]);
    }
    /* the dead nodes' process told nothing; --kill killed one actor */
    CHECK_EQ_INT((int)starts, live_actors + (z.kill ? 1 : 0));
    CHECK_EQ_INT((int)errors, 0);
    CHECK_EQ_INT((int)calls_answered, z.calls * 11);   /* the first call and 10 rounds each */
    CHECK_EQ_INT((int)calls_refused, z.calls ? 1 : 0); /* "nosuch" */
    /* the period the head sized for the nodes (head/nodes.c): the configured one doubled while
     * two heartbeats a node a period exceed 20,000 a second; every node was told it */
    int period = z.hb_ms;
    while ((long long)(z.nodes + real) * 2 * 1000 > 20000LL * period)
        period *= 2;
    printf("metric heartbeat_ms=%ld\n", hb_max);
    if (z.restart) {
        CHECK(resumed >= z.nodes);
    } else {
        CHECK_EQ_INT((int)refused, 0);
    }
    if (!z.restart && !z.kill) { /* --kill: the fresh nodes joined a table holding the dead */
        CHECK_EQ_INT((int)hb_max, period);
        CHECK_EQ_INT((int)hb_min, period);
        char told[64];
        snprintf(told, sizeof told, "heartbeat period %d ms", period);
        CHECK(period == z.hb_ms || file_has(node_log, told, 10000));
    }
    if (real)
        unlink(node_log);
    printf("metric sim_kb_per_node=%.1f\n", (double)rss / z.nodes);
    printf("ct-simnodes: %.1f kB per simulated node; ct-head peak %ld kB\n", (double)rss / z.nodes,
           vm_hwm_kb(head));
    peer_close(&drv);
    peer_close(&beat);
    int rc = sec_finish("scale_nodes", -1);
    if (z.restart) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", state);
        if (system(cmd))
            fprintf(stderr, "cannot remove %s\n", state);
    }
    return rc;
}
