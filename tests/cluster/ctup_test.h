/* tests/cluster/ctup_test.h — helpers for the tests that run the ctup binary: a private
 * temporary directory (CT_STATE_DIR inside it), running `ctup ...` with its exit code and
 * output, and a cleanup that SIGKILLs every process any state file there records (also when a
 * test fails or is killed: atexit + fatal signals), then removes the directory.
 * Builds on tests/runtime/harness.h (CHECK macros, h_bin, h_gone). Header-only. */
#ifndef CT_TESTS_CLUSTER_CTUP_TEST_H
#define CT_TESTS_CLUSTER_CTUP_TEST_H

#define _GNU_SOURCE
#include <dirent.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stdbool.h>
#include "ct/error.h"
#include "tests/runtime/harness.h"
#include "cluster/cluster.h"

static char t_dir[256];   /* the test's private directory */
static char t_state[300]; /* CT_STATE_DIR */
static pid_t t_extra[32]; /* pids the test learnt of outside state files */
static int t_nextra;

/* Kills pid when it still runs (not a zombie). */
static void t_kill(pid_t pid)
{
    if (pid > 0 && !h_gone(pid))
        kill(pid, SIGKILL);
}

/* SIGKILLs every process recorded in a state file under t_state, and t_extra. */
static void t_kill_clusters(void)
{
    if (getpid() != h_owner || !t_state[0])
        return;
    DIR *d = opendir(t_state);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 7 || strcmp(de->d_name + n - 6, ".state"))
            continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(n - 6), de->d_name);
        ct_cluster_state st;
        if (ct_cluster_state_read(name, &st) == 0)
            for (int i = 0; i < st.n_procs; i++)
                t_kill(st.procs[i].pid);
    }
    if (d)
        closedir(d);
    for (int i = 0; i < t_nextra; i++)
        t_kill(t_extra[i]);
}

static void t_cleanup(void)
{
    if (getpid() != h_owner || !t_dir[0])
        return;
    t_kill_clusters();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", t_dir);
    t_dir[0] = 0;
}

static void t_on_signal(int sig)
{
    t_cleanup();
    h_on_signal(sig);
}

/* h_init, a private directory, CT_STATE_DIR in it, cleanup at exit and on fatal signals. */
static void t_init(void)
{
    h_init();
    snprintf(t_dir, sizeof t_dir, "/tmp/ctup-test.XXXXXX");
    if (!mkdtemp(t_dir)) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(t_state, sizeof t_state, "%s/state", t_dir);
    setenv("CT_STATE_DIR", t_state, 1);
    atexit(t_cleanup); /* runs before h_kill_all */
    int sigs[] = {SIGSEGV, SIGABRT, SIGTERM, SIGINT, SIGALRM};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], t_on_signal);
}

/* Writes text to t_dir/name; returns the path (static buffer per call slot). */
static const char *t_write(const char *name, const char *text)
{
    static char paths[8][400];
    static int k;
    char *p = paths[k++ % 8];
    snprintf(p, 400, "%s/%s", t_dir, name);
    FILE *f = fopen(p, "w");
    if (!f || fputs(text, f) < 0) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(1);
    }
    fclose(f);
    return p;
}

/* Runs `ctup ARGS` (a shell fragment), stderr folded in; returns the exit status, output in
 * *out (malloc'd). */
static int t_ctup(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3), unused));
static int t_ctup(char **out, const char *fmt, ...)
{
    char args[2048], cmd[3000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s %s 2>&1; echo \"rc=$?\"", h_bin("ctup"), args);
    *out = h_capture(cmd);
    const char *rc = *out ? strstr(*out, "rc=") : NULL;
    while (rc && strstr(rc + 1, "rc="))
        rc = strstr(rc + 1, "rc=");
    return rc ? atoi(rc + 3) : -1;
}

/* Runs ctup; checks its exit code and that its output has every needle (NULL-ended). */
#define T_EXPECT(rc_want, needles, ...)                                                            \
    do {                                                                                           \
        char *_out = NULL;                                                                         \
        int _rc = t_ctup(&_out, __VA_ARGS__);                                                      \
        const char *const *_n = (needles);                                                         \
        bool _ok = _rc == (rc_want);                                                               \
        for (int _i = 0; _n && _n[_i] && _ok; _i++)                                                \
            _ok = _out && strstr(_out, _n[_i]);                                                    \
        if (!_ok) {                                                                                \
            fprintf(stderr, "%s:%d: ctup exit %d (want %d); want in output:", __FILE__, __LINE__,  \
                    _rc, (rc_want));                                                               \
            for (int _i = 0; _n && _n[_i]; _i++)                                                   \
                fprintf(stderr, " '%s'", _n[_i]);                                                  \
            fprintf(stderr, "\n---- output:\n%s----\n", _out ? _out : "");                         \
            h_failures++;                                                                          \
        }                                                                                          \
        free(_out);                                                                                \
    } while (0)
#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Start time of pid (field 22 of /proc/PID/stat), 0 when gone. */
__attribute__((unused)) static unsigned long long t_start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long long v = 0;
    for (int field = 2; p && *p && field < 22; p++)
        if (*p == ' ' && ++field == 22)
            v = strtoull(p + 1, NULL, 10);
    return v;
}

/* /proc/PID/comm of pid, "" when gone. */
__attribute__((unused)) static const char *t_comm(pid_t pid)
{
    static char buf[64];
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f))
            buf[0] = 0;
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
    return buf;
}

#endif
