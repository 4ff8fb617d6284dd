/* tests/trainer/test_resume.c — checkpoints within an epoch, the checkpoint directory, and
 * resuming a job in a new driver process after its whole cluster is gone.
 *
 * The job: a small CNN with BatchNorm and Dropout (tt_cnn), 2 replicas, 2 epochs of 16 batches,
 * Adam + StepLR; a checkpoint every 5 optimizer steps (steps 5, 10, 15, 16 = epoch 1's end, 20,
 * 25, ...). The reference is the same job undisturbed and without step checkpoints: A.
 * 1. A new driver process (this test again, "--driver kill DIR", its own embedded cluster)
 *    trains with checkpoint_dir DIR; replica 1 parks in its 25th step (the probe loss) and the
 *    driver then SIGKILLs itself: the cluster dies with it (the embedded head and node follow
 *    their parent). DIR's index must say the latest checkpoint is step 20 (batch 4 of epoch 2),
 *    and hold the newest 3 files.
 * 2. Another new driver process ("--driver resume DIR") trains with .resume = DIR: its group
 *    must start at step 20 (trainer_stats.group_start_step), end at step 32, and its final
 *    weights must be bit-identical to A's. DIR then holds exactly the newest 3 checkpoints. On
 *    its one-node cluster a checkpoint asks for the 1 copy there can be: none is counted as
 *    under-replicated, and its log has no warning.
 * 3. In this process: A, then the job again with replica 1 killed (SIGKILL, by pid) in its 25th
 *    step: one retry, the new group starts at step 20, the final weights equal A's bit for bit.
 * 4. Retention: an MLP whose custom step reports a metric "m" that is constant over each
 *    8-step segment (values G below), a checkpoint every 8 steps, 3 epochs:
 *    with num_to_keep 2 and score "m" the directory keeps exactly the newest 2 and the best 2
 *    (min, then max), checked against scores computed here from G; the index names the latest
 *    and the best in order.
 * 5. Resume's edges (the MLP, 2 epochs): .resume of a missing directory, and of an empty one,
 *    starts fresh (one command line for the first run and the resumed ones), a missing
 *    *.safetensors file is CT_ENOENT; resuming the finished job trains nothing and returns the
 *    finished run's statistics (complete_at_resume, its val_accuracy and train_loss exactly)
 *    with a warning that says it is complete. */
#include "tt.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define EVERY 5

/* the probed trainer of the model, 2 epochs, seed 5 */
static trainer *make(const char *model, int probe_step)
{
    return tt_make_probed(model, probe_step, 2, 5);
}

