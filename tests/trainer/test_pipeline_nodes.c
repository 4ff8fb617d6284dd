/* tests/trainer/test_pipeline_nodes.c — pipeline stages as actors on different nodes (issue 40
 * item 5, trainer/pipeline/stage.h). A ct-head and ct-node processes of 1 CPU each; a small GPT
 * (2 layers, 2 heads, n_embd 32, block 16, vocab 64, no dropout) on synthetic token data, Adam.
 *
 *   two: 2 stages on 2 nodes (embedding + layer 0 | layer 1 + ln_f + the tied output layer),
 *        M = 4 micro-batches, 1F1B, batch 8, STEPS steps: every step's loss equals the
 *        single-process run's (the whole GPT, ct_nn_gpt_new, the same micro-batches accumulated)
 *        to 1e-5, the loss falls, the stages ran on two different nodes, the p2p links carried
 *        exactly the activations, their gradients and the tied embedding's gradients, and the
 *        stages' parameters gathered into one checkpoint (ct__pipe_job_save: the trainer's
 *        format) load into a whole GPT (ct_module_load) and equal the single process's weights
 *        to 1e-4 (5.6e-5 measured, at a weight near 0: see dp).
 *   dp:  2 pipelines x 2 stages on 4 nodes, batch 4 each, GPipe, M = 2: every step's loss equals
 *        one process's with the batch of 8 (the pipelines' rows together) to 1e-5; the gathered
 *        weights equal that process's and one pipeline's with the batch of 8 to 1e-4 (not 1e-5:
 *        after 50 Adam steps, weights near 0 whose gradients are rounding noise differ by ~3e-5).
 *   four: 4 stages of one layer each on 2 nodes of 2 CPUs (middle stages; the tied embedding's
 *        own link between stages 0 and 3), 1F1B, M = 4: the losses and weights as in two.
 *   trainer: trainer_train with config keys pipeline_stages=2, micro_batches=4, schedule=1f1b
 *        (model "gpt", data "text" of a generated text, SGD, StepLR, 3 epochs) against 1
 *        replica: the epochs' losses equal to 1e-5, the driver's weights after training to
 *        1e-5; then the last stage kills itself (SIGKILL) in epoch 2: one retry (max_retries 1)
 *        from epoch 1's checkpoint (weights, optimizer and scheduler state), and epochs 2 and
 *        3's losses and the final weights equal the uninterrupted run's; and the same run in two
 *        trainer_train calls (epochs 1-2, then 3) ends with the same weights.
 *   trainer_dp: trainer_train with num_replicas 2 and pipeline_stages 2 (2 pipelines x 2 stages
 *        on 4 nodes, a test data creator that is not sharded), batch 8 each, against one
 *        pipeline with batch 16: the epochs' losses and the weights to 1e-5.
 *   kill: two's run through ct__pipe_job_train with a checkpoint every 4 steps; stage 1 is
 *        killed with SIGKILL before step 10: one retry, from step 8's checkpoint (weights and
 *        Adam state), and every step's loss equals the uninterrupted single process's to 1e-5.
 *   ckpt_steps, resume, validate, log_dir: trainer_train's checkpoint_every_steps,
 *        checkpoint_dir, resume, validation (during training and trainer_validate) and log_dir
 *        on 2 stages against 1 replica (see each below).
 */
#include "tt.h"

#include <dirent.h>
#include <pthread.h>
#include <sys/stat.h>

#include "trainer/pipeline/stage.h"

#define STEPS 50

static ct_gpt_config GPT = {/* "four": 4 layers */
                            .n_layer = 2,     .n_head = 2,      .n_embd = 32,
                            .block_size = 16, .vocab_size = 64, .dropout = 0};

/* one process: the whole GPT (seeded, or init_file's weights), steps [from, steps) of the global
 * batch of `rows` rows split into m micro-batches whose scaled losses are back-propagated in
 * order, a new Adam; losses[from..steps) */
static ct_module *reference(uint64_t seed, int rows, int m, int from, int steps,
                            const char *init_file, double *losses)
{
    ct_nn_set_threads(1);
    ct_nn_manual_seed(seed);
    ct_module *g = ct_nn_gpt_new(&GPT);
    if (g && init_file)
        CHECK_OK(ct_module_load(g, init_file));
    const ct_param_ref *refs = NULL;
    int np = 0;
    CHECK_OK(g ? ct_module_params(g, &refs, &np) : CT_EINVAL);
    ct_optim *opt = ct_optim_adam_new(refs, np, &(ct_adam_opts){.lr = 3e-3});
    CHECK(opt != NULL);
    for (int step = from; step < steps && opt; step++) {
        ct_tensor *x = NULL, *y = NULL;
        CHECK_OK(ct__pipe_gpt_batch(seed, step, 0, rows, GPT.block_size, GPT.vocab_size, &x, &y));
        ct_module_zero_grad(g);
        double loss = 0;
        for (int i = 0, at = 0; i < m && x; i++) {
            int len = rows / m + (i < rows % m);
            ct_tensor *xi = ct_tensor_narrow0(x, at, len);
            ct_tensor *yi =
                ct_tensor_narrow0(y, (int64_t)at * GPT.block_size, (int64_t)len * GPT.block_size);
            ct_tensor *out = ct_module_forward(g, xi);
            ct_tensor *l = out ? ct_nn_cross_entropy(out, yi, 0.0f) : NULL;
            CHECK(l != NULL);
            if (l) {
                loss += ct_tensor_item(l) * len;
                CHECK_OK(ct_tensor_backward_scaled(l, (float)len / (float)rows));
            }
            ct_tensor_release(&l);
            ct_tensor_release(&out);
            ct_tensor_release(&xi);
            ct_tensor_release(&yi);
            at += len;
        }
        CHECK_OK(ct_optim_step(opt));
        losses[step] = loss / rows;
        ct_tensor_release(&x);
        ct_tensor_release(&y);
    }
    ct_optim_destroy(&opt);
    return g;
}

