/* bench/trainer_recovery/bench_trainer_recovery.c — ct's side of the recovery benchmark.
 * On an embedded cluster (2 CPUs), trains the Fashion-MNIST MLP (784-256-128-10, Adam lr 1e-3,
 * batch 64 per replica, --limit samples) with 2 replicas through trainer_train, --runs times.
 * In each run replica 1 parks at its step (limit / 2 / 64) + 10 (mid epoch 2) and publishes
 * its pid in the KV; this program kills it with SIGKILL. Measured per run, CLOCK_MONOTONIC:
 *   startup_ms:  trainer_train entered -> first completed step of the first group (slowest rank)
 *   recovery_ms: kill -> first completed step of the new group: --recovery restart (default):
 *                a group restored from the epoch-1 checkpoint in the object store (the steps
 *                since it trained again); --recovery live: the survivor going on at once from
 *                the step the kill interrupted (no step lost)
 *   steps_lost:  optimizer steps the failure cost, trained again: the steps the group had
 *                completed at the kill (the victim parks in the loss of the batch after them)
 *                less the step the group after the failure started from (restart: the
 *                checkpoint's; live: the survivor's, from on_world_size as it shrinks)
 * Also printed, not counted: trainer_create's time (its check-run of the creators decodes the
 * data set once for the cluster: ~0.3 s in run 0, a KV lookup after).
 *   live also: the replacement that heals from the survivor at the next step boundary
 * (trainer_stats heal_*): the snapshot's put, fetch and load (copy_ms) and its size; --hidden H
 * trains a wide MLP 784-H-H/4-10 instead (H 8192: 93 MB of weights, with Adam's state a 279 MB
 * snapshot). Prints one line per run and `ct: startup_ms <median> recovery_ms <median>
 * steps_lost <median> (<recovery>)` last, live then `ct heal: copy_ms <median> snapshot_mb <size>`.
 * --nodes N: instead of the embedded cluster (one node of 2 CPUs), a ct-head and N ct-node
 * processes of 1 CPU each on loopback that this program starts (from its own directory) and
 * kills: the killed replica's replacement then starts on the freed node and its snapshot
 * crosses from the survivor's node over the data port, as a heal between two machines would.
 * Not here: the reference (ref_torch.py) and the comparison (run.sh). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_cluster.h"
#include "ct/trainer.h"
#include "examples/fashion_mnist_model.h"

static int64_t probe_step, calls;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* config hidden = H > 0: the wide MLP 784-H-H/4-10 (H 8192: 23.2 M parameters, 93 MB), for
 * the heal's copy time of a big model; else Fashion-MNIST's MLP */
static ct_module *make_mlp(trainer_ctx *ctx)
{
    int64_t h = trainer_config_int(ctx, "hidden", 0);
    if (h <= 0)
        return fmnist_make_model("mlp");
    return CT_SEQUENTIAL(ct_nn_flatten_new(), ct_nn_linear_new(784, h, true), ct_nn_relu_new(),
                         ct_nn_linear_new(h, h / 4, true), ct_nn_relu_new(),
                         ct_nn_linear_new(h / 4, 10, true));
}

/* Cross entropy; replica 1 of the first group parks at probe_step until it is killed. */
static ct_tensor *probe_loss(ct_tensor *out, ct_tensor *target)
{
    if (probe_step > 0 && ++calls == probe_step) {
        char pid[32];
        /* its pid and the steps the group completed: this is the loss of the next batch */
        snprintf(pid, sizeof pid, "%d %lld", (int)getpid(), (long long)(probe_step - 1));
        ct_kv_put("bench/victim", pid, strlen(pid) + 1);
        for (int i = 0; i < 600; i++)
            usleep(100000);
    }
    return ct_nn_cross_entropy(out, target, 0.0f);
}

static trainer_loss_fn make_probe(trainer_ctx *ctx)
{
    int64_t step = trainer_config_int(ctx, "victim_step", 0);
    calls = 0;
    probe_step = !trainer_ctx_is_driver(ctx) && trainer_ctx_rank(ctx) == 1 &&
                         trainer_ctx_start_epoch(ctx) == 0
                     ? step
                     : 0;
    return probe_loss;
}

typedef struct run_state {
    int64_t kill_ns, startup_ns;
    int64_t kill_step;  /* optimizer steps the group had completed at the kill */
    int64_t live_start; /* live: the step the survivor went on from (-1: none yet) */
    int run;
} run_state;

static void *killer(void *arg)
{
    run_state *rs = arg;
    char key[64];
    snprintf(key, sizeof key, "bench/victim");
    void *v = NULL;
    size_t n;
    if (ct_kv_get(key, &v, &n, 120000) < 0)
        return NULL;
    ct_kv_del(key);
    int pid = 0;
    long long step = -1;
    if (sscanf(v, "%d %lld", &pid, &step) != 2 || pid <= 0) {
        free(v);
        return NULL;
    }
    free(v);
    rs->kill_step = step;
    rs->kill_ns = now_ns();
    kill(pid, SIGKILL);
    return NULL;
}

static int on_epoch(trainer *t, const trainer_stats *st, void *user)
{
    (void)t;
    run_state *rs = user;
    if (st->epoch == 1 && st->retries_used == 0)
        rs->startup_ns = st->group_first_step_ns - st->train_start_ns;
    return 0;
}

/* live: the survivor's group is about to go on smaller; the step it goes on from. */
static int on_world_size(trainer *t, int old_size, int new_size, void *user)
{
    run_state *rs = user;
    trainer_stats st;
    if (new_size < old_size && old_size > 0 && rs->live_start < 0 && trainer_get_stats(t, &st) == 0)
        rs->live_start = st.group_start_step;
    return 0;
}

