/* tests/harness/test_timeout_cleanup.c — a test that is killed leaves no process behind.
 * harness_timeout_sleeper (timeout_sleeper.c) starts real clusters the ways the tests do (its
 * own head and nodes, an embedded cluster, `ctup up` + `ctup submit`), each with actors, lists
 * every process it started and sleeps. It runs under ct_test_guard, as ctest runs every test
 * that starts processes (tests/CMakeLists.txt), and is killed twice:
 *   1. by ctest at its TIMEOUT: a one-test CTestTestfile.cmake run with the real ctest, which
 *      must report the timeout (15 s; when the sleeper was not ready by then, on a loaded
 *      machine or in a sanitized build, once more with 90 s);
 *   2. by a SIGKILL of the test process alone (timeout -s KILL, the OOM killer).
 * After each, every listed process must end within 10 s; one that does not is named, killed by
 * pid (only while it is still the listed process: same start time), and the test fails. The
 * killed sleeper's directories (its private one and its secret's, which each kill used to leave
 * in /tmp) are removed here; what its nodes left is purged at exit (h_kill_all).
 *   test_harness_timeout CTEST GUARD SLEEPER */
#define _GNU_SOURCE
#include <sys/stat.h>
#include "tests/cluster/ctup_test.h"

/* the sleeper's ctest TIMEOUTs: it is ready in about 3 s unloaded; when it was not yet ready at
 * the first (a loaded machine, a sanitized build), the kill is tried again with the second */
static const int sleeper_timeout_s[] = {15, 90};
#define GONE_MS 10000

typedef struct {
    pid_t pid;
    unsigned long long start;
    char comm[32];
} listed;

/* Checks the sleeper's list (path) after it was killed: waits up to GONE_MS for every listed
 * process to end; kills and names those that do not. Returns how many were left behind, or -1
 * when the list is missing or incomplete. */
static int check_gone(const char *path, const char *label)
{
    static listed p[512];
    int n = 0, heads = 0, nodes = 0, ended = 0;
    char line[256], dir[2][256] = {"", ""};
    int ndir = 0;
    FILE *f = fopen(path, "r");
    while (f && n < 512 && fgets(line, sizeof line, f)) {
        if (!strcmp(line, "end\n")) {
            ended = 1;
            break;
        }
        if (ndir < 2 && sscanf(line, "dir %255s", dir[ndir]) == 1) {
            ndir++;
            continue;
        }
        if (sscanf(line, "%d %llu %31s", &p[n].pid, &p[n].start, p[n].comm) == 3) {
            heads += !strcmp(p[n].comm, "ct-head");
            nodes += !strcmp(p[n].comm, "ct-node");
            n++;
        }
    }
    if (f)
        fclose(f);
    printf("%s: the sleeper had started %d processes (ct-head %d, ct-node %d, zygotes, actors, "
           "drivers and ctup %d)\n",
           label, n, heads, nodes, n - heads - nodes);
    /* the heads: its own, ctup's and the embedded cluster's (named ct-head too); the nodes: 2
     * each for the first two, 1 embedded. A node may be forking another zygote while the list
     * is taken: its child is "ct-node" until it execs, so there are at least 5 */
    if (!ended || heads != 3 || nodes < 5) {
        fprintf(stderr, "%s: list %s incomplete (want 3 ct-head and 5 ct-node, then end)\n", label,
                path);
        return -1;
    }
    int left = 0;
    double until = h_now_ms() + GONE_MS;
    for (int i = 0; i < n; i++) {
        while (t_start_time(p[i].pid) == p[i].start && !h_gone(p[i].pid) && h_now_ms() < until)
            usleep(20000);
        if (t_start_time(p[i].pid) == p[i].start && !h_gone(p[i].pid)) {
            fprintf(stderr, "%s: left behind: pid %d (%s); killing it\n", label, (int)p[i].pid,
                    p[i].comm);
            kill(p[i].pid, SIGKILL);
            left++;
        }
    }
    printf("%s: %d of %d still running %d s after the kill\n", label, left, n, GONE_MS / 1000);
    for (int i = 0; i < ndir; i++) /* t_init's and h_secret_make's mkdtemp patterns only */
        if (!strncmp(dir[i], "/tmp/ctup-test.", 15) ||
            !strncmp(dir[i], "/tmp/ct-test-secret.", 20)) {
            char rm[300];
            snprintf(rm, sizeof rm, "rm -rf '%.255s'", dir[i]);
            if (system(rm) != 0)
                fprintf(stderr, "%s: cannot remove %s\n", label, dir[i]);
        }
    return left;
}

