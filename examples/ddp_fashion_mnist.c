/* examples/ddp_fashion_mnist.c — data-parallel training of the Fashion-MNIST CNN on a ct
 * cluster: the main job of `make run`.
 *
 * The driver starts an embedded cluster (ct_init(NULL): a head and a node as child processes),
 * or joins the one in $CT_ADDRESS, and creates --replicas replica actors. Each replica is this
 * same program in actor mode: it builds the same model from the same seed, reads its shard of
 * the training set (distributed sampler: rank, world size, per-epoch permutation), and averages
 * its gradients with the other replicas (ring allreduce over shared memory or TCP, the group
 * found through the head's KV) before its optimizer step, so every replica holds identical
 * weights, as with PyTorch DDP. As in DDP, the averaging overlaps backward: parameters are
 * grouped into buckets in reverse order (the first ~1 MiB, the rest --bucket-mb), a
 * gradient-ready hook (ct_module_on_grad_ready) marks each parameter's gradient as soon as
 * backward has finished it, and a full bucket is all-reduced on the bucketer's communication
 * thread while backward goes on; ct_bucketer_finish() waits before the step. --no-overlap
 * instead averages the whole flat gradient buffer with one allreduce after backward. The
 * driver collects each epoch's loss and throughput from the replicas and has replica 0
 * evaluate the test set.
 *
 *   ddp_fashion_mnist [--replicas 2] [--epochs 2] [--batch 64] [--lr 1e-3] [--gamma 0.5]
 *                     [--limit N] [--model cnn|mlp] [--seed 0] [--data DIR] [--min-accuracy X]
 *                     [--bucket-mb 25] [--no-overlap] [--timing]
 *
 * --timing adds a line per epoch: milliseconds per step in backward and in the gradient sync
 * after it (overlap: ct_bucketer_finish; --no-overlap: the flat allreduce).
 * Adam's learning rate is multiplied by --gamma after every epoch (1 turns that off).
 * --batch is per replica. Prints a line per epoch and last
 * `final: test_accuracy=<x> train_loss=<y> samples_per_s=<z>` (all replicas together).
 * Not here: checkpoints and retry after a replica dies (the trainer's job). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ct/collective.h"
#include "ct/ct.h"
#include "ct/data.h"
#include "ct/nn.h"
#include "ct/optim.h"
#include "ct/tensor.h"
#include "fashion_mnist_model.h"

/* What the driver tells each replica when it creates it. */
typedef struct replica_config {
    int rank, world, threads;
    int64_t batch, limit;
    double lr, gamma; /* Adam's lr, multiplied by gamma after every epoch (StepLR) */
    uint64_t seed;
    int overlap;      /* gradients reduced in buckets during backward */
    double bucket_mb; /* bucket size after the first (MiB) */
    char model[8];
    char data[256];
    char group[64];
} replica_config;

/* What a replica reports after an epoch. */
typedef struct epoch_report {
    double loss_sum; /* sum over samples of the loss */
    int64_t samples;
    double seconds;
    int64_t weights_hash; /* of the flat weights, to show the replicas agree */
    int64_t steps;
    double backward_seconds; /* in ct_tensor_backward (overlap: includes marking buckets) */
    double sync_seconds;     /* after backward, until the gradients are averaged */
} epoch_report;

typedef struct replica {
    replica_config cfg;
    ct_dataset *train_full, *train, *test;
    ct_loader *loader;
    ct_module *net;
    ct_optim *optim;
    ct_sched *sched; /* NULL when gamma is 1 */
    ct_rendezvous *rdv;
    ct_comm *comm;
    ct_bucketer *bucketer; /* overlap mode: the gradients in reverse parameter order */
    int nparams;
    float *grads; /* the model's flat gradient buffer (borrowed from net) */
    int64_t numel;
} replica;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void replica_free(void *state)
{
    replica *r = state;
    if (!r)
        return;
    if (r->net)
        ct_module_on_grad_ready(r->net, NULL, NULL);
    ct_bucketer_destroy(&r->bucketer); /* before the communicator it uses */
    ct_comm_destroy(&r->comm);
    ct_rendezvous_kv_destroy(&r->rdv);
    ct_sched_destroy(&r->sched);
    ct_optim_destroy(&r->optim);
    ct_module_destroy(&r->net);
    ct_loader_destroy(&r->loader);
    ct_dataset_destroy(&r->train);
    ct_dataset_destroy(&r->train_full);
    ct_dataset_destroy(&r->test);
    free(r);
}

/* Builds the replica: data shard, model (same seed everywhere: same initial weights),
 * optimizer. Joining the gradient group is a separate call (it waits for every replica). */
