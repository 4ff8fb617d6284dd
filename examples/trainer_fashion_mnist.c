/* examples/trainer_fashion_mnist.c — the Fashion-MNIST CNN trained through the trainer API
 * (include/ct/trainer.h): what examples/ddp_fashion_mnist.c does by hand, in a page, plus
 * checkpoints in the object store and recovery from lost replicas.
 *
 *   trainer_fashion_mnist [--replicas 2] [--epochs 3] [--limit N] [--batch 64] [--lr 1e-3]
 *                         [--gamma 0.5] [--model cnn|mlp|tiny] [--max-retries 3]
 *                         [--min-accuracy X] [--save FILE] [--checkpoint-dir DIR]
 *                         [--checkpoint-every N] [--keep K] [--resume DIR|FILE]
 *                         [--accumulate K] [--sched steplr|warmup_cosine] [--warmup N]
 *                         [--optimizer adam|adamw] [--wd X] [--smoothing X] [--crop-pad N]
 *                         [--hflip P] [--stop-at X] [--validate 0|1] [--cpu-binding 0|1]
 *                         [--recovery live|restart]
 *                         [--storage-path DIR] [--name NAME]
 *
 * --storage-path DIR (Ray's RunConfig.storage_path; `make run` gives results) saves the trained
 * model as DIR/NAME/model.safetensors (NAME: --name, else trainer_fashion_mnist-<date>-<time>)
 * and prints `model: <path>`. Prints a line per epoch and last `final: test_accuracy=<x>
 * train_loss=<y> samples_per_s=<z>`; exits 1 when the test accuracy is below --min-accuracy. With
 * --stop-at X it stops after the first epoch whose test accuracy reaches X and prints `reached:
 * test_accuracy=<x> epochs=<e> wall_s=<s>` (s: from trainer_train's start, the group's startup
 * included). "tiny" is the MLP 64-128-64-10 on the images downsampled to 8x8 (data "fmnist8",
 * registered here). Not here: a cluster file (with no CT_ADDRESS, ct_init(NULL) starts an embedded
 * one on this machine). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ct/ct.h"
#include "ct/trainer.h"
#include "fashion_mnist_model.h"

static ct_module *make_model(trainer_ctx *ctx)
{
    return fmnist_make_model(trainer_config_str(ctx, "model", "cnn"));
}

/* Fashion-MNIST downsampled to 8x8 (fmnist_downsample8), for the tiny MLP: the first `limit`
 * training images (0: all) and all test images, normalised like the 28x28 ones. */
static int load8(bool train, int64_t limit, ct_dataset **out)
{
    ct_dataset *full = NULL;
    float img[784], *x = NULL;
    int64_t *y = NULL;
    int rc = ct_dataset_open_mnist(NULL, train, &full);
    if (rc < 0)
        return rc;
    int64_t n = ct_dataset_length(full);
    if (limit > 0 && limit < n)
        n = limit;
    x = malloc((size_t)n * 64 * sizeof *x);
    y = malloc((size_t)n * sizeof *y);
    if (!x || !y) {
        rc = CT_ENOMEM;
        goto out;
    }
    for (int64_t i = 0; i < n && rc == 0; i++) {
        rc = ct_dataset_get(full, i, img, &y[i]);
        fmnist_downsample8(img, x + i * 64);
    }
    if (rc == 0)
        rc = ct_dataset_from_f32(x, y, n, 3, (int64_t[]){1, 8, 8}, out);
out:
    free(x);
    free(y);
    ct_dataset_destroy(&full);
    return rc;
}

static int make_data8(trainer_ctx *ctx, trainer_data *d)
{
    int64_t limit = trainer_config_int(ctx, "limit", 0);
    int rc = load8(true, limit, &d->train);
    if (rc == 0)
        rc = load8(false, 0, &d->val);
    d->transform = (ct_transform_opts){.mean = fmnist_mean, .std = fmnist_std};
    d->num_classes = 10;
    d->prefetch = -1; /* 64 floats a sample: building a batch costs less than a hand-off */
    return rc;
}

