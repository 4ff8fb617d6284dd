/* tests/runtime/harness.h — helpers for the runtime's multi-process tests: start ct-head /
 * ct-node from the build's bin/, read their output, assert with both values printed, and kill
 * and reap every process started, by pid, also when a test fails (atexit + fatal signals).
 * Header-only: each test is one executable. */
#ifndef CT_TESTS_RUNTIME_HARNESS_H
#define CT_TESTS_RUNTIME_HARNESS_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ct/ct.h" /* h_finish_actors */

static int h_failures;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            h_failures++;                                                                          \
        }                                                                                          \
    } while (0)
#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long _a = (long long)(a), _b = (long long)(b);                                        \
        if (_a != _b) {                                                                            \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld vs %lld\n", __FILE__, __LINE__, #a, #b,  \
                    _a, _b);                                                                       \
            h_failures++;                                                                          \
        }                                                                                          \
    } while (0)
#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *_a = (a), *_b = (b);                                                           \
        if (strcmp(_a ? _a : "(null)", _b ? _b : "(null)")) {                                      \
            fprintf(stderr, "%s:%d: %s == %s failed: '%s' vs '%s'\n", __FILE__, __LINE__, #a, #b,  \
                    _a, _b);                                                                       \
            h_failures++;                                                                          \
        }                                                                                          \
    } while (0)
#define CHECK_OK(call)                                                                             \
    do {                                                                                           \
        int _rc = (call);                                                                          \
        if (_rc) {                                                                                 \
            fprintf(stderr, "%s:%d: %s returned %d (%s): %s\n", __FILE__, __LINE__, #call, _rc,    \
                    ct_strerror(_rc), ct_last_error());                                            \
            h_failures++;                                                                          \
        }                                                                                          \
    } while (0)

#define H_MAX_PROCS 64
static pid_t h_procs[H_MAX_PROCS];
static int h_nprocs;
static pid_t h_owner;

__attribute__((unused)) static double h_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Whether id has the form of the ids the head gives nodes: "node-" and 12 lower-case hex
 * digits (random, nodes.c's node_id_new). */
__attribute__((unused)) static bool h_is_node_id(const char *id)
{
    if (!id || strncmp(id, "node-", 5) || strlen(id) != 5 + 12)
        return false;
    for (const char *c = id + 5; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return false;
    return true;
}

/* A line of text (up to its newline, or the end) that starts with prefix: a pointer into text,
 * or NULL. For rows of `ctup status` tables. */
__attribute__((unused)) static const char *h_line_starting(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, prefix, n))
            return l;
    return NULL;
}

/* actor/objnode.c: removes the store shards and /tmp/ct-node.<pid>.* dirs of dead nodes. */
void ct__objnode_purge_leftovers(void);

/* Whether node pid's default directory (/tmp/ct-node.<pid>.XXXXXX, made by mkdtemp; or the
 * older /tmp/ct-node.<pid>) still exists. */
