/* examples/fashion_mnist.c — single-process training on Fashion-MNIST with ct's engine.
 *
 * The CNN: Conv2d(1,32,3,pad 1)-BatchNorm2d-ReLU-MaxPool2d(2), Conv2d(32,64,3,pad 1)-
 * BatchNorm2d-ReLU-MaxPool2d(2), Flatten, Linear(3136,128)-ReLU-Dropout(0.25), Linear(128,10);
 * or `--model mlp`: MLP 784-256-128-10. Pixels are scaled to [0,1] and normalised with mean
 * 0.2860, std 0.3530. Adam (lr 1e-3) by default, `--optim sgd` for SGD with momentum 0.9; the
 * learning rate is multiplied by --gamma (0.5) after every epoch (StepLR; 1 turns it off).
 *
 *   fashion_mnist [--model cnn|mlp] [--epochs 4] [--batch 64] [--lr 1e-3] [--gamma 0.5]
 *                 [--optim adam|sgd]
 *                 [--threads N] [--limit N] [--seed 0] [--data DIR] [--bench-steps N]
 *                 [--min-accuracy X] [--stop-at X]
 *
 * Prints one line per epoch and last `final: test_accuracy=<x> train_loss=<y> samples_per_s=<z>`
 * (samples_per_s: training samples per second of training time, evaluation excluded).
 * --bench-steps N: time N training steps after 5 warm-up steps and print only the final line
 * with test_accuracy=0. --min-accuracy X: exit 1 when the final test accuracy is below X (the
 * test engine_fashion_mnist_accuracy). --stop-at X: stop after the first epoch whose test
 * accuracy reaches X (early stopping). Not here: distributed training
 * (see the trainer examples). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct/data.h"
#include "ct/error.h"
#include "ct/nn.h"
#include "ct/optim.h"
#include "ct/tensor.h"
#include "fashion_mnist_model.h"

typedef struct args {
    const char *model, *optim, *data;
    int epochs, threads, bench_steps;
    double min_accuracy, stop_at;
    int64_t batch, limit;
    double lr, gamma;
    uint64_t seed;
} args;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fashion_mnist [--model cnn|mlp] [--epochs N] [--batch N] [--lr X] "
               "[--gamma X]\n"
               "                     [--optim adam|sgd] [--threads N] [--limit N] [--seed N]\n"
               "                     [--data DIR] [--bench-steps N] [--min-accuracy X]\n"
               "                     [--stop-at X]\n"
               "  --model cnn|mlp    the model (default cnn)\n"
               "  --epochs N         epochs (default 4)\n"
               "  --batch N          batch size (default 64)\n"
               "  --lr X             learning rate (default 1e-3)\n"
               "  --gamma X          learning rate factor after each epoch (default 0.5; 1: off)\n"
               "  --optim adam|sgd   the optimizer (default adam; sgd: momentum 0.9)\n"
               "  --threads N        engine threads (default: all CPUs)\n"
               "  --limit N          use only the first N training samples (default: all)\n"
               "  --seed N           seed of the initialisation and the shuffle (default 0)\n"
               "  --data DIR         the IDX files (default /usr/share/datasets/fashion-mnist)\n"
               "  --bench-steps N    time N training steps and print only the final line\n"
               "  --min-accuracy X   exit 1 when the final test accuracy is below X\n"
               "  --stop-at X        stop after the first epoch with test accuracy >= X\n");
}

/* Fills *a from the command line. Returns 0, -1 after --help (usage printed), or 2 after a
 * usage error (said on stderr). */
