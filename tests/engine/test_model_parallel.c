/* tests/engine/test_model_parallel.c — one model across two devices (issue 40, items 1-3):
 *
 * - device names: "cpu", "cuda:1", "checkdev:1" parse; bad ones are refused with the valid forms;
 * - ct_tensor_to in a forward pass is differentiable (checkdev:0 to checkdev:1 and to the CPU;
 *   the gradient copied back adds to one already there);
 * - ct_module_to on a child after the tree's parameters were packed packs them again;
 * - the checking device's indices are separate memory spaces: a kernel on checkdev:1 given
 *   memory of checkdev:0 is refused, an op on tensors of the two is refused naming both, and a
 *   peer copy from checkdev:0 that no event wait ordered after checkdev:0's writes fails (with
 *   the wait it copies the bytes);
 * - the PyTorch tutorial's model-parallel ResNet-50 (torchvision's Bottleneck, [3, 4, 6, 3]):
 *   seq1 = conv1, bn1, relu, maxpool, layer1, layer2 on checkdev:0; seq2 = layer3, layer4,
 *   avgpool and fc on checkdev:1, x = fc(seq2(seq1(x).to(checkdev:1))). 20 SGD steps (momentum
 *   0.9) on generated 3x64x64 data give losses and weights bit-identical to the same model on
 *   checkdev:0 alone, and the same safetensors file; the forward with the copy done without the
 *   cross-device wait fails, and without the copy fails too. The model is
 *   examples/resnet50_model.h.
 *
 * WIDTH REDUCED: the stages are 8, 16, 32, 64 channels wide (torchvision's 64 .. 512 divided by
 * 8; expansion 4 kept, so fc takes 256 features), batch 4, so that 2 x 20 steps on the checking
 * device (whose every task waits 200 us on its worker) stay well under 60 s. The depth, the
 * strides, the downsample projections and the split are the chapter's. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ct/nn.h"
#include "ct/optim.h"
#include "testutil.h"
#include "examples/resnet50_model.h"
#include "trainer/backend/backend.h"

#define WIDTH 8 /* torchvision: 64 */
#define BATCH 4
#define STEPS 20
#define CLASSES 10

/* ---- device names ---- */

static void test_names(void)
{
    struct {
        const char *s;
        ct_device d;
    } ok[] = {{"cpu", CT_CPU},
              {"cuda", CT_CUDA},
              {"cuda:0", CT_CUDA},
              {"cuda:1", ct_device_make(CT_CUDA, 1)},
              {"checkdev", CT_CHECKDEV},
              {"checkdev:1", ct_device_make(CT_CHECKDEV, 1)},
              {"checkdev:3", ct_device_make(CT_CHECKDEV, 3)}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ct_device d = -1;
        CHECK(ct_device_parse(ok[i].s, &d) == 0 && d == ok[i].d, "parse \"%s\": %d, want %d",
              ok[i].s, d, ok[i].d);
    }
    CHECK(ct_device_kind(ct_device_make(CT_CHECKDEV, 1)) == CT_CHECKDEV &&
              ct_device_index(ct_device_make(CT_CHECKDEV, 1)) == 1,
          "kind and index of checkdev:1");
    const char *bad[] = {"gpu",   "cuda:",       "cuda:x",    "cuda:4", "cuda:12",
                         "cpu:1", "checkdev:-1", "checkdev1", "CUDA",   ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ct_device d = 0;
        int rc = ct_device_parse(bad[i], &d);
        char want[64];
        snprintf(want, sizeof want, "device \"%s\"", bad[i]);
        CHECK(rc == CT_EINVAL && strstr(ct_last_error(), want) &&
                  strstr(ct_last_error(), "\"checkdev:N\""),
              "parse \"%s\": rc %d, message: %s", bad[i], rc, ct_last_error());
    }
    char buf[32];
    CHECK(!strcmp(ct_device_name(ct_device_make(CT_CHECKDEV, 2), buf, sizeof buf), "checkdev:2") &&
              !strcmp(ct_device_name(CT_CUDA, buf, sizeof buf), "cuda") &&
              !strcmp(ct_device_name(ct_device_make(CT_CPU, 1), buf, sizeof buf), "?"),
          "names");
}

/* ---- two checking devices are two memory spaces with their own streams ---- */

