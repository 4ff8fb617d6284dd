/* tests/scale/test_scale_calls.c — a driver calls actors on simulated nodes through libct.
 * A real ct-head and one ct-simnodes process with 100 nodes of 4 CPUs (actor/simnodes.c); this
 * process is the driver (ct_init with the head's address). It creates 300 actors of class "Sim"
 * (CPU=1) with ct_actor_create_many, so the head places them on simulated nodes and the driver
 * connects to the address each ActorReady gave (the simulated nodes' one call listener), then:
 * 1. calls each "echo" once with ct_actor_call_async (all sent, then every future waited) and
 *    asserts every result's bytes are the arguments sent, then 5 more such rounds;
 * 2. calls a method the actor lacks: ct_actor_call fails with CT_ENOENT and the message names
 *    the method;
 * 3. kills one: once the head reported it dead, a call to it fails CT_EDEAD;
 * 4. from ct-simnodes' counters at SIGTERM: every call answered there, one refused, one kill,
 *    no error.
 * The head runs with --heartbeat-rate 500: the period it gives the 100 nodes (two heartbeats a
 * node a period) is the configured 100 ms doubled until they send at most 500 a second, 400 ms,
 * which every simulated node must hold; --heartbeat-rate 0 is refused, naming the flag.
 * The class is registered here only because the driver checks the name; its method never runs
 * (no actor process is started). Nothing here asserts a time. */
#include "../runtime/harness.h"
#include "ct/ct.h"
#include "simnodes_out.h"

#define NODES "100"
#define ACTORS 300
#define ROUNDS 6

static int never_called(void *state, const void *args, size_t len, void **out, size_t *out_len)
{
    (void)state, (void)args, (void)len, (void)out, (void)out_len;
    return CT_EINVAL;
}