typedef struct run_state {
    double stop_at; /* 0: never stop early */
    int64_t t0_ns;  /* trainer_train's start */
    int64_t epochs; /* epochs done when the accuracy was reached */
    double wall_s, accuracy;
} run_state;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int print_epoch(trainer *t, const trainer_stats *st, void *user)
{
    run_state *rs = user;
    (void)t;
    printf("epoch %lld: train_loss=%.4f test_accuracy=%.4f samples_per_s=%.1f time=%.1fs "
           "replicas=%d retries=%d\n",
           (long long)st->epoch, st->train_loss, st->val_accuracy, st->samples_per_s,
           st->epoch_seconds, st->replicas, st->retries_used);
    fflush(stdout);
    if (rs->stop_at > 0 && st->val_samples > 0 && st->val_accuracy >= rs->stop_at) {
        rs->epochs = st->epoch;
        rs->accuracy = st->val_accuracy;
        rs->wall_s = (double)(now_ns() - rs->t0_ns) * 1e-9;
        return CT_ECANCELED; /* stops training; main tells it from a failure */
    }
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
               "                             [--log-dir DIR] [--log-every N] [--accumulate K]\n"
               "                             [--sched S] [--warmup N] [--optimizer O] [--wd X]\n"
               "                             [--smoothing X] [--crop-pad N] [--hflip P]\n"
               "                             [--stop-at X] [--validate 0|1] [--cpu-binding 0|1]\n"
               "                             [--recovery live|restart]\n"
               "  --replicas N       replica actors (default 2)\n"
               "  --epochs N         epochs (default 3)\n"
               "  --limit N          use only the first N training samples (default: all)\n"
               "  --batch N          batch size per replica (default 64)\n"
               "  --lr X             Adam's learning rate (default 1e-3)\n"
               "  --gamma X          learning rate factor after each epoch (default 0.5)\n"
               "  --model M          cnn (default), mlp, or tiny (64-128-64-10 on 8x8 images)\n"
               "  --max-retries N    restarts from the last checkpoint when replicas die "
               "(default 3)\n"
               "  --min-accuracy X   exit 1 when the final test accuracy is below X\n"
               "  --save FILE        save the trained model (safetensors)\n"
               "  --storage-path DIR save it as DIR/NAME/model.safetensors and print the path\n"
               "  --name NAME        the run's name under --storage-path (default: the program's "
               "name, date and time)\n"
               "  --checkpoint-dir DIR  also write every checkpoint to DIR (on this host)\n"
               "  --checkpoint-every N  a checkpoint every N optimizer steps too (default: "
               "epochs' ends)\n"
               "  --keep K           keep the newest K checkpoints in DIR and the best (default 3; "
               "-1: all)\n"
               "  --resume DIR|FILE  go on from the latest checkpoint in DIR, or from FILE (none\n"
               "                     there: start from the beginning)\n"
               "  --log-dir DIR      write DIR/metrics.jsonl and a TensorBoard event file\n"
               "  --log-every N      a progress line every N steps when stderr is no terminal\n"
               "                     (on a terminal a live line is shown anyway)\n"
               "  --accumulate K     batches per optimizer step (default 1)\n"
               "  --sched S          steplr (default; --gamma) or warmup_cosine (per batch)\n"
               "  --warmup N         warmup_cosine's warmup in optimizer steps (default 100)\n"
               "  --optimizer O      adam (default) or adamw\n"
               "  --wd X             weight decay (default: the optimizer's)\n"
               "  --smoothing X      label smoothing of the cross entropy (default 0)\n"
               "  --crop-pad N       random 28x28 crops of the images padded by N (default 0)\n"
               "  --hflip P          horizontal flips with probability P (default 0)\n"
               "  --stop-at X        stop after the first epoch with test accuracy >= X\n"
               "  --validate 0|1     test accuracy after every epoch (default 1; 0: at the "
               "end)\n"
               "  --cpu-binding 0|1  replicas on this machine get CPUs of their own when they "
               "fit\n"
               "                     (default 1; 0: trainer_opts.no_cpu_binding)\n"
               "  --recovery R       when a replica dies: live (default: the survivors go on)\n"
               "                     or restart (all from the last checkpoint)\n"
               "Joins the cluster in $CT_ADDRESS, or starts an embedded one on this machine.\n");
}

