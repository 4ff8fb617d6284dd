/* common/thread_exit.c — work a thread's caches ask to have done when the thread ends: the
 * engine keeps per-thread buffers (autograd's tape and scratch, the CPU's freed-buffer cache,
 * gemm's packing buffer) for the thread's life, and a thread that ends (a pipeline's stage
 * threads, any thread a program starts and ends) must hand them back, or each leaks its own.
 *
 * One pthread key whose destructor runs, in the ending thread, the functions that thread
 * registered, last registered first (as atexit). The process's main thread runs none: exit()
 * does not run key destructors, and its caches live as long as the process. */
#include <pthread.h>
#include <stdlib.h>

#include "common/common.h"

#define MAX_AT_EXIT 8

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_key_t key;
static int key_rc;
static __thread void (*fns[MAX_AT_EXIT])(void);
static __thread int nfns;

static void run_all(void *unused)
{
    (void)unused;
    while (nfns > 0) /* a function may register another (a free into a cache): it runs too */
        fns[--nfns]();
}

static void make_key(void)
{
    key_rc = pthread_key_create(&key, run_all);
}

int ct__at_thread_exit(void (*fn)(void))
{
    for (int i = 0; i < nfns; i++)
        if (fns[i] == fn)
            return 0;
    pthread_once(&once, make_key);
    if (key_rc != 0)
        return ct__error(CT_ENOMEM, "thread exit: cannot create the key (error %d)", key_rc);
    if (nfns == MAX_AT_EXIT)
        return ct__error(CT_ENOMEM, "thread exit: more than %d functions", MAX_AT_EXIT);
    /* any non-NULL value: the destructor runs only for a thread whose value is set */
    int rc = pthread_setspecific(key, (void *)&nfns);
    if (rc != 0)
        return ct__error(CT_ENOMEM, "thread exit: pthread_setspecific failed (error %d)", rc);
    fns[nfns++] = fn;
    return 0;
}
