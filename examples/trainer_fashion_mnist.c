/* examples/trainer_fashion_mnist.c — the Fashion-MNIST CNN trained through the trainer API
 * (include/ct/trainer.h): what examples/ddp_fashion_mnist.c does by hand, in a page, plus
 * checkpoints in the object store and recovery from lost replicas.
 *
 *   trainer_fashion_mnist [--replicas 2] [--epochs 3] [--limit N] [--batch 64] [--lr 1e-3]
 *                         [--gamma 0.5] [--model cnn|mlp] [--max-retries 3]
 *                         [--min-accuracy X] [--save FILE] [--checkpoint-dir DIR]
 *                         [--checkpoint-every N] [--keep K] [--resume DIR|FILE]
 *
 * Prints a line per epoch and last `final: test_accuracy=<x> train_loss=<y> samples_per_s=<z>`;
 * exits 1 when the test accuracy is below --min-accuracy. Not here: a cluster file (with no
 * CT_ADDRESS, ct_init(NULL) starts an embedded one on this machine). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct/ct.h"
#include "ct/trainer.h"
#include "fashion_mnist_model.h"

static ct_module *make_model(trainer_ctx *ctx)
{
    return fmnist_make_model(trainer_config_str(ctx, "model", "cnn"));
}

static int print_epoch(trainer *t, const trainer_stats *st, void *user)
{
    (void)t;
    (void)user;
    printf("epoch %lld: train_loss=%.4f test_accuracy=%.4f samples_per_s=%.1f time=%.1fs "
           "replicas=%d retries=%d\n",
           (long long)st->epoch, st->train_loss, st->val_accuracy, st->samples_per_s,
           st->epoch_seconds, st->replicas, st->retries_used);
    fflush(stdout);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: trainer_fashion_mnist [--replicas N] [--epochs N] [--limit N] [--batch N]\n"
               "                             [--lr X] [--gamma X] [--model cnn|mlp] "
               "[--max-retries N]\n"
               "                             [--min-accuracy X] [--save FILE] "
               "[--checkpoint-dir DIR]\n"
               "                             [--checkpoint-every N] [--keep K] "
               "[--resume DIR|FILE]\n"
               "                             [--log-dir DIR] [--log-every N]\n"
               "  --replicas N       replica actors (default 2)\n"
               "  --epochs N         epochs (default 3)\n"
               "  --limit N          use only the first N training samples (default: all)\n"
               "  --batch N          batch size per replica (default 64)\n"
               "  --lr X             Adam's learning rate (default 1e-3)\n"
               "  --gamma X          learning rate factor after each epoch (default 0.5)\n"
               "  --model cnn|mlp    the model (default cnn)\n"
               "  --max-retries N    restarts from the last checkpoint when replicas die "
               "(default 3)\n"
               "  --min-accuracy X   exit 1 when the final test accuracy is below X\n"
               "  --save FILE        save the trained model (safetensors)\n"
               "  --checkpoint-dir DIR  also write every checkpoint to DIR (on this host)\n"
               "  --checkpoint-every N  a checkpoint every N optimizer steps too (default: "
               "epochs' ends)\n"
               "  --keep K           keep the newest K checkpoints in DIR (default: all)\n"
               "  --resume DIR|FILE  go on from the latest checkpoint in DIR, or from FILE\n"
               "  --log-dir DIR      write DIR/metrics.jsonl and a TensorBoard event file\n"
               "  --log-every N      a progress line every N steps when stderr is no terminal\n"
               "                     (on a terminal a live line is shown anyway)\n"
               "Joins the cluster in $CT_ADDRESS, or starts an embedded one on this machine.\n");
}

int main(int argc, char **argv)
{
    trainer_register_model("fmnist", make_model);
    int replicas = 2, epochs = 3, retries = 3;
    long long limit = 0, batch = 64;
    double lr = 1e-3, gamma = 0.5, min_acc = 0;
    const char *model = "cnn", *save = NULL, *ckpt_dir = NULL, *resume = NULL, *log_dir = NULL;
    long long every = 0;
    int keep = 0, log_every = 0;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(k, "--replicas")) {
            replicas = atoi(v);
        } else if (!strcmp(k, "--epochs")) {
            epochs = atoi(v);
        } else if (!strcmp(k, "--limit")) {
            limit = atoll(v);
        } else if (!strcmp(k, "--batch")) {
            batch = atoll(v);
        } else if (!strcmp(k, "--lr")) {
            lr = atof(v);
        } else if (!strcmp(k, "--gamma")) {
            gamma = atof(v);
        } else if (!strcmp(k, "--model")) {
            model = v;
        } else if (!strcmp(k, "--max-retries")) {
            retries = atoi(v);
        } else if (!strcmp(k, "--min-accuracy")) {
            min_acc = atof(v);
        } else if (!strcmp(k, "--save")) {
            save = v;
        } else if (!strcmp(k, "--checkpoint-dir")) {
            ckpt_dir = v;
        } else if (!strcmp(k, "--checkpoint-every")) {
            every = atoll(v);
        } else if (!strcmp(k, "--keep")) {
            keep = atoi(v);
        } else if (!strcmp(k, "--resume")) {
            resume = v;
        } else if (!strcmp(k, "--log-dir")) {
            log_dir = v;
        } else if (!strcmp(k, "--log-every")) {
            log_every = atoi(v);
        } else {
            fprintf(stderr, "trainer_fashion_mnist: unknown option '%s' (see --help)\n", k);
            return 2;
        }
        if (++i == argc) { /* every option but --help takes a value */
            fprintf(stderr, "trainer_fashion_mnist: %s needs a value\n", k);
            return 2;
        }
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (ct_init(&(ct_init_opts){.cpus = replicas > cores ? replicas : cores}) < 0) {
        fprintf(stderr, "trainer_fashion_mnist: ct_init: %s\n", ct_last_error());
        return 1;
    }
    char config[256];
    snprintf(config, sizeof config, "model=%s,lr=%g,gamma=%g,step_size=1,limit=%lld", model, lr,
             gamma, limit);
    trainer *t = NULL;
    trainer_stats st = {0};
    int status = 1;
    int rc = trainer_create(&(trainer_opts){.model = "fmnist",
                                            .data = "fashion_mnist",
                                            .optimizer = "adam",
                                            .loss = "cross_entropy",
                                            .scheduler = "steplr",
                                            .config = config,
                                            .num_replicas = replicas,
                                            .batch_size = batch,
                                            .epochs = epochs},
                            &t);
    if (rc < 0) {
        fprintf(stderr, "trainer_fashion_mnist: %s\n", ct_last_error());
        goto out;
    }
    printf("trainer_fashion_mnist: %d replicas of the %s, cluster at %s\n", replicas, model,
           ct_head_address());
    rc = trainer_train(t, .max_retries = retries, .checkpoint = TRAINER_CHECKPOINT_AUTO,
                       .validate_every_epoch = true, .on_epoch = print_epoch, .stats = &st,
                       .checkpoint_every_steps = every, .checkpoint_dir = ckpt_dir,
                       .checkpoint_num_to_keep = keep, .resume = resume, .log_dir = log_dir,
                       .log_every_steps = log_every);
    if (rc < 0) {
        fprintf(stderr, "trainer_fashion_mnist: training failed: %s\n", ct_last_error());
        goto out;
    }
    if (save && trainer_save(t, save) < 0) {
        fprintf(stderr, "trainer_fashion_mnist: %s\n", ct_last_error());
        goto out;
    }
    if (resume)
        printf("resumed: the group started at step %lld\n", (long long)st.group_start_step);
    printf("final: test_accuracy=%.4f train_loss=%.4f samples_per_s=%.1f\n", st.val_accuracy,
           st.train_loss, st.samples_per_s);
    status = st.val_accuracy >= min_acc ? 0 : 1;
    if (status)
        fprintf(stderr, "trainer_fashion_mnist: test accuracy %.4f below --min-accuracy %.4f\n",
                st.val_accuracy, min_acc);
out:
    trainer_shutdown(&t);
    ct_shutdown();
    return status;
}
