/* tests/objectstore/os_test.h — tiny assertion and process helpers shared by the objectstore
 * tests. Assertions print both values and jump to the test's `fail:` label. Children started
 * with os_fork() die with the parent (PR_SET_PDEATHSIG) and are killed and reaped by
 * os_kill_all(), which every test calls on every exit path. */
#ifndef CT_TESTS_OS_TEST_H
#define CT_TESTS_OS_TEST_H

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct/error.h"
#include "common/auth.h"
#include "common/common.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: CHECK(%s) failed (last error: %s)\n", __FILE__, __LINE__, #c,  \
                    ct_last_error());                                                              \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        if (va_ != vb_) {                                                                          \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld vs %lld (last error: %s)\n", __FILE__,   \
                    __LINE__, #a, #b, va_, vb_, ct_last_error());                                  \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

static pid_t os_children[16];
static int os_nchildren;

/* One cluster secret for the test and the "nodes" it forks: transfer servers and data ports
 * check it (common/auth.h). */
__attribute__((constructor)) static void os_auth_init(void)
{
    ct__auth_ensure();
}

/* fork() whose child dies with the parent; the parent records it for os_kill_all. */
static inline pid_t os_fork(void)
{
    pid_t parent = getpid();
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(99);
        os_nchildren = 0;
        return 0;
    }
    if (p > 0 && os_nchildren < 16)
        os_children[os_nchildren++] = p;
    return p;
}

/* Kills (SIGKILL) and reaps one recorded child; returns its wait status or -1. */
static inline int os_kill(pid_t p)
{
    int st = -1;
    for (int i = 0; i < os_nchildren; i++) {
        if (os_children[i] != p)
            continue;
        kill(p, SIGKILL);
        waitpid(p, &st, 0);
        os_children[i] = os_children[--os_nchildren];
        break;
    }
    return st;
}

/* Waits for a recorded child to exit by itself; returns its exit code, or -1. */
static inline int os_wait(pid_t p)
{
    int st = 0;
    if (waitpid(p, &st, 0) != p)
        return -1;
    for (int i = 0; i < os_nchildren; i++)
        if (os_children[i] == p)
            os_children[i] = os_children[--os_nchildren];
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static inline void os_kill_all(void)
{
    while (os_nchildren > 0)
        os_kill(os_children[0]);
}

/* Number of /dev/shm entries whose name starts with prefix. */
static inline int os_shm_count(const char *prefix)
{
    int n = 0;
    DIR *d = opendir("/dev/shm");
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

/* Removes /dev/shm segments that earlier runs of these tests left behind when they were
 * killed (names "ct.ostest-<tag>-<pid>.arena" whose pid is gone). */
static inline void os_purge_stale(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "ct.ostest-", 10))
            continue;
        const char *dot = strrchr(e->d_name, '.'), *dash = NULL;
        for (const char *q = e->d_name; q < dot; q++)
            if (*q == '-')
                dash = q;
        int pid = dash ? atoi(dash + 1) : 0;
        if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
            char path[512];
            snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
            unlink(path);
        }
    }
    if (d)
        closedir(d);
}

/* Deterministic bytes of object `seed`: a xorshift stream. */
static inline void os_fill(void *buf, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    unsigned char *p = buf;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < n; i++)
        p[i] = (unsigned char)(x >> (8 * (i & 7)));
}

/* 1 if buf holds os_fill(seed) bytes; else prints the first difference and returns 0. */
static inline int os_verify(const void *buf, size_t n, uint64_t seed)
{
    unsigned char *want = malloc(n ? n : 1);
    if (!want)
        return 0;
    os_fill(want, n, seed);
    int ok = 1;
    if (memcmp(buf, want, n)) {
        for (size_t i = 0; i < n; i++) {
            if (((const unsigned char *)buf)[i] != want[i]) {
                fprintf(stderr, "byte %zu of %zu: got 0x%02x want 0x%02x\n", i, n,
                        ((const unsigned char *)buf)[i], want[i]);
                break;
            }
        }
        ok = 0;
    }
    free(want);
    return ok;
}

static inline void os_id(void *id20, uint64_t k)
{
    unsigned char *b = id20;
    memset(b, 0, 20);
    memcpy(b, &k, 8);
    b[19] = 0x5a;
}

/* Makes a fresh temporary directory; returns a malloc'd path. */
static inline char *os_tmpdir(const char *tag)
{
    char *p = malloc(256);
    snprintf(p, 256, "/tmp/ct-os-%s-XXXXXX", tag);
    if (!mkdtemp(p)) {
        free(p);
        return NULL;
    }
    return p;
}

/* Removes dir with its files and the files of its subdirectories (a shard's spill dir). */
static inline void os_rmtree(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[1024];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path)
                continue;
            if (unlink(path) != 0 && depth > 0)
                os_rmtree(path, depth - 1);
        }
        closedir(d);
    }
    rmdir(dir);
}

static inline void os_rmdir(char *dir)
{
    if (!dir)
        return;
    os_rmtree(dir, 1);
    free(dir);
}

#endif