static int replica_new(const void *args, size_t len, void **state)
{
    if (len != sizeof(replica_config))
        return CT_EINVAL;
    replica *r = calloc(1, sizeof *r);
    if (!r)
        return CT_ENOMEM;
    memcpy(&r->cfg, args, sizeof r->cfg);
    const replica_config *c = &r->cfg;
    const ct_param_ref *ps;
    float *values;
    int np, rc;
    ct_nn_set_threads(c->threads);
    ct_nn_manual_seed(c->seed);
    const char *dir = c->data[0] ? c->data : NULL;
    if ((rc = ct_dataset_open_mnist(dir, true, &r->train_full)) < 0 ||
        (rc = ct_dataset_open_mnist(dir, false, &r->test)) < 0)
        goto fail;
    int64_t n = ct_dataset_length(r->train_full);
    if (c->limit > 0 && c->limit < n)
        n = c->limit;
    if ((rc = ct_dataset_subset(r->train_full, 0, n, &r->train)) < 0)
        goto fail;
    rc = ct_loader_new(r->train,
                       &(ct_loader_opts){.batch_size = c->batch,
                                         .shuffle = true,
                                         .seed = c->seed,
                                         .rank = c->rank,
                                         .world_size = c->world,
                                         .prefetch = 2,
                                         .transform = {.mean = fmnist_mean, .std = fmnist_std}},
                       &r->loader);
    if (rc < 0)
        goto fail;
    rc = CT_ENOMEM;
    if (!(r->net = fmnist_make_model(c->model)))
        goto fail;
    if ((rc = ct_module_params(r->net, &ps, &np)) < 0 ||
        (rc = ct_module_flat(r->net, &values, &r->grads, &r->numel)) < 0)
        goto fail;
    rc = CT_EINVAL;
    if (!(r->optim = ct_optim_adam_new(ps, np, &(ct_adam_opts){.lr = c->lr})))
        goto fail;
    if (c->gamma > 0 && c->gamma != 1.0 &&
        !(r->sched =
              ct_sched_steplr_new(r->optim, &(ct_steplr_opts){.step_size = 1, .gamma = c->gamma})))
        goto fail;
    rc = CT_ENOMEM;
    if (!(r->rdv = ct_rendezvous_kv_new("ddp_fashion_mnist/")))
        goto fail;
    *state = r;
    return 0;
fail:
    replica_free(r);
    return rc;
}

/* The gradient-ready hook: parameter i's gradient is final, so is the bucketer's gradient
 * nparams-1-i (DDP's reverse order); a full bucket starts its allreduce at once. */
static int grad_ready(int i, void *user)
{
    replica *r = user;
    return ct_bucketer_mark_ready(r->bucketer, r->nparams - 1 - i);
}

/* Overlap mode: a bucketer over the parameters' slices of the flat gradient buffer, in reverse
 * parameter order (the order backward finishes them), driven by the gradient-ready hook. */
static int replica_bucketer_new(replica *r)
{
    const ct_param_ref *ps;
    int np, rc;
    float **grads = NULL;
    size_t *counts = NULL;
    if ((rc = ct_module_params(r->net, &ps, &np)) < 0)
        return rc;
    grads = malloc(sizeof *grads * (size_t)np);
    counts = malloc(sizeof *counts * (size_t)np);
    if (!grads || !counts) {
        rc = CT_ENOMEM;
        goto out;
    }
    for (int k = 0; k < np; k++) {
        grads[k] = ps[np - 1 - k].grad;
        counts[k] = (size_t)ps[np - 1 - k].numel;
    }
    size_t bucket = (size_t)(r->cfg.bucket_mb * 1024 * 1024);
    size_t first = bucket < (1u << 20) ? bucket : (1u << 20);
    r->nparams = np;
    if ((rc = ct_bucketer_new(
             r->comm, grads, counts, np,
             &(ct_bucketer_opts){.first_bucket_bytes = first, .bucket_bytes = bucket},
             &r->bucketer)) < 0)
        goto out;
    rc = ct_module_on_grad_ready(r->net, grad_ready, r);
out:
    free(grads);
    free(counts);
    return rc;
}

/* Joins the gradient group (blocks until every replica has joined). */
static int replica_join(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    replica *r = state;
    int rc = ct_comm_new(&(ct_comm_opts){.rendezvous = r->rdv,
                                         .group_id = r->cfg.group,
                                         .rank = r->cfg.rank,
                                         .world_size = r->cfg.world,
                                         .node_id = ct_self_node_id()},
                         &r->comm);
    if (rc == 0 && r->cfg.overlap)
        rc = replica_bucketer_new(r);
    return rc;
}