int main(int argc, char **argv)
{
    trainer_register_model("fmnist", make_model);
    trainer_register_data("fmnist8", make_data8);
    int replicas = 2, epochs = 3, retries = 3, accumulate = 1, warmup = 100, crop_pad = 0;
    int validate = 1, cpu_binding = 1;
    long long limit = 0, batch = 64;
    double lr = 1e-3, gamma = 0.5, min_acc = 0, wd = -1, smoothing = 0, hflip = 0;
    const char *model = "cnn", *save = NULL, *ckpt_dir = NULL, *resume = NULL, *log_dir = NULL;
    const char *storage = NULL, *run_name = NULL, *recovery = NULL;
    char saved[4200] = "";
    const char *sched = "steplr", *optimizer = "adam";
    run_state rs = {0};
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
        } else if (!strcmp(k, "--storage-path")) {
            storage = v;
        } else if (!strcmp(k, "--name")) {
            run_name = v;
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
        } else if (!strcmp(k, "--accumulate")) {
            accumulate = atoi(v);
        } else if (!strcmp(k, "--sched")) {
            sched = v;
        } else if (!strcmp(k, "--warmup")) {
            warmup = atoi(v);
        } else if (!strcmp(k, "--optimizer")) {
            optimizer = v;
        } else if (!strcmp(k, "--wd")) {
            wd = atof(v);
        } else if (!strcmp(k, "--smoothing")) {
            smoothing = atof(v);
        } else if (!strcmp(k, "--crop-pad")) {
            crop_pad = atoi(v);
        } else if (!strcmp(k, "--hflip")) {
            hflip = atof(v);
        } else if (!strcmp(k, "--stop-at")) {
            rs.stop_at = atof(v);
        } else if (!strcmp(k, "--validate")) {
            validate = atoi(v);
        } else if (!strcmp(k, "--cpu-binding")) {
            cpu_binding = atoi(v);
        } else if (!strcmp(k, "--recovery")) {
            recovery = v;
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
    /* only keys some creator reads: an unread key is an error */
    bool tiny = !strcmp(model, "tiny"), cosine = !strcmp(sched, "warmup_cosine");
    char config[512], wds[48] = "", augment[64] = "", sch[128];
    if (wd >= 0)
        snprintf(wds, sizeof wds, ",weight_decay=%g", wd);
    if (!tiny)
        snprintf(augment, sizeof augment, ",crop_pad=%d,hflip=%g", crop_pad, hflip);
    if (cosine) { /* per batch: total_steps counts optimizer steps of the whole run */
        long long n = limit > 0 && limit < 60000 ? limit : 60000;
        long long per_rank = (n + replicas - 1) / replicas;
        long long batches = (per_rank + batch - 1) / batch;
        long long steps = epochs * ((batches + accumulate - 1) / accumulate);
        snprintf(sch, sizeof sch, "warmup_steps=%d,total_steps=%lld,start_factor=0.1", warmup,
                 steps);
    } else {
        snprintf(sch, sizeof sch, "gamma=%g,step_size=1", gamma);
    }
    snprintf(config, sizeof config, "model=%s,lr=%g,%s,limit=%lld,label_smoothing=%g%s%s", model,
             lr, sch, limit, smoothing, wds, augment);
    trainer *t = NULL;
    trainer_stats st = {0};
    int status = 1;
    int rc = trainer_create(&(trainer_opts){.model = "fmnist",
                                            .data = tiny ? "fmnist8" : "fashion_mnist",
                                            .optimizer = optimizer,
                                            .loss = "cross_entropy",
                                            .scheduler = sched,
                                            .scheduler_step = cosine ? "batch" : "epoch",
                                            .config = config,
                                            .num_replicas = replicas,
                                            .batch_size = batch,
                                            .epochs = epochs,
                                            .accumulate = accumulate,
                                            .no_cpu_binding = !cpu_binding,
                                            .recovery = recovery},
                            &t);
    if (rc < 0) {
        fprintf(stderr, "trainer_fashion_mnist: %s\n", ct_last_error());
        goto out;
    }
    printf("trainer_fashion_mnist: %d replicas of the %s, cluster at %s\n", replicas, model,
           ct_head_address());
    rs.t0_ns = now_ns();
    rc = trainer_train(t, .max_retries = retries, .checkpoint = TRAINER_CHECKPOINT_AUTO,
                       .validate_every_epoch = validate != 0, .on_epoch = print_epoch, .user = &rs,
                       .stats = &st, .checkpoint_every_steps = every, .checkpoint_dir = ckpt_dir,
                       .checkpoint_num_to_keep = keep, .resume = resume, .log_dir = log_dir,
                       .log_every_steps = log_every);
    if (rc == CT_ECANCELED && rs.epochs > 0) {
        printf("reached: test_accuracy=%.4f epochs=%lld wall_s=%.1f\n", rs.accuracy,
               (long long)rs.epochs, rs.wall_s);
        rc = 0;
    }
    if (rc == 0 && !validate)
        rc = trainer_validate(t, &st);
    if (rc < 0) {
        fprintf(stderr, "trainer_fashion_mnist: training failed: %s\n", ct_last_error());
        goto out;
    }
    if (save && trainer_save(t, save) < 0) {
        fprintf(stderr, "trainer_fashion_mnist: %s\n", ct_last_error());
        goto out;
    }
    if (storage) { /* DIR/NAME/model.safetensors, as Ray keeps a run under its storage_path */
        char name[128], run_dir[4096];
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        strftime(name, sizeof name, "trainer_fashion_mnist-%Y%m%d-%H%M%S", &tmv);
        snprintf(run_dir, sizeof run_dir, "%s/%s", storage, run_name ? run_name : name);
        snprintf(saved, sizeof saved, "%s/model.safetensors", run_dir);
        if ((mkdir(storage, 0755) != 0 && errno != EEXIST) ||
            (mkdir(run_dir, 0755) != 0 && errno != EEXIST)) {
            fprintf(stderr, "trainer_fashion_mnist: cannot make %s: %s\n", run_dir,
                    strerror(errno));
            goto out;
        }
        if (trainer_save(t, saved) < 0) {
            fprintf(stderr, "trainer_fashion_mnist: %s\n", ct_last_error());
            goto out;
        }
    }
    if (resume && st.complete_at_resume)
        printf("resumed: the run was complete already (epoch %lld, step %lld)\n",
               (long long)st.epoch, (long long)st.steps);
    else if (resume && st.group_start_step > 0) /* no checkpoint is at step 0 */
        printf("resumed: the group started at step %lld\n", (long long)st.group_start_step);
    else if (resume)
        printf("resume: no checkpoint in %s: trained from the beginning\n", resume);
    printf("final: test_accuracy=%.4f train_loss=%.4f samples_per_s=%.1f\n", st.val_accuracy,
           st.train_loss, st.samples_per_s);
    if (saved[0])
        printf("model: %s\n", saved);
    status = st.val_accuracy >= min_acc ? 0 : 1;
    if (status)
        fprintf(stderr, "trainer_fashion_mnist: test accuracy %.4f below --min-accuracy %.4f\n",
                st.val_accuracy, min_acc);
out:
    trainer_shutdown(&t);
    ct_shutdown();
    return status;
}
