/* trainer/train/cpu_binding.c — gives each replica CPUs of its own, the way MPI launchers
 * bind ranks to cores.
 *
 * Why: the replicas of a group are coupled (every optimizer step waits for all of them), and
 * a replica's comm thread spins briefly while it waits for its peers. Left to the scheduler,
 * the replicas' threads on a host scatter over its CPUs; a comm thread woken on a peer's CPU
 * then takes that CPU from the very replica it waits for, and the group runs up to 20-40%
 * slower in those phases. Bound, each replica's main, comm and loader threads share its own
 * CPUs and never displace a peer.
 *
 * How: every rank contributes (its kernel's boot id, its process's CPU mask) to one allgather
 * on the group's communicator. The ranks on one kernel with the same mask are numbered in rank
 * order; rank i of n takes the i-th run of `threads` CPUs of the mask, when n >= 2 and the n
 * replicas fill the mask (n * threads CPUs): then the scheduler has no spare CPU to put a
 * waiting thread on. With CPUs to spare it does well unbound, and two jobs on one big machine
 * do not pile onto the same first CPUs. The kernel, not the ct-node, is what shares CPUs:
 * several nodes of one machine (test clusters, network namespaces) count together. Nothing is
 * bound when a rank of the same kernel has a different mask that overlaps (who owns what is
 * unclear then), or when trainer_opts.no_cpu_binding says so. */
#define _GNU_SOURCE /* sched_setaffinity, CPU_* */
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/collective.h"
#include "internal.h"

/* What a rank tells its peers, gathered as bytes: the masks are compared only among ranks of
 * one kernel, where cpu_set_t is the same everywhere. */
typedef struct cpu_claim {
    int64_t kernel; /* hash of the boot id: ranks of one machine (0: unknown, or not binding) */
    cpu_set_t mask; /* the CPUs its process may run on */
} cpu_claim;

static int64_t kernel_id(void)
{
    char boot[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f)
        return 0;
    if (!fgets(boot, sizeof boot, f))
        boot[0] = 0;
    fclose(f);
    boot[strcspn(boot, "\n")] = 0;
    return boot[0] ? (int64_t)(ct__fnv1a64(boot, strlen(boot)) >> 1) | 1 : 0;
}

/* Sets mask on every thread of this process. Threads created later inherit it from their
 * creator. Returns how many threads refused. */
static int bind_all_threads(const cpu_set_t *set)
{
    int refused = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return sched_setaffinity(0, sizeof *set, set) == 0 ? 0 : 1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && sched_setaffinity(atoi(e->d_name), sizeof *set, set) != 0)
            refused++;
    closedir(d);
    return refused;
}

int ct__replica_bind_cpus(ct_comm *comm, int threads, bool enabled, int timeout_ms)
{
    int rank = ct_comm_rank(comm), world = ct_comm_world_size(comm);
    cpu_claim me;
    memset(&me, 0, sizeof me); /* padding included: the bytes are compared */
    if (enabled && sched_getaffinity(0, sizeof me.mask, &me.mask) == 0)
        me.kernel = kernel_id();
    cpu_claim *all = calloc((size_t)world, sizeof *all);
    if (!all)
        return ct__error(CT_ENOMEM, "trainer replica %d: CPU claims", rank);
    /* every rank takes part, also one that binds nothing, so that the group stays in step */
    int rc = ct_comm_allgather(comm, &me, all, sizeof me, CT_U8, timeout_ms);
    if (rc < 0 || !me.kernel)
        goto out;
    int index = 0, peers = 0, cpus = CPU_COUNT(&me.mask);
    for (int r = 0; r < world; r++) {
        cpu_set_t both;
        if (all[r].kernel != me.kernel)
            continue;
        CPU_AND(&both, &all[r].mask, &me.mask);
        if (CPU_EQUAL(&all[r].mask, &me.mask)) {
            if (r == rank)
                index = peers;
            peers++;
        } else if (CPU_COUNT(&both) > 0) {
            CT_LOG(CT_LOG_DEBUG, "trainer", "rank %d: not bound: rank %d shares some of its CPUs",
                   rank, r);
            goto out;
        }
    }
    if (peers < 2 || peers * threads != cpus) {
        CT_LOG(CT_LOG_DEBUG, "trainer",
               "rank %d: not bound: %d replica(s) of %d thread(s) on %d CPUs", rank, peers, threads,
               cpus);
        goto out;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    char list[256] = "";
    for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE && seen < (index + 1) * threads; cpu++) {
        if (!CPU_ISSET(cpu, &me.mask))
            continue;
        if (seen++ >= index * threads) {
            CPU_SET(cpu, &set);
            size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, "%s%d", len ? "," : "", cpu);
        }
    }
    int refused = bind_all_threads(&set);
    if (refused)
        CT_LOG(CT_LOG_WARN, "trainer", "rank %d: %d thread(s) refused CPUs %s", rank, refused,
               list);
    else
        CT_LOG(CT_LOG_DEBUG, "trainer", "rank %d: bound to CPUs %s (%d of %d replicas here)", rank,
               list, index, peers);
    rc = peers; /* a refusal too: every rank derives the same count from the same claims */
out:
    free(all);
    return rc;
}