/* the gathered file's weights against the reference model's, within tol */
static void same_file(const char *path, ct_module *ref, double tol)
{
    ct_module *g = ct_nn_gpt_new(&GPT);
    CHECK_OK(g ? ct_module_load(g, path) : CT_EINVAL);
    int64_t n = 0, nr = 0;
    float *w = tt_weights(g, &n), *wr = tt_weights(ref, &nr);
    CHECK(w && wr && n == nr && n > 0);
    double worst = 0;
    int64_t at = -1;
    for (int64_t i = 0; w && wr && n == nr && i < n; i++) {
        double d = fabs((double)w[i] - (double)wr[i]);
        if (d > worst) {
            worst = d;
            at = i;
        }
    }
    printf("%s: %lld weights, largest difference %.3g", path, (long long)n, worst);
    if (at >= 0) /* where: Adam moves a weight whose gradient is rounding noise by up to lr */
        printf(" (flat index %lld: %.6g vs %.6g)", (long long)at, w[at], wr[at]);
    printf("\n");
    CHECK(worst <= tol);
    free(w);
    free(wr);
    ct_module_destroy(&g);
}

static void compare_losses(const double *got, const double *want, int from, int to)
{
    double worst = 0;
    for (int s = from; s < to; s++) {
        double d = fabs(got[s] - want[s]);
        worst = d > worst ? d : worst;
        if (d > 1e-5)
            fprintf(stderr, "step %d: loss %.8f, one process %.8f\n", s, got[s], want[s]);
    }
    printf("steps %d..%d: losses %.5f -> %.5f, largest difference from one process %.3g\n", from,
           to - 1, got[from], got[to - 1], worst);
    CHECK(worst <= 1e-5);
    CHECK(got[to - 1] < got[from] - 0.3); /* it learns */
}

static ct__pipe_job_opts two_opts(void)
{
    return (ct__pipe_job_opts){.gpt = GPT,
                               .stages = 2,
                               .pipelines = 1,
                               .micro_batches = 4,
                               .schedule = CT_PIPE_1F1B,
                               .batch = 8,
                               .seed = 11,
                               .lr = 3e-3f,
                               .timeout_ms = 60000};
}

static void run_two(const char *dir)
{
    ct__pipe_job_opts o = two_opts();
    double want[STEPS] = {0}, got[STEPS] = {0};
    ct_module *ref = reference(o.seed, o.batch, o.micro_batches, 0, STEPS, NULL, want);
    ct__pipe_job *j = NULL;
    CHECK_OK(ct__pipe_job_start(&o, "pn-two", &j));
    if (j) {
        const char *n0 = ct_actor_node(ct__pipe_job_actor(j, 0, 0)),
                   *n1 = ct_actor_node(ct__pipe_job_actor(j, 0, 1));
        printf("stage 0 on node %s, stage 1 on node %s\n", n0, n1);
        CHECK(strcmp(n0, n1) != 0);
    }
    for (int step = 0; j && step < STEPS; step++)
        CHECK_OK(ct__pipe_job_step(j, step, &got[step]));
    if (j) {
        compare_losses(got, want, 0, STEPS);
        /* what crossed the links: per step M activations forward and M gradients back, each
         * (2 rows, T, C) f32 with an 88-byte header, and the tied embedding's gradient (V, C)
         * both ways; nothing else */
        uint64_t sent = 0, received = 0, act = 88 + 2 * 16 * 32 * 4, tied = 88 + 64 * 32 * 4;
        uint64_t want_bytes = (uint64_t)STEPS * (2 * 4 * act + 2 * tied);
        ct__pipe_job_p2p_bytes(j, &sent, &received);
        printf("p2p: %llu bytes sent, %llu received (expected %llu)\n", (unsigned long long)sent,
               (unsigned long long)received, (unsigned long long)want_bytes);
        CHECK(sent == want_bytes && received == want_bytes);
        char final[300];
        snprintf(final, sizeof final, "%s/two.safetensors", dir);
        CHECK_OK(ct__pipe_job_save(j, STEPS, final));
        same_file(final, ref, 1e-4);
    }
    ct__pipe_job_end(&j);
    ct_module_destroy(&ref);
}

/* kill: SIGKILL of stage 1 before step 10 of the first try */
static int killed;
static void kill_stage(ct__pipe_job *j, int64_t step, int try_, void *user)
{
    (void)user;
    if (try_ == 0 && step == 10) {
        pid_t pid = ct_actor_pid(ct__pipe_job_actor(j, 0, 1));
        CHECK(pid > 0);
        if (pid > 0 && kill(pid, SIGKILL) == 0)
            killed++;
    }
}

static void run_kill(const char *dir)
{
    ct__pipe_job_opts o = two_opts();
    double want[STEPS] = {0}, got[STEPS] = {0};
    ct_module *ref = reference(o.seed, o.batch, o.micro_batches, 0, STEPS, NULL, want);
    char ckpt[300];
    snprintf(ckpt, sizeof ckpt, "%s/kill.safetensors", dir);
    int retries = -1;
    /* checkpoints every 4 steps: the kill before step 10 goes back to step 8 */
    CHECK_OK(ct__pipe_job_train(&o, "pn-kill", STEPS, 4, ckpt, 2, kill_stage, NULL, got, &retries));
    printf("killed %d stage(s), %d retry\n", killed, retries);
    CHECK_EQ_INT(killed, 1);
    CHECK_EQ_INT(retries, 1);
    /* the retry resumed the weights and Adam's state: the run is the uninterrupted one's */
    compare_losses(got, want, 0, STEPS);
    same_file(ckpt, ref, 1e-4);
    ct_module_destroy(&ref);
}

/* four: 4 stages (each one layer; stages 1 and 2 have neither embedding nor head, the tied
 * embedding has a link of its own between stages 0 and 3) on 2 nodes of 2 CPUs, 1F1B */
static void run_four(const char *dir)
{
    ct__pipe_job_opts o = two_opts();
    o.stages = 4;
    double want[STEPS] = {0}, got[STEPS] = {0};
    ct_module *ref = reference(o.seed, o.batch, o.micro_batches, 0, STEPS, NULL, want);
    ct__pipe_job *j = NULL;
    CHECK_OK(ct__pipe_job_start(&o, "pn-four", &j));
    for (int step = 0; j && step < STEPS; step++)
        CHECK_OK(ct__pipe_job_step(j, step, &got[step]));
    if (j) {
        compare_losses(got, want, 0, STEPS);
        char final[300];
        snprintf(final, sizeof final, "%s/four.safetensors", dir);
        CHECK_OK(ct__pipe_job_save(j, STEPS, final));
        same_file(final, ref, 1e-4);
    }
    ct__pipe_job_end(&j);
    ct_module_destroy(&ref);
}