/* Averages this step's gradients over the group: the buckets still in flight (overlap), or
 * the whole flat buffer at once. */
static int replica_sync_grads(replica *r)
{
    if (r->bucketer)
        return ct_bucketer_finish(r->bucketer);
    return ct_comm_allreduce(r->comm, r->grads, (size_t)r->numel, CT_F32, CT_COMM_AVG, 0);
}

static int64_t hash_floats(const float *x, int64_t n)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)x;
    for (int64_t i = 0; i < n * (int64_t)sizeof(float); i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return (int64_t)(h >> 1);
}

/* One epoch over this replica's shard: forward, backward (buckets reduced meanwhile in
 * overlap mode), average the gradients over the group, step. Result: an epoch_report. */
static int replica_train_epoch(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    replica *r = state;
    int64_t epoch = *(const int64_t *)args;
    epoch_report rep = {0};
    int rc = ct_loader_set_epoch(r->loader, epoch);
    double t0 = now_s();
    ct_batch b;
    while (rc == 0 && (rc = ct_loader_next(r->loader, &b)) > 0) {
        int64_t xs[4] = {b.n, b.shape[0], b.shape[1], b.shape[2]}, ys[1] = {b.n};
        ct_tensor *x = ct_tensor_wrap(CT_F32, 4, xs, (void *)b.x);
        ct_tensor *y = ct_tensor_wrap(CT_I64, 1, ys, (void *)b.y);
        ct_tensor *logits = NULL, *loss = NULL;
        ct_module_zero_grad(r->net);
        rc = CT_EINVAL;
        if ((logits = ct_module_forward(r->net, x)) &&
            (loss = ct_nn_cross_entropy(logits, y, 0.0f))) {
            double tb = now_s();
            rc = ct_tensor_backward(loss, NULL);
            double ts = now_s();
            /* always: in overlap mode this also drains the buckets a failed backward queued */
            int src = replica_sync_grads(r);
            rc = rc < 0 ? rc : src;
            rep.backward_seconds += ts - tb;
            rep.sync_seconds += now_s() - ts;
            rep.steps++;
        }
        if (rc == 0 && (rc = ct_optim_step(r->optim)) == 0) {
            rep.loss_sum += ct_tensor_item(loss) * (double)b.n;
            rep.samples += b.n;
        }
        ct_tensor_release(&loss);
        ct_tensor_release(&logits);
        ct_tensor_release(&x);
        ct_tensor_release(&y);
    }
    if (rc == 0 && r->sched)
        rc = ct_sched_step(r->sched); /* StepLR: one step per epoch */
    if (rc < 0)
        return rc;
    rep.seconds = now_s() - t0;
    float *values, *grads;
    int64_t numel;
    ct_module_flat(r->net, &values, &grads, &numel);
    rep.weights_hash = hash_floats(values, numel);
    if (!(*res = malloc(sizeof rep)))
        return CT_ENOMEM;
    memcpy(*res, &rep, sizeof rep);
    *rlen = sizeof rep;
    return 0;
}

/* Test-set accuracy of this replica's model (a double). */
static int replica_evaluate(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    replica *r = state;
    double acc;
    int rc = fmnist_test_accuracy(r->net, r->test, &acc);
    if (rc < 0)
        return rc;
    if (!(*res = malloc(sizeof acc)))
        return CT_ENOMEM;
    memcpy(*res, &acc, sizeof acc);
    *rlen = sizeof acc;
    return 0;
}

/* ---- driver ---- */

typedef struct options {
    int replicas, epochs, overlap, timing;
    int64_t batch, limit;
    double lr, gamma, min_accuracy, bucket_mb;
    uint64_t seed;
    const char *model, *data;
} options;

static void usage(FILE *f)
{
    fprintf(f, "usage: ddp_fashion_mnist [--replicas N] [--epochs N] [--batch N] [--lr X] "
               "[--gamma X]\n"
               "                         [--limit N] [--model cnn|mlp] [--seed N] [--data DIR]\n"
               "                         [--min-accuracy X] [--bucket-mb X] [--no-overlap] "
               "[--timing]\n"
               "  --replicas N       replica actors (default 2)\n"
               "  --epochs N         epochs (default 2)\n"
               "  --batch N          batch size per replica (default 64)\n"
               "  --lr X             Adam's learning rate (default 1e-3)\n"
               "  --gamma X          learning rate factor after each epoch (default 0.5; 1: off)\n"
               "  --limit N          use only the first N training samples (default: all)\n"
               "  --model cnn|mlp    the model (default cnn)\n"
               "  --seed N           seed of the initialisation and the shuffle (default 0)\n"
               "  --data DIR         the IDX files (default /usr/share/datasets/fashion-mnist)\n"
               "  --min-accuracy X   exit 1 when the final test accuracy is below X\n"
               "  --bucket-mb X      gradient bucket size in MiB (default 25)\n"
               "  --no-overlap       one flat allreduce after backward instead of buckets\n"
               "  --timing           print backward and gradient sync times per step\n"
               "Joins the cluster in $CT_ADDRESS, or starts an embedded one on this machine.\n");
}

