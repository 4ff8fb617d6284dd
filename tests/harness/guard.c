/* tests/harness/guard.c — ct_test_guard CMD [ARG...]: runs one test so that no process it
 * starts outlives it, however the test ends.
 *
 * Why: at a test's TIMEOUT ctest (3.25, kwsys) SIGSTOPs the test, SIGKILLs every process whose
 * parent chain, read from /proc, still leads to it, then SIGKILLs the test. What has been
 * re-parented away is missed: the ct-head and ct-nodes that `ctup up` detaches (setsid, their
 * shell gone) hang off init and kept running with their actors after cluster_trainer_e2e timed
 * out. A plain SIGKILL of the test (timeout -s KILL, the OOM killer) reaches even less: only
 * children started with PR_SET_PDEATHSIG die with it.
 *
 * How: the guard marks the environment with CT_TEST_GUARD=<pid>.<ns>, which every process the
 * test starts inherits (daemons that ctup detaches too), starts a watchdog outside the test's
 * process tree (ctest's kill does not reach it) and in a session of its own (nor does a
 * terminal's ^C), then execs CMD: the test keeps the guard's pid, so its exit code, signals
 * and timeout are the test's own. Once that pid is gone the watchdog gives the marked
 * processes 1 s to end by themselves, then SIGKILLs each one, by pid, until none is left, and
 * names each on stderr.
 *
 * Not covered: a process started with a cleaned environment. ct-node drops the CT_* variables
 * for its zygotes and actors; those die with their node through PR_SET_PDEATHSIG
 * (actor/node_zygote.c, actor/worker.c), which tests/harness/test_timeout_cleanup.c checks. Files a
 * killed test leaves (its /tmp directory) stay; the next ct-node on the host purges dead nodes'
 * shards. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GRACE_MS 1000 /* marked processes still dying when the test ends get this long */
#define POLL_MS 50

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* State letter and start time (field 22) of pid from /proc/PID/stat; returns 0, or -1 when
 * pid does not exist. */
static int proc_stat(pid_t pid, char *state, unsigned long long *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (!p || p[1] != ' ')
        return -1;
    *state = p[2];
    *start = 0;
    for (int field = 2; *p; p++)
        if (*p == ' ' && ++field == 22) {
            *start = strtoull(p + 1, NULL, 10);
            break;
        }
    return 0;
}

/* 1 while pid runs and is still the process that started at `start` (not a zombie). */
static int runs(pid_t pid, unsigned long long start)
{
    char st;
    unsigned long long s;
    return proc_stat(pid, &st, &s) == 0 && st != 'Z' && st != 'X' && s == start;
}

/* 1 when pid's environment holds the entry `mark` ("NAME=value"). */
static int marked(pid_t pid, const char *mark)
{
    static char buf[1 << 20]; /* /proc/PID/environ: NUL-separated entries */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0; /* gone, or another user's */
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(fd, buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    close(fd);
    buf[n] = 0;
    for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
        if (!strcmp(buf + i, mark))
            return 1;
    return 0;
}

/* Counts the live processes (zombies excluded) other than this one whose environment holds
 * mark; with kill_them, SIGKILLs each and names it on stderr. */
static int sweep(const char *mark, int kill_them)
{
    int found = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        pid_t pid = (pid_t)atoi(de->d_name);
        char st;
        unsigned long long start;
        if (pid <= 0 || pid == getpid() || !marked(pid, mark) || proc_stat(pid, &st, &start) ||
            st == 'Z' || st == 'X')
            continue;
        found++;
        if (kill_them) {
            char path[64], comm[64] = "";
            snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
            FILE *f = fopen(path, "r");
            if (f) {
                if (!fgets(comm, sizeof comm, f))
                    comm[0] = 0;
                fclose(f);
            }
            comm[strcspn(comm, "\n")] = 0;
            fprintf(stderr, "ct_test_guard: SIGKILL pid %d (%s), left running by the test\n",
                    (int)pid, comm);
            kill(pid, SIGKILL);
        }
    }
    if (d)
        closedir(d);
    return found;
}

/* The watchdog: waits for the test (pid, start) to be gone, then for the marked processes. */
static void watchdog(pid_t pid, unsigned long long start, const char *mark)
{
    while (runs(pid, start))
        usleep(POLL_MS * 1000);
    double until = now_ms() + GRACE_MS;
    while (sweep(mark, 0) && now_ms() < until)
        usleep(POLL_MS * 1000);
    /* a process being started as the sweep reads /proc is caught by the next one */
    for (int i = 0; i < 100 && sweep(mark, 1); i++)
        usleep(POLL_MS * 1000);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: ct_test_guard CMD [ARG...]\n");
        return 2;
    }
    pid_t self = getpid();
    char state;
    unsigned long long start;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char value[64], mark[96];
    snprintf(value, sizeof value, "%d.%lld%09ld", (int)self, (long long)ts.tv_sec, ts.tv_nsec);
    snprintf(mark, sizeof mark, "CT_TEST_GUARD=%s", value);
    int ready[2];
    if (proc_stat(self, &state, &start) || setenv("CT_TEST_GUARD", value, 1) ||
        pipe2(ready, O_CLOEXEC)) {
        perror("ct_test_guard");
        return 2;
    }
    fflush(NULL);
    pid_t mid = fork();
    if (mid == 0) {
        /* a session of its own, then one more fork: the watchdog's parent exits at once, so
         * it is re-parented away from the test and no kill meant for the test finds it */
        setsid();
        if (fork() != 0)
            _exit(0);
        signal(SIGPIPE, SIG_IGN); /* ctest may have closed the output pipe */
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1); /* stderr stays: the names of what it kills belong in the test's log */
        close(ready[0]);
        if (write(ready[1], "1", 1) != 1)
            _exit(1);
        close(ready[1]);
        watchdog(self, start, mark);
        _exit(0);
    }
    close(ready[1]);
    char c;
    if (mid < 0 || waitpid(mid, NULL, 0) != mid || read(ready[0], &c, 1) != 1) {
        fprintf(stderr, "ct_test_guard: cannot start the watchdog\n");
        return 2;
    }
    close(ready[0]);
    execvp(argv[1], argv + 1);
    fprintf(stderr, "ct_test_guard: cannot run %s\n", argv[1]);
    return 127;
}