__attribute__((unused)) static bool h_node_dir_exists(pid_t pid)
{
    char pat[64];
    snprintf(pat, sizeof pat, "/tmp/ct-node.%d.*", (int)pid);
    glob_t g;
    bool found = glob(pat, GLOB_NOSORT, NULL, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    snprintf(pat, sizeof pat, "/tmp/ct-node.%d", (int)pid);
    return found || access(pat, F_OK) == 0;
}

/* The test's cluster secret (common/auth.h): a file in a private directory, made by h_init and
 * given to every process through CT_SECRET_FILE; removed at exit. */
int ct__secret_file_create(const char *path);
int ct__auth_load(const char *path);
static char h_secret_dir[64], h_secret_file[96];

__attribute__((unused)) static void h_secret_remove(void)
{
    if (getpid() != h_owner)
        return;
    if (h_secret_file[0])
        unlink(h_secret_file);
    if (h_secret_dir[0])
        rmdir(h_secret_dir);
    h_secret_file[0] = h_secret_dir[0] = 0;
}

__attribute__((unused)) static void h_secret_make(void)
{
    snprintf(h_secret_dir, sizeof h_secret_dir, "/tmp/ct-test-secret.XXXXXX");
    if (!mkdtemp(h_secret_dir)) {
        h_secret_dir[0] = 0;
        return;
    }
    snprintf(h_secret_file, sizeof h_secret_file, "%s/secret", h_secret_dir);
    if (ct__secret_file_create(h_secret_file) == 0 && ct__auth_load(h_secret_file) == 0)
        setenv("CT_SECRET_FILE", h_secret_file, 1);
}

/* Kills and reaps every process this test started (those still running). Async-signal-safe
 * (kill, waitpid): the signal handler below calls it. */
__attribute__((unused)) static void h_kill_children(void)
{
    if (getpid() != h_owner)
        return;
    for (int i = 0; i < h_nprocs; i++)
        if (h_procs[i] > 0) {
            kill(h_procs[i], SIGKILL);
            waitpid(h_procs[i], NULL, 0);
            h_procs[i] = 0;
        }
}

/* At exit: kills the test's processes, then removes what killed nodes left in /dev/shm and
 * /tmp (that purge reads directories and allocates, so the signal handler leaves it to the
 * next ct-node on the host, which purges dead nodes' leftovers as it starts). */
__attribute__((unused)) static void h_kill_all(void)
{
    if (getpid() != h_owner)
        return;
    h_kill_children();
    ct__objnode_purge_leftovers();
}

/* A crash, a kill or the alarm: only async-signal-safe calls, then the signal's own end. */
__attribute__((unused)) static void h_on_signal(int sig)
{
    h_kill_children();
    h_secret_remove();
    signal(sig, SIG_DFL);
    raise(sig);
}

__attribute__((unused)) static void h_init(void)
{
    h_owner = getpid();
    atexit(h_secret_remove); /* runs after h_kill_all (atexit order is reversed) */
    atexit(h_kill_all);
    h_secret_make();
    signal(SIGSEGV, h_on_signal);
    signal(SIGABRT, h_on_signal);
    signal(SIGTERM, h_on_signal);
    signal(SIGINT, h_on_signal);
    signal(SIGPIPE, SIG_IGN);
    alarm(120); /* a hung test still cleans up (SIGALRM -> handler) */
    signal(SIGALRM, h_on_signal);
}

/* Path of a program next to this test binary (build/bin). */
static const char *h_bin(const char *name)
{
    static char out[8][PATH_MAX];
    static int k;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    char *p = out[k++ % 8];
    snprintf(p, PATH_MAX, "%s/%s", dirname(self), name);
    return p;
}

/* Starts argv with stdout on a pipe (*out_fd, or /dev/null when out_fd is NULL); the child
 * dies with this process. Returns the pid. */
__attribute__((unused)) static pid_t h_spawn(char *const argv[], int *out_fd)
{
    int p[2] = {-1, -1};
    if (out_fd && pipe2(p, O_CLOEXEC))
        return -1;
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me)
            _exit(1);
        if (out_fd)
            dup2(p[1], 1);
        execv(argv[0], argv);
        _exit(127);
    }
    if (out_fd) {
        close(p[1]);
        *out_fd = p[0];
    }
    if (pid > 0 && h_nprocs < H_MAX_PROCS)
        h_procs[h_nprocs++] = pid;
    return pid;
}

__attribute__((unused)) static int h_read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t n = 0;
    double until = h_now_ms() + timeout_ms;
    while (n + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)(until - h_now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return -1;
        if (read(fd, buf + n, 1) != 1)
            return -1;
        if (buf[n] == '\n')
            break;
        n++;
    }
    buf[n] = 0;
    return 0;
}

/* Starts ct-head with argv (argv[0] its path) and reads its first line, "listening on ADDR",
 * into addr. Its pid, -1 when it did not start (said on stderr). */