/* Whether the sleeper's list at path is complete: it was ready when it was killed. */
static int list_complete(const char *path)
{
    char line[256];
    int ended = 0;
    FILE *f = fopen(path, "r");
    while (f && !ended && fgets(line, sizeof line, f))
        ended = !strcmp(line, "end\n");
    if (f)
        fclose(f);
    return ended;
}

/* 1. ctest runs the sleeper with a TIMEOUT and kills it; again with a longer one when the
 * sleeper was not ready yet (its list is written once all is up), as what it had started by
 * then cannot be listed. */
static void killed_by_ctest(const char *ctest, const char *guard, const char *sleeper)
{
    char dir[400], text[2048], pids[450];
    snprintf(dir, sizeof dir, "%s/ctest", t_dir);
    snprintf(pids, sizeof pids, "%s/pids", dir);
    mkdir(dir, 0700);
    if (chdir(dir)) {
        perror(dir);
        h_failures++;
        return;
    }
    int n_tries = (int)(sizeof sleeper_timeout_s / sizeof sleeper_timeout_s[0]);
    for (int k = 0; k < n_tries; k++) {
        snprintf(text, sizeof text,
                 "add_test(harness_timeout_sleeper \"%s\" \"%s\" \"%s\")\n"
                 "set_tests_properties(harness_timeout_sleeper PROPERTIES TIMEOUT %d)\n",
                 guard, sleeper, pids, sleeper_timeout_s[k]);
        t_write("ctest/CTestTestfile.cmake", text);
        char *argv[] = {(char *)ctest, "--output-on-failure", NULL};
        int fd = -1;
        pid_t pid = h_spawn(argv, &fd);
        char out[16384];
        size_t n = 0;
        ssize_t r;
        while (fd >= 0 && n < sizeof out - 1 && (r = read(fd, out + n, sizeof out - 1 - n)) > 0)
            n += (size_t)r;
        out[n] = 0;
        close(fd);
        int status = 0;
        waitpid(pid, &status, 0);
        h_procs[h_nprocs - 1] = 0; /* reaped: never to be signalled again */
        printf("---- ctest output (TIMEOUT %d s):\n%s----\n", sleeper_timeout_s[k], out);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0);
        CHECK(strstr(out, "(Timeout)") != NULL);
        if (list_complete(pids) || k == n_tries - 1)
            break;
        printf("killed by ctest: the sleeper was not ready at its %d s TIMEOUT; again with %d s\n",
               sleeper_timeout_s[k], sleeper_timeout_s[k + 1]);
    }
    int left = check_gone(pids, "killed by ctest");
    CHECK_EQ_INT(left, 0);
}

/* 2. The sleeper's process alone gets SIGKILL, nothing else. */
static void killed_alone(const char *guard, const char *sleeper)
{
    char pids[400];
    snprintf(pids, sizeof pids, "%s/pids2", t_dir);
    char *argv[] = {(char *)guard, (char *)sleeper, pids, NULL};
    int fd = -1;
    pid_t pid = h_spawn(argv, &fd);
    char line[512] = "";
    double until = h_now_ms() + 60000;
    while (h_now_ms() < until && strncmp(line, "ready", 5))
        if (h_read_line(fd, line, sizeof line, (int)(until - h_now_ms())))
            break;
    close(fd);
    CHECK(strncmp(line, "ready", 5) == 0);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    h_procs[h_nprocs - 1] = 0;
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    int left = check_gone(pids, "SIGKILL");
    CHECK_EQ_INT(left, 0);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_harness_timeout CTEST GUARD SLEEPER\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* in order with stderr in the log */
    t_init();
    alarm(15 + 90 + 60 + 2 * GONE_MS / 1000 + 60); /* both TIMEOUTs, the SIGKILL's wait, margin */
    killed_by_ctest(argv[1], argv[2], argv[3]);
    killed_alone(argv[2], argv[3]);
    if (h_failures)
        fprintf(stderr, "%d check(s) failed\n", h_failures);
    else
        printf("PASS\n");
    return h_failures ? 1 : 0;
}
