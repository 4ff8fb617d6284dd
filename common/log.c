/* common/log.c — the log sink: leveled lines on stderr with a timestamp, component and who. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/common.h"
#include "common/env.h"

int ct__log_level = CT_LOG_WARN;
/* The process's "who" (node id, store name, ...): threads of an embedded cluster set it while
 * others log, so it is read and written under log_mu. */
static char log_who[64];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

void ct__log_init(void)
{
    const char *s = ct__env(CT__ENV_LOG_LEVEL);
    if (!s)
        return;
    if (!strcmp(s, "error"))
        ct__log_level = CT_LOG_ERROR;
    else if (!strcmp(s, "warn"))
        ct__log_level = CT_LOG_WARN;
    else if (!strcmp(s, "info"))
        ct__log_level = CT_LOG_INFO;
    else if (!strcmp(s, "debug"))
        ct__log_level = CT_LOG_DEBUG;
}

/* fork() while another thread holds log_mu must not leave it held in the child (the embedded
 * head and node are forked and log): it is taken around fork and released on both sides. */
static void log_lock(void)
{
    pthread_mutex_lock(&log_mu);
}

static void log_unlock(void)
{
    pthread_mutex_unlock(&log_mu);
}

/* Reads CT_LOG_LEVEL before main() so that every process honours it without a call. */
__attribute__((constructor)) static void log_init_at_load(void)
{
    ct__log_init();
    pthread_atfork(log_lock, log_unlock, log_unlock);
}

void ct__log_set_who(const char *who)
{
    pthread_mutex_lock(&log_mu);
    snprintf(log_who, sizeof log_who, "%s", who ? who : "");
    pthread_mutex_unlock(&log_mu);
}

void ct__log(int level, const char *component, const char *fmt, ...)
{
    static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char who[sizeof log_who];
    pthread_mutex_lock(&log_mu);
    memcpy(who, log_who, sizeof who);
    pthread_mutex_unlock(&log_mu);
    fprintf(stderr, "%02d:%02d:%02d.%03ld %s %s[%s]: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
            ts.tv_nsec / 1000000,
            names[level < 0   ? 0
                  : level > 3 ? 3
                              : level],
            component, who, msg);
}

int64_t ct__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t ct__now_ms(void)
{
    return ct__now_ns() / 1000000;
}
