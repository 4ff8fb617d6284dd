/* tests/runtime/test_embed_cleanup.c — an embedded cluster (ct_init(NULL)) cleans up after its
 * driver however the driver ends: SIGINT (to the driver alone, and to its process group as a
 * terminal's Ctrl-C sends it), SIGTERM, a normal exit without ct_shutdown, and SIGKILL. Each case
 * runs this executable again as a driver ("driver MODE": ct_init(NULL), one actor, one object put,
 * so the node has a shard, a directory and a zygote), collects every process of that run (the
 * driver's descendants: head, node, zygote, actor), ends the driver, and checks that
 * - the driver's wait status is the signal's (a library does not swallow it) or exit 0;
 * - no process of the run is left;
 * - /dev/shm and /tmp hold no entry named after a pid of the run (the node's shard
 *   ct.node.PID.arena and directory ct-node.PID.XXXXXX among them). Only names carrying this
 *   run's pids are looked at: other runs' files on the machine are neither judged nor touched.
 * This test never purges before it checks (the harness's exit purge comes after). */
#include "harness.h"
#include <dirent.h>
#include "classes.h"
#include "ct/ct.h"

#define MAX_RUN 64

/* The driver: an embedded cluster with an actor and an object; "ready" on stdout, then it waits
 * on stdin: MODE "exit" returns from main when stdin has a line (no ct_shutdown), the others
 * wait for the signal the test sends. */
static int driver(const char *mode)
{
    if (ct_init(&(ct_init_opts){.cpus = 2, .dead_after_ms = 20000})) {
        fprintf(stderr, "driver: ct_init: %s\n", ct_last_error());
        return 1;
    }
    ct_actor *a = NULL;
    long one = 1, *v = NULL;
    size_t n = 0;
    if (ct_actor_create("Counter", NULL, NULL, 0, &a) ||
        ct_actor_call(a, "add", &one, sizeof one, (void **)&v, &n, 30000)) {
        fprintf(stderr, "driver: actor: %s\n", ct_last_error());
        return 1;
    }
    free(v);
    ct_object_id id;
    char bytes[4096] = {1};
    if (ct_put(bytes, sizeof bytes, NULL, &id)) {
        fprintf(stderr, "driver: ct_put: %s\n", ct_last_error());
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!strcmp(mode, "exit")) {
        if (!fgets(line, sizeof line, stdin))
            return 3;
        return 0; /* exit(0) from main: no ct_shutdown */
    }
    for (;;)
        pause();
}

/* Appends pid's descendants (all its threads' children, recursively) to run. */
static void descendants(pid_t pid, pid_t *run, int *n)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char cp[320];
        snprintf(cp, sizeof cp, "/proc/%d/task/%s/children", (int)pid, de->d_name);
        FILE *f = fopen(cp, "r");
        int c;
        while (f && fscanf(f, "%d", &c) == 1) {
            bool seen = false;
            for (int i = 0; i < *n; i++)
                seen |= run[i] == c;
            if (!seen && *n < MAX_RUN) {
                run[(*n)++] = c;
                descendants(c, run, n);
            }
        }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
}

/* Whether name carries one of the run's pids as a whole number (ct.node.123.arena, ct-node.123.x).
 */
static bool names_run_pid(const char *name, const pid_t *run, int n)
{
    for (const char *p = name; *p;) {
        if (*p < '0' || *p > '9') {
            p++;
            continue;
        }
        char *end;
        long v = strtol(p, &end, 10);
        for (int i = 0; i < n; i++)
            if (v == run[i])
                return true;
        p = end;
    }
    return false;
}

/* Entries of dir starting with "ct" that name a pid of the run; each printed. */
static int leaked_in(const char *dir, const pid_t *run, int n)
{
    int k = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (!strncmp(de->d_name, "ct", 2) && names_run_pid(de->d_name, run, n)) {
            fprintf(stderr, "left behind: %s/%s\n", dir, de->d_name);
            k++;
        }
    if (d)
        closedir(d);
    return k;
}

/* One run: a driver ended by sig (0: it exits normally without ct_shutdown); to its whole
 * process group when group (a terminal's Ctrl-C: head, node, zygote and actor get it too). */
static void run_case(int sig, bool group)
{
    const char *mode = sig == 0 ? "exit" : "signal";
    fprintf(stderr, "== driver ended by %s%s\n", sig ? strsignal(sig) : "exit without ct_shutdown",
            group ? ", sent to its process group" : "");
    char self[PATH_MAX];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    self[sl > 0 ? sl : 0] = 0;
    int out[2], in[2];
    if (pipe2(out, O_CLOEXEC) || pipe2(in, O_CLOEXEC)) {
        h_failures++;
        return;
    }
    pid_t me = getpid();
    pid_t drv = fork();
    if (drv == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* dies with the test */
        if (getppid() != me)
            _exit(1);
        if (group)
            setpgid(0, 0);
        dup2(out[1], 1);
        dup2(in[0], 0);
        /* a driver with the default dispositions, as a program that installed no handler */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execl(self, self, "driver", mode, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(in[0]);
    if (drv > 0 && h_nprocs < H_MAX_PROCS)
        h_procs[h_nprocs++] = drv;
    char line[64] = "";
    bool ready =
        drv > 0 && h_read_line(out[0], line, sizeof line, 60000) == 0 && !strcmp(line, "ready");
    CHECK(ready);
    pid_t run[MAX_RUN];
    int n = 0;
    run[n++] = drv;
    descendants(drv, run, &n);
    /* head, node, a zygote and the actor at least */
    CHECK(n >= 5);
    fprintf(stderr, "run's pids:");
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %d", (int)run[i]);
    fprintf(stderr, "\n");
    if (sig)
        kill(group ? -drv : drv, sig);
    else if (write(in[1], "go\n", 3) != 3)
        h_failures++;
    int st = h_reap(drv, 0, 30000);
    if (sig) {
        CHECK(st != -1 && WIFSIGNALED(st));
        CHECK_EQ_INT(st != -1 && WIFSIGNALED(st) ? WTERMSIG(st) : -1, sig);
    } else {
        CHECK(st != -1 && WIFEXITED(st));
        CHECK_EQ_INT(st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1, 0);
    }
    /* every process of the run ends (a bound for a loaded machine, not a timing) */
    for (int i = 1; i < n; i++)
        if (!h_wait_gone(run[i], 60000)) {
            fprintf(stderr, "pid %d outlived its driver\n", (int)run[i]);
            h_failures++;
        }
    CHECK_EQ_INT(leaked_in("/dev/shm", run, n), 0);
    CHECK_EQ_INT(leaked_in("/tmp", run, n), 0);
    close(out[0]);
    close(in[1]);
}

int main(int argc, char **argv)
{
    register_test_classes();
    ct_serve_if_worker();
    if (argc == 3 && !strcmp(argv[1], "driver"))
        return driver(argv[2]);
    h_init();
    alarm(400);
    unsetenv("CT_ADDRESS");
    run_case(SIGINT, false);
    run_case(SIGINT, true);
    run_case(SIGTERM, false);
    run_case(0, false);
    run_case(SIGKILL, false);
    if (h_failures)
        fprintf(stderr, "test_embed_cleanup: %d failures\n", h_failures);
    return h_failures ? 1 : 0;
}
