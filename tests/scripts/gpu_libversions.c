/* tests/scripts/gpu_libversions.c — prints the versions of the CUDA libraries that
 * scripts/gpu-check.sh found on a lent GPU machine, as each library reports itself.
 *
 *   gpu_libversions NAME=PATH...      NAME: cudart | cublas | cudnn | nccl
 * dlopen()s each PATH and calls its version function (cudaRuntimeGetVersion, cublasLtGetVersion,
 * cudnnGetVersion, ncclGetVersion), then prints one line `NAME MAJOR.MINOR[.PATCH]` (cudart:
 * MAJOR.MINOR, all its number holds). Exit 0 when every library loaded and answered; 1, with a
 * line `NAME error: WHY` on stderr, for each one that did not; 2 on bad arguments. None of these
 * calls needs a GPU or a driver. gpu-check.sh compares the lines with the versions of the headers
 * ct was built against (its `record-versions`); tests/scripts/test_gpu_check.sh runs this program
 * on stand-in libraries. Not a loader for ct: ct links the libraries, it does not dlopen them.
 * Built on every machine (it needs no CUDA header). */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The four version functions, as the headers declare them (cudaError_t, cublasStatus_t and
 * ncclResult_t are enums: int here; 0 is success). */
typedef int (*int_out_fn)(int *);
typedef size_t (*size_fn)(void);

/* Splits a packed version number: major * base + minor * 100 + patch. */
static void print_packed(const char *name, long v, long base)
{
    printf("%s %ld.%ld.%ld\n", name, v / base, v % base / 100, v % 100);
}

/* Loads one library and prints its version; returns 0, or -1 after a line on stderr. */
static int one(const char *name, const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s error: %s\n", name, dlerror());
        return -1;
    }
    int rc = -1, v = 0;
    const char *sym = !strcmp(name, "cudart")   ? "cudaRuntimeGetVersion"
                      : !strcmp(name, "cublas") ? "cublasLtGetVersion"
                      : !strcmp(name, "cudnn")  ? "cudnnGetVersion"
                                                : "ncclGetVersion";
    void *f = dlsym(h, sym);
    if (!f) {
        fprintf(stderr, "%s error: no %s in %s\n", name, sym, path);
        goto out;
    }
    if (!strcmp(name, "cudart")) { /* 1000 * major + 10 * minor */
        if (((int_out_fn)f)(&v) != 0) {
            fprintf(stderr, "%s error: %s failed\n", name, sym);
            goto out;
        }
        printf("cudart %d.%d\n", v / 1000, v % 1000 / 10);
    } else if (!strcmp(name, "nccl")) { /* 10000 * major + ... since 2.9, 1000 * major before */
        if (((int_out_fn)f)(&v) != 0) {
            fprintf(stderr, "%s error: %s failed\n", name, sym);
            goto out;
        }
        print_packed("nccl", v, v >= 20900 ? 10000 : 1000);
    } else { /* cuBLAS 12+ and cuDNN 9+: 10000 * major + ...; cuDNN 8: 1000 * major + ... */
        long n = (long)((size_fn)f)();
        print_packed(name, n, !strcmp(name, "cudnn") && n < 90000 ? 1000 : 10000);
    }
    rc = 0;
out:
    dlclose(h);
    return rc;
}

int main(int argc, char **argv)
{
    static const char *const names[] = {"cudart", "cublas", "cudnn", "nccl"};
    int status = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s cudart|cublas|cudnn|nccl=PATH...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        char name[16];
        size_t len = eq ? (size_t)(eq - argv[i]) : 0;
        int known = 0;
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
            known |= len == strlen(names[k]) && !strncmp(argv[i], names[k], len);
        if (!known) {
            fprintf(stderr,
                    "%s: bad argument '%s' (want NAME=PATH, NAME cudart, cublas, "
                    "cudnn or nccl)\n",
                    argv[0], argv[i]);
            return 2;
        }
        memcpy(name, argv[i], len);
        name[len] = '\0';
        if (one(name, eq + 1) < 0)
            status = 1;
    }
    return status;
}