static int write_all(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static void ckpt_name(char *buf, size_t cap, int epoch, int step)
{
    snprintf(buf, cap, "ckpt-epoch%04d-step%06d.safetensors", epoch, step);
}

/* ---- the driver processes (phases 1 and 2) ---- */

static void *die_at_probe(void *arg)
{
    (void)arg;
    void *v = NULL;
    size_t n;
    if (ct_kv_get("tt/probe", &v, &n, 60000) == 0)
        raise(SIGKILL); /* the driver, and with it the whole embedded cluster */
    fprintf(stderr, "driver: no probe in the KV: %s\n", ct_last_error());
    _exit(4);
}

static int driver_main(const char *phase, const char *dir)
{
    if (ct_init(&(ct_init_opts){.cpus = 2}) < 0) {
        fprintf(stderr, "driver: ct_init: %s\n", ct_last_error());
        return 2;
    }
    bool kill_phase = !strcmp(phase, "kill");
    trainer *t = make("cnn", kill_phase ? 16 + 9 : 0);
    trainer_stats st = {0};
    int rc = t ? 0 : 3;
    if (t && kill_phase) {
        pthread_t th;
        ct_kv_put("tt/probe/armed", "1", 1);
        pthread_create(&th, NULL, die_at_probe, NULL);
        rc = trainer_train(t, .checkpoint_every_steps = EVERY, .checkpoint_dir = dir,
                           .checkpoint_num_to_keep = 3, .stats = &st);
        fprintf(stderr, "driver: trainer_train returned %d (%s) before the kill\n", rc,
                ct_last_error());
        rc = 5;
    } else if (t) {
        rc = trainer_train(t, .resume = dir, .checkpoint_every_steps = EVERY, .checkpoint_dir = dir,
                           .checkpoint_num_to_keep = 3, .stats = &st);
        if (rc < 0)
            fprintf(stderr, "driver: trainer_train: %s\n", ct_last_error());
        int64_t n = 0;
        float *w = rc == 0 ? tt_weights(trainer_get_model(t), &n) : NULL;
        char path[600], res[200];
        snprintf(path, sizeof path, "%s/../weights.bin", dir);
        if (w && write_all(path, w, (size_t)n * sizeof(float)) < 0)
            rc = 6;
        free(w);
        snprintf(path, sizeof path, "%s/../result.txt", dir);
        snprintf(res, sizeof res, "%lld %lld %lld %d %d\n", (long long)st.group_start_step,
                 (long long)st.steps, (long long)st.epoch, st.retries_used,
                 st.checkpoints_under_replicated);
        if (write_all(path, res, strlen(res)) < 0)
            rc = 6;
    }
    trainer_shutdown(&t);
    ct_shutdown();
    return rc == 0 ? 0 : rc < 0 ? 1 : rc;
}

/* Runs this executable as a new driver (its own cluster), stdout and stderr to log; returns
 * its wait status. */
static int run_driver(const char *phase, const char *dir, const char *log)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    pid_t me = getpid(), pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me)
            _exit(1);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(self, self, "--driver", phase, dir, (char *)NULL);
        _exit(127);
    }
    if (pid > 0 && h_nprocs < H_MAX_PROCS)
        h_procs[h_nprocs++] = pid;
    int st = pid > 0 ? h_reap(pid, 0, 100000) : -1;
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        size_t len;
        char *out = tt_read_file(log, &len);
        fprintf(stderr, "---- driver %s (status 0x%x) log:\n%s----\n", phase, st, out ? out : "");
        free(out);
    }
    return st;
}

/* ---- this process ---- */

/* A train step that reports metric "m" = G[segment] (segments of SEG optimizer steps). */
#define SEG 8
static const double G[6] = {6, 1, 4, 0, 7, 2};

static int seg_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    int64_t seg = trainer_step_count(s) / SEG;
    int rc = trainer_builtin_train_step(s, b, out);
    return rc < 0 ? rc : trainer_step_metric(s, "m", G[seg < 6 ? seg : 5]);
}

/* 3 epochs of 16 steps, a checkpoint every SEG steps: checkpoint c (0..5) after segment c, at
 * step 8 (c + 1); its score is the mean of "m" over its epoch's batches so far: G[c] within an
 * epoch (c even), (G[c-1] + G[c]) / 2 at an epoch's end (c odd). The directory must keep the
 * newest 2 and the best 2 by that score. */