static void run_dp(const char *dir)
{
    ct__pipe_job_opts o = {.gpt = GPT,
                           .stages = 2,
                           .pipelines = 2,
                           .micro_batches = 2,
                           .schedule = CT_PIPE_GPIPE,
                           .batch = 4,
                           .seed = 13,
                           .lr = 3e-3f,
                           .timeout_ms = 60000};
    double want[STEPS] = {0}, got[STEPS] = {0};
    /* one process, the 8 rows at once in the pipelines' micro-batches' sizes (4 of 2) */
    ct_module *ref = reference(o.seed, 2 * o.batch, 4, 0, STEPS, NULL, want);
    ct__pipe_job *j = NULL;
    CHECK_OK(ct__pipe_job_start(&o, "pn-dp", &j));
    for (int a = 0; j && a < 4; a++) /* the placement group spread them: one per node */
        for (int b = a + 1; b < 4; b++)
            CHECK(strcmp(ct_actor_node(ct__pipe_job_actor(j, a / 2, a % 2)),
                         ct_actor_node(ct__pipe_job_actor(j, b / 2, b % 2))) != 0);
    for (int step = 0; j && step < STEPS; step++)
        CHECK_OK(ct__pipe_job_step(j, step, &got[step]));
    if (j) {
        compare_losses(got, want, 0, STEPS);
        char final[300];
        snprintf(final, sizeof final, "%s/dp.safetensors", dir);
        CHECK_OK(ct__pipe_job_save(j, STEPS, final));
        same_file(final, ref, 1e-4);
        /* the measure: one pipeline with twice the batch (the same 8 rows in 4
         * micro-batches of 2); after 50 Adam steps 1e-4 here too (3.1e-5 measured, at a weight
         * near 0 whose gradient is rounding noise: Adam's steps do not shrink with it) */
        ct__pipe_job_end(&j);
        ct__pipe_job_opts one = o;
        one.pipelines = 1;
        one.batch = 2 * o.batch;
        one.micro_batches = 2 * o.micro_batches;
        double got1[STEPS] = {0};
        CHECK_OK(ct__pipe_job_start(&one, "pn-dp-one", &j));
        for (int step = 0; j && step < STEPS; step++)
            CHECK_OK(ct__pipe_job_step(j, step, &got1[step]));
        char path1[300];
        snprintf(path1, sizeof path1, "%s/one.safetensors", dir);
        if (j)
            CHECK_OK(ct__pipe_job_save(j, STEPS, path1));
        ct_module *g1 = ct_nn_gpt_new(&GPT);
        CHECK_OK(g1 ? ct_module_load(g1, path1) : CT_EINVAL);
        printf("against one pipeline with twice the batch: ");
        same_file(final, g1, 1e-4);
        ct_module_destroy(&g1);
    }
    ct__pipe_job_end(&j);
    ct_module_destroy(&ref);
}

/* trainer: the same GPT through trainer_train (model "gpt", data "text" of a generated text,
 * SGD with momentum, StepLR halving the rate after epoch 2, 3 epochs), once as 1 replica and once
 * with config keys pipeline_stages=2, micro_batches=4, schedule=1f1b: the epochs' losses equal to
 * 1e-5, the driver's models after training (the pipeline's gathered from its stages) to 1e-5. SGD,
 * not Adam: Adam moves the attention's key biases, whose true gradient is 0 (softmax ignores a
 * constant added to every key), by rounding noise scaled up to lr per step, 1e-3 apart after 80
 * steps, while every other weight agrees to 7e-6. */
static double trainer_losses[4][4];
static int64_t epoch1_steps;
static int record_epoch(trainer *t, const trainer_stats *st, void *user)
{
    (void)t;
    if (st->epoch >= 1 && st->epoch <= 3)
        trainer_losses[*(int *)user][st->epoch] = st->train_loss;
    if (st->epoch == 1)
        epoch1_steps = st->steps;
    return 0;
}

/* the GPT on text through trainer_train (SGD with momentum 0.9, lr 0.3, StepLR halving the rate
 * every step_size epochs), not trained; pipeline: 2 stages, M = 4, 1F1B; extra: more config
 * (the probe's keys, with loss "probe") */
static trainer *make_trainer(const char *text, bool pipeline, const char *extra, int epochs,
                             int step_size)
{
    char config[800];
    snprintf(config, sizeof config,
             "text_file=%s,val_fraction=0.1,n_layer=2,n_head=2,n_embd=32,block_size=16,lr=0.3,"
             "momentum=0.9,step_size=%d,gamma=0.5%s%s",
             text, step_size, pipeline ? ",pipeline_stages=2,micro_batches=4,schedule=1f1b" : "",
             extra);
    trainer *t = NULL;
    CHECK_OK(trainer_create(&(trainer_opts){.model = "gpt",
                                            .data = "text",
                                            .optimizer = "sgd",
                                            .loss = extra[0] ? "probe" : "cross_entropy",
                                            .scheduler = "steplr",
                                            .config = config,
                                            .num_replicas = 1,
                                            .batch_size = 8,
                                            .epochs = epochs,
                                            .seed = 5},
                            &t));
    return t;
}

/* one trainer_train run of 3 epochs (StepLR after 2); the retries it used into *retries */
static float *train_once(const char *text, bool pipeline, int which, const char *extra,
                         int max_retries, int *retries, int64_t *n)
{
    trainer *t = make_trainer(text, pipeline, extra, 3, 2);
    trainer_stats st = {0};
    if (t)
        CHECK_OK(trainer_train(t, .stats = &st, .on_epoch = record_epoch, .user = &which,
                               .max_retries = max_retries));
    CHECK_EQ_INT(st.epoch, 3);
    *retries = st.retries_used;
    float *w = tt_weights(t ? trainer_get_model(t) : NULL, n);
    trainer_shutdown(&t);
    return w;
}

/* the pipeline run of train_once in two trainer_train calls: epochs 1-2, then epoch 3 */
static float *train_twice(const char *text, int64_t *n)
{
    trainer *t = make_trainer(text, true, "", 3, 2);
    trainer_stats st = {0};
    if (t)
        CHECK_OK(trainer_train(t, .stats = &st, .epochs = 2));
    CHECK_EQ_INT(st.epoch, 2);
    if (t)
        CHECK_OK(trainer_train(t, .stats = &st));
    CHECK_EQ_INT(st.epoch, 3);
    float *w = tt_weights(t ? trainer_get_model(t) : NULL, n);
    trainer_shutdown(&t);
    return w;
}

