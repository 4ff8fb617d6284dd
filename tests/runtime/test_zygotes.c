/* tests/runtime/test_zygotes.c — zygotes do not pile up on a long-lived node, and ps tells the
 * processes apart:
 * - two jobs, one after the other (each a driver process of its own, this executable, with 2
 *   actors on node A): while a job runs, /proc/PID/comm is "ct-node" for the node, "ct-zygote"
 *   for its zygotes and "ct-actor" for its actors (all the node's children); when the job's
 *   driver ends, the node is left with no child at all (the head's JobEnded), and still runs;
 * - node B runs with CT_ZYGOTE_IDLE_MS=300: a job whose only actor there was killed loses that
 *   zygote while its driver still runs (the idle rule, for jobs whose end the head cannot tell
 *   the node);
 * - an embedded cluster (ct_init(NULL)): the driver's head and node children are "ct-head" and
 *   "ct-node", its actor "ct-actor" under that node;
 * - an actor that dies in its create (a message on stderr, then exit 3): the creator gets
 *   CT_EDEAD with the exit status and that message (the node quotes the actor's stderr);
 * - nothing this test started is left running. */
#include "harness.h"
#include "classes.h"
#include "ct/ct.h"

#include <dirent.h>

/* /proc/pid/comm without its newline ("" when gone). */
static const char *comm_of(pid_t pid, char *buf, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(buf, (int)cap, f))
            buf[0] = 0;
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
    return buf;
}

/* The parent pid of pid (from /proc/pid/stat), -1 when gone. */
static pid_t ppid_of(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    int pp = -1;
    char state;
    if (!p || sscanf(p + 1, " %c %d", &state, &pp) != 2)
        return -1;
    return pp;
}

/* The live (not zombie) children of pid: up to cap pids in out, their count. */
static int children_of(pid_t pid, pid_t *out, int cap)
{
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        pid_t c = atoi(e->d_name);
        if (c > 0 && ppid_of(c) == pid && !h_gone(c)) {
            if (n < cap)
                out[n] = c;
            n++;
        }
    }
    if (d)
        closedir(d);
    return n;
}

/* How many children of pid have comm name. */
static int children_named(pid_t pid, const char *name)
{
    pid_t c[64];
    char buf[32];
    int n = children_of(pid, c, 64), k = 0;
    for (int i = 0; i < n && i < 64; i++)
        k += !strcmp(comm_of(c[i], buf, sizeof buf), name);
    return k;
}

/* Waits up to timeout_ms for pid to have no child; the number left (and their names). */
static int wait_childless(pid_t pid, int timeout_ms)
{
    double until = h_now_ms() + timeout_ms;
    for (;;) {
        pid_t c[64];
        int n = children_of(pid, c, 64);
        if (!n)
            return 0;
        if (h_now_ms() > until) {
            char buf[32];
            for (int i = 0; i < n && i < 64; i++)
                fprintf(stderr, "pid %d: child %d (%s) left\n", (int)pid, (int)c[i],
                        comm_of(c[i], buf, sizeof buf));
            return n;
        }
        usleep(20000);
    }
}

/* An actor whose create says why on stderr and exits (a data file missing, say). */
static int crasher_new(const void *args, size_t len, void **state)
{
    (void)args, (void)len, (void)state;
    fprintf(stderr, "crasher: loading its data\n");
    fprintf(stderr, "crasher: /nonexistent/shard-7.bin: No such file or directory\n");
    _exit(3);
}

/* ---- the driver processes (this executable with --driver MODE ADDR) ----
 * MODE "job": 2 Counter actors on resource a, prints "actor PID" for each, "ready", then waits
 * for stdin's end and shuts down. MODE "idle": 1 actor on b, prints it, kills it, prints
 * "killed", waits for stdin's end. MODE "embedded": ct_init(NULL), 1 actor, prints it and
 * "ready", waits for stdin's end. MODE "crash": creates a Crasher on a, prints
 * "crash RC MESSAGE" and exits. */