static void retention(const char *base, const char *order)
{
    char dir[600], want[1024] = "", got[1024], name[80];
    snprintf(dir, sizeof dir, "%s/keep-%s", base, order);
    trainer *t = NULL;
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "fashion_mnist",
                                            .optimizer = "sgd",
                                            .config = "limit=2048,val_limit=100",
                                            .train_step = "seg_metric",
                                            .num_replicas = 2,
                                            .batch_size = 64,
                                            .epochs = 3},
                            &t));
    if (!t)
        return;
    trainer_stats st = {0};
    CHECK_OK(trainer_train(t, .checkpoint_every_steps = SEG, .checkpoint_dir = dir,
                           .checkpoint_num_to_keep = 2, .checkpoint_num_best = 2,
                           .checkpoint_score_attribute = "m", .checkpoint_score_order = order,
                           .stats = &st));
    CHECK_EQ_INT(st.steps, 48);
    trainer_shutdown(&t);
    bool max = !strcmp(order, "max");
    double score[6];
    int rank[6];
    for (int c = 0; c < 6; c++) {
        score[c] = c % 2 ? (G[c - 1] + G[c]) / 2 : G[c];
        rank[c] = c;
    }
    for (int i = 0; i < 6; i++) /* best first (no ties in G) */
        for (int j = i + 1; j < 6; j++)
            if (max ? score[rank[j]] > score[rank[i]] : score[rank[j]] < score[rank[i]]) {
                int x = rank[i];
                rank[i] = rank[j];
                rank[j] = x;
            }
    bool kept[6] = {false};
    kept[4] = kept[5] = true; /* newest 2 */
    kept[rank[0]] = kept[rank[1]] = true;
    for (int c = 0; c < 6; c++)
        if (kept[c]) {
            ckpt_name(name, sizeof name, (c + 1) / 2, SEG * (c + 1));
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", want[0] ? " " : "",
                     name);
        }
    tt_list_ckpts(dir, got, sizeof got);
    printf("kept (%s): %s\n", order, got);
    CHECK_STR(got, want);
    /* min keeps 4 files (best: steps 32, 16), max 3 (best: steps 40, 8; 40 is also newest) */
    CHECK_STR(got, max ? "ckpt-epoch0000-step000008.safetensors "
                         "ckpt-epoch0002-step000040.safetensors "
                         "ckpt-epoch0003-step000048.safetensors"
                       : "ckpt-epoch0001-step000016.safetensors "
                         "ckpt-epoch0002-step000032.safetensors "
                         "ckpt-epoch0002-step000040.safetensors "
                         "ckpt-epoch0003-step000048.safetensors");
    char ip[700], frag[300], b0[80], b1[80];
    size_t len = 0;
    snprintf(ip, sizeof ip, "%s/index.json", dir);
    char *idx = tt_read_file(ip, &len);
    CHECK(idx != NULL);
    ckpt_name(name, sizeof name, 3, 48);
    snprintf(frag, sizeof frag, "\"latest\": \"%s\"", name);
    CHECK(idx && strstr(idx, frag));
    ckpt_name(b0, sizeof b0, (rank[0] + 1) / 2, SEG * (rank[0] + 1));
    ckpt_name(b1, sizeof b1, (rank[1] + 1) / 2, SEG * (rank[1] + 1));
    snprintf(frag, sizeof frag, "\"best\": [\"%s\", \"%s\"]", b0, b1);
    CHECK(idx && strstr(idx, frag));
    if (idx && !strstr(idx, frag))
        fprintf(stderr, "index.json lacks %s:\n%s\n", frag, idx);
    free(idx);
}

static trainer *make_mlp(void)
{
    trainer *t = NULL;
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "fashion_mnist",
                                            .optimizer = "sgd",
                                            .config = "limit=512,val_limit=100",
                                            .num_replicas = 2,
                                            .batch_size = 64,
                                            .epochs = 2},
                            &t));
    return t;
}

/* trainer_train with .resume = .checkpoint_dir = dir and in-line validation; stderr to err. */
static int train_resuming(trainer *t, const char *dir, const char *err, trainer_stats *st)
{
    fflush(stderr);
    int saved = dup(STDERR_FILENO), fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDERR_FILENO);
    close(fd);
    int rc = trainer_train(t, .resume = dir, .checkpoint_dir = dir, .validate_every_epoch = true,
                           .stats = st);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    return rc;
}

