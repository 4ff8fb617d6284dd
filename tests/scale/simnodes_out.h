/* tests/scale/simnodes_out.h — what the scale tests read of ct-simnodes: the counters of its
 * last output line ("name=N") and its resident memory. */
#ifndef CT_TESTS_SCALE_SIMNODES_OUT_H
#define CT_TESTS_SCALE_SIMNODES_OUT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* A counter "name=N" of ct-simnodes' last line; -1 when absent. */
static inline long counter(const char *line, const char *name)
{
    char key[48];
    snprintf(key, sizeof key, " %s=", name);
    const char *p = strstr(line, key);
    return p ? atol(p + strlen(key)) : -1;
}

/* pid's resident memory (VmRSS) in kB, -1 unreadable. */
static inline long rss_kb_of(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

#endif