static double largest_difference(const float *a, const float *b, int64_t na, int64_t nb)
{
    CHECK(a && b && na == nb && na > 0);
    double worst = 0;
    for (int64_t i = 0; a && b && na == nb && i < na; i++)
        worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
    return a && b && na == nb ? worst : INFINITY;
}

/* about 6 kB of a small language in dir/text.txt (path: its name) */
static void write_text(const char *dir, char *path, size_t cap)
{
    snprintf(path, cap, "%s/text.txt", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    static const char *words[] = {"the ",  "pipeline ",   "stage ",    "sends ",
                                  "its ",  "activation ", "to ",       "next ",
                                  "one, ", "and ",        "gradient ", "back. "};
    uint64_t x = 7;
    for (int i = 0; f && i < 1200; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        fputs(words[(x >> 33) % 12], f);
    }
    if (f)
        fclose(f);
}

static void run_trainer(const char *dir)
{
    char text[300];
    write_text(dir, text, sizeof text);
    int64_t n1 = 0, n2 = 0, n3 = 0;
    int r1 = -1, r2 = -1, r3 = -1;
    float *w1 = train_once(text, false, 0, "", 0, &r1, &n1),
          *w2 = train_once(text, true, 1, "", 0, &r2, &n2);
    printf("trainer_train: epoch losses %.6f %.6f %.6f (1 replica), %.6f %.6f %.6f (2 stages)\n",
           trainer_losses[0][1], trainer_losses[0][2], trainer_losses[0][3], trainer_losses[1][1],
           trainer_losses[1][2], trainer_losses[1][3]);
    for (int e = 1; e <= 3; e++)
        CHECK(fabs(trainer_losses[0][e] - trainer_losses[1][e]) <= 1e-5);
    CHECK(trainer_losses[1][3] > 0 && trainer_losses[1][3] < trainer_losses[1][1]);
    double worst = largest_difference(w1, w2, n1, n2);
    printf("trainer_train: driver's weights, largest difference %.3g\n", worst);
    CHECK(worst <= 1e-5);
    CHECK_EQ_INT(r2, 0);
    /* the last stage SIGKILLs itself in epoch 2 (its probe loss, called once a micro-batch: 4 a
     * batch) in the first job only (probe_epoch0: a job that starts at epoch 0); one retry from
     * epoch 1's checkpoint, and the run ends as the uninterrupted one */
    char probe[160];
    snprintf(probe, sizeof probe, ",probe_step=%lld,probe_action=die,probe_rank=0",
             (long long)(epoch1_steps * 4 + 9));
    float *w3 = train_once(text, true, 2, probe, 1, &r3, &n3);
    printf("trainer_train with a stage killed in epoch 2 (after %lld steps of epoch 1): %d "
           "retry, epoch 2's and 3's losses %.6f %.6f\n",
           (long long)epoch1_steps, r3, trainer_losses[2][2], trainer_losses[2][3]);
    CHECK_EQ_INT(r3, 1);
    for (int e = 2; e <= 3; e++) /* epoch 3's learning rate: the scheduler's, restored */
        CHECK(fabs(trainer_losses[2][e] - trainer_losses[1][e]) <= 1e-5);
    worst = largest_difference(w3, w2, n3, n2);
    printf("... its driver's weights against the uninterrupted run's, largest difference %.3g\n",
           worst);
    CHECK(worst <= 1e-5);
    /* two trainer_train calls (epochs 1-2, then 3): the second starts where the first ended */
    int64_t n4 = 0;
    float *w4 = train_twice(text, &n4);
    worst = largest_difference(w4, w2, n4, n2);
    printf("... trained in two trainer_train calls, against one, largest difference %.3g\n", worst);
    CHECK(worst <= 1e-5);
    free(w1);
    free(w2);
    free(w3);
    free(w4);
}

/* data "pn_tokens" (not sharded, so pipelines split it as replicas do): 480 windows of 16 tokens
 * of vocabulary 256 from the synthetic data's walk (x: the ids as f32, y: the next ones), 400 for
 * training */
static int pn_tokens(trainer_ctx *ctx, trainer_data *d)
{
    (void)ctx;
    int64_t n = 480, T = 16;
    ct_tensor *x = NULL, *y = NULL;
    int rc = ct__pipe_gpt_batch(3, 0, 0, n, T, 256, &x, &y);
    float *xf = malloc(sizeof(float) * (size_t)(n * T)),
          *yf = malloc(sizeof(float) * (size_t)(n * T));
    if (rc == 0 && (!xf || !yf))
        rc = CT_ENOMEM;
    for (int64_t i = 0; rc == 0 && i < n * T; i++) {
        xf[i] = (float)((const int64_t *)ct_tensor_data(x))[i];
        yf[i] = (float)((const int64_t *)ct_tensor_data(y))[i];
    }
    int64_t shape[1] = {T};
    if (rc == 0)
        rc = ct_dataset_from_f32_targets(xf, yf, n, 1, shape, 1, shape, &d->keep[0]);
    if (rc == 0)
        rc = ct_dataset_subset(d->keep[0], 0, 400, &d->train);
    if (rc == 0)
        rc = ct_dataset_subset(d->keep[0], 400, n - 400, &d->val);
    d->tokens = true;
    free(xf);
    free(yf);
    ct_tensor_release(&x);
    ct_tensor_release(&y);
    return rc;
}

/* each run's validations (on_validate): [which] */
static struct {
    int n;
    int64_t epoch[64], step[64], samples[64];
    double loss[64];
} vals[2];
static int record_val(trainer *t, const trainer_stats *st, void *user)
{
    (void)t;
    int which = *(int *)user, k = vals[which].n;
    if (k < 64) {
        vals[which].epoch[k] = st->val_epoch;
        vals[which].step[k] = st->val_step;
        vals[which].samples[k] = st->val_samples;
        vals[which].loss[k] = st->val_loss;
        vals[which].n++;
    }
    return 0;
}

/* trainer_dp: 2 pipelines x 2 stages (num_replicas 2, pipeline_stages 2) on 4 nodes of 1 CPU,
 * batch 8 each, against 1 pipeline with batch 16 (the pipelines' loaders take alternate samples
 * of the same order, so their two batches are its one): epoch losses and weights to 1e-5
 * (2.2e-7 with lr 0.05; with lr 0.3 this run is unstable enough to magnify the averaging's
 * rounding to 2e-3 by epoch 2, while epoch 1's losses still agree to 6 digits); and each
 * epoch's validation (each pipeline its slice, the sums added) the same to 1e-5 */
static float *train_tokens(int replicas, int batch, int which, int64_t *n)
{
    trainer *t = NULL;
    float *w = NULL;
    CHECK_OK(trainer_create(
        &(trainer_opts){.model = "gpt",
                        .data = "pn_tokens",
                        .optimizer = "sgd",
                        .loss = "cross_entropy",
                        .config = "n_layer=2,n_head=2,n_embd=32,block_size=16,lr=0.05,momentum=0.9,"
                                  "pipeline_stages=2,micro_batches=2,schedule=gpipe",
                        .num_replicas = replicas,
                        .batch_size = batch,
                        .epochs = 2,
                        .seed = 9},
        &t));
    trainer_stats st = {0};
    if (t)
        CHECK_OK(trainer_train(t, .stats = &st, .on_epoch = record_epoch, .on_validate = record_val,
                               .user = &which, .validate_every_epoch = true));
    CHECK_EQ_INT(st.epoch, 2);
    w = tt_weights(t ? trainer_get_model(t) : NULL, n);
    trainer_shutdown(&t);
    return w;
}

static void run_trainer_dp(const char *dir)
{
    (void)dir;
    int64_t n1 = 0, n2 = 0;
    float *w2 = train_tokens(2, 8, 1, &n2), *w1 = train_tokens(1, 16, 0, &n1);
    printf("trainer_train: epoch losses %.6f %.6f (2 x 2 stages, batch 8 each), %.6f %.6f (1 x 2, "
           "batch 16)\n",
           trainer_losses[1][1], trainer_losses[1][2], trainer_losses[0][1], trainer_losses[0][2]);
    for (int e = 1; e <= 2; e++)
        CHECK(fabs(trainer_losses[0][e] - trainer_losses[1][e]) <= 1e-5);
    CHECK(trainer_losses[1][2] > 0 && trainer_losses[1][2] < trainer_losses[1][1]);
    double worst = largest_difference(w1, w2, n1, n2);
    printf("trainer_train: driver's weights, largest difference %.3g\n", worst);
    CHECK(worst <= 1e-5);
    /* the validations: each pipeline its half of the 80 windows, the sums added */
    CHECK(vals[0].n == 2 && vals[1].n == 2);
    for (int k = 0; k < 2 && vals[0].n == 2 && vals[1].n == 2; k++) {
        printf("epoch %d: val_loss %.6f (%lld samples; 2 x 2 stages), %.6f (%lld; 1 x 2)\n", k + 1,
               vals[1].loss[k], (long long)vals[1].samples[k], vals[0].loss[k],
               (long long)vals[0].samples[k]);
        CHECK(vals[1].samples[k] == 80 && vals[0].samples[k] == 80);
        CHECK(fabs(vals[1].loss[k] - vals[0].loss[k]) <= 1e-5);
    }
    free(w1);
    free(w2);
}

/* ---- checkpoints within an epoch, resume, validation, the run log (the trainer's options a
 * pipeline runs as the replicas do) ---- */

/* a trained trainer's weights (caller frees), and the trainer shut down */
static float *weights_of(trainer **t, int64_t *n)
{
    float *w = tt_weights(*t ? trainer_get_model(*t) : NULL, n);
    trainer_shutdown(t);
    return w;
}

/* a checkpoint file's weights, read into a model of the trainer t (caller frees) */
static float *file_weights(trainer *t, const char *path, int64_t *n)
{
    ct_module *m = t ? trainer_get_model(t) : NULL;
    CHECK_OK(m ? ct_module_load(m, path) : CT_EINVAL);
    return tt_weights(m, n);
}

/* every checkpoint file of d0 has a namesake in d1 with the same weights (1e-5); returns how
 * many there were, *mid those within an epoch of nbatches (their step no multiple of it) */
static int same_dirs(trainer *reader, const char *d0, const char *d1, int64_t nbatches, int *mid)
{
    DIR *d = opendir(d0);
    int files = 0;
    *mid = 0;
    CHECK(d != NULL);
    for (struct dirent *e; d && (e = readdir(d));) {
        long long epoch = 0, step = 0;
        if (sscanf(e->d_name, "ckpt-epoch%lld-step%lld.safetensors", &epoch, &step) != 2)
            continue;
        char p0[600], p1[600];
        snprintf(p0, sizeof p0, "%s/%s", d0, e->d_name);
        snprintf(p1, sizeof p1, "%s/%s", d1, e->d_name);
        int64_t n0 = 0, n1 = 0;
        float *w0 = file_weights(reader, p0, &n0), *w1 = file_weights(reader, p1, &n1);
        double worst = largest_difference(w0, w1, n0, n1);
        printf("  %s: largest difference %.3g\n", e->d_name, worst);
        CHECK(worst <= 1e-5);
        files++;
        *mid += step % nbatches != 0;
        free(w0);
        free(w1);
    }
    if (d)
        closedir(d);
    return files;
}

static int mkdir_in(const char *dir, const char *name, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", dir, name);
    return mkdir(path, 0700);
}

#define EVERY 7 /* checkpoint_every_steps: no divisor of an epoch's batches here */

/* the probe config that kills the last stage after the first checkpoint within epoch 2 (steps
 * nbatches + 1 ..): in the forward of the step after the next (the probe counts a call per
 * micro-batch, 4 a batch), in the job that started at epoch 0 only; *ckpt its checkpoint's step */
static void kill_after_ckpt(int64_t nbatches, char *probe, size_t cap, int64_t *ckpt)
{
    *ckpt = (nbatches / EVERY + 1) * EVERY;
    CHECK(*ckpt + 2 < 2 * nbatches);
    snprintf(probe, cap, ",probe_step=%lld,probe_action=die,probe_rank=0",
             (long long)((*ckpt + 2) * 4 + 1));
}

/* ckpt_steps: checkpoint_every_steps on a pipeline. 1 replica and 2 stages write checkpoints
 * every EVERY steps into their checkpoint_dirs: the same files (names: epoch and step), each
 * with the same weights (every stage's parameters gathered), some within an epoch; the epoch
 * losses and the final weights equal. Then the pipeline with its last stage killed 2 steps after
 * the first checkpoint within epoch 2: one retry, its job starts at that checkpoint's step (only
 * the steps after it trained again), and the losses and weights are the run's without the kill;
 * and killed in step 3, before any checkpoint: one retry from the start, the same. */
static void run_ckpt_steps(const char *dir)
{
    char text[300], d0[300], d1[300], probe[160];
    write_text(dir, text, sizeof text);
    CHECK_OK(mkdir_in(dir, "replica", d0, sizeof d0));
    CHECK_OK(mkdir_in(dir, "pipeline", d1, sizeof d1));
    int64_t n[4] = {0}, nbatches = 0, ckpt = 0;
    float *w[4] = {0};
    trainer_stats st[4] = {0};
    const char *dirs[4] = {d0, d1, NULL, NULL};
    /* 0: 1 replica, 1: 2 stages, 2: killed after a checkpoint within epoch 2, 3: killed in the
     * forward of step 3 (no checkpoint yet: the retry starts from the beginning; the probe
     * waits to be killed once per arming, as the retry starts at epoch 0 too) */
    tt_killer killer = {0};
    pthread_t th;
    for (int which = 0; which < 4; which++) {
        if (which == 2)
            kill_after_ckpt(nbatches, probe, sizeof probe, &ckpt);
        if (which == 3)
            snprintf(probe, sizeof probe, ",probe_step=9,probe_action=wait,probe_rank=0");
        trainer *t = make_trainer(text, which > 0, which >= 2 ? probe : "", 2, 1);
        if (which == 3) {
            killer.t = t;
            CHECK_OK(ct_kv_put("tt/probe/armed", "1", 2));
            pthread_create(&th, NULL, tt_kill_probe, &killer);
        }
        if (t)
            CHECK_OK(trainer_train(t, .stats = &st[which], .on_epoch = record_epoch, .user = &which,
                                   .checkpoint_every_steps = EVERY, .checkpoint_dir = dirs[which],
                                   .checkpoint_num_to_keep = TRAINER_KEEP_ALL,
                                   .max_retries = which >= 2));
        if (which == 3)
            pthread_join(th, NULL);
        if (which == 0)
            nbatches = epoch1_steps;
        w[which] = weights_of(&t, &n[which]);
        CHECK_EQ_INT(st[which].epoch, 2);
    }
    printf("epoch losses: %.6f %.6f (1 replica), %.6f %.6f (2 stages), %.6f %.6f (2 stages, "
           "killed after step %lld's checkpoint of %lld batches an epoch)\n",
           trainer_losses[0][1], trainer_losses[0][2], trainer_losses[1][1], trainer_losses[1][2],
           trainer_losses[2][1], trainer_losses[2][2], (long long)ckpt, (long long)nbatches);
    for (int e = 1; e <= 2; e++) {
        CHECK(fabs(trainer_losses[0][e] - trainer_losses[1][e]) <= 1e-5);
        CHECK(fabs(trainer_losses[2][e] - trainer_losses[1][e]) <= 1e-5);
    }
    double worst = largest_difference(w[0], w[1], n[0], n[1]);
    printf("weights, 2 stages against 1 replica: largest difference %.3g\n", worst);
    CHECK(worst <= 1e-5);
    trainer *reader = make_trainer(text, false, "", 2, 1);
    int mid = 0, files = same_dirs(reader, d0, d1, nbatches, &mid);
    trainer_shutdown(&reader);
    printf("%d checkpoint files alike, %d within an epoch\n", files, mid);
    CHECK(files == (int)(2 * nbatches / EVERY) + 2 - (2 * nbatches % EVERY == 0));
    CHECK(mid >= 2);
    /* the kill: one retry, from the checkpoint within epoch 2 */
    printf("killed: %d retry, the last job from step %lld\n", st[2].retries_used,
           (long long)st[2].group_start_step);
    CHECK_EQ_INT(st[2].retries_used, 1);
    CHECK_EQ_INT((int)st[2].group_start_step, (int)ckpt);
    worst = largest_difference(w[2], w[1], n[2], n[1]);
    printf("weights, killed against not: largest difference %.3g\n", worst);
    CHECK(worst <= 1e-5);
    /* killed before any checkpoint: one retry from the start */
    worst = largest_difference(w[3], w[1], n[3], n[1]);
    printf("killed at step 3: %d retry, the last job from step %lld; weights against not "
           "killed: largest difference %.3g\n",
           st[3].retries_used, (long long)st[3].group_start_step, worst);
    CHECK(killer.killed_pid > 0);
    CHECK_EQ_INT(st[3].retries_used, 1);
    CHECK_EQ_INT((int)st[3].group_start_step, 0);
    CHECK(worst <= 1e-5);
    for (int e = 1; e <= 2; e++)
        CHECK(fabs(trainer_losses[3][e] - trainer_losses[1][e]) <= 1e-5);
    for (int i = 0; i < 4; i++)
        free(w[i]);
}

/* resume: a pipeline run whose last stage dies after a checkpoint within epoch 2 (no retries:
 * trainer_train fails) leaves its checkpoint_dir; a new trainer resumes from it, starts at that
 * checkpoint's step and ends with the weights of the uninterrupted run (its checkpoint_dir's
 * last file too); resuming the finished run again trains nothing. */
static void run_resume(const char *dir)
{
    char text[300], d1[300], d2[300], probe[160];
    write_text(dir, text, sizeof text);
    CHECK_OK(mkdir_in(dir, "whole", d1, sizeof d1));
    CHECK_OK(mkdir_in(dir, "resumed", d2, sizeof d2));
    int64_t n1 = 0, n2 = 0, n3 = 0, ckpt = 0;
    int which = 0;
    trainer_stats st = {0};
    trainer *t = make_trainer(text, true, "", 2, 1);
    if (t)
        CHECK_OK(trainer_train(t, .stats = &st, .on_epoch = record_epoch, .user = &which,
                               .checkpoint_every_steps = EVERY, .checkpoint_dir = d1,
                               .checkpoint_num_to_keep = TRAINER_KEEP_ALL));
    int64_t nbatches = epoch1_steps;
    float *w1 = weights_of(&t, &n1);
    kill_after_ckpt(nbatches, probe, sizeof probe, &ckpt);
    t = make_trainer(text, true, probe, 2, 1);
    int rc = t ? trainer_train(t, .checkpoint_every_steps = EVERY, .checkpoint_dir = d2,
                               .checkpoint_num_to_keep = TRAINER_KEEP_ALL)
               : CT_EINVAL;
    printf("the killed run without retries: %s (%s)\n", ct_strerror(rc), ct_last_error());
    CHECK(rc < 0);
    trainer_shutdown(&t);
    t = make_trainer(text, true, "", 2, 1);
    st = (trainer_stats){0};
    if (t)
        CHECK_OK(trainer_train(t, .stats = &st, .resume = d2, .checkpoint_every_steps = EVERY,
                               .checkpoint_dir = d2, .checkpoint_num_to_keep = TRAINER_KEEP_ALL));
    printf("resumed from %s: from step %lld, to epoch %lld step %lld\n", d2,
           (long long)st.group_start_step, (long long)st.epoch, (long long)st.steps);
    CHECK_EQ_INT((int)st.group_start_step, (int)ckpt);
    CHECK_EQ_INT((int)st.epoch, 2);
    CHECK_EQ_INT((int)st.steps, (int)(2 * nbatches));
    float *w2 = weights_of(&t, &n2);
    double worst = largest_difference(w1, w2, n1, n2);
    printf("weights, resumed against uninterrupted: largest difference %.3g\n", worst);
    CHECK(worst <= 1e-5);
    /* the last checkpoint files of both directories */
    trainer *reader = make_trainer(text, false, "", 2, 1);
    char name[96], p1[600], p2[600];
    snprintf(name, sizeof name, "ckpt-epoch0002-step%06lld.safetensors", (long long)(2 * nbatches));
    snprintf(p1, sizeof p1, "%s/%s", d1, name);
    snprintf(p2, sizeof p2, "%s/%s", d2, name);
    int64_t f1 = 0, f2 = 0;
    float *a = file_weights(reader, p1, &f1), *b = file_weights(reader, p2, &f2);
    worst = largest_difference(a, b, f1, f2);
    printf("%s of both runs: largest difference %.3g\n", name, worst);
    CHECK(worst <= 1e-5);
    free(a);
    free(b);
    trainer_shutdown(&reader);
    /* again: complete already, nothing to train */
    t = make_trainer(text, true, "", 2, 1);
    st = (trainer_stats){0};
    if (t)
        CHECK_OK(trainer_train(t, .stats = &st, .resume = d2));
    CHECK(st.complete_at_resume);
    float *w3 = weights_of(&t, &n3);
    CHECK(largest_difference(w1, w3, n1, n3) <= 1e-5);
    free(w1);
    free(w2);
    free(w3);
}

/* validate: validations during training (every VAL_EVERY steps and at each epoch's end) on 1
 * replica and on 2 stages: the same validations (epoch, step) with the same val_loss (1e-5)
 * and samples, handed to on_validate; then trainer_validate on each trained trainer: the same. */
#define VAL_EVERY 10
static void run_validate(const char *dir)
{
    char text[300];
    write_text(dir, text, sizeof text);
    trainer_stats after[2] = {0};
    for (int which = 0; which < 2; which++) {
        trainer *t = make_trainer(text, which == 1, "", 2, 1);
        trainer_stats st = {0};
        if (t)
            CHECK_OK(trainer_train(t, .stats = &st, .on_validate = record_val, .user = &which,
                                   .validate_every_steps = VAL_EVERY,
                                   .validate_every_epoch = true));
        CHECK_EQ_INT((int)st.epoch, 2);
        if (t)
            CHECK_OK(trainer_validate(t, &after[which]));
        trainer_shutdown(&t);
    }
    printf("validations: %d (1 replica), %d (2 stages)\n", vals[0].n, vals[1].n);
    CHECK(vals[0].n == vals[1].n && vals[0].n >= 4);
    double worst = 0;
    for (int k = 0; k < vals[0].n && k < vals[1].n; k++) {
        printf("  epoch %lld step %lld: val_loss %.6f (%lld samples), %.6f (%lld)\n",
               (long long)vals[1].epoch[k], (long long)vals[1].step[k], vals[0].loss[k],
               (long long)vals[0].samples[k], vals[1].loss[k], (long long)vals[1].samples[k]);
        CHECK(vals[0].epoch[k] == vals[1].epoch[k] && vals[0].step[k] == vals[1].step[k]);
        CHECK(vals[0].samples[k] == vals[1].samples[k] && vals[1].samples[k] > 0);
        worst = fmax(worst, fabs(vals[0].loss[k] - vals[1].loss[k]));
    }
    printf("largest val_loss difference %.3g\n", worst);
    CHECK(worst <= 1e-5);
    CHECK(vals[1].loss[vals[1].n - 1] < vals[1].loss[0]); /* it learns */
    printf("trainer_validate: %.6f (%lld samples), %.6f (%lld), perplexity %.4f %.4f\n",
           after[0].val_loss, (long long)after[0].val_samples, after[1].val_loss,
           (long long)after[1].val_samples, after[0].val_perplexity, after[1].val_perplexity);
    CHECK(after[1].val_samples == after[0].val_samples && after[1].val_samples > 0);
    CHECK(fabs(after[0].val_loss - after[1].val_loss) <= 1e-5);
    CHECK(fabs(after[1].val_loss - vals[1].loss[vals[1].n - 1]) <= 1e-6);
    /* still refused, named, before anything starts: restore_best */
    trainer *rb = make_trainer(text, true, "", 2, 1);
    int rrc =
        rb ? trainer_train(rb, .restore_best = true, .validate_every_epoch = true) : CT_EINVAL;
    printf("restore_best: %s: %s\n", ct_strerror(rrc), ct_last_error());
    CHECK_EQ_INT(rrc, CT_ENOSYS);
    CHECK(strstr(ct_last_error(), "opts.restore_best") != NULL);
    trainer_shutdown(&rb);
    /* the stages validate as the built-in step: a custom one is refused, named */
    char config[400];
    snprintf(config, sizeof config, "text_file=%s,n_layer=2,n_head=2,n_embd=32,pipeline_stages=2",
             text);
    trainer *t = NULL;
    int rc = trainer_create(&(trainer_opts){.model = "gpt",
                                            .data = "text",
                                            .optimizer = "sgd",
                                            .loss = "cross_entropy",
                                            .validate_step = "pn_validate",
                                            .config = config,
                                            .num_replicas = 1},
                            &t);
    printf("a custom validate step: %s: %s\n", ct_strerror(rc), ct_last_error());
    CHECK_EQ_INT(rc, CT_ENOSYS);
    CHECK(strstr(ct_last_error(), "a custom validate step") != NULL);
    trainer_shutdown(&t);
}

/* the value of "key": in a JSON line, or NAN */
static double json_number(const char *line, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *at = strstr(line, k);
    return at ? strtod(at + strlen(k), NULL) : NAN;
}

/* log_dir: a pipeline's run log, metrics.jsonl, as 1 replica's: a "step" record per optimizer
 * step (its step number, loss and learning rate), an "epoch" record per epoch with the epoch's
 * train_loss (on_epoch's), a "val" record per validation with its val_loss (on_validate's); the
 * same records, the values to 1e-5. */
enum { RECS = 160 };
static double recs[2][3][RECS]; /* [which][step 0, epoch 1, val 2][k]: loss */
static int64_t rec_steps[2][RECS];
static double rec_lr[2][RECS];
static int nrecs[2][3];

static void read_log(int which, const char *logs)
{
    static const char *types[3] = {"\"type\":\"step\"", "\"type\":\"epoch\"", "\"type\":\"val\""};
    static const char *keys[3] = {"loss", "train_loss", "val_loss"};
    char path[400], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", logs);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    while (f && fgets(line, sizeof line, f)) {
        for (int kind = 0; kind < 3; kind++) {
            int k = nrecs[which][kind];
            if (!strstr(line, types[kind]) || k >= RECS)
                continue;
            recs[which][kind][k] = json_number(line, keys[kind]);
            if (kind == 0) {
                rec_steps[which][k] = (int64_t)json_number(line, "step");
                rec_lr[which][k] = json_number(line, "lr");
            }
            nrecs[which][kind]++;
        }
    }
    if (f)
        fclose(f);
}

