/* examples/dcgan_model.h — a small DCGAN for Fashion-MNIST on the trainer, with two models
 * (the generator is model 0, the discriminator model 1), two optimizers and a custom train
 * step that alternates them: what examples/dcgan_fashion_mnist.c runs and
 * tests/trainer/test_multi_model.c checks. Header-only (static functions), example code.
 *
 * Generator: z (N,64,1,1) -> ConvTranspose2d(64,64,7) (N,64,7,7) (a linear layer and a reshape
 * in one) -> BatchNorm2d -> ReLU -> ConvTranspose2d(64,32,4,s2,p1) (N,32,14,14) -> BatchNorm2d
 * -> ReLU -> ConvTranspose2d(32,1,4,s2,p1) (N,1,28,28) -> Tanh.
 * Discriminator: x (N,1,28,28) -> Conv2d(1,32,4,s2,p1) (N,32,14,14) -> LeakyReLU(0.2) ->
 * Conv2d(32,64,4,s2,p1) (N,64,7,7) -> LeakyReLU(0.2) -> Flatten -> Linear(3136,1) (N,1) logit.
 * Loss: "bce_with_logits" (one loss for both). Optimizers "adam_g" / "adam_d": Adam with
 * beta1 0.5, lr config lr_g / lr_d [2e-4].
 *
 * The step, per batch: real images rescaled from the built-in normalisation (mean 0.2860, std
 * 0.3530) to tanh's [-1, 1]; z drawn from N(0,1) by a generator seeded from (seed, epoch,
 * batch, rank).
 *   D step: fake = G(z) with autograd off (not on the tape: D's backward stops at fake, as
 *     PyTorch's fake.detach()); loss_d = bce(D(real), 1) + bce(D(fake), 0); backward and
 *     reduce model 1, optimizer 1.
 *   G step: loss_g = bce(D(G(z)), 1); backward (through D) and reduce model 0, optimizer 0.
 * G runs twice per batch (once per step: ct_tensor_backward clears the whole tape, so the D
 * step's backward would drop a G forward recorded before it); its BatchNorm running statistics
 * therefore see each batch twice. Metrics "loss_d", "loss_g"; the step's loss is their sum.
 * With config check_updates=1 it also snapshots both models' parameters around each optimizer
 * call and reports "update_violations": per batch, the parameters of the stepped model that did
 * not change plus those of the other model that did (0 when each optimizer changes all of its
 * own model's parameters and none of the other's). */
#ifndef CT_EXAMPLES_DCGAN_MODEL_H
#define CT_EXAMPLES_DCGAN_MODEL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ct/optim.h"
#include "ct/trainer.h"

#define DCGAN_Z 64

static ct_module *dcgan_generator(trainer_ctx *ctx)
{
    (void)ctx;
    ct_conv_opts up = {.stride = {2, 2}, .padding = {1, 1}};
    return CT_SEQUENTIAL(ct_nn_conv_transpose2d_new(DCGAN_Z, 64, 7, NULL, false),
                         ct_nn_batchnorm2d_new(64), ct_nn_relu_new(),
                         ct_nn_conv_transpose2d_new(64, 32, 4, &up, false),
                         ct_nn_batchnorm2d_new(32), ct_nn_relu_new(),
                         ct_nn_conv_transpose2d_new(32, 1, 4, &up, true), ct_nn_tanh_new());
}

static ct_module *dcgan_discriminator(trainer_ctx *ctx)
{
    (void)ctx;
    ct_conv_opts down = {.stride = {2, 2}, .padding = {1, 1}};
    return CT_SEQUENTIAL(ct_nn_conv2d_new(1, 32, 4, &down, true), ct_nn_leaky_relu_new(0.2f),
                         ct_nn_conv2d_new(32, 64, 4, &down, true), ct_nn_leaky_relu_new(0.2f),
                         ct_nn_flatten_new(), ct_nn_linear_new(64 * 7 * 7, 1, true));
}

