/* tests/collective/harness.h — multi-process helpers for the collective tests: fork ranks
 * (each dies with the test through PR_SET_PDEATHSIG), wait for them with a deadline, kill and
 * reap every one by pid on failure, a scratch rendezvous directory, and CHECK macros that print
 * both values. Header-only, test code only. */
#ifndef CT_TEST_COLLECTIVE_HARNESS_H
#define CT_TEST_COLLECTIVE_HARNESS_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "ct/collective.h"
#include "ct/error.h"

int ct__auth_ensure(void); /* common/auth.h */

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define CHECK_RC(expr)                                                                             \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != 0) {                                                                            \
            fprintf(stderr, "%s:%d: %s = %d (%s): %s\n", __FILE__, __LINE__, #expr, rc_,           \
                    ct_strerror(rc_), ct_last_error());                                            \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static inline long long t_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char t_rdv_dir[256];

/* a fresh rendezvous directory under /tmp; removed by t_rdv_cleanup() */
static inline int t_rdv_init(void)
{
    snprintf(t_rdv_dir, sizeof t_rdv_dir, "/tmp/ct-coll-test-XXXXXX");
    return mkdtemp(t_rdv_dir) ? 0 : -1;
}

static inline void t_rdv_cleanup(void)
{
    char cmd[320];
    if (!t_rdv_dir[0])
        return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t_rdv_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", t_rdv_dir);
}

typedef int (*t_rank_fn)(int rank, int world, void *arg);

/* forks world children running fn(rank, world, arg); returns 0 and fills pids */
static inline int t_spawn(int world, t_rank_fn fn, void *arg, pid_t *pids)
{
    pid_t parent = getpid();
    ct__auth_ensure(); /* one secret for all ranks: the TCP ring checks it (common/auth.h) */
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < world; r++) {
        pid_t p = fork();
        if (p < 0) {
            perror("fork");
            for (int q = 0; q < r; q++) {
                kill(pids[q], SIGKILL);
                waitpid(pids[q], NULL, 0);
            }
            return -1;
        }
        if (p == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(99);
            int rc = fn(r, world, arg);
            fflush(stderr);
            _exit(rc == 0 ? 0 : 1);
        }
        pids[r] = p;
    }
    return 0;
}

/* kills (SIGKILL) and reaps every child still in pids (pid > 0), then clears them */
static inline void t_kill_all(int n, pid_t *pids)
{
    for (int r = 0; r < n; r++)
        if (pids[r] > 0) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], NULL, 0);
            pids[r] = 0;
        }
}

/* waits for every child until timeout_ms; returns 0 when all exited 0. On a failed child or
 * the timeout, kills and reaps the rest. skip (or -1): a rank whose exit is not checked. */
static inline int t_wait_all(int n, pid_t *pids, int timeout_ms, const char *label)
{
    long long end = t_now_ms() + timeout_ms;
    int left = 0, bad = 0;
    for (int r = 0; r < n; r++)
        left += pids[r] > 0;
    while (left > 0 && !bad) {
        for (int r = 0; r < n; r++) {
            if (pids[r] <= 0)
                continue;
            int st;
            pid_t w = waitpid(pids[r], &st, WNOHANG);
            if (w == pids[r]) {
                pids[r] = 0;
                left--;
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                    fprintf(stderr, "%s: rank %d failed (%s %d)\n", label, r,
                            WIFEXITED(st) ? "exit" : "signal",
                            WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                    bad = 1;
                }
            }
        }
        if (left > 0 && t_now_ms() > end) {
            fprintf(stderr, "%s: timed out after %d ms with %d rank(s) running\n", label,
                    timeout_ms, left);
            bad = 1;
        }
        if (left > 0 && !bad)
            usleep(1000);
    }
    t_kill_all(n, pids);
    return bad;
}

static inline int t_run(int world, t_rank_fn fn, void *arg, int timeout_ms, const char *label)
{
    pid_t pids[64] = {0};
    if (t_spawn(world, fn, arg, pids) < 0)
        return 1;
    return t_wait_all(world, pids, timeout_ms, label);
}

#endif
