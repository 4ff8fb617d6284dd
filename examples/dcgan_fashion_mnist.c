/* examples/dcgan_fashion_mnist.c — a DCGAN on Fashion-MNIST through the trainer: two models
 * (generator, discriminator), two optimizers, and a custom train step that alternates them
 * (examples/dcgan_model.h has the models and the step; include/ct/trainer.h "Several models").
 *
 *   dcgan_fashion_mnist [--replicas 2] [--epochs 5] [--limit N] [--save FILE]
 *
 * Prints a line per epoch with both losses; exits 1 when a loss is not finite. Its test:
 * tests/trainer/test_multi_model.c (trainer_multi_model). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct/ct.h"
#include "ct/trainer.h"
#include "dcgan_model.h"

static int print_epoch(trainer *t, const trainer_stats *st, void *user)
{
    (void)t;
    (void)user;
    double ld = trainer_stats_metric(st, false, "loss_d", NAN),
           lg = trainer_stats_metric(st, false, "loss_g", NAN);
    printf("epoch %lld: loss_d=%.4f loss_g=%.4f samples_per_s=%.1f replicas=%d\n",
           (long long)st->epoch, ld, lg, st->samples_per_s, st->replicas);
    fflush(stdout);
    return isfinite(ld) && isfinite(lg) ? 0 : CT_EINVAL;
}

int main(int argc, char **argv)
{
    dcgan_register();
    ct_serve_if_worker(); /* in a replica process: serves, never returns */
    int replicas = 2;
    long long epochs = 5, limit = 0;
    const char *save = NULL;
    for (int i = 1; i < argc; i += 2) {
        bool help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
        if (help || i + 1 == argc) { /* --help, or an option without its value */
            fprintf(help ? stdout : stderr,
                    "usage: dcgan_fashion_mnist [--replicas N] [--epochs N] "
                    "[--limit N] [--save FILE]\n");
            return help ? 0 : 2;
        }
        if (!strcmp(argv[i], "--replicas"))
            replicas = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--epochs"))
            epochs = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--limit"))
            limit = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--save"))
            save = argv[i + 1];
        else {
            fprintf(stderr, "usage: dcgan_fashion_mnist [--replicas N] [--epochs N] [--limit N] "
                            "[--save FILE]\n");
            return 2;
        }
    }
    char config[128] = "";
    if (limit > 0)
        snprintf(config, sizeof config, "limit=%lld,val_limit=%lld", limit, limit);
    if (ct_init(NULL) < 0) {
        fprintf(stderr, "dcgan_fashion_mnist: %s\n", ct_last_error());
        return 1;
    }
    trainer *t = NULL;
    trainer_opts o = dcgan_opts(config, replicas, epochs);
    trainer_stats st;
    int rc = trainer_create(&o, &t);
    if (rc == 0)
        rc = trainer_train(t, .stats = &st, .max_retries = 2, .on_epoch = print_epoch);
    if (rc == 0 && save)
        rc = trainer_save(t, save); /* m0.* (generator), m1.* (discriminator), optim0/1.* */
    if (rc < 0) {
        fprintf(stderr, "dcgan_fashion_mnist: %s\n", ct_last_error());
    } else {
        double loss_d = trainer_stats_metric(&st, false, "loss_d", NAN);
        double loss_g = trainer_stats_metric(&st, false, "loss_g", NAN);
        printf("final: loss_d=%.4f loss_g=%.4f weights_agree=%d\n", loss_d, loss_g,
               st.weights_agree);
        if (!isfinite(loss_d) || !isfinite(loss_g) || !st.weights_agree) {
            fprintf(stderr, "dcgan_fashion_mnist: a loss is not finite or the replicas differ\n");
            rc = -1;
        }
    }
    trainer_shutdown(&t);
    ct_shutdown();
    return rc == 0 ? 0 : 1;
}
