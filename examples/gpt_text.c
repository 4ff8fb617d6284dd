/* examples/gpt_text.c — a small GPT (nanoGPT's model, the built-in "gpt") trained on the King
 * James Bible, byte by byte, on 2 replicas with trainer_train: AdamW with weight decay on the
 * matrices only, warm-up plus cosine per step, gradient clipping by the global norm (the
 * averaged gradients are the same on every replica), checkpoints to a directory and resume.
 *
 *   gpt_text [--text FILE] [--replicas 2] [--epochs 1] [--layers 4] [--heads 4] [--embd 128]
 *            [--block 128] [--batch 16] [--lr 1e-3] [--clip 1] [--val 0.05] [--val-every 250]
 *            [--log-every 50] [--checkpoint-dir DIR] [--threads N] [--zero 0]
 *
 * --text (default kjv.txt) is made with Debian's bible-kjv when missing
 * (COLUMNS=80 bible Genesis1:1-Revelation22:21). The learning rate warms up over 20 steps from
 * 5% and then follows a cosine down to a tenth at the run's last step. --checkpoint-dir also
 * resumes from the directory's latest checkpoint when there is one. Prints the trainer's line
 * every --log-every steps (with MFU), `val step=<s> val_loss=<x>` every --val-every steps (0:
 * none), an epoch line each epoch, `optimizer_state_bytes=<per replica> zero=<stage>` (--zero 1:
 * ZeRO-1, the AdamW moments sharded over the replicas: about 1/N of the bytes, the same
 * training) and last `final: val_loss=<nats per byte> tokens_per_s=<rate> params=<count>`.
 * bench/gpt_train/text.sh runs the same recipe under PyTorch DDP beside it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ct/trainer.h"

/* forward, loss, backward (averaged gradients), clip by the global norm, optimizer */
static int clipped_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    double clip = trainer_config_double(trainer_step_ctx(s), "clip", 1.0), norm = 0;
    ct_tensor *logits = ct_module_forward(trainer_step_model(s), b->x); /* (B*T, 256) */
    ct_tensor *loss = logits ? trainer_step_loss(s)(logits, b->y) : NULL;
    int rc = loss ? trainer_step_backward(s, loss) : CT_EINVAL;
    if (rc == 0)
        rc = trainer_step_clip_grad_norm(s, clip, &norm);
    if (rc == 0)
        rc = trainer_step_metric(s, "grad_norm", norm);
    if (rc == 0)
        rc = trainer_step_optimizer(s);
    if (rc == 0) {
        out->loss_sum = ct_tensor_item(loss) * (double)b->n;
        out->samples = b->n;
    }
    ct_tensor_release(&loss);
    ct_tensor_release(&logits);
    return rc;
}

static int make_text_file(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0)
        return 0;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "COLUMNS=80 bible Genesis1:1-Revelation22:21 > '%s'", path);
    fprintf(stderr, "gpt_text: making %s with bible-kjv\n", path);
    if (system(cmd) != 0 || stat(path, &st) != 0 || st.st_size == 0) {
        fprintf(stderr, "gpt_text: could not make %s (is bible-kjv installed?)\n", path);
        remove(path);
        return -1;
    }
    return 0;
}

static int on_validate(trainer *t, const trainer_stats *st, void *user)
{
    (void)t, (void)user;
    printf("val step=%lld val_loss=%.4f\n", (long long)st->val_step, st->val_loss);
    fflush(stdout);
    return 0;
}

/* Optimizer steps of the run: the longest training shard's windows in batches, per epoch (as
 * the trainer's loader pads every rank to it), for the cosine's length. */
static long long run_steps(const char *text, double val, long long block, long long batch,
                           int replicas, long long epochs)
{
    int64_t longest = 0;
    for (int r = 0; r < replicas; r++) {
        ct_dataset *d = NULL;
        if (ct_dataset_open_text(
                text,
                &(ct_text_opts){
                    .block_size = block, .rank = r, .world_size = replicas, .val_fraction = val},
                &d) < 0)
            return -1;
        longest = ct_dataset_length(d) > longest ? ct_dataset_length(d) : longest;
        ct_dataset_destroy(&d);
    }
    return (longest + batch - 1) / batch * epochs;
}

/* model FLOPs of one window's forward and backward: T (6 N + 12 L T C), N the parameters less
 * the position embedding (PaLM's count, as TorchTitan and bench/gpt_train use) */
static double flops_per_window(ct_module *m, int layers, long long embd, long long block)
{
    double n = (double)ct_module_num_params(m) - (double)(block * embd);
    return (double)block * (6 * n + 12.0 * layers * (double)block * (double)embd);
}

