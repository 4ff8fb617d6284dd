/* common/log.c — the log sink: leveled lines on stderr with a timestamp, component and who. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/common.h"

int ct__log_level = CT_LOG_WARN;
static char log_who[64];

void ct__log_init(void)
{
    const char *s = getenv("CT_LOG_LEVEL");
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

/* Reads CT_LOG_LEVEL before main() so that every process honours it without a call. */
__attribute__((constructor)) static void log_init_at_load(void)
{
    ct__log_init();
}

void ct__log_set_who(const char *who)
{
    snprintf(log_who, sizeof log_who, "%s", who ? who : "");
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
    fprintf(stderr, "%02d:%02d:%02d.%03ld %s %s[%s]: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
            ts.tv_nsec / 1000000,
            names[level < 0   ? 0
                  : level > 3 ? 3
                              : level],
            component, log_who, msg);
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