static void resume_edges(const char *base)
{
    char dir[600], empty[600], err[600], file[700];
    trainer_stats st = {0}, st2 = {0};
    snprintf(dir, sizeof dir, "%s/edges", base);
    snprintf(empty, sizeof empty, "%s/empty", base);
    snprintf(err, sizeof err, "%s/edges.log", base);
    snprintf(file, sizeof file, "%s/nothing.safetensors", base);
    trainer *t = make_mlp();
    if (!t)
        return;
    /* a missing file is an error: a file was meant */
    CHECK_EQ_INT(trainer_train(t, .resume = file), CT_ENOENT);
    CHECK(strstr(ct_last_error(), "nothing.safetensors") != NULL);
    /* a missing directory, and an empty one: the job starts fresh */
    CHECK_OK(train_resuming(t, dir, err, &st));
    CHECK_EQ_INT(st.epoch, 2);
    CHECK(!st.complete_at_resume && st.val_samples == 100 && st.steps > 0);
    trainer_shutdown(&t);
    CHECK_EQ_INT(mkdir(empty, 0755), 0);
    if ((t = make_mlp())) {
        CHECK_OK(trainer_train(t, .resume = empty, .epochs = 1, .stats = &st2));
        CHECK_EQ_INT(st2.epoch, 1);
        CHECK(!st2.complete_at_resume);
    }
    trainer_shutdown(&t);
    /* the finished job again: nothing to train, its statistics back, and a warning */
    if (!(t = make_mlp()))
        return;
    memset(&st2, 0, sizeof st2);
    CHECK_OK(train_resuming(t, dir, err, &st2));
    CHECK(st2.complete_at_resume);
    CHECK_EQ_INT(st2.epoch, 2);
    CHECK_EQ_INT(st2.steps, st.steps);
    CHECK_EQ_INT(st2.group_start_step, st.steps);
    CHECK_EQ_INT(st2.replicas, 0); /* no group started */
    CHECK_EQ_INT(st2.val_samples, 100);
    CHECK(st2.val_accuracy == st.val_accuracy && st2.val_accuracy > 0);
    CHECK(st2.train_loss == st.train_loss && st2.val_loss == st.val_loss);
    printf("resumed the finished job: val_accuracy %.4f (finished run %.4f), steps %lld\n",
           st2.val_accuracy, st.val_accuracy, (long long)st2.steps);
    char *log = tt_read_file(err, NULL);
    if (!log || !strstr(log, "WARN") || !strstr(log, "is complete already (epoch 2 of 2") ||
        !strstr(log, "its final statistics are returned")) {
        fprintf(stderr, "the log of the finished job's resume does not say it:\n%s\n",
                log ? log : "(none)");
        h_failures++;
    }
    free(log);
    trainer_shutdown(&t);
}

