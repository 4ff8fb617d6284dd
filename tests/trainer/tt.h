/* tests/trainer/tt.h — what the trainer tests share: the runtime tests' process harness
 * (tests/runtime/harness.h: CHECK macros, start / kill / reap by pid), a small MLP creator,
 * and a probe loss that lets a test stop or kill a replica at a chosen step.
 * Header-only: each test is one executable. */
#ifndef CT_TESTS_TRAINER_TT_H
#define CT_TESTS_TRAINER_TT_H

#include "tests/runtime/harness.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>

#include "ct/ct.h"
#include "ct/trainer.h"

/* 784-64-10 MLP: fast enough for tests that train several epochs on 2 cores. */
__attribute__((unused)) static ct_module *tt_mlp(trainer_ctx *ctx)
{
    (void)ctx;
    return CT_SEQUENTIAL(ct_nn_flatten_new(), ct_nn_linear_new(784, 64, true), ct_nn_relu_new(),
                         ct_nn_linear_new(64, 10, true));
}

/* A small CNN with BatchNorm (blocked oneDNN layout: 16 channels) and Dropout, so that
 * buffers and random draws are part of what must survive a restart. */
__attribute__((unused)) static ct_module *tt_cnn(trainer_ctx *ctx)
{
    (void)ctx;
    ct_conv_opts p1 = {.padding = {1, 1}};
    return CT_SEQUENTIAL(ct_nn_conv2d_new(1, 16, 3, &p1, true), ct_nn_batchnorm2d_new(16),
                         ct_nn_relu_new(), ct_nn_maxpool2d_new(2, 0, 0), ct_nn_flatten_new(),
                         ct_nn_linear_new(16 * 14 * 14, 32, true), ct_nn_relu_new(),
                         ct_nn_dropout_new(0.25f), ct_nn_linear_new(32, 10, true));
}

/* The probe loss: cross entropy that counts this process's calls. Config keys:
 *   probe_step  (0: off) the step (1-based, counted in this replica process) at which
 *   probe_rank  (1) this rank acts, only when
 *   probe_epoch0 (1: only in a group that started at epoch 0; 0: in every group), by
 *   probe_action ("wait": once per arming (the test puts KV key "tt/probe/armed"; the probe
 *                 takes it, so a group restarted from the same epoch does not wait again),
 *                 put its pid under KV key "tt/probe" and sleep until killed;
 *                 "die": put its pid under "tt/probe/<pid>" and SIGKILL itself). */
static int64_t tt_probe_step, tt_calls;
static int tt_probe_action; /* 1 wait, 2 die */

__attribute__((unused)) static ct_tensor *tt_probe_loss(ct_tensor *out, ct_tensor *target)
{
    if (tt_probe_step > 0 && ++tt_calls == tt_probe_step) {
        char pid[32], key[64];
        snprintf(pid, sizeof pid, "%d", (int)getpid());
        if (tt_probe_action == 1) {
            if (ct_kv_del("tt/probe/armed") != 0)
                return ct_nn_cross_entropy(out, target, 0.0f); /* fired already */
            ct_kv_put("tt/probe", pid, strlen(pid) + 1);
            for (int i = 0; i < 300; i++)
                usleep(100000); /* until killed (30 s at most) */
        } else {
            snprintf(key, sizeof key, "tt/probe/%s", pid);
            ct_kv_put(key, pid, strlen(pid) + 1);
            raise(SIGKILL);
        }
    }
    return ct_nn_cross_entropy(out, target, 0.0f);
}

__attribute__((unused)) static trainer_loss_fn tt_probe_creator(trainer_ctx *ctx)
{
    int64_t step = trainer_config_int(ctx, "probe_step", 0);
    int64_t rank = trainer_config_int(ctx, "probe_rank", 1);
    bool epoch0 = trainer_config_bool(ctx, "probe_epoch0", true);
    const char *action = trainer_config_str(ctx, "probe_action", "wait");
    tt_probe_action = !strcmp(action, "die") ? 2 : 1;
    tt_calls = 0;
    tt_probe_step = 0;
    if (!trainer_ctx_is_driver(ctx) && trainer_ctx_rank(ctx) == rank &&
        (!epoch0 || trainer_ctx_start_epoch(ctx) == 0))
        tt_probe_step = step;
    return tt_probe_loss;
}

/* The trainer of the probe tests: model on 2 replicas, 2048 Fashion-MNIST images (500 for
 * validation), Adam 2e-3, StepLR(1, 0.5), batch 64, the probe loss armed at probe_step (0: off),
 * recovery "restart" (the group restarted from the checkpoint is what these tests check).
 * NULL (and the error printed) when trainer_create fails. */