static int driver(const char *mode, const char *addr)
{
    bool embedded = !strcmp(mode, "embedded"), idle = !strcmp(mode, "idle");
    ct_init_opts io = {.address = addr};
    /* embedded: dead times a loaded machine does not reach, as the test's own head */
    if (ct_init(embedded ? &(ct_init_opts){.cpus = 2, .dead_after_ms = 20000} : &io)) {
        fprintf(stderr, "driver %s: ct_init: %s\n", mode, ct_last_error());
        return 1;
    }
    if (!strcmp(mode, "crash")) {
        ct_actor *c = NULL;
        int rc = ct_actor_create("Crasher", &(ct_resources){.custom = {{"a", 1}}}, NULL, 0, &c);
        printf("crash %d %s\n", rc, rc ? ct_last_error() : "");
        ct_actor_release(&c);
        ct_shutdown();
        return 0;
    }
    ct_actor *a[2] = {NULL, NULL};
    int n = embedded || idle ? 1 : 2;
    ct_resources r = {.custom = {{idle ? "b" : "a", 1}}};
    for (int i = 0; i < n; i++) {
        if (ct_actor_create("Counter", embedded ? NULL : &r, NULL, 0, &a[i])) {
            fprintf(stderr, "driver %s: %s\n", mode, ct_last_error());
            return 1;
        }
        printf("actor %d\n", ct_actor_pid(a[i]));
    }
    if (idle) {
        ct_actor_kill(a[0]);
        for (int i = 0; i < 500 && !ct_actor_is_dead(a[0]); i++)
            usleep(10000);
        printf("killed\n");
    } else {
        printf("ready\n");
    }
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    for (int i = 0; i < n; i++)
        ct_actor_release(&a[i]);
    ct_shutdown();
    return 0;
}

/* Starts a driver (stdout on *out, stdin on *in); registered for h_kill_all. */
static pid_t spawn_driver(const char *mode, const char *addr, int *out, int *in)
{
    int o[2], i[2];
    if (pipe2(o, O_CLOEXEC) || pipe2(i, O_CLOEXEC))
        return -1;
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me)
            _exit(1);
        dup2(o[1], 1);
        dup2(i[0], 0);
        char *argv[] = {(char *)h_bin("test_runtime_zygotes"), "--driver", (char *)mode,
                        (char *)addr, NULL};
        execv(argv[0], argv);
        _exit(127);
    }
    close(o[1]);
    close(i[0]);
    *out = o[0];
    *in = i[1];
    if (pid > 0 && h_nprocs < H_MAX_PROCS)
        h_procs[h_nprocs++] = pid;
    return pid;
}

/* Reads "actor PID" lines into pids (up to cap) until a line equal to last; their count, or
 * -1 when the driver said nothing more. */
static int read_actors(int fd, pid_t *pids, int cap, const char *last)
{
    char line[128];
    int n = 0;
    while (!h_read_line(fd, line, sizeof line, 60000)) {
        if (!strcmp(line, last))
            return n;
        if (!strncmp(line, "actor ", 6) && n < cap)
            pids[n++] = atoi(line + 6);
    }
    return -1;
}

/* Ends a driver: closes its stdin, checks that it exits 0. */
static void end_driver(pid_t d, int out, int in)
{
    close(in);
    int st = h_reap(d, 0, 30000);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(out);
}

/* One job on node: its processes' names while it runs, none of them left after it. */
static void job_on(pid_t node, const char *addr, int round)
{
    int out, in;
    pid_t d = spawn_driver("job", addr, &out, &in);
    pid_t act[2] = {0, 0};
    int n = read_actors(out, act, 2, "ready");
    CHECK_EQ_INT(n, 2);
    char buf[32];
    for (int i = 0; i < n; i++) {
        CHECK_STR(comm_of(act[i], buf, sizeof buf), "ct-actor");
        CHECK_EQ_INT(ppid_of(act[i]), node);
    }
    CHECK_STR(comm_of(node, buf, sizeof buf), "ct-node");
    /* a sibling zygote started with the first may still be loading the program (named as it
     * until it reaches ct_init): give it time to name itself */
    int zyg = 0, all = 0;
    for (double until = h_now_ms() + 30000; h_now_ms() < until; usleep(20000)) {
        zyg = children_named(node, "ct-zygote");
        all = children_of(node, (pid_t[64]){0}, 64);
        if (all == zyg + 2)
            break;
    }
    printf("job %d: node %d has %d children: %d ct-zygote, %d ct-actor\n", round, (int)node, all,
           zyg, children_named(node, "ct-actor"));
    CHECK(zyg >= 1);
    CHECK_EQ_INT(children_named(node, "ct-actor"), 2);
    CHECK_EQ_INT(all, zyg + 2); /* nothing else, nothing unnamed */
    end_driver(d, out, in);
    /* its ct_shutdown told the head: the head kills the job's actors and tells the node the
     * job ended, which ends its zygotes too */
    CHECK_EQ_INT(wait_childless(node, 30000), 0);
    CHECK(!h_gone(node));
}

