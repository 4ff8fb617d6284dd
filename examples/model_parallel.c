/* examples/model_parallel.c — the PyTorch tutorial's single-machine model parallelism, in ct:
 * a ResNet-50 (examples/resnet50_model.h) whose seq1 (conv1 .. layer2) is on one device and
 * seq2 (layer3, layer4, avgpool) and fc on another, x = fc(seq2(seq1(x).to(dev1))), trained
 * beside the same model on one device, with the tutorial's loop: SGD (lr 0.001), MSE against
 * one-hot labels of random classes, random images. Both start from the same weights and must
 * end with the same weights, bit for bit; the program says whether they do and exits 1 if not.
 *
 *   model_parallel [--device checkdev|cuda] [--width 16] [--size 64] [--batch 8] [--steps 5]
 *                  [--repeat 3] [--classes 100]
 *
 * --device checkdev: checkdev:0 and checkdev:1 (the checking device, CPU kernels on worker
 * threads; no GPU needed). cuda: cuda:0 and cuda:1 (not yet run on two GPUs; without them the
 * program says what is missing). The tutorial's model is --width 64 --size 224 --classes 1000 on
 * two GPUs; the defaults are smaller so that the CPU behind the checking device finishes in
 * seconds.
 *
 * After one untimed step of each (the CPU kernels' first calls build their primitives), prints
 * one line per run and last
 *   model_parallel: single=<s> split=<s> s per <N> steps ratio=<single/split> same_weights=<0|1>
 * (the mean of --repeat runs each). The tutorial's plot: model parallel is a little slower than
 * one device, as the two devices never work at once; pipelining is what wins the time back. On
 * the checking device the times are the emulator's, not a GPU's: each stream's worker sleeps
 * CT_CHECKDEV_DELAY_US (200 us) before each task, and two devices' workers sleep at once, which
 * flatters the split; CT_CHECKDEV_DELAY_US=0 times the CPU kernels alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct/error.h"
#include "ct/nn.h"
#include "ct/optim.h"
#include "ct/tensor.h"
#include "resnet50_model.h"

typedef struct args {
    const char *device;
    int width, size, batch, steps, repeat, classes;
} args;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: model_parallel [--device checkdev|cuda] [--width N] [--size N] [--batch N]\n"
               "                      [--steps N] [--repeat N] [--classes N]\n"
               "  --device D   checkdev (checkdev:0 and :1, default) or cuda (cuda:0 and :1)\n"
               "  --width N    first stage's width (default 16; torchvision's is 64)\n"
               "  --size N     image side (default 64; the tutorial's is 224)\n"
               "  --batch N    batch size (default 8)\n"
               "  --steps N    training steps per run (default 5)\n"
               "  --repeat N   runs of each (default 3)\n"
               "  --classes N  classes (default 100; the tutorial's is 1000)\n");
}

static int parse(int argc, char **argv, args *a)
{
    *a = (args){"checkdev", 16, 64, 8, 5, 3, 100};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *ip = !strcmp(k, "--width")     ? &a->width
                  : !strcmp(k, "--size")    ? &a->size
                  : !strcmp(k, "--batch")   ? &a->batch
                  : !strcmp(k, "--steps")   ? &a->steps
                  : !strcmp(k, "--repeat")  ? &a->repeat
                  : !strcmp(k, "--classes") ? &a->classes
                                            : NULL;
        if (!strcmp(k, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!v) {
            fprintf(stderr, "model_parallel: %s: unknown, or without its value\n", k);
            return -1;
        } else if (!strcmp(k, "--device")) {
            a->device = v;
        } else if (ip) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 100000) {
                fprintf(stderr, "model_parallel: %s %s: not a positive integer\n", k, v);
                return -1;
            }
            *ip = (int)n;
        } else {
            fprintf(stderr, "model_parallel: %s: unknown option\n", k);
            return -1;
        }
        i++;
    }
    if (strcmp(a->device, "checkdev") && strcmp(a->device, "cuda")) {
        fprintf(stderr, "model_parallel: --device %s: not checkdev or cuda\n", a->device);
        return -1;
    }
    if (a->size < 32) {
        fprintf(stderr, "model_parallel: --size %d: at least 32 (five halvings)\n", a->size);
        return -1;
    }
    return 0;
}

/* random images in [0, 1) and one-hot labels of random classes, from state *st */
static void make_batch(const args *a, uint64_t *st, float *x, float *y)
{
    size_t nx = (size_t)a->batch * 3 * a->size * a->size;
    for (size_t i = 0; i < nx; i++) {
        *st = *st * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((*st >> 40) / (double)(1 << 24));
    }
    memset(y, 0, (size_t)a->batch * a->classes * sizeof(float));
    for (int i = 0; i < a->batch; i++) {
        *st = *st * 6364136223846793005ull + 1442695040888963407ull;
        y[(size_t)i * a->classes + (*st >> 33) % (uint64_t)a->classes] = 1.0f;
    }
}

/* One run: a fresh model (seed 0) placed on first/second, steps SGD steps; *seconds: the loop's
 * time, synchronized by reading the last loss. Returns the model (caller destroys) or NULL. */