__attribute__((unused)) static pid_t h_spawn_head(char *const argv[], char *addr, size_t cap)
{
    int fd = -1;
    pid_t pid = h_spawn(argv, &fd);
    char line[120];
    if (pid < 0 || h_read_line(fd, line, sizeof line, 10000) ||
        strncmp(line, "listening on ", 13)) {
        fprintf(stderr, "ct-head did not start:");
        for (int i = 0; argv[i]; i++)
            fprintf(stderr, " %s", argv[i]);
        fprintf(stderr, "\n");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    snprintf(addr, cap, "%s", line + 13);
    return pid;
}

/* Starts ct-head on port ("0": any) with heartbeat and dead-after times (ms, as strings) and,
 * when state_dir is not NULL, --state-dir state_dir; fills addr ("127.0.0.1:P"). Its pid, -1
 * when it did not start. */
__attribute__((unused)) static pid_t h_start_head_on(const char *port, char *addr, size_t cap,
                                                     const char *hb, const char *dead,
                                                     const char *state_dir)
{
    char *argv[] = {
        (char *)h_bin("ct-head"), "--port",     (char *)port,  "--heartbeat-ms",  (char *)hb,
        "--dead-after-ms",        (char *)dead, "--state-dir", (char *)state_dir, NULL};
    if (!state_dir)
        argv[7] = NULL;
    return h_spawn_head(argv, addr, cap);
}

/* Starts ct-head on an ephemeral port; fills addr ("127.0.0.1:P"). */
__attribute__((unused)) static pid_t h_start_head(char *addr, size_t cap, const char *hb,
                                                  const char *dead)
{
    return h_start_head_on("0", addr, cap, hb, dead, NULL);
}

/* Starts ct-node with extra args (NULL-terminated list). */
__attribute__((unused)) static pid_t h_start_node(const char *addr, const char *a1, const char *a2,
                                                  const char *a3, const char *a4, const char *a5,
                                                  const char *a6)
{
    char *argv[] = {(char *)h_bin("ct-node"),
                    "--head",
                    (char *)addr,
                    (char *)a1,
                    (char *)a2,
                    (char *)a3,
                    (char *)a4,
                    (char *)a5,
                    (char *)a6,
                    NULL};
    return h_spawn(argv, NULL);
}

/* 1 when pid no longer runs (gone or a zombie). */
__attribute__((unused)) static int h_gone(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* Waits up to timeout_ms for pid to be gone; 1 if gone. */
__attribute__((unused)) static int h_wait_gone(pid_t pid, int timeout_ms)
{
    double until = h_now_ms() + timeout_ms;
    while (!h_gone(pid)) {
        if (h_now_ms() > until)
            return 0;
        usleep(5000);
    }
    return 1;
}

/* Sends sig to child pid (0: none), waits up to timeout_ms for it to exit, reaps it and
 * forgets it (h_procs); its wait status, or -1 when it still runs (h_kill_all ends it). */
__attribute__((unused)) static int h_reap(pid_t pid, int sig, int timeout_ms)
{
    if (sig)
        kill(pid, sig);
    double until = h_now_ms() + timeout_ms;
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (h_now_ms() > until)
            return -1;
        usleep(10000);
    }
    for (int i = 0; i < h_nprocs; i++)
        if (h_procs[i] == pid)
            h_procs[i] = 0;
    return st;
}

/* Counts live processes (zombies excluded) other than this one that run this test's own
 * executable: zygotes and actors are this executable started again. Waits up to timeout_ms
 * for them to go; returns how many are left (and names them). */
__attribute__((unused)) static int h_leftovers(int timeout_ms)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    double until = h_now_ms() + timeout_ms;
    for (;;) {
        int left = 0;
        FILE *ls = popen("ls /proc", "r");
        char name[64];
        while (ls && fscanf(ls, "%63s", name) == 1) {
            int pid = atoi(name);
            if (pid <= 0 || pid == getpid())
                continue;
            char path[96], exe[PATH_MAX];
            snprintf(path, sizeof path, "/proc/%d/exe", pid);
            ssize_t k = readlink(path, exe, sizeof exe - 1);
            if (k <= 0)
                continue;
            exe[k] = 0;
            if (!strcmp(exe, self) && !h_gone(pid)) {
                left++;
                if (timeout_ms > 0 && h_now_ms() > until)
                    fprintf(stderr, "left behind: pid %d (%s)\n", pid, exe);
            }
        }
        if (ls)
            pclose(ls);
        if (!left || h_now_ms() > until)
            return left;
        usleep(20000);
    }
}

/* An actor of class cls that needs one unit of the custom resource res (on the node that has
 * it), waiting up to timeout_ms; NULL (a failure counted) when it could not be made. */
__attribute__((unused)) static ct_actor *h_actor_with(const char *cls, const char *res,
                                                      int timeout_ms)
{
    ct_resources r = {.bundle = -1, .timeout_ms = timeout_ms};
    r.custom[0].name = res;
    r.custom[0].amount = 1;
    ct_actor *a = NULL;
    CHECK_OK(ct_actor_create(cls, &r, NULL, 0, &a));
    return a;
}

/* The end of a test that made actors: releases the n actors (NULL ones skipped), shuts the
 * client down, kills every process the test started, checks that each actor process and every
 * other copy of this executable is gone, and returns the exit code (1 after any failure). */
__attribute__((unused)) static int h_finish_actors(ct_actor **a, int n, const char *test)
{
    pid_t pids[64];
    int np = 0;
    for (int i = 0; i < n; i++) {
        if (a[i] && np < 64)
            pids[np++] = ct_actor_pid(a[i]);
        ct_actor_release(&a[i]);
    }
    ct_shutdown();
    h_kill_all();
    for (int i = 0; i < np; i++)
        if (!h_wait_gone(pids[i], 3000)) {
            fprintf(stderr, "actor pid %d still running\n", (int)pids[i]);
            h_failures++;
        }
    int left = h_leftovers(3000);
    if (left) {
        fprintf(stderr, "%s: %d process(es) left over\n", test, left);
        h_failures++;
    }
    if (h_failures)
        fprintf(stderr, "%s: %d failure(s)\n", test, h_failures);
    return h_failures ? 1 : 0;
}

/* Runs a command, returns its stdout (malloc'd). */
__attribute__((unused)) static char *h_capture(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - 1 - n, p)) > 0)
        n += r;
    buf[n] = 0;
    pclose(p);
    return buf;
}

#endif