static void test_spaces(void)
{
    const ct_device c0 = CT_CHECKDEV, c1 = ct_device_make(CT_CHECKDEV, 1);
    const ct__backend *d0 = ct__backend_of(c0), *d1 = ct__backend_of(c1);
    CHECK(d0 && d1 && d0 != d1 && d1->device == c1 && !strcmp(d1->name, "checkdev:1"),
          "two tables: %s", ct_last_error());
    if (!d0 || !d1)
        return;
    enum { N = 4096 };
    size_t bytes = N * sizeof(float);
    float *a = NULL, *b = NULL, host[N];
    CHECK(d0->alloc((void **)&a, bytes) == 0 && d1->alloc((void **)&b, bytes) == 0, "alloc");

    /* a kernel on checkdev:1's memory given checkdev:0's: refused when queued */
    int rc = d1->axpy(N, 1.0f, a, b);
    CHECK(rc == CT_EINVAL && strstr(ct_last_error(), "memory of checkdev:0 and of checkdev:1"),
          "axpy across devices: rc %d: %s", rc, ct_last_error());

    /* a peer copy with no wait: checkdev:0's fill may not have run, and the copy fails */
    CHECK(d0->fill(N, 1.0f, a) == 0 && d1->fill(N, 0.0f, b) == 0, "fill");
    CHECK(d1->peer_copy(b, a, bytes, NULL) == 0, "peer_copy queued: %s", ct_last_error());
    rc = d1->synchronize(NULL);
    CHECK(rc == CT_EINVAL && strstr(ct_last_error(), "no event wait between the devices"),
          "peer_copy without a wait: rc %d: %s", rc, ct_last_error());

    /* with the wait: the bytes of the fill queued before it */
    void *ev = NULL;
    CHECK(d0->event_new(&ev) == 0, "event_new");
    CHECK(d0->fill(N, 2.0f, a) == 0 && d0->event_record(ev, NULL) == 0 &&
              d1->stream_wait(NULL, ev) == 0 && d1->peer_copy(b, a, bytes, NULL) == 0,
          "peer_copy after a wait: %s", ct_last_error());
    CHECK(d1->download(host, b, bytes) == 0, "download: %s", ct_last_error());
    int wrong = 0;
    for (int i = 0; i < N; i++)
        wrong += host[i] != 2.0f;
    CHECK(wrong == 0, "%d of %d floats not copied", wrong, N);
    d0->event_free(ev);
    d0->free(a);
    d1->free(b);

    /* an op on tensors of the two devices is refused naming both */
    int64_t shape[1] = {8};
    ct_tensor *h = ct_tensor_new(CT_F32, 1, shape);
    ct_tensor *x0 = ct_tensor_to(h, c0), *x1 = ct_tensor_to(h, c1);
    ct_tensor *y = x0 && x1 ? ct_nn_add(x0, x1) : NULL;
    CHECK(x0 && x1 && !y && strstr(ct_last_error(), "checkdev:1"), "add across devices: %s",
          ct_last_error());
    /* ct_tensor_to between them: the bytes, on the other device */
    ct_tensor_fill_f32(h, 3.0f);
    ct_tensor *z0 = ct_tensor_to(h, c0), *z1 = z0 ? ct_tensor_to(z0, c1) : NULL;
    CHECK(z1 && ct_tensor_device(z1) == c1, "to checkdev:1: %s", ct_last_error());
    ct_tensor *s = z1 ? ct_nn_sum(z1) : NULL;
    CHECK(s && ct_tensor_item(s) == 24.0f, "sum on checkdev:1: %g", s ? ct_tensor_item(s) : -1);
    ct_autograd_clear_tape();
    ct_tensor_release(&s);
    ct_tensor_release(&z0);
    ct_tensor_release(&z1);
    ct_tensor_release(&y);
    ct_tensor_release(&x0);
    ct_tensor_release(&x1);
    ct_tensor_release(&h);
}

/* ---- ct_tensor_to in a forward pass is differentiable ---- */

/* x (checkdev:0, requires grad) used on checkdev:1 (through ct_tensor_to), on the CPU, and on
 * its own device: d/dx sum(2 to1(x) + to_cpu(x)^2 + x) = 2 + 2x + 1, gathered on checkdev:0
 * (the second and third terms add into a gradient the first has written: the backward's copy
 * then adds, not overwrites). */