/* Fills *o from the command line. Returns 0, -1 after --help (usage printed), or 2 after a
 * usage error (said on stderr). */
static int parse(int argc, char **argv, options *o)
{
    *o = (options){.replicas = 2,
                   .epochs = 2,
                   .batch = 64,
                   .lr = 1e-3,
                   .gamma = 0.5,
                   .model = "cnn",
                   .overlap = 1,
                   .bucket_mb = 25};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(k, "--no-overlap")) {
            o->overlap = 0;
            continue;
        } else if (!strcmp(k, "--timing")) {
            o->timing = 1;
            continue;
        } else if (!strcmp(k, "--replicas")) {
            o->replicas = atoi(v);
        } else if (!strcmp(k, "--epochs")) {
            o->epochs = atoi(v);
        } else if (!strcmp(k, "--batch")) {
            o->batch = atoll(v);
        } else if (!strcmp(k, "--lr")) {
            o->lr = atof(v);
        } else if (!strcmp(k, "--gamma")) {
            o->gamma = atof(v);
        } else if (!strcmp(k, "--limit")) {
            o->limit = atoll(v);
        } else if (!strcmp(k, "--seed")) {
            o->seed = strtoull(v, NULL, 10);
        } else if (!strcmp(k, "--model")) {
            o->model = v;
        } else if (!strcmp(k, "--data")) {
            o->data = v;
        } else if (!strcmp(k, "--min-accuracy")) {
            o->min_accuracy = atof(v);
        } else if (!strcmp(k, "--bucket-mb")) {
            o->bucket_mb = atof(v);
        } else {
            fprintf(stderr, "ddp_fashion_mnist: unknown option '%s' (see --help)\n", k);
            return 2;
        }
        if (++i == argc) { /* every option from --replicas on takes a value */
            fprintf(stderr, "ddp_fashion_mnist: %s needs a value\n", k);
            return 2;
        }
    }
    if (o->replicas < 1 || o->replicas > 64 || o->batch < 1 || o->epochs < 0 ||
        !(o->bucket_mb > 0 && o->bucket_mb <= 1024) ||
        (strcmp(o->model, "cnn") && strcmp(o->model, "mlp"))) {
        fprintf(stderr,
                "ddp_fashion_mnist: bad --replicas, --batch, --epochs, --bucket-mb or --model\n");
        return 2;
    }
    return 0;
}

/* Calls method with args on every replica at once; results[i] gets each result (malloc'd). */
static int call_all(ct_actor **actors, int n, const char *method, const void *args, size_t len,
                    void **results)
{
    ct_future **f = calloc((size_t)n, sizeof *f);
    int rc = f ? 0 : CT_ENOMEM;
    for (int i = 0; i < n && rc == 0; i++)
        rc = ct_actor_call_async(actors[i], method, args, len, &f[i]);
    for (int i = 0; f && i < n; i++) {
        int w = f[i] ? ct_future_wait(f[i], -1, results ? &results[i] : NULL, NULL) : 0;
        if (w && !rc) {
            fprintf(stderr, "ddp_fashion_mnist: %s on replica %d: %s: %s\n", method, i,
                    ct_strerror(w), ct_last_error());
            rc = w;
        }
        ct_future_destroy(&f[i]);
    }
    free(f);
    return rc;
}