__attribute__((unused)) static trainer *tt_make_probed(const char *model, int probe_step,
                                                       int64_t epochs, uint64_t seed)
{
    char cfg[200];
    snprintf(cfg, sizeof cfg,
             "limit=2048,val_limit=500,lr=2e-3,step_size=1,gamma=0.5,probe_step=%d", probe_step);
    trainer *t = NULL;
    if (trainer_create(&(trainer_opts){.model = model,
                                       .data = "fashion_mnist",
                                       .optimizer = "adam",
                                       .loss = "probe",
                                       .scheduler = "steplr",
                                       .config = cfg,
                                       .num_replicas = 2,
                                       .batch_size = 64,
                                       .epochs = epochs,
                                       .seed = seed,
                                       .recovery = "restart"}, /* what they test */
                       &t) < 0)
        fprintf(stderr, "trainer_create: %s\n", ct_last_error());
    return t;
}

/* The initialization hook: counts its runs in this process; in a replica it also leaves
 * "tt/hook/<rank>" = its pid in the KV. */
static int tt_hook_runs;
__attribute__((unused)) static int tt_hook(trainer_ctx *ctx)
{
    tt_hook_runs++;
    if (!trainer_ctx_is_driver(ctx)) {
        char key[32], pid[32];
        snprintf(key, sizeof key, "tt/hook/%d", trainer_ctx_rank(ctx));
        snprintf(pid, sizeof pid, "%d", (int)getpid());
        return ct_kv_put(key, pid, strlen(pid) + 1);
    }
    return 0;
}

/* Reads all of path (to its end: also a log still being written) into a NUL-terminated buffer
 * the caller frees; *len (may be NULL) gets its length. NULL when it cannot be read. */
__attribute__((unused)) static char *tt_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 65536;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
    } while (got > 0);
    fclose(f);
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

/* forward, loss, backward, the gradients' norm clipped to bound, optimizer; the norm as the
 * step's metric "grad_norm" (the trainer tests' clipping train step) */
__attribute__((unused)) static int tt_clip_step(trainer_step *s, const trainer_batch *b,
                                                trainer_step_out *out, double bound)
{
    ct_tensor *y = ct_module_forward(trainer_step_model(s), b->x);
    ct_tensor *loss = y ? trainer_step_loss(s)(y, b->y) : NULL;
    int rc = loss ? trainer_step_backward(s, loss) : CT_EINVAL;
    double norm = 0;
    if (rc == 0)
        rc = trainer_step_clip_grad_norm(s, bound, &norm);
    if (rc == 0)
        rc = trainer_step_optimizer(s);
    if (rc == 0)
        rc = trainer_step_metric(s, "grad_norm", norm);
    if (rc == 0) {
        out->loss_sum = ct_tensor_item(loss) * (double)b->n;
        out->samples = b->n;
    }
    ct_tensor_release(&loss);
    ct_tensor_release(&y);
    return rc;
}

/* the weights must be bit-identical; prints the first difference and counts a failure */
__attribute__((unused)) static void tt_same_weights(const float *a, const float *b, int64_t na,
                                                    int64_t nb, const char *what)
{
    CHECK(a && b && na == nb && na > 0);
    if (!a || !b || na != nb)
        return;
    int64_t diff = 0, first = -1;
    for (int64_t i = 0; i < na; i++)
        if (memcmp(&a[i], &b[i], sizeof(float))) {
            diff++;
            first = first < 0 ? i : first;
        }
    if (diff) {
        fprintf(stderr, "%s: %lld of %lld weights differ; first at %lld: %.9g vs %.9g\n", what,
                (long long)diff, (long long)na, (long long)first, a[first], b[first]);
        h_failures++;
    }
}

/* the checkpoint file of epoch 1 in dir, into path */
__attribute__((unused)) static bool tt_epoch1_file(const char *dir, char *path, size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool found = false;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, "ckpt-epoch0001-", 15) && !found) {
            snprintf(path, cap, "%s/%s", dir, e->d_name);
            found = true;
        }
    if (d)
        closedir(d);
    if (!found)
        fprintf(stderr, "no epoch-1 checkpoint in %s\n", dir);
    return found;
}

/* every checkpoint file of directory a is in b with the same bytes (a failure names what
 * differs: "between ..."); returns how many were compared */
__attribute__((unused)) static int tt_same_files(const char *a, const char *b, const char *what)
{
    DIR *d = opendir(a);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "ckpt-", 5))
            continue;
        char pa[600], pb[600];
        snprintf(pa, sizeof pa, "%s/%s", a, e->d_name);
        snprintf(pb, sizeof pb, "%s/%s", b, e->d_name);
        size_t la = 0, lb = 0;
        char *ca = tt_read_file(pa, &la), *cb = tt_read_file(pb, &lb);
        if (!ca || !cb || la != lb || memcmp(ca, cb, la)) {
            fprintf(stderr, "checkpoint %s differs %s\n", e->d_name, what);
            h_failures++;
        }
        free(ca);
        free(cb);
        n++;
    }
    if (d)
        closedir(d);
    return n;
}
/* Waits up to timeout_ms for the cluster's CPUs (all, live nodes) to be want. */
__attribute__((unused)) static bool tt_wait_total_cpus(double want, int timeout_ms)
{
    double total = -1, free_cpu = 0;
    for (double until = h_now_ms() + timeout_ms; h_now_ms() < until; usleep(20000))
        if (ct_cluster_resources("CPU", &total, &free_cpu) == 0 && total == want)
            return true;
    fprintf(stderr, "the cluster has %g CPUs, not %g\n", total, want);
    return false;
}

