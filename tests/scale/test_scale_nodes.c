/* tests/scale/test_scale_nodes.c — the head holds 2,000 nodes. A real ct-head at its default
 * heartbeat period (100 ms) and dead-after time (10 s), and 2,000 nodes simulated by one
 * ct-simnodes process (actor/simnodes.c: each its own CURVE connection and death-watch
 * connection, two heartbeats a period, its store announced). A raw driver peer (sec.h) then:
 * 1. creates ACTORS actors of CPU=1 (pipelined: all sent, then every reply read) and asserts
 *    every one answered CreateActorReply (the simulated node answered StartActor);
 * 2. creates PGS single-bundle placement groups and waits on each: every one Ok (ready);
 * 3. keeps the cluster heartbeating past the dead-after time, then asserts from the status
 *    that all 2,000 nodes are alive and the actors ALIVE, and from ct-simnodes' counters that
 *    the head refused no heartbeat (it declared no node dead) and sent no error.
 * Nothing here asserts a time: on a loaded machine it takes longer, and the head counts only
 * the silence of time it ran (head/nodes.c). */
#include "../security/sec.h"
#include <sys/resource.h>

#define NODES 2000
#define ACTORS 4000 /* nodes have CPU=4: half the cluster */
#define PGS 1000
#define HOLD_MS 12000 /* past the default dead-after time (10 s) */

/* Sends n CreateActor (CPU=1) without waiting, then reads until every one is answered or
 * timeout_ms passed; the number answered CreateActorReply. */
static int create_many(peer *drv, int n, int timeout_ms)
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
        Ct__Envelope *r = peer_wait(drv, 0, 0, timeout_ms);
        if (!r)
            break;
        if (r->body_case == CT__ENVELOPE__BODY_CREATE_ACTOR_REPLY && r->req_id >= first)
            ok++;
        else if (other++ < 5)
            fprintf(stderr, "create: got %s (%s)\n", ct__msg_body_name(r->body_case),
                    r->body_case == CT__ENVELOPE__BODY_ERROR ? r->error->message : "");
        ct__msg_free(r);
    }
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
        Ct__Envelope *rep = peer_call(drv, &e, timeout_ms);
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
        Ct__Envelope *rep = peer_call(drv, &e, timeout_ms);
        ready += rep && rep->body_case == CT__ENVELOPE__BODY_OK;
        ct__msg_free(rep);
    }
    free(ids);
    return ready;
}

/* A counter "name=N" of ct-simnodes' last line; -1 when absent. */
static long counter(const char *line, const char *name)
{
    char key[48];
    snprintf(key, sizeof key, " %s=", name);
    const char *p = strstr(line, key);
    return p ? atol(p + strlen(key)) : -1;
}

int main(void)
{
    h_init();
    alarm(110);
    struct rlimit rl; /* this process needs few; the head and ct-simnodes raise their own */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max < 3 * NODES + 256) {
        fprintf(stderr, "test_scale_nodes: needs %d file descriptors, the hard limit is %llu\n",
                3 * NODES + 256, (unsigned long long)rl.rlim_max);
        return 77;
    }
    char addr[128];
    pid_t head = h_start_head(addr, sizeof addr, "100", "10000");
    CHECK(head > 0);
    if (head <= 0)
        return sec_finish("scale_nodes", -1);
    char n[16];
    snprintf(n, sizeof n, "%d", NODES);
    char *argv[] = {(char *)h_bin("ct-simnodes"), "--head", addr, "--nodes", n, "--watch", NULL};
    int fd = -1;
    double t0 = h_now_ms();
    pid_t sim = h_spawn(argv, &fd);
    char line[512] = "";
    CHECK(sim > 0 && h_read_line(fd, line, sizeof line, 90000) == 0);
    CHECK(!strncmp(line, "registered ", 11) && atoi(line + 11) == NODES);
    printf("%d simulated nodes registered in %.0f ms\n", NODES, h_now_ms() - t0);
    peer drv;
    CHECK_OK(peer_open(&drv, addr, "drv", "job"));

    t0 = h_now_ms();
    int placed = create_many(&drv, ACTORS, 60000);
    printf("%d actors created (answered) in %.0f ms\n", placed, h_now_ms() - t0);
    CHECK_EQ_INT(placed, ACTORS);
    t0 = h_now_ms();
    int ready = pgs_many(&drv, PGS, 30000);
    printf("%d placement groups ready in %.0f ms\n", ready, h_now_ms() - t0);
    CHECK_EQ_INT(ready, PGS);

    usleep(HOLD_MS * 1000);
    t0 = h_now_ms();
    Ct__Envelope *st = status(&drv);
    printf("status of %d nodes in %.0f ms\n", st ? (int)st->status_reply->n_nodes : -1,
           h_now_ms() - t0);
    CHECK(st != NULL);
    int alive = 0, actors_alive = 0;
    for (size_t i = 0; st && i < st->status_reply->n_nodes; i++)
        alive += st->status_reply->nodes[i]->alive;
    for (size_t i = 0; st && i < st->status_reply->n_actors; i++)
        actors_alive += !strcmp(st->status_reply->actors[i]->state, "ALIVE");
    CHECK_EQ_INT(st ? (int)st->status_reply->n_nodes : -1, NODES);
    CHECK_EQ_INT(alive, NODES);
    CHECK_EQ_INT(actors_alive, ACTORS);
    ct__msg_free(st);

    /* ct-simnodes' counters: no heartbeat refused (no node declared dead), no error */
    kill(sim, SIGTERM);
    line[0] = 0;
    while (!h_read_line(fd, line, sizeof line, 20000) && strncmp(line, "simnodes ", 9))
        ;
    printf("%s\n", line);
    CHECK_EQ_INT((int)counter(line, "registered"), NODES);
    CHECK_EQ_INT((int)counter(line, "starts"), ACTORS);
    CHECK_EQ_INT((int)counter(line, "refused_heartbeats"), 0);
    CHECK_EQ_INT((int)counter(line, "errors"), 0);
    long rss = counter(line, "rss_kb"), base = counter(line, "base_rss_kb");
    printf("ct-simnodes: %.1f kB per simulated node; ct-head peak %ld kB\n",
           (double)(rss - base) / NODES, vm_hwm_kb(head));
    close(fd);
    peer_close(&drv);
    return sec_finish("scale_nodes", -1);
}