static void test_to_grad(void)
{
    const ct_device c1 = ct_device_make(CT_CHECKDEV, 1);
    int64_t shape[1] = {5};
    float hx[5] = {-2.0f, -0.5f, 0.0f, 1.5f, 3.0f}, g[5];
    ct_tensor *h = ct_tensor_from_f32(1, shape, hx), *x = ct_tensor_to(h, CT_CHECKDEV);
    ct_tensor_set_requires_grad(x, true);
    ct_tensor *a = ct_tensor_to(x, c1), *b = ct_tensor_to(x, CT_CPU);
    ct_tensor *a2 = a ? ct_nn_add(a, a) : NULL, *b2 = b ? ct_nn_mul(b, b) : NULL;
    ct_tensor *sa = a2 ? ct_nn_sum(a2) : NULL, *sb = b2 ? ct_nn_sum(b2) : NULL;
    ct_tensor *sx = ct_nn_sum(x);
    ct_tensor *sa0 = sa ? ct_tensor_to(sa, CT_CHECKDEV) : NULL;
    ct_tensor *sb0 = sb ? ct_tensor_to(sb, CT_CHECKDEV) : NULL;
    ct_tensor *t1 = sa0 && sb0 ? ct_nn_add(sa0, sb0) : NULL;
    ct_tensor *loss = t1 && sx ? ct_nn_add(t1, sx) : NULL;
    CHECK(loss && ct_tensor_device(a) == c1 && ct_tensor_requires_grad(a), "forward: %s",
          ct_last_error());
    CHECK(loss && ct_tensor_backward(loss, NULL) == 0, "backward: %s", ct_last_error());
    ct_tensor *gx = ct_tensor_grad(x);
    CHECK(gx && ct_tensor_copy_to(gx, g, sizeof g) == 0, "grad of x: %s", ct_last_error());
    for (int i = 0; gx && i < 5; i++)
        CHECK(g[i] == 3.0f + 2.0f * hx[i], "d/dx[%d] = %g, want %g", i, g[i], 3.0f + 2.0f * hx[i]);
    ct_tensor *ts[] = {loss, t1, sb0, sa0, sx, sb, sa, b2, a2, b, a, x, h};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        ct_tensor_release(&ts[i]);
}

/* ---- placing a child after the tree was packed packs it again ---- */

static void test_repack(void)
{
    const ct_device c1 = ct_device_make(CT_CHECKDEV, 1);
    ct_nn_manual_seed(3);
    ct_module *a = ct_nn_linear_new(4, 3, true), *b = ct_nn_linear_new(3, 2, true);
    ct_module *net = CT_SEQUENTIAL(a, b);
    const ct_param_ref *r;
    int n = 0;
    CHECK(ct_module_to(net, CT_CHECKDEV) == 0 && ct_module_params(net, &r, &n) == 0 && n == 4,
          "packed on checkdev: %s", ct_last_error());
    float before[6], after[6];
    const ct_named_tensor *sd;
    int nsd;
    CHECK(ct_module_state_dict(b, &sd, &nsd) == 0 && nsd == 2 && !strcmp(sd[0].name, "weight"),
          "b's state dict");
    ct_tensor *wb = ct_tensor_to(sd[0].tensor, CT_CPU);
    CHECK(wb && ct_tensor_copy_to(wb, before, sizeof before) == 0, "b's weight");
    ct_tensor_release(&wb);
    CHECK(ct_module_to(b, c1) == 0 && ct_module_params(net, &r, &n) == 0 && n == 4, "again: %s",
          ct_last_error());
    CHECK(r[0].device == CT_CHECKDEV && r[1].device == CT_CHECKDEV && r[2].device == c1 &&
              r[3].device == c1,
          "devices after the move: %d %d %d %d", r[0].device, r[1].device, r[2].device,
          r[3].device);
    CHECK(ct_module_state_dict(b, &sd, &nsd) == 0 && nsd == 2, "b's state dict after"); /* anew */
    wb = ct_tensor_to(sd[0].tensor, CT_CPU);
    CHECK(wb && ct_tensor_copy_to(wb, after, sizeof after) == 0 &&
              !memcmp(before, after, sizeof after),
          "b's weight moved with its values");
    ct_tensor_release(&wb);
    ct_module_destroy(&net);
}

/* ---- the split ResNet-50 ---- */

/* The host-free copy of ct_tensor_to without its event wait (what "removing the wait" means):
 * queued on `to` at once. */
static ct_tensor *copy_no_wait(ct_tensor *x, ct_device to)
{
    const ct__backend *bk = ct__backend_of(to);
    ct_tensor *h = x ? ct_tensor_new(CT_F32, ct_tensor_ndim(x), ct_tensor_shape(x)) : NULL;
    ct_tensor *c = h ? ct_tensor_to(h, to) : NULL;
    if (c && bk->peer_copy(ct_tensor_data(c), ct_tensor_data(x),
                           (size_t)ct_tensor_numel(x) * sizeof(float), NULL) < 0)
        ct_tensor_release(&c);
    ct_tensor_release(&h);
    ct_tensor_release(&x);
    return c;
}