/* Starts a node (1 CPU, 256M store) and waits up to 5 s for its NODE_JOINED event (the caller
 * subscribed to it); its pid, and its id into id (idsize bytes). -1 when it did not join. */
__attribute__((unused)) static pid_t tt_start_node_joined(const char *addr, char *id, size_t idsize)
{
    ct_event ev;
    pid_t pid = h_start_node(addr, "--cpus", "1", "--store-memory", "256M", NULL, NULL);
    for (double until = h_now_ms() + 5000; pid > 0 && h_now_ms() < until;)
        if (ct_events_next(&ev, 200) == 0 && ev.type == CT_EVENT_NODE_JOINED && ev.pid == pid) {
            snprintf(id, idsize, "%s", ev.node_id);
            return pid;
        }
    fprintf(stderr, "node %d did not join\n", (int)pid);
    return -1;
}

/* "synthetic" data: 10 well-separated Gaussian blobs in 784 dimensions (n = config "n", 1000),
 * 20% of them as validation; a user-written data creator. */
static uint64_t tt_rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}
__attribute__((unused)) static int tt_synthetic(trainer_ctx *ctx, trainer_data *d)
{
    int64_t n = trainer_config_int(ctx, "n", 1000), f = 784;
    float *x = malloc(sizeof(float) * (size_t)(n * f));
    int64_t *y = malloc(sizeof(int64_t) * (size_t)n);
    uint64_t s = 42;
    int rc = x && y ? 0 : CT_ENOMEM;
    for (int64_t i = 0; rc == 0 && i < n; i++) {
        y[i] = (int64_t)(tt_rng(&s) % 10);
        for (int64_t k = 0; k < f; k++)
            x[i * f + k] =
                (float)((tt_rng(&s) % 1000) / 1000.0 - 0.5) + (k % 10 == y[i] ? 2.0f : 0.0f);
    }
    int64_t shape[1] = {f}, nv = n / 5;
    if (rc == 0)
        rc = ct_dataset_from_f32(x, y, n, 1, shape, &d->keep[0]);
    if (rc == 0)
        rc = ct_dataset_subset(d->keep[0], 0, n - nv, &d->train);
    if (rc == 0)
        rc = ct_dataset_subset(d->keep[0], n - nv, nv, &d->val);
    free(x);
    free(y);
    return rc;
}

/* Registers the test creators ("mlp" and "cnn" models, "probe" loss). Call first in main. */
__attribute__((unused)) static void tt_register(void)
{
    trainer_register_model("mlp", tt_mlp);
    trainer_register_model("cnn", tt_cnn);
    trainer_register_hook("tt_hook", tt_hook);
    trainer_register_data("synthetic", tt_synthetic);
    trainer_register_loss("probe", tt_probe_creator);
}

/* A copy of the model's flat weights (caller frees) and its length. */
__attribute__((unused)) static float *tt_weights(ct_module *m, int64_t *n)
{
    float *v, *g;
    if (!m || ct_module_flat(m, &v, &g, n) < 0)
        return NULL;
    float *c = malloc((size_t)*n * sizeof(float));
    if (c)
        memcpy(c, v, (size_t)*n * sizeof(float));
    return c;
}

/* The largest |a[i] - b[i]| over n floats. */
__attribute__((unused)) static double tt_max_abs_diff(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

/* The checkpoint files ("ckpt-*") in dir, sorted, joined by spaces ("" when none). */
__attribute__((unused)) static void tt_list_ckpts(const char *dir, char *out, size_t cap)
{
    char names[64][80];
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) && n < 64)
        if (!strncmp(e->d_name, "ckpt-", 5))
            snprintf(names[n++], sizeof names[0], "%.79s", e->d_name);
    if (d)
        closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    out[0] = 0;
    for (int i = 0; i < n; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%.79s", i ? " " : "", names[i]);
}

/* A thread that waits for the probe's pid (KV "tt/probe", put by probe_action "wait"), takes
 * the key (so the next arming writes it anew), notes replica 1's pid and the time, and
 * SIGKILLs the probe: run it with pthread_create(&th, NULL, tt_kill_probe, &killer). */
typedef struct tt_killer {
    trainer *t;
    int killed_pid, replica_pid;
    int64_t kill_ns; /* CLOCK_MONOTONIC at the kill */
} tt_killer;

__attribute__((unused)) static void *tt_kill_probe(void *arg)
{
    tt_killer *k = arg;
    void *v = NULL;
    size_t n;
    if (ct_kv_get("tt/probe", &v, &n, 60000) < 0) {
        fprintf(stderr, "no probe pid in the KV: %s\n", ct_last_error());
        return NULL;
    }
    int pid = atoi(v);
    free(v);
    ct_kv_del("tt/probe");
    trainer_replica_info info;
    if (trainer_replica_info_get(k->t, 1, &info) == 0)
        k->replica_pid = info.pid;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    k->kill_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    if (kill(pid, SIGKILL) == 0)
        k->killed_pid = pid;
    return NULL;
}

#endif