static int parse(int argc, char **argv, args *a)
{
    *a =
        (args){.model = "cnn", .optim = "adam", .epochs = 4, .batch = 64, .lr = 1e-3, .gamma = 0.5};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(k, "--model")) {
            a->model = v;
        } else if (!strcmp(k, "--optim")) {
            a->optim = v;
        } else if (!strcmp(k, "--data")) {
            a->data = v;
        } else if (!strcmp(k, "--epochs")) {
            a->epochs = atoi(v);
        } else if (!strcmp(k, "--batch")) {
            a->batch = atoll(v);
        } else if (!strcmp(k, "--lr")) {
            a->lr = atof(v);
        } else if (!strcmp(k, "--gamma")) {
            a->gamma = atof(v);
        } else if (!strcmp(k, "--threads")) {
            a->threads = atoi(v);
        } else if (!strcmp(k, "--limit")) {
            a->limit = atoll(v);
        } else if (!strcmp(k, "--seed")) {
            a->seed = strtoull(v, NULL, 10);
        } else if (!strcmp(k, "--bench-steps")) {
            a->bench_steps = atoi(v);
        } else if (!strcmp(k, "--min-accuracy")) {
            a->min_accuracy = atof(v);
        } else if (!strcmp(k, "--stop-at")) {
            a->stop_at = atof(v);
        } else {
            fprintf(stderr, "fashion_mnist: unknown option '%s' (see --help)\n", k);
            return 2;
        }
        if (++i == argc) { /* every option but --help takes a value */
            fprintf(stderr, "fashion_mnist: %s needs a value\n", k);
            return 2;
        }
    }
    if (strcmp(a->model, "cnn") && strcmp(a->model, "mlp")) {
        fprintf(stderr, "fashion_mnist: --model: '%s' is not cnn or mlp\n", a->model);
        return 2;
    }
    if (a->batch <= 0 || a->epochs < 0) {
        fprintf(stderr, "fashion_mnist: --batch must be > 0 and --epochs >= 0\n");
        return 2;
    }
    return 0;
}

/* One training step on a borrowed batch; returns the loss or NAN on error. */
static float train_step(ct_module *net, ct_optim *o, const ct_batch *b)
{
    int64_t xs[4] = {b->n, b->shape[0], b->shape[1], b->shape[2]}, ys[1] = {b->n};
    ct_tensor *x = ct_tensor_wrap(CT_F32, 4, xs, (void *)b->x);
    ct_tensor *y = ct_tensor_wrap(CT_I64, 1, ys, (void *)b->y);
    ct_tensor *logits = NULL, *loss = NULL;
    float lv = NAN;
    ct_module_zero_grad(net);
    logits = ct_module_forward(net, x);
    if (logits)
        loss = ct_nn_cross_entropy(logits, y, 0.0f);
    if (loss && ct_tensor_backward(loss, NULL) == 0 && ct_optim_step(o) == 0)
        lv = ct_tensor_item(loss);
    ct_tensor_release(&loss);
    ct_tensor_release(&logits);
    ct_tensor_release(&x);
    ct_tensor_release(&y);
    return lv;
}

