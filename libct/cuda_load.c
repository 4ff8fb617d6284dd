/* libct/cuda_load.c — libct.so's loader of ct's CUDA code (ct__cuda_lib: backend/cudalib.h).
 *
 * libct.so links neither cudart nor NCCL, so it starts where CUDA is not installed. The first
 * use of device "cuda" (ct__backend_of(CT_CUDA), an NCCL communicator, trainer_create with
 * use_gpu) dlopen()s libct_cuda.so: first beside libct.so (found with dladdr), then by the
 * runtime linker's path; and takes its tables from its one export, ct__cuda_lib_entry. Once:
 * the outcome, the error message included, is kept for later calls. Only in libct.so: ct's own
 * programs link the CUDA code (ct_link_cuda) or have none. Not the device probe (the table's
 * devices()). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "trainer/backend/cudalib.h"

#define LIB "libct_cuda.so"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const ct__cuda_lib *lib;
static char why[PATH_MAX + 1024]; /* ct__error keeps its first 1023 bytes */

/* dlopen()s path; NULL with its dlerror() in err */
static void *open_lib(const char *path, char *err, size_t cap)
{
    /* RTLD_LOCAL: libct_cuda.so's own symbols are for it alone (it exports one anyway) */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(err, cap, "%s", e ? e : "unknown dlopen error");
    }
    return h;
}

static void load(void)
{
    char self[PATH_MAX], dir[PATH_MAX] = "", path[PATH_MAX + sizeof LIB], err[512] = "";
    void *h = NULL;
    Dl_info info;
    /* beside libct.so: the install's lib directory, or the build's */
    if (dladdr((void *)ct__cuda_lib_load, &info) && info.dli_fname &&
        realpath(info.dli_fname, self)) {
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            snprintf(dir, sizeof dir, "%s", self);
            snprintf(path, sizeof path, "%s/%s", dir, LIB);
            if (access(path, F_OK) == 0)
                h = open_lib(path, err, sizeof err); /* there: its error is the one to report */
        }
    }
    if (!h && !err[0]) {
        h = open_lib(LIB, err, sizeof err);
        if (!h) {
            snprintf(why, sizeof why,
                     "device cuda: %s could not be loaded (not beside libct.so%s%s, nor on the "
                     "loader's path): %s",
                     LIB, dir[0] ? " in " : "", dir, err);
            return;
        }
    }
    if (!h) {
        snprintf(why, sizeof why, "device cuda: %s could not be loaded: %s", path, err);
        return;
    }
    const ct__cuda_lib *(*entry)(void) =
        (const ct__cuda_lib *(*)(void))dlsym(h, "ct__cuda_lib_entry");
    const ct__cuda_lib *l = entry ? entry() : NULL;
    if (!l) {
        snprintf(why, sizeof why, "device cuda: %s has no ct__cuda_lib_entry: not ct's", LIB);
        dlclose(h);
        return;
    }
    if (l->abi != CT__CUDA_LIB_ABI || l->backend_size != sizeof(ct__backend)) {
        snprintf(why, sizeof why,
                 "device cuda: %s is from another build of ct (abi %d, this libct.so's %d)", LIB,
                 l->abi, CT__CUDA_LIB_ABI);
        dlclose(h);
        return;
    }
    CT_LOG(CT_LOG_DEBUG, "backend", "loaded %s", LIB);
    lib = l; /* never closed: its tables are used until the process ends */
}

const ct__cuda_lib *ct__cuda_lib_load(void)
{
    pthread_once(&once, load);
    if (!lib)
        ct__error(CT_ENOSYS, "%s", why);
    return lib;
}