int main(int argc, char **argv)
{
    register_test_classes();
    ct_actor_class_register("Crasher", &(ct_actor_class){.create = crasher_new});
    ct_serve_if_worker();
    if (argc == 4 && !strcmp(argv[1], "--driver"))
        return driver(argv[2], argv[3]);
    setvbuf(stdout, NULL, _IOLBF, 0); /* where it got to, also when ctest kills it */
    h_init();
    alarm(170); /* within ctest's 180 s (h_init's 120 is short for this one on a loaded machine) */
    char addr[128];
    /* no failure detection is tested here: dead times a loaded machine does not reach (a
     * driver's job ends at its ct_shutdown, which says so) */
    pid_t head = h_start_head(addr, sizeof addr, "100", "20000");
    if (head < 0)
        return 1;
    pid_t na =
        h_start_node(addr, "--cpus", "4", "--resources", "a=10", "--head-dead-after-ms", "60000");
    setenv("CT_ZYGOTE_IDLE_MS", "300", 1);
    pid_t nb =
        h_start_node(addr, "--cpus", "4", "--resources", "b=10", "--head-dead-after-ms", "60000");
    unsetenv("CT_ZYGOTE_IDLE_MS");
    CHECK(na > 0 && nb > 0);

    /* two jobs in turn on node A: no zygote of either is left */
    job_on(na, addr, 1);
    job_on(na, addr, 2);

    /* node B: the job's actor killed, its driver still there: the idle zygote ends */
    printf("idle zygote\n");
    int out, in;
    pid_t d = spawn_driver("idle", addr, &out, &in);
    pid_t act[1] = {0};
    CHECK_EQ_INT(read_actors(out, act, 1, "killed"), 1);
    CHECK_EQ_INT(wait_childless(nb, 30000), 0);
    CHECK(!h_gone(d)); /* the job still runs: the idle rule ended the zygote, not JobEnded */
    end_driver(d, out, in);

    /* an embedded cluster's processes */
    printf("embedded cluster\n");
    d = spawn_driver("embedded", "-", &out, &in);
    CHECK_EQ_INT(read_actors(out, act, 1, "ready"), 1);
    char buf[32];
    CHECK_STR(comm_of(act[0], buf, sizeof buf), "ct-actor");
    pid_t enode = ppid_of(act[0]);
    CHECK_STR(comm_of(enode, buf, sizeof buf), "ct-node");
    CHECK_EQ_INT(ppid_of(enode), d);
    CHECK_EQ_INT(children_named(d, "ct-head"), 1);
    CHECK_EQ_INT(children_named(d, "ct-node"), 1);
    end_driver(d, out, in);

    /* an actor that dies in create: its stderr's last lines reach the creator */
    printf("crash in create\n");
    d = spawn_driver("crash", addr, &out, &in);
    char line[1024] = "";
    CHECK_OK(h_read_line(out, line, sizeof line, 60000));
    printf("%s\n", line);
    CHECK(!strncmp(line, "crash -10001 ", 13)); /* CT_EDEAD */
    CHECK(strstr(line, "exited with status 3") != NULL);
    CHECK(strstr(line, "its stderr: crasher: loading its data | crasher: /nonexistent/shard-7.bin: "
                       "No such file or directory") != NULL);
    end_driver(d, out, in);

    CHECK(!h_gone(na) && !h_gone(nb) && !h_gone(head));
    return h_finish_actors(NULL, 0, "test_runtime_zygotes");
}