static void run_log_dir(const char *dir)
{
    char text[300];
    write_text(dir, text, sizeof text);
    for (int which = 0; which < 2; which++) {
        char logs[300];
        CHECK_OK(mkdir_in(dir, which ? "log-pipeline" : "log-replica", logs, sizeof logs));
        trainer *t = make_trainer(text, which == 1, "", 2, 1);
        if (t)
            CHECK_OK(trainer_train(t, .on_epoch = record_epoch, .on_validate = record_val,
                                   .user = &which, .log_dir = logs, .validate_every_epoch = true));
        trainer_shutdown(&t);
        read_log(which, logs);
    }
    printf("metrics.jsonl: %d step, %d epoch and %d val records (1 replica), %d, %d and %d (2 "
           "stages) over %lld steps\n",
           nrecs[0][0], nrecs[0][1], nrecs[0][2], nrecs[1][0], nrecs[1][1], nrecs[1][2],
           (long long)(2 * epoch1_steps));
    for (int kind = 0; kind < 3; kind++)
        CHECK_EQ_INT(nrecs[1][kind], nrecs[0][kind]);
    CHECK(nrecs[1][0] == 2 * epoch1_steps && nrecs[1][1] == 2 && nrecs[1][2] == 2);
    double worst = 0;
    for (int k = 0; k < nrecs[1][0] && k < nrecs[0][0]; k++) {
        CHECK(rec_steps[1][k] == k + 1 && rec_steps[0][k] == k + 1);
        CHECK(rec_lr[1][k] == rec_lr[0][k]); /* StepLR: 0.3, then 0.15 in epoch 2 */
        worst = fmax(worst, fabs(recs[1][0][k] - recs[0][0][k]));
    }
    printf("  step records' losses: %.6f .. %.6f, largest difference from 1 replica's %.3g\n",
           recs[1][0][0], recs[1][0][nrecs[1][0] - 1], worst);
    CHECK(worst <= 1e-5);
    for (int k = 0; k < 2; k++) {
        printf("  epoch %d: train_loss %.6f %.6f (on_epoch %.6f), val_loss %.6f %.6f "
               "(on_validate %.6f)\n",
               k + 1, recs[0][1][k], recs[1][1][k], trainer_losses[1][k + 1], recs[0][2][k],
               recs[1][2][k], vals[1].loss[k]);
        CHECK(fabs(recs[1][1][k] - trainer_losses[1][k + 1]) <= 1e-6);
        CHECK(fabs(recs[1][2][k] - vals[1].loss[k]) <= 1e-6);
        CHECK(fabs(recs[1][1][k] - recs[0][1][k]) <= 1e-5);
        CHECK(fabs(recs[1][2][k] - recs[0][2][k]) <= 1e-5);
    }
}