/* --nodes: a ct-head and n ct-nodes of 1 CPU on loopback (bench_cluster.h), and this driver
 * connected to them. 0 or -1. */
static int start_cluster(int n)
{
    char addr[128];
    if (bc_start_head("bench_trainer_recovery", addr, sizeof addr) < 0)
        return -1;
    char *nargs[] = {"--cpus", "1", "--store-memory", "1G", NULL};
    for (int i = 0; i < n; i++)
        if (bc_start_node("bench_trainer_recovery", addr, nargs, 10000) < 0)
            return -1;
    return 0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    trainer_register_model("mlp", make_mlp);
    trainer_register_loss("probe", make_probe);
    ct_serve_if_worker(); /* a replica: this program again; it never returns */
    int runs = 3;
    long limit = 8192, hidden = 0, nodes = 0;
    const char *mode = "restart";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--recovery"))
            mode = argv[i + 1];
        else if (!strcmp(argv[i], "--runs"))
            runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--limit"))
            limit = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--hidden"))
            hidden = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--nodes"))
            nodes = atol(argv[i + 1]);
    }
    bool live = !strcmp(mode, "live");
    if (runs < 1 || runs > 20 || limit < 2048 || hidden < 0 || nodes < 0 || nodes > 8 ||
        (!live && strcmp(mode, "restart")))
        return 2;
    if (nodes ? start_cluster((int)nodes) < 0 : ct_init(&(ct_init_opts){.cpus = 2}) < 0) {
        fprintf(stderr, "bench_trainer_recovery: ct_init: %s\n", ct_last_error());
        return 1;
    }
    double startup[20], recovery[20], heal[20], copy[20], lost[20], mb = 0;
    int ok = 0, status = 0;
    for (int r = 0; r < runs; r++) {
        char cfg[200];
        snprintf(cfg, sizeof cfg, "limit=%ld,val_limit=100,victim_step=%ld,hidden=%ld", limit,
                 limit / 2 / 64 + 10, hidden);
        trainer *t = NULL;
        run_state rs = {.run = r, .kill_step = -1, .live_start = -1};
        trainer_stats st = {0};
        int64_t c0 = now_ns();
        if (trainer_create(&(trainer_opts){.model = "mlp",
                                           .data = "fashion_mnist",
                                           .optimizer = "adam",
                                           .loss = "probe",
                                           .config = cfg,
                                           .num_replicas = 2,
                                           .batch_size = 64,
                                           .epochs = 3,
                                           .recovery = mode},
                           &t) < 0) {
            fprintf(stderr, "bench_trainer_recovery: %s\n", ct_last_error());
            status = 1;
            break;
        }
        double create_ms = (now_ns() - c0) / 1e6;
        pthread_t th;
        pthread_create(&th, NULL, killer, &rs);
        int rc = trainer_train(t, .max_retries = 1, .on_epoch = on_epoch,
                               .on_world_size = on_world_size, .user = &rs, .stats = &st);
        pthread_join(th, NULL);
        if (rc < 0 || st.retries_used != (live ? 0 : 1) || st.live_recoveries != live ||
            !rs.kill_ns || rs.kill_step < 0 || (live && rs.live_start < 0)) {
            fprintf(stderr, "bench_trainer_recovery: run %d: rc %d retries %d live %d: %s\n", r, rc,
                    st.retries_used, st.live_recoveries, ct_last_error());
            status = 1;
            trainer_shutdown(&t);
            break;
        }
        startup[ok] = rs.startup_ns / 1e6;
        recovery[ok] = ((live ? st.live_first_step_ns : st.group_first_step_ns) - rs.kill_ns) / 1e6;
        lost[ok] = (double)(rs.kill_step - (live ? rs.live_start : st.group_start_step));
        printf("run %d: startup_ms %.1f recovery_ms %.1f steps_lost %.0f (killed after step %lld; "
               "failure seen after %.1f ms; trainer_create before it: %.1f ms)\n",
               r, startup[ok], recovery[ok], lost[ok], (long long)rs.kill_step,
               (st.failure_seen_ns - rs.kill_ns) / 1e6, create_ms);
        /* live: a replacement healed from the survivor at the first step boundary where it fit */
        heal[ok] = st.heals ? st.heal_ns / 1e6 : 0;
        copy[ok] = st.heals ? st.heal_copy_ns / 1e6 : 0;
        mb = st.heal_bytes / 1e6;
        if (live)
            printf("run %d: heals %d: failure seen -> group of 2 again %.1f ms (the survivor "
                   "trained on until it fit); snapshot %.1f MB: put, fetch and load "
                   "%.1f ms; steps the survivor trained during the copy, replayed by the "
                   "replacement: %lld\n",
                   r, st.heals, heal[ok], mb, copy[ok], (long long)st.heal_replayed_steps);
        fflush(stdout);
        ok++;
        trainer_shutdown(&t);
    }
    if (ok) {
        qsort(startup, (size_t)ok, sizeof(double), cmp);
        qsort(recovery, (size_t)ok, sizeof(double), cmp);
        qsort(lost, (size_t)ok, sizeof(double), cmp);
        printf("ct: startup_ms %.1f recovery_ms %.1f steps_lost %.0f (%s)\n", startup[ok / 2],
               recovery[ok / 2], lost[ok / 2], live ? "live" : "restart");
        qsort(copy, (size_t)ok, sizeof(double), cmp);
        if (live)
            printf("ct heal: copy_ms %.1f snapshot_mb %.1f\n", copy[ok / 2], mb);
    }
    ct_shutdown();
    return status;
}