int main(int argc, char **argv)
{
    args a;
    int rc = parse(argc, argv, &a), status = 1;
    if (rc)
        return rc < 0 ? 0 : rc;
    ct_dataset *train_full = NULL, *train = NULL, *test = NULL;
    ct_loader *ld = NULL;
    ct_module *net = NULL;
    ct_optim *o = NULL;
    ct_sched *sched = NULL;
    if (a.threads > 0)
        ct_nn_set_threads(a.threads);
    ct_nn_manual_seed(a.seed);
    if (ct_dataset_open_mnist(a.data, true, &train_full) < 0 ||
        ct_dataset_open_mnist(a.data, false, &test) < 0) {
        fprintf(stderr, "fashion_mnist: %s\n", ct_last_error());
        goto out;
    }
    int64_t n = ct_dataset_length(train_full);
    if (a.limit > 0 && a.limit < n)
        n = a.limit;
    if (ct_dataset_subset(train_full, 0, n, &train) < 0)
        goto fail;
    if (ct_loader_new(train,
                      &(ct_loader_opts){.batch_size = a.batch,
                                        .shuffle = true,
                                        .seed = a.seed,
                                        .prefetch = 4,
                                        .transform = {.mean = fmnist_mean, .std = fmnist_std}},
                      &ld) < 0)
        goto fail;
    net = fmnist_make_model(a.model);
    if (!net)
        goto fail;
    const ct_param_ref *ps;
    int np;
    if (ct_module_params(net, &ps, &np) < 0)
        goto fail;
    if (!strcmp(a.optim, "sgd"))
        o = ct_optim_sgd_new(ps, np, &(ct_sgd_opts){.lr = a.lr, .momentum = 0.9});
    else
        o = ct_optim_adam_new(ps, np, &(ct_adam_opts){.lr = a.lr});
    if (!o)
        goto fail;
    /* StepLR(step_size=1, gamma): the learning rate shrinks every epoch */
    if (a.gamma > 0 && a.gamma != 1.0 &&
        !(sched = ct_sched_steplr_new(o, &(ct_steplr_opts){.step_size = 1, .gamma = a.gamma})))
        goto fail;

    if (a.bench_steps > 0) {
        /* throughput only: warm up, then time bench_steps steps (epochs wrap around) */
        ct_batch b;
        int64_t epoch = 0, samples = 0;
        double t0 = 0, last = NAN;
        ct_loader_set_epoch(ld, epoch);
        for (int s = 0; s < a.bench_steps + 5; s++) {
            if (s == 5) {
                t0 = now_s();
                samples = 0;
            }
            int r = ct_loader_next(ld, &b);
            if (r == 0) {
                ct_loader_set_epoch(ld, ++epoch);
                r = ct_loader_next(ld, &b);
            }
            if (r < 0)
                goto fail;
            last = train_step(net, o, &b);
            if (last != last)
                goto fail;
            samples += b.n;
        }
        double dt = now_s() - t0;
        printf("final: test_accuracy=0 train_loss=%.4f samples_per_s=%.1f\n", last,
               (double)samples / dt);
        status = 0;
        goto out;
    }

    double train_time = 0, loss_sum = 0, acc = 0;
    int64_t train_samples = 0, loss_n = 0;
    for (int epoch = 0; epoch < a.epochs; epoch++) {
        ct_batch b;
        loss_sum = 0;
        loss_n = 0;
        double t0 = now_s();
        if (ct_loader_set_epoch(ld, epoch) < 0)
            goto fail;
        while ((rc = ct_loader_next(ld, &b)) > 0) {
            float l = train_step(net, o, &b);
            if (l != l)
                goto fail;
            loss_sum += l * (double)b.n;
            loss_n += b.n;
        }
        if (rc < 0)
            goto fail;
        double dt = now_s() - t0;
        train_time += dt;
        train_samples += loss_n;
        if (fmnist_test_accuracy(net, test, &acc) < 0)
            goto fail;
        if (sched && ct_sched_step(sched) < 0)
            goto fail;
        printf("epoch %d: train_loss=%.4f test_accuracy=%.4f samples_per_s=%.1f time=%.1fs\n",
               epoch + 1, loss_sum / (double)(loss_n ? loss_n : 1), acc, (double)loss_n / dt, dt);
        fflush(stdout);
        if (a.stop_at > 0 && acc >= a.stop_at)
            break;
    }
    printf("final: test_accuracy=%.4f train_loss=%.4f samples_per_s=%.1f\n", acc,
           loss_sum / (double)(loss_n ? loss_n : 1),
           train_time > 0 ? (double)train_samples / train_time : 0.0);
    status = acc >= a.min_accuracy ? 0 : 1;
    if (status)
        fprintf(stderr, "fashion_mnist: test accuracy %.4f below --min-accuracy %.4f\n", acc,
                a.min_accuracy);
    goto out;
fail:
    fprintf(stderr, "fashion_mnist: %s\n", ct_last_error());
out:
    ct_sched_destroy(&sched);
    ct_optim_destroy(&o);
    ct_module_destroy(&net);
    ct_loader_destroy(&ld);
    ct_dataset_destroy(&train);
    ct_dataset_destroy(&test);
    ct_dataset_destroy(&train_full);
    return status;
}