/* ct-head on a free port with --heartbeat-rate rate; its pid, addr filled ("127.0.0.1:P"). */
static pid_t start_head_rate(char *addr, size_t cap, const char *rate)
{
    char *argv[] = {(char *)h_bin("ct-head"),
                    "--port",
                    "0",
                    "--heartbeat-ms",
                    "100",
                    "--dead-after-ms",
                    "10000",
                    "--heartbeat-rate",
                    (char *)rate,
                    NULL};
    int fd = -1;
    pid_t pid = h_spawn(argv, &fd);
    char line[120];
    if (pid < 0 || h_read_line(fd, line, sizeof line, 10000) ||
        strncmp(line, "listening on ", 13)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    snprintf(addr, cap, "%s", line + 13);
    return pid;
}

/* ct-head's refusal of a bad --heartbeat-rate: exit status 2 and a message naming the flag. */
static void bad_rate(const char *rate)
{
    char cmd[1200], out[512] = "";
    snprintf(cmd, sizeof cmd, "'%s' --port 0 --heartbeat-rate '%s' 2>&1", h_bin("ct-head"), rate);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    int st = p ? pclose(p) : -1;
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    char want[120];
    snprintf(want, sizeof want, "--heartbeat-rate: '%s' is not an integer in [1, 10000000]", rate);
    if (!strstr(out, want))
        fprintf(stderr, "ct-head --heartbeat-rate %s said: %s\n", rate, out);
    CHECK(strstr(out, want) != NULL);
}

int main(void)
{
    ct_actor_class_register("Sim", &(ct_actor_class){.methods = {{"echo", never_called}}});
    ct_serve_if_worker();
    h_init();
    char addr[128];
    bad_rate("0");
    bad_rate("10000001");
    pid_t head = start_head_rate(addr, sizeof addr, "500");
    CHECK(head > 0);
    if (head <= 0)
        return 1;
    int fd = -1;
    char *argv[] = {
        (char *)h_bin("ct-simnodes"), "--head", addr, "--nodes", NODES, "--cpus", "4", NULL};
    pid_t sim = h_spawn(argv, &fd);
    char line[512] = "";
    CHECK(sim > 0 && !h_read_line(fd, line, sizeof line, 60000));
    CHECK_STR(line, "registered " NODES);
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));

    long rss0 = rss_kb_of(sim);
    static ct_actor *a[ACTORS];
    CHECK_OK(
        ct_actor_create_many("Sim", &(ct_resources){.cpu = 1, .bundle = -1}, NULL, 0, ACTORS, a));
    int made = 0;
    for (int i = 0; i < ACTORS; i++)
        made += a[i] && !strncmp(ct_actor_address(a[i]), "tcp://127.0.0.1:", 16);
    CHECK_EQ_INT(made, ACTORS);
    long rss1 = rss_kb_of(sim);

    /* 1: echo, every actor once a round, all sent before any is waited */
    static ct_future *f[ACTORS];
    static char args[ACTORS][96];
    int echoed = 0;
    double t0 = h_now_ms();
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < ACTORS; i++) {
            snprintf(args[i], sizeof args[i], "round %d, actor %d (%s)", round, i,
                     a[i] ? ct_actor_id(a[i]) : "none");
            f[i] = NULL;
            if (a[i] && ct_actor_call_async(a[i], "echo", args[i], strlen(args[i]), &f[i]))
                fprintf(stderr, "call %d: %s\n", i, ct_last_error());
        }
        for (int i = 0; i < ACTORS; i++) {
            void *res = NULL;
            size_t len = 0;
            int rc = f[i] ? ct_future_wait(f[i], 30000, &res, &len) : CT_EINVAL;
            bool same = !rc && len == strlen(args[i]) && !memcmp(res, args[i], len);
            if (!same && echoed + 5 > round * ACTORS + i)
                fprintf(stderr, "echo %d of round %d: rc %d, %zu bytes: %s\n", i, round, rc, len,
                        rc ? ct_last_error() : "");
            echoed += same;
            free(res);
            ct_future_destroy(&f[i]);
        }
    }
    double ms = h_now_ms() - t0;
    long rss2 = rss_kb_of(sim);
    /* what ct-simnodes holds: an actor's record (120 B) and the messages that placed it, the
     * driver's connection to it accepted (ct__zconn and its 8 KiB read buffer); then the first
     * replies (its 16 KiB write buffer) */
    printf("ct-simnodes: %.2f kB per actor placed and connected, %.2f kB more once called\n",
           (double)(rss1 - rss0) / ACTORS, (double)(rss2 - rss1) / ACTORS);
    CHECK_EQ_INT(echoed, ROUNDS * ACTORS);
    printf("%d calls to %d actors on simulated nodes in %.0f ms (%.0f calls/s)\n", echoed, ACTORS,
           ms, echoed * 1000.0 / (ms > 1 ? ms : 1));

    /* 2: a method the class lacks */
    void *res = NULL;
    size_t len = 0;
    int rc = a[0] ? ct_actor_call(a[0], "nosuch", "x", 1, &res, &len, 30000) : CT_EINVAL;
    CHECK_EQ_INT(rc, CT_ENOENT);
    CHECK(strstr(ct_last_error(), "no method 'nosuch'") != NULL);
    free(res);

    /* 3: a killed actor: its node answers KillActor (ActorExited), the head tells the driver,
     * whose calls then fail CT_EDEAD, as a real actor's (the shared address itself would still
     * answer) */
    if (a[1]) {
        CHECK_OK(ct_actor_kill(a[1]));
        for (double until = h_now_ms() + 30000; !ct_actor_is_dead(a[1]) && h_now_ms() < until;)
            usleep(10000);
        CHECK(ct_actor_is_dead(a[1]));
        res = NULL;
        CHECK_EQ_INT(ct_actor_call(a[1], "echo", "x", 1, &res, &len, 30000), CT_EDEAD);
        free(res);
    }

    /* 4: ct-simnodes' count of what it answered */
    kill(sim, SIGTERM);
    line[0] = 0;
    while (!h_read_line(fd, line, sizeof line, 20000) && strncmp(line, "simnodes ", 9))
        ;
    printf("%s\n", line);
    CHECK_EQ_INT((int)counter(line, "starts"), ACTORS);
    CHECK_EQ_INT((int)counter(line, "kills"), 1);
    CHECK_EQ_INT((int)counter(line, "calls"), ROUNDS * ACTORS);
    CHECK_EQ_INT((int)counter(line, "call_errors"), 1);
    CHECK_EQ_INT((int)counter(line, "errors"), 0);
    CHECK_EQ_INT((int)counter(line, "heartbeat_ms"), 400); /* --heartbeat-rate 500 */
    CHECK_EQ_INT((int)counter(line, "heartbeat_ms_min"), 400);
    close(fd);
    for (int i = 0; i < ACTORS; i++)
        ct_actor_release(&a[i]);
    ct_shutdown();
    h_kill_all();
    if (h_failures)
        fprintf(stderr, "scale_calls: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
