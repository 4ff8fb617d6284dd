/* fuzz/replay_main.c — a main for the fuzz targets where libFuzzer is absent (gcc builds): runs
 * LLVMFuzzerTestOneInput over every file of a corpus directory, then over deterministic
 * pseudo-random mutations of them (byte flips, interesting bytes, truncations, insertions,
 * splices) until a count or a time cap. ctest runs it as fuzz_<target>, so `make test` replays
 * the seed corpus and every crash ever found (they are kept in the corpus).
 *
 *   replay CORPUS_DIR [SECONDS [MUTATIONS]]     (defaults 20 s, 5000 mutations)
 *
 * A crash kills the process (the test fails); the last line printed before it names the file,
 * or the mutation to within 500 (the sequence is the same on every run). Not a fuzzer: no
 * coverage feedback. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX_FILES 4096
#define REPLAY_MAX_INPUT (1 << 20)

typedef struct input {
    uint8_t *b;
    size_t n;
} input;

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Reads path whole; 0, or -1 (skipped) when unreadable or larger than REPLAY_MAX_INPUT. */
static int read_file(const char *path, input *in)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    in->b = malloc(REPLAY_MAX_INPUT);
    in->n = in->b ? fread(in->b, 1, REPLAY_MAX_INPUT, f) : 0;
    int bad = !in->b || ferror(f) || !feof(f);
    fclose(f);
    if (bad) {
        free(in->b);
        return -1;
    }
    uint8_t *exact = realloc(in->b, in->n ? in->n : 1); /* so ASan sees reads past the end */
    if (exact)
        in->b = exact;
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* One mutation of buf[0, *n) in place (capacity REPLAY_MAX_INPUT), with other a splice source. */
static void mutate(uint8_t *buf, size_t *n, const input *other)
{
    static const uint8_t interesting[] = {0, 1, 0x7F, 0x80, 0xFF, 0xFE, '"', ':', '{', '}', '\n'};
    size_t len = *n, at = len ? next() % len : 0;
    switch (next() % 6) {
    case 0: /* flip a bit */
        if (len)
            buf[at] ^= (uint8_t)(1u << (next() % 8));
        break;
    case 1: /* an interesting byte */
        if (len)
            buf[at] = interesting[next() % sizeof interesting];
        break;
    case 2: /* truncate */
        *n = len ? next() % len : 0;
        break;
    case 3: { /* insert up to 8 random bytes */
        size_t k = 1 + next() % 8;
        if (len + k > REPLAY_MAX_INPUT)
            break;
        memmove(buf + at + k, buf + at, len - at);
        for (size_t i = 0; i < k; i++)
            buf[at + i] = (uint8_t)next();
        *n = len + k;
        break;
    }
    case 4: /* erase up to 8 bytes */
        if (len) {
            size_t k = 1 + next() % 8;
            k = k > len - at ? len - at : k;
            memmove(buf + at, buf + at + k, len - at - k);
            *n = len - k;
        }
        break;
    default: /* overwrite a run with another input's bytes */
        if (other->n && len) {
            size_t from = next() % other->n, k = 1 + next() % 32;
            k = k > other->n - from ? other->n - from : k;
            k = k > len - at ? len - at : k;
            memcpy(buf + at, other->b + from, k);
        }
        break;
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR [SECONDS [MUTATIONS]]\n", argv[0]);
        return 2;
    }
    double secs = argc > 2 ? atof(argv[2]) : 20;
    long muts = argc > 3 ? atol(argv[3]) : 5000;
    DIR *d = opendir(argv[1]);
    if (!d) {
        fprintf(stderr, "replay: cannot open %s\n", argv[1]);
        return 1;
    }
    static char *names[REPLAY_MAX_FILES];
    int nnames = 0;
    struct dirent *de;
    while ((de = readdir(d)) && nnames < REPLAY_MAX_FILES)
        if (de->d_name[0] != '.')
            names[nnames++] = strdup(de->d_name);
    closedir(d);
    qsort(names, (size_t)nnames, sizeof *names, cmp_names);
    static input in[REPLAY_MAX_FILES];
    int nin = 0;
    for (int i = 0; i < nnames; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], names[i]);
        struct stat st;
        if (stat(path, &st) || !S_ISREG(st.st_mode) || read_file(path, &in[nin]))
            continue;
        printf("replay: %s (%zu bytes)\n", names[i], in[nin].n);
        fflush(stdout);
        LLVMFuzzerTestOneInput(in[nin].b, in[nin].n);
        nin++;
    }
    if (!nin) {
        fprintf(stderr, "replay: no input in %s\n", argv[1]);
        return 1;
    }
    uint8_t *buf = malloc(REPLAY_MAX_INPUT);
    if (!buf)
        return 1;
    double t0 = now_s();
    long done = 0;
    for (; done < muts && now_s() - t0 < secs; done++) {
        const input *src = &in[next() % (uint64_t)nin];
        size_t n = src->n;
        memcpy(buf, src->b, n);
        for (int k = 1 + (int)(next() % 4); k > 0; k--)
            mutate(buf, &n, &in[next() % (uint64_t)nin]);
        if (done % 500 == 0) {
            printf("replay: mutation %ld\n", done);
            fflush(stdout);
        }
        /* an exact-size copy, so that ASan sees a read past the input's end */
        uint8_t *exact = malloc(n ? n : 1);
        if (!exact)
            return 1;
        memcpy(exact, buf, n);
        LLVMFuzzerTestOneInput(exact, n);
        free(exact);
    }
    printf("replay: %d files, %ld mutations in %.1f s, no crash\n", nin, done, now_s() - t0);
    free(buf);
    for (int i = 0; i < nin; i++)
        free(in[i].b);
    for (int i = 0; i < nnames; i++)
        free(names[i]);
    return 0;
}