static ct_module *run(const args *a, ct_device first, ct_device second, double *seconds)
{
    rn50 r;
    ct_nn_manual_seed(0);
    rn50_build(&r, a->width, a->classes);
    if (!r.root || rn50_place(&r, first, second) < 0) {
        fprintf(stderr, "model_parallel: building or placing the model: %s\n", ct_last_error());
        ct_module_destroy(&r.root);
        return NULL;
    }
    const ct_param_ref *refs;
    int n;
    ct_optim *o = ct_module_params(r.root, &refs, &n) < 0
                      ? NULL
                      : ct_optim_sgd_new(refs, n, &(ct_sgd_opts){.lr = 0.001});
    size_t nx = (size_t)a->batch * 3 * a->size * a->size, ny = (size_t)a->batch * a->classes;
    float *hx = malloc(nx * sizeof(float)), *hy = malloc(ny * sizeof(float));
    int64_t xs[4] = {a->batch, 3, a->size, a->size}, ys[2] = {a->batch, a->classes};
    uint64_t st = 42;
    int rc = o && hx && hy ? 0 : -1;
    float last = NAN;
    double t0 = now_s();
    for (int s = 0; s < a->steps && rc == 0; s++) {
        make_batch(a, &st, hx, hy);
        ct_tensor *cx = ct_tensor_from_f32(4, xs, hx), *cy = ct_tensor_from_f32(2, ys, hy);
        ct_tensor *x = cx ? ct_tensor_to(cx, first) : NULL;
        ct_tensor *y = cy ? ct_tensor_to(cy, second) : NULL;
        ct_module_zero_grad(r.root);
        ct_tensor *out =
            x && y ? rn50_forward(&r, x, second, second == first ? NULL : rn50_cross_to) : NULL;
        ct_tensor *loss = out ? ct_nn_mse_loss(out, y) : NULL;
        rc = !loss || ct_tensor_backward(loss, NULL) < 0 || ct_optim_step(o) < 0 ? -1 : 0;
        if (rc == 0 && s == a->steps - 1)
            last = ct_tensor_item(loss); /* waits for the devices */
        ct_tensor *ts[] = {loss, out, y, x, cy, cx};
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++)
            ct_tensor_release(&ts[k]);
    }
    *seconds = now_s() - t0;
    if (rc < 0 || last != last)
        fprintf(stderr, "model_parallel: training: %s\n", ct_last_error());
    ct_optim_destroy(&o);
    free(hx);
    free(hy);
    if (rc < 0 || last != last)
        ct_module_destroy(&r.root);
    return r.root;
}

/* whether a and b have the same state-dict bytes. The copies to the host are read, not
 * differentiated: in no-grad mode, else each would record a node on the tape that holds its
 * parameter (and so the module's buffers) until the next backward, here never. */
static bool same_weights(ct_module *a, ct_module *b)
{
    const ct_named_tensor *sa, *sb;
    int na, nb;
    if (ct_module_state_dict(a, &sa, &na) < 0 || ct_module_state_dict(b, &sb, &nb) < 0 || na != nb)
        return false;
    bool same = true, grad_mode = ct_autograd_set_enabled(false);
    for (int i = 0; i < na && same; i++) {
        ct_tensor *ha = ct_tensor_to(sa[i].tensor, CT_CPU),
                  *hb = ct_tensor_to(sb[i].tensor, CT_CPU);
        size_t bytes = (size_t)ct_tensor_numel(sa[i].tensor) * ct_dtype_size(ct_tensor_dtype(ha));
        same = ha && hb && ct_tensor_numel(ha) == ct_tensor_numel(hb) &&
               !memcmp(ct_tensor_data(ha), ct_tensor_data(hb), bytes);
        ct_tensor_release(&ha);
        ct_tensor_release(&hb);
    }
    ct_autograd_set_enabled(grad_mode);
    return same;
}

int main(int argc, char **argv)
{
    args a;
    if (parse(argc, argv, &a) < 0) {
        usage(stderr);
        return 2;
    }
    int kind = !strcmp(a.device, "cuda") ? CT_CUDA : CT_CHECKDEV;
    ct_device d0 = ct_device_make(kind, 0), d1 = ct_device_make(kind, 1);
    char n0[32], n1[32];
    ct_device_name(d0, n0, sizeof n0);
    ct_device_name(d1, n1, sizeof n1);
    double single = 0, split = 0;
    bool same = true;
    { /* warm-up, untimed: the CPU kernels' first calls build their primitives */
        args w = a;
        w.steps = 1;
        double t;
        ct_module *one = run(&w, d0, d0, &t), *two = one ? run(&w, d0, d1, &t) : NULL;
        bool ok = one && two;
        ct_module_destroy(&one);
        ct_module_destroy(&two);
        if (!ok)
            return 1;
    }
    for (int k = 0; k < a.repeat; k++) {
        double ts = 0, tp = 0;
        ct_module *one = run(&a, d0, d0, &ts), *two = one ? run(&a, d0, d1, &tp) : NULL;
        if (!one || !two) {
            ct_module_destroy(&one);
            return 1;
        }
        bool s = same_weights(one, two);
        printf("run %d: single (%s) %.3f s, split (%s | %s) %.3f s, same weights: %s\n", k, n0, ts,
               n0, n1, tp, s ? "yes" : "NO");
        same = same && s;
        single += ts / a.repeat;
        split += tp / a.repeat;
        ct_module_destroy(&one);
        ct_module_destroy(&two);
    }
    printf("model_parallel: single=%.3f split=%.3f s per %d steps ratio=%.3f same_weights=%d\n",
           single, split, a.steps, single / split, same);
    return same ? 0 : 1;
}