static int on_epoch(trainer *t, const trainer_stats *st, void *user)
{
    (void)t, (void)user;
    printf("epoch %lld: train_loss=%.4f samples_per_s=%.1f grad_norm=%.3f\n", (long long)st->epoch,
           st->train_loss, st->samples_per_s, trainer_stats_metric(st, false, "grad_norm", 0));
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    trainer_register_train_step("clipped", clipped_step);
    trainer_register_step_keys("clipped", "clip");
    if (ct_init(NULL) != 0) {
        fprintf(stderr, "gpt_text: %s\n", ct_last_error());
        return 1;
    }
    const char *text = "kjv.txt", *ckpt = NULL;
    int replicas = 2, layers = 4, heads = 4, threads = 1, zero = 0;
    long long epochs = 1, embd = 128, block = 128, batch = 16, val_every = 250, log_every = 50;
    double lr = 1e-3, clip = 1.0, val = 0.05;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--text"))
            text = v;
        else if (!strcmp(k, "--replicas"))
            replicas = atoi(v);
        else if (!strcmp(k, "--epochs"))
            epochs = atoll(v);
        else if (!strcmp(k, "--layers"))
            layers = atoi(v);
        else if (!strcmp(k, "--heads"))
            heads = atoi(v);
        else if (!strcmp(k, "--embd"))
            embd = atoll(v);
        else if (!strcmp(k, "--block"))
            block = atoll(v);
        else if (!strcmp(k, "--batch"))
            batch = atoll(v);
        else if (!strcmp(k, "--lr"))
            lr = atof(v);
        else if (!strcmp(k, "--clip"))
            clip = atof(v);
        else if (!strcmp(k, "--val"))
            val = atof(v);
        else if (!strcmp(k, "--val-every"))
            val_every = atoll(v);
        else if (!strcmp(k, "--log-every"))
            log_every = atoll(v);
        else if (!strcmp(k, "--checkpoint-dir"))
            ckpt = v;
        else if (!strcmp(k, "--threads"))
            threads = atoi(v);
        else if (!strcmp(k, "--zero"))
            zero = atoi(v);
        else {
            fprintf(stderr, "gpt_text: unknown option %s (see the file's header)\n", k);
            ct_shutdown();
            return 2;
        }
    }
    long long steps =
        make_text_file(text) < 0 ? -1 : run_steps(text, val, block, batch, replicas, epochs);
    if (steps < 0) {
        if (*ct_last_error())
            fprintf(stderr, "gpt_text: %s\n", ct_last_error());
        ct_shutdown();
        return 1;
    }
    char config[1600];
    snprintf(config, sizeof config,
             "text_file=%s,val_fraction=%g,n_layer=%d,n_head=%d,n_embd=%lld,block_size=%lld,"
             "lr=%g,weight_decay=0.1,beta2=0.95,decay_matrices_only=1,clip=%g,"
             "warmup_steps=20,total_steps=%lld,start_factor=0.05,eta_min=%g",
             text, val, layers, heads, embd, block, lr, clip, steps > 20 ? steps : 21, lr / 10);
    trainer *t = NULL;
    trainer_stats st;
    int rc = trainer_create(&(trainer_opts){.model = "gpt",
                                            .data = "text",
                                            .optimizer = "adamw",
                                            .loss = "cross_entropy",
                                            .scheduler = "warmup_cosine",
                                            .scheduler_step = "batch",
                                            .train_step = "clipped",
                                            .config = config,
                                            .num_replicas = replicas,
                                            .cpus_per_replica = threads,
                                            .batch_size = batch,
                                            .epochs = epochs,
                                            .seed = 1,
                                            .zero_stage = zero},
                            &t);
    if (rc == 0)
        rc = trainer_train(
            t, .max_retries = 2, .stats = &st, .on_epoch = on_epoch, .checkpoint_dir = ckpt,
            .resume = ckpt, .validate_every_steps = val_every, .on_validate = on_validate,
            .log_every_steps = (int)log_every, .progress = TRAINER_PROGRESS_OFF,
            .flops_per_sample = flops_per_window(trainer_get_model(t), layers, embd, block));
    if (rc == 0)
        rc = trainer_validate(t, &st);
    if (rc == 0)
        printf("optimizer_state_bytes=%lld zero=%d\n", (long long)st.optim_state_bytes, zero);
    if (rc == 0)
        printf("final: val_loss=%.4f tokens_per_s=%.0f params=%lld\n", st.val_loss,
               st.samples_per_s * (double)block,
               (long long)ct_module_num_params(trainer_get_model(t)));
    else
        fprintf(stderr, "gpt_text: %s\n", ct_last_error());
    trainer_shutdown(&t);
    ct_shutdown();
    return rc == 0 ? 0 : 1;
}