/* the modes (argv[1]; ctest runs each as trainer_pipeline_nodes_<mode>): the nodes and their
 * CPUs each needs */
typedef struct {
    const char *name;
    void (*run)(const char *dir);
    int nodes;
    const char *cpus;
} test_mode;
static const test_mode modes[] = {
    {"two", run_two, 2, "1"},
    {"four", run_four, 2, "2"},
    {"dp", run_dp, 4, "1"},
    {"kill", run_kill, 2, "1"},
    {"trainer", run_trainer, 2, "1"},
    {"trainer_dp", run_trainer_dp, 4, "1"},
    {"ckpt_steps", run_ckpt_steps, 2, "1"},
    {"resume", run_resume, 2, "1"},
    {"validate", run_validate, 2, "1"},
    {"log_dir", run_log_dir, 2, "1"},
};

int main(int argc, char **argv)
{
    tt_register(); /* the probe loss */
    trainer_register_data("pn_tokens", pn_tokens);
    trainer_register_validate_step("pn_validate", trainer_builtin_validate_step);
    ct_serve_if_worker();
    h_init();
    /* within ctest's 300 s: h_init's 120 is short for trainer's four trainer_train runs in a
     * sanitized build beside other tests (26 s alone, more than 120 s under make sanitize) */
    alarm(290);
    const char *name = argc > 1 ? argv[1] : "two";
    const test_mode *mode = NULL;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (!strcmp(name, modes[i].name))
            mode = &modes[i];
    if (!mode) {
        fprintf(stderr, "test_pipeline_nodes: no mode \"%s\"\n", name);
        return 1;
    }
    if (mode->run == run_four)
        GPT.n_layer = 4;
    int nodes = mode->nodes;
    const char *cpus = mode->cpus;
    char addr[128], dir[] = "/tmp/ct-pipeline-nodes.XXXXXX", cmd[200];
    CHECK(mkdtemp(dir) != NULL);
    if (h_start_head(addr, sizeof addr, "100", "3000") < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    for (int i = 0; i < nodes; i++)
        h_start_node(addr, "--cpus", cpus, "--store-memory", "64M", NULL, NULL);
    if (!tt_wait_total_cpus(nodes * atoi(cpus), 20000)) {
        h_failures++;
        goto out;
    }
    mode->run(dir);
out:
    ct_shutdown();
    h_kill_all();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (h_failures)
        fprintf(stderr, "test_pipeline_nodes %s: %d failure(s)\n", name, h_failures);
    return h_failures ? 1 : 0;
}