int main(int argc, char **argv)
{
    tt_register();
    trainer_register_train_step("seg_metric", seg_step);
    ct_serve_if_worker();
    if (argc == 4 && !strcmp(argv[1], "--driver"))
        return driver_main(argv[2], argv[3]);
    h_init();
    char base[] = "/tmp/ct-resume.XXXXXX", dir[600], log[600], path[700], got[1024];
    CHECK(mkdtemp(base) != NULL);
    snprintf(dir, sizeof dir, "%s/job", base);
    int64_t n1 = 0, n2 = 0, n3 = 0;
    float *w1 = NULL, *w2 = NULL, *w3 = NULL;
    char *idx = NULL, *res = NULL;
    size_t len = 0;

    /* 1. a driver and its cluster die mid-epoch */
    snprintf(log, sizeof log, "%s/driver-kill.log", base);
    int st = run_driver("kill", dir, log);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    snprintf(path, sizeof path, "%s/index.json", dir);
    idx = tt_read_file(path, &len);
    CHECK(idx && strstr(idx, "\"latest\": \"ckpt-epoch0001-step000020.safetensors\""));
    tt_list_ckpts(dir, got, sizeof got);
    printf("after the cluster died: %s\n", got);
    CHECK_STR(got, "ckpt-epoch0000-step000015.safetensors ckpt-epoch0001-step000016.safetensors "
                   "ckpt-epoch0001-step000020.safetensors");

    /* 2. a new driver, a new cluster: resume from the directory */
    snprintf(log, sizeof log, "%s/driver-resume.log", base);
    st = run_driver("resume", dir, log);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    snprintf(path, sizeof path, "%s/result.txt", base);
    res = tt_read_file(path, &len);
    long long start = -1, steps = -1, epoch = -1;
    int retries = -1, under = -1;
    CHECK(res &&
          sscanf(res, "%lld %lld %lld %d %d", &start, &steps, &epoch, &retries, &under) == 5);
    CHECK_EQ_INT(start, 20);
    CHECK_EQ_INT(steps, 32);
    CHECK_EQ_INT(epoch, 2);
    CHECK_EQ_INT(retries, 0);
    CHECK_EQ_INT(under, 0); /* 1 node: 1 copy is all a checkpoint can have, and it asks 1 */
    free(res);
    res = tt_read_file(log, &len);
    /* no warning about copies */
    CHECK(res && !strstr(res, "under-replicated") && !strstr(res, "stored with"));
    tt_list_ckpts(dir, got, sizeof got);
    printf("after the resumed run: %s\n", got);
    CHECK_STR(got, "ckpt-epoch0001-step000025.safetensors ckpt-epoch0001-step000030.safetensors "
                   "ckpt-epoch0002-step000032.safetensors");
    snprintf(path, sizeof path, "%s/weights.bin", base);
    w3 = (float *)tt_read_file(path, &len);
    n3 = (int64_t)(len / sizeof(float));

    /* 3. this process: the undisturbed reference, then a replica killed mid-epoch */
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    trainer *t = make("cnn", 0);
    CHECK(t != NULL);
    if (!t)
        goto out;
    trainer_stats st1 = {0}, st2 = {0};
    CHECK_OK(trainer_train(t, .stats = &st1));
    CHECK_EQ_INT(st1.steps, 32);
    CHECK_EQ_INT(st1.checkpoints_under_replicated, 0); /* one node: 1 copy asked, 1 made */
    w1 = tt_weights(trainer_get_model(t), &n1);
    trainer_shutdown(&t);
    tt_same_weights(w1, w3, n1, n3, "resumed in a new driver");

    t = make("cnn", 16 + 9);
    CHECK(t != NULL);
    if (!t)
        goto out;
    ct_kv_put("tt/probe/armed", "1", 1);
    tt_killer k = {.t = t};
    pthread_t th;
    pthread_create(&th, NULL, tt_kill_probe, &k);
    snprintf(path, sizeof path, "%s/in-process", base);
    CHECK_OK(trainer_train(t, .max_retries = 1, .checkpoint_every_steps = EVERY,
                           .checkpoint_dir = path, .checkpoint_num_to_keep = 2, .stats = &st2));
    pthread_join(th, NULL);
    CHECK(k.killed_pid > 0);
    CHECK_EQ_INT(k.killed_pid, k.replica_pid);
    CHECK_EQ_INT(st2.retries_used, 1);
    CHECK_EQ_INT(st2.group_start_step, 20);
    CHECK_EQ_INT(st2.steps, 32);
    CHECK_EQ_INT(st2.replicas, 2);
    CHECK(st2.weights_agree);
    w2 = tt_weights(trainer_get_model(t), &n2);
    tt_same_weights(w1, w2, n1, n2, "replica killed mid-epoch");
    trainer_shutdown(&t);

    /* 4. which files are kept */
    retention(base, "min");
    retention(base, "max");
    /* 5. resume's edges */
    resume_edges(base);
out:
    free(idx);
    free(res);
    free(w1);
    free(w2);
    free(w3);
    ct_shutdown();
    if (!h_failures) {
        snprintf(path, sizeof path, "rm -rf '%s'", base);
        if (system(path) != 0)
            fprintf(stderr, "could not remove %s\n", base);
    }
    if (h_failures)
        fprintf(stderr, "test_resume: %d failure(s); files in %s\n", h_failures, base);
    return h_failures ? 1 : 0;
}
