/* tests/common/test_thread_exit.c — common/thread_exit.c: what a thread registers runs when that
 * thread ends, in that thread, last registered first, once however often it was registered; a
 * function registered while the others run (a cache filled by another's release) runs too; a
 * thread that registered nothing runs nothing, and another thread's registrations are its own. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/common.h"

#include "tests/check.h"

/* what ran, in order, and on which thread; written by the ending threads, read after a join */
static char order[64];
static pthread_t ran_on[64];
static int nran;

static void note(char c)
{
    ran_on[nran] = pthread_self();
    order[nran++] = c;
}

static void fn_c(void)
{
    note('c');
}
static void fn_a(void)
{
    note('a');
}
/* registers c while the thread is ending */
static void fn_b(void)
{
    note('b');
    CHECK(ct__at_thread_exit(fn_c) == 0);
}

static pthread_t self_of[3];

static void *twice_then_b(void *arg)
{
    self_of[0] = pthread_self();
    (void)arg;
    CHECK(ct__at_thread_exit(fn_a) == 0);
    CHECK(ct__at_thread_exit(fn_b) == 0);
    CHECK(ct__at_thread_exit(fn_a) == 0); /* again: still once, in its first place */
    return NULL;
}

static void *nothing(void *arg)
{
    (void)arg;
    return NULL;
}

static void *only_a(void *arg)
{
    self_of[2] = pthread_self();
    (void)arg;
    CHECK(ct__at_thread_exit(fn_a) == 0);
    return NULL;
}

static void run(void *(*fn)(void *))
{
    pthread_t th;
    CHECK(pthread_create(&th, NULL, fn, NULL) == 0);
    CHECK(pthread_join(th, NULL) == 0);
}

int main(void)
{
    run(twice_then_b); /* b registered last runs first; c, added by b, next; a last */
    order[nran] = 0;
    printf("first thread ran: %s\n", order);
    CHECK(strcmp(order, "bca") == 0);
    CHECK(nran == 3);
    for (int i = 0; i < nran; i++)
        CHECK(pthread_equal(ran_on[i], self_of[0]));
    int before = nran;
    run(nothing);
    CHECK(nran == before);
    run(only_a);
    order[nran] = 0;
    printf("then: %s\n", order + before);
    CHECK(nran == before + 1 && order[before] == 'a' && pthread_equal(ran_on[before], self_of[2]));
    if (failures)
        fprintf(stderr, "test_thread_exit: %d failure(s)\n", failures);
    else
        printf("test_thread_exit: ok\n");
    return failures ? 1 : 0;
}