/* batch s of the generated data: x (BATCH, 3, 64, 64) in [-1, 1), labels (BATCH) */
static void make_batch(int s, float *x, int64_t *y)
{
    uint64_t st = 0x9E3779B97F4A7C15ull * (uint64_t)(s + 1);
    for (int i = 0; i < BATCH * 3 * 64 * 64; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((st >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
    }
    for (int i = 0; i < BATCH; i++)
        y[i] = (int64_t)((s * 7 + i * 3) % CLASSES);
}

/* Trains r for STEPS steps with seq1 on checkdev:0 and seq2, fc on `second`; losses[s] */
static int train(rn50 *r, ct_device second, float *losses)
{
    const ct_device first = CT_CHECKDEV;
    int rc = rn50_place(r, first, second);
    const ct_param_ref *refs;
    int n;
    if (rc < 0 || (rc = ct_module_params(r->root, &refs, &n)) < 0)
        return rc;
    ct_optim *o = ct_optim_sgd_new(refs, n, &(ct_sgd_opts){.lr = 0.05, .momentum = 0.9});
    if (!o)
        return -1;
    static float hx[BATCH * 3 * 64 * 64];
    int64_t hy[BATCH], xs[4] = {BATCH, 3, 64, 64}, ys[1] = {BATCH};
    for (int s = 0; s < STEPS && rc == 0; s++) {
        make_batch(s, hx, hy);
        ct_tensor *cx = ct_tensor_from_f32(4, xs, hx), *cy = ct_tensor_new(CT_I64, 1, ys);
        ct_tensor_copy_from(cy, hy, sizeof hy);
        ct_tensor *x = ct_tensor_to(cx, first), *y = ct_tensor_to(cy, second);
        ct_module_zero_grad(r->root);
        ct_tensor *logits = rn50_forward(r, x, second, second == first ? NULL : rn50_cross_to);
        ct_tensor *loss = logits ? ct_nn_cross_entropy(logits, y, 0.0f) : NULL;
        rc = !loss ? -1 : ct_tensor_backward(loss, NULL) < 0 ? -1 : ct_optim_step(o);
        losses[s] = loss ? ct_tensor_item(loss) : NAN;
        ct_tensor_release(&loss);
        ct_tensor_release(&logits);
        ct_tensor_release(&x);
        ct_tensor_release(&y);
        ct_tensor_release(&cx);
        ct_tensor_release(&cy);
    }
    ct_optim_destroy(&o);
    return rc;
}

/* every state-dict entry's bytes, host side, concatenated; *bytes */
static char *state_bytes(ct_module *m, size_t *bytes)
{
    const ct_named_tensor *sd;
    int n;
    *bytes = 0;
    if (ct_module_state_dict(m, &sd, &n) < 0)
        return NULL;
    for (int i = 0; i < n; i++)
        *bytes +=
            (size_t)ct_tensor_numel(sd[i].tensor) * ct_dtype_size(ct_tensor_dtype(sd[i].tensor));
    char *h = malloc(*bytes ? *bytes : 1), *p = h;
    for (int i = 0; i < n && h; i++) {
        size_t b =
            (size_t)ct_tensor_numel(sd[i].tensor) * ct_dtype_size(ct_tensor_dtype(sd[i].tensor));
        ct_tensor *c = ct_nn_to_plain(sd[i].tensor);
        if (!c || ct_tensor_copy_to(c, p, b) < 0)
            memset(p, 0xff, b);
        ct_tensor_release(&c);
        p += b;
    }
    return h;
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *b = NULL;
    *n = 0;
    if (f && fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        rewind(f);
        b = malloc(len > 0 ? (size_t)len : 1);
        *n = b ? fread(b, 1, (size_t)len, f) : 0;
    }
    if (f)
        fclose(f);
    return b;
}

static void test_split_resnet(void)
{
    const ct_device c1 = ct_device_make(CT_CHECKDEV, 1);
    rn50 one, two;
    float l1[STEPS], l2[STEPS];
    ct_nn_manual_seed(40);
    rn50_build(&one, WIDTH, CLASSES);
    ct_nn_manual_seed(40);
    rn50_build(&two, WIDTH, CLASSES);
    CHECK(one.root && two.root && one.nblocks == 16 && one.split_after == 7, "built");
    CHECK(train(&one, CT_CHECKDEV, l1) == 0, "one device: %s", ct_last_error());
    CHECK(train(&two, c1, l2) == 0, "two devices: %s", ct_last_error());

    /* the parameters are where they were placed, one flat buffer per device */
    const ct_param_ref *refs;
    int n, on1 = 0;
    ct_module_params(two.root, &refs, &n);
    for (int i = 0; i < n; i++)
        on1 += refs[i].device == c1;
    CHECK(refs[0].device == CT_CHECKDEV && refs[n - 1].device == c1 && on1 > 0 && on1 < n,
          "placement: %d of %d parameters on checkdev:1", on1, n);
    float *fv;
    CHECK(ct_module_flat(two.root, &fv, NULL, NULL) == CT_EINVAL, "flat of a split model");

    CHECK(memcmp(l1, l2, sizeof l1) == 0, "losses differ: step 0 %.9g / %.9g, last %.9g / %.9g",
          l1[0], l2[0], l1[STEPS - 1], l2[STEPS - 1]);
    CHECK(l1[STEPS - 1] == l1[STEPS - 1] && l1[STEPS - 1] != l1[0], "the loss moved: %g -> %g",
          l1[0], l1[STEPS - 1]);
    size_t b1, b2;
    char *s1 = state_bytes(one.root, &b1), *s2 = state_bytes(two.root, &b2);
    CHECK(s1 && s2 && b1 == b2 && b1 > 0 && memcmp(s1, s2, b1) == 0,
          "weights not bit-identical (%zu / %zu bytes)", b1, b2);
    free(s1);
    free(s2);

    /* checkpoints: the same file whatever the placement; it loads into the other placement */
    char p1[64], p2[64];
    snprintf(p1, sizeof p1, "/tmp/ct_mp_one_%d.safetensors", (int)getpid());
    snprintf(p2, sizeof p2, "/tmp/ct_mp_two_%d.safetensors", (int)getpid());
    CHECK(ct_module_save(one.root, p1) == 0 && ct_module_save(two.root, p2) == 0, "save: %s",
          ct_last_error());
    size_t n1, n2;
    char *f1 = slurp(p1, &n1), *f2 = slurp(p2, &n2);
    CHECK(f1 && f2 && n1 == n2 && n1 > 0 && memcmp(f1, f2, n1) == 0, "checkpoint files differ");
    free(f1);
    free(f2);
    rn50 three;
    ct_nn_manual_seed(41);
    rn50_build(&three, WIDTH, CLASSES);
    ct_module_to(three.root, CT_CHECKDEV);
    ct_module_to(three.fc, c1);
    CHECK(ct_module_load(three.root, p2) == 0, "load into a third placement: %s", ct_last_error());
    s1 = state_bytes(one.root, &b1);
    s2 = state_bytes(three.root, &b2);
    CHECK(s1 && s2 && b1 == b2 && memcmp(s1, s2, b1) == 0, "loaded weights differ");
    free(s1);
    free(s2);
    unlink(p1);
    unlink(p2);

    /* the cross-device wait removed: the copy fails; the copy removed: seq2 refuses its input */
    int64_t xs[4] = {BATCH, 3, 64, 64};
    ct_tensor *hx = ct_tensor_new(CT_F32, 4, xs), *x = ct_tensor_to(hx, CT_CHECKDEV);
    ct_tensor *bad = rn50_forward(&two, x, c1, copy_no_wait);
    ct_tensor *sum = bad ? ct_nn_sum(bad) : NULL;
    float v = sum ? ct_tensor_item(sum) : 0.0f;
    ct_tensor_release(&sum);
    ct_tensor_release(&bad);
    CHECK(v != v && strstr(ct_last_error(), "no event wait between the devices"),
          "without the wait: %g, %s", v, ct_last_error());
    ct_tensor *none = rn50_forward(&two, x, c1, NULL);
    CHECK(!none && strstr(ct_last_error(), "checkdev:1"), "without the copy: %s", ct_last_error());
    ct_autograd_clear_tape();
    ct_tensor_release(&none);
    ct_tensor_release(&x);
    ct_tensor_release(&hx);
    ct_module_destroy(&one.root);
    ct_module_destroy(&two.root);
    ct_module_destroy(&three.root);
}

int main(void)
{
    test_names();
    test_spaces();
    test_to_grad();
    test_repack();
    test_split_resnet();
    if (g_fail)
        fprintf(stderr, "test_model_parallel: %d failure(s)\n", g_fail);
    else
        printf("test_model_parallel: ok\n");
    return g_fail ? 1 : 0;
}