int main(int argc, char **argv)
{
    ct_actor_class_register("Replica",
                            &(ct_actor_class){.create = replica_new,
                                              .destroy = replica_free,
                                              .methods = {{"join", replica_join},
                                                          {"train_epoch", replica_train_epoch},
                                                          {"evaluate", replica_evaluate}}});
    options o;
    int rc = parse(argc, argv, &o), status = 1;
    if (rc)
        return rc < 0 ? 0 : rc;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = (int)(cores / o.replicas) > 0 ? (int)(cores / o.replicas) : 1;
    if ((rc = ct_init(&(ct_init_opts){.cpus = o.replicas > cores ? o.replicas : cores})) < 0) {
        fprintf(stderr, "ddp_fashion_mnist: ct_init: %s\n", ct_last_error());
        return 1;
    }
    ct_actor **actors = calloc((size_t)o.replicas, sizeof *actors);
    void **results = calloc((size_t)o.replicas, sizeof *results);
    if (!actors || !results)
        goto out;
    printf("ddp_fashion_mnist: %d replicas of the %s, %d thread(s) each, cluster at %s\n",
           o.replicas, o.model, threads, ct_head_address());
    if (o.overlap)
        printf("gradients: buckets of %g MiB (first <= 1 MiB) reduced during backward\n",
               o.bucket_mb);
    else
        printf("gradients: one flat allreduce after backward (--no-overlap)\n");
    double t_start = now_s();
    /* one group id for all replicas (computed once: a second boundary between two replicas'
     * creation must not split the group) */
    char group[64];
    snprintf(group, sizeof group, "ddp-%d-%lld", (int)getpid(), (long long)t_start);
    for (int i = 0; i < o.replicas; i++) {
        replica_config c = {.rank = i,
                            .world = o.replicas,
                            .threads = threads,
                            .batch = o.batch,
                            .limit = o.limit,
                            .lr = o.lr,
                            .gamma = o.gamma,
                            .seed = o.seed,
                            .overlap = o.overlap,
                            .bucket_mb = o.bucket_mb};
        snprintf(c.model, sizeof c.model, "%s", o.model);
        snprintf(c.data, sizeof c.data, "%s", o.data ? o.data : "");
        memcpy(c.group, group, sizeof c.group);
        if ((rc = ct_actor_create("Replica", &(ct_resources){.cpu = 1}, &c, sizeof c, &actors[i])) <
            0) {
            fprintf(stderr, "ddp_fashion_mnist: creating replica %d: %s: %s\n", i, ct_strerror(rc),
                    ct_last_error());
            goto out;
        }
    }
    if (call_all(actors, o.replicas, "join", NULL, 0, NULL) < 0)
        goto out;
    printf("replicas ready in %.2f s\n", now_s() - t_start);
    double acc = 0, loss = 0, train_time = 0;
    int64_t train_samples = 0;
    for (int64_t epoch = 0; epoch < o.epochs; epoch++) {
        if (call_all(actors, o.replicas, "train_epoch", &epoch, sizeof epoch, results) < 0)
            goto out;
        double loss_sum = 0, slowest = 0, bw_ms = 0, sync_ms = 0;
        int64_t samples = 0, agree = 1;
        for (int i = 0; i < o.replicas; i++) {
            epoch_report *rep = results[i];
            int64_t st = rep->steps ? rep->steps : 1;
            bw_ms += 1e3 * rep->backward_seconds / (double)st / o.replicas;
            sync_ms += 1e3 * rep->sync_seconds / (double)st / o.replicas;
            loss_sum += rep->loss_sum;
            samples += rep->samples;
            slowest = rep->seconds > slowest ? rep->seconds : slowest;
            agree &= rep->weights_hash == ((epoch_report *)results[0])->weights_hash;
        }
        for (int i = 0; i < o.replicas; i++) {
            free(results[i]);
            results[i] = NULL;
        }
        if (!agree) {
            fprintf(stderr, "ddp_fashion_mnist: replicas' weights differ after epoch %lld\n",
                    (long long)epoch + 1);
            goto out;
        }
        if (call_all(actors, 1, "evaluate", NULL, 0, results) < 0)
            goto out;
        acc = *(double *)results[0];
        free(results[0]);
        results[0] = NULL;
        loss = loss_sum / (double)(samples ? samples : 1);
        train_time += slowest;
        train_samples += samples;
        printf("epoch %lld: train_loss=%.4f test_accuracy=%.4f samples_per_s=%.1f "
               "time=%.1fs (replicas' weights identical)\n",
               (long long)epoch + 1, loss, acc, (double)samples / slowest, slowest);
        if (o.timing)
            printf("  per step, mean over replicas: backward=%.2fms gradient_sync_after_backward="
                   "%.2fms\n",
                   bw_ms, sync_ms);
        fflush(stdout);
    }
    printf("final: test_accuracy=%.4f train_loss=%.4f samples_per_s=%.1f\n", acc, loss,
           train_time > 0 ? (double)train_samples / train_time : 0.0);
    status = acc >= o.min_accuracy ? 0 : 1;
    if (status)
        fprintf(stderr, "ddp_fashion_mnist: test accuracy %.4f below --min-accuracy %.4f\n", acc,
                o.min_accuracy);
out:
    for (int i = 0; actors && i < o.replicas; i++)
        ct_actor_release(&actors[i]);
    free(actors);
    free(results);
    ct_shutdown();
    return status;
}