static ct_optim *dcgan_adam(trainer_ctx *ctx, ct_module *m, const char *key)
{
    const ct_param_ref *ps;
    int n;
    if (ct_module_params(m, &ps, &n) < 0)
        return NULL;
    double lr = trainer_config_double(ctx, key, 2e-4);
    return ct_optim_adam_new(ps, n, &(ct_adam_opts){.lr = lr, .beta1 = 0.5, .beta2 = 0.999});
}
static ct_optim *dcgan_adam_g(trainer_ctx *ctx, ct_module *m)
{
    return dcgan_adam(ctx, m, "lr_g");
}
static ct_optim *dcgan_adam_d(trainer_ctx *ctx, ct_module *m)
{
    return dcgan_adam(ctx, m, "lr_d");
}

/* Reads the step's config key here, in the driver's check-run too (an unread key is refused). */
static int dcgan_setup(trainer_ctx *ctx)
{
    trainer_config_bool(ctx, "check_updates", false);
    return 0;
}

static uint64_t dcgan_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* z (n,64,1,1) from N(0,1) (Box-Muller), a function of where the batch is. */
static ct_tensor *dcgan_noise(trainer_step *s, int64_t n)
{
    int64_t shape[4] = {n, DCGAN_Z, 1, 1};
    ct_tensor *z = ct_tensor_new(CT_F32, 4, shape);
    if (!z)
        return NULL;
    trainer_ctx *ctx = trainer_step_ctx(s);
    uint64_t st =
        dcgan_mix(trainer_ctx_seed(ctx) ^ dcgan_mix((uint64_t)trainer_step_epoch(s) * 1000003u +
                                                    (uint64_t)trainer_step_index(s) * 131u +
                                                    (uint64_t)trainer_ctx_rank(ctx)));
    float *p = ct_tensor_f32(z);
    for (int64_t i = 0; i < n * DCGAN_Z; i++) {
        st = dcgan_mix(st);
        double u1 = ((double)(st >> 11) + 1.0) / 9007199254740993.0; /* (0, 1] */
        double u2 = (double)(dcgan_mix(st) >> 11) / 9007199254740992.0;
        p[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    return z;
}

/* A copy of m's flat parameter values (caller frees). */
static float *dcgan_snapshot(ct_module *m)
{
    float *v, *g;
    int64_t n;
    if (ct_module_flat(m, &v, &g, &n) < 0)
        return NULL;
    float *c = malloc((size_t)n * sizeof(float) + 1);
    if (c)
        memcpy(c, v, (size_t)n * sizeof(float));
    return c;
}

/* Parameters of m that differ from the snapshot (any element) when want_changed, else those that
 * do not: the count of violations. */
static int dcgan_violations(ct_module *m, const float *before, bool want_changed)
{
    const ct_param_ref *ps;
    float *v, *g;
    int64_t total;
    int n, bad = 0;
    if (!before || ct_module_params(m, &ps, &n) < 0 || ct_module_flat(m, &v, &g, &total) < 0)
        return 1000;
    for (int k = 0; k < n; k++) {
        const float *b = before + (ps[k].value - v);
        bool changed = memcmp(b, ps[k].value, (size_t)ps[k].numel * sizeof(float)) != 0;
        bad += changed != want_changed;
    }
    return bad;
}

/* Optimizer i's step, counting violations of "changes all of model i's parameters and none of
 * the other model's" into *viol when check. */
static int dcgan_optimizer(trainer_step *s, int i, bool check, int *viol)
{
    ct_module *own = trainer_step_model_at(s, i), *other = trainer_step_model_at(s, 1 - i);
    float *b_own = check ? dcgan_snapshot(own) : NULL,
          *b_other = check ? dcgan_snapshot(other) : NULL;
    int rc = trainer_step_optimizer_at(s, i);
    if (rc == 0 && check)
        *viol += dcgan_violations(own, b_own, true) + dcgan_violations(other, b_other, false);
    free(b_own);
    free(b_other);
    return rc;
}

static int dcgan_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    ct_module *g = trainer_step_model_at(s, 0), *d = trainer_step_model_at(s, 1);
    trainer_loss_fn bce = trainer_step_loss_at(s, 1);
    bool check = trainer_config_bool(trainer_step_ctx(s), "check_updates", false);
    int64_t n = b->n, lshape[2] = {n, 1};
    ct_tensor *real = ct_tensor_clone(b->x), *z = dcgan_noise(s, n);
    ct_tensor *ones = ct_tensor_new(CT_F32, 2, lshape), *zeros = ct_tensor_new(CT_F32, 2, lshape);
    ct_tensor *fake = NULL, *dr = NULL, *df = NULL, *lr = NULL, *lf = NULL, *ld = NULL;
    ct_tensor *fake2 = NULL, *dg = NULL, *lg = NULL;
    int rc = real && z && ones && zeros ? ct_tensor_fill_f32(ones, 1.0f) : CT_ENOMEM;
    int viol = 0;
    if (rc == 0) { /* back to [0,1] pixels, then to tanh's [-1,1] */
        float *p = ct_tensor_f32(real);
        for (int64_t i = 0; i < ct_tensor_numel(real); i++)
            p[i] = (p[i] * 0.3530f + 0.2860f) * 2.0f - 1.0f;
    }
    /* D step: the fake batch off the tape, so that D's backward does not reach G */
    if (rc == 0) {
        bool was = ct_autograd_set_enabled(false);
        fake = ct_module_forward(g, z); /* (N,1,28,28) */
        ct_autograd_set_enabled(was);
        dr = fake ? ct_module_forward(d, real) : NULL; /* (N,1) */
        df = dr ? ct_module_forward(d, fake) : NULL;
        lr = df ? bce(dr, ones) : NULL;
        lf = lr ? bce(df, zeros) : NULL;
        ld = lf ? ct_nn_add(lr, lf) : NULL; /* () */
        rc = ld ? trainer_step_backward_model(s, 1, ld) : CT_EINVAL;
    }
    if (rc == 0)
        rc = dcgan_optimizer(s, 1, check, &viol);
    /* G step: through D (its gradients there are not D's update: zeroed before D's backward) */
    if (rc == 0) {
        fake2 = ct_module_forward(g, z);
        dg = fake2 ? ct_module_forward(d, fake2) : NULL;
        lg = dg ? bce(dg, ones) : NULL;
        rc = lg ? trainer_step_backward_model(s, 0, lg) : CT_EINVAL;
    }
    if (rc == 0)
        rc = dcgan_optimizer(s, 0, check, &viol);
    if (rc == 0) {
        double vd = ct_tensor_item(ld), vg = ct_tensor_item(lg);
        out->loss_sum = (vd + vg) * (double)n;
        out->samples = n;
        rc = trainer_step_metric(s, "loss_d", vd);
        if (rc == 0)
            rc = trainer_step_metric(s, "loss_g", vg);
        if (rc == 0 && check)
            rc = trainer_step_metric(s, "update_violations", viol);
    }
    ct_tensor *all[] = {real, z, ones, zeros, fake, dr, df, lr, lf, ld, fake2, dg, lg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ct_tensor_release(&all[i]);
    return rc;
}

/* Registers the DCGAN's creators and step (before ct_init, in every process). */
__attribute__((unused)) static void dcgan_register(void)
{
    trainer_register_model("dcgan_g", dcgan_generator);
    trainer_register_model("dcgan_d", dcgan_discriminator);
    trainer_register_optimizer("adam_g", dcgan_adam_g);
    trainer_register_optimizer("adam_d", dcgan_adam_d);
    trainer_register_hook("dcgan_setup", dcgan_setup);
    trainer_register_train_step("dcgan", dcgan_step);
}

/* The trainer options of the DCGAN (config: "limit=...,check_updates=1,..."). */
__attribute__((unused)) static trainer_opts dcgan_opts(const char *config, int replicas,
                                                       int64_t epochs)
{
    return (trainer_opts){.model = "dcgan_g,dcgan_d",
                          .optimizer = "adam_g,adam_d",
                          .loss = "bce_with_logits",
                          .data = "fashion_mnist",
                          .initialization_hook = "dcgan_setup",
                          .train_step = "dcgan",
                          .config = config,
                          .num_replicas = replicas,
                          .batch_size = 64,
                          .epochs = epochs,
                          .seed = 1};
}

#endif
