/* tests/trainer/test_fail_fast.c — failures that a retry cannot fix end trainer_train at once,
 * and a relative data path works. One case per run (the argument), each on its own embedded
 * cluster of 2 CPUs and no GPU, on the built-in "text" data and a tiny "gpt":
 *   relative  the test changes its working directory after ct_init (the embedded node, and so
 *             the replicas, stay in the old one) and names text_file relatively: training
 *             works, and every replica's config holds the absolute path (an initialization
 *             hook puts it in the KV).
 *   missing   a relative text_file that is missing fails trainer_create with CT_ENOENT naming
 *             the absolute path; a file removed after trainer_create fails trainer_train with
 *             the replica's CT_ENOENT naming it, "not retried", and 0 retries spent of 3.
 *   shards    a 1000-byte text whose validation split (100 bytes) fits one window of 65 bytes
 *             but not 2 shards of 50: trainer_create refuses num_replicas 2 (and max_replicas 2)
 *             naming the shard and the replica, and no replica ever built its data; 1 replica
 *             is accepted.
 *   never     cpus_per_replica 4 on a node of 2 CPUs: trainer_train refuses with CT_EINVAL,
 *             "no node has 4 CPUs; nodes: 1 x {CPU: 2}", though min_replicas_timeout_ms is an
 *             hour (a wait would pass the test's timeout), with no retry spent and no replica
 *             started.
 *   nogpu     device "cuda" (this executable links the CUDA backend) on the same cluster:
 *             "no node has a GPU; nodes: 1 x {CPU: 2}", the same way. Exits 77 (a skip) when
 *             the program has no CUDA backend.
 * The test never asserts a duration: a wait it must not do is caught by ctest's timeout. */
#include "tt.h"

#include <sys/stat.h>

#define TEXT_CFG "block_size=16,n_layer=1,n_head=1,n_embd=16,lr=1e-3"

/* The initialization hook: in a replica, puts its text_file under "ff/text_file/<rank>". */
static int record_path(trainer_ctx *ctx)
{
    const char *path = trainer_config_str(ctx, "text_file", "");
    if (trainer_ctx_is_driver(ctx))
        return 0;
    char key[64];
    snprintf(key, sizeof key, "ff/text_file/%d", trainer_ctx_rank(ctx));
    return ct_kv_put(key, path, strlen(path) + 1);
}

/* n bytes of text into path (a pattern a small model can learn). */
static int write_text(const char *path, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    static const char line[] = "the quick brown fox jumps over the lazy dog. ";
    for (int i = 0; i < n; i++)
        fputc(line[i % (int)(sizeof line - 1)], f);
    return fclose(f);
}

/* The value of KV key (NUL-terminated) into buf; "" when absent. */
static const char *kv_str(const char *key, char *buf, size_t cap)
{
    void *v = NULL;
    size_t n = 0;
    buf[0] = 0;
    if (ct_kv_get(key, &v, &n, 0) == 0 && v)
        snprintf(buf, cap, "%.*s", (int)n, (const char *)v);
    free(v);
    return buf;
}

static void expect_msg(const char *what, const char *s)
{
    if (!strstr(ct_last_error(), s)) {
        fprintf(stderr, "%s: message \"%s\" lacks \"%s\"\n", what, ct_last_error(), s);
        h_failures++;
    }
}

/* Every CPU of the cluster free again, and no replica built its state (the hook's keys). */
static void expect_nothing_started(void)
{
    double total = 0, free_cpu = 0;
    char v[600];
    CHECK_OK(ct_cluster_resources("CPU", &total, &free_cpu));
    CHECK(total == 2 && free_cpu == 2);
    CHECK_STR(kv_str("ff/text_file/0", v, sizeof v), "");
}

static trainer *make(const char *cfg, int num, int max, double cpus, const char *device, int *rc)
{
    trainer *t = NULL;
    *rc = trainer_create(&(trainer_opts){.model = "gpt",
                                         .data = "text",
                                         .optimizer = "adam",
                                         .config = cfg,
                                         .initialization_hook = "record_path",
                                         .num_replicas = num,
                                         .max_replicas = max,
                                         .cpus_per_replica = cpus,
                                         .device = device,
                                         .batch_size = 16,
                                         .epochs = 1},
                         &t);
    if (*rc < 0)
        printf("trainer_create: %s\n", ct_last_error());
    return t;
}

static void case_relative(const char *dir)
{
    char cfg[300], want[4200], got[4200];
    CHECK_OK(write_text("corpus.txt", 4000));
    snprintf(cfg, sizeof cfg, "text_file=./corpus.txt," TEXT_CFG);
    snprintf(want, sizeof want, "%s/corpus.txt", dir);
    int rc;
    trainer *t = make(cfg, 2, 0, 0, NULL, &rc);
    CHECK_EQ_INT(rc, 0);
    trainer_stats st = {0};
    if (t) {
        rc = trainer_train(t, .max_retries = 2, .stats = &st);
        if (rc < 0)
            printf("trainer_train: %s\n", ct_last_error());
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(st.retries_used, 0);
        CHECK_EQ_INT(st.replicas, 2);
        CHECK_EQ_INT((int)st.epoch, 1);
        CHECK(st.steps > 0);
        CHECK_STR(kv_str("ff/text_file/0", got, sizeof got), want);
        CHECK_STR(kv_str("ff/text_file/1", got, sizeof got), want);
        printf("relative: replicas read %s, %lld steps\n", got, (long long)st.steps);
    }
    trainer_shutdown(&t);
    unlink("corpus.txt");
}

static void case_missing(const char *dir)
{
    char cfg[300], want[4200];
    int rc;
    /* missing at trainer_create: the driver's check names the absolute path */
    snprintf(want, sizeof want, "%s/nope.txt", dir);
    trainer *t = make("text_file=nope.txt," TEXT_CFG, 2, 0, 0, NULL, &rc);
    CHECK(t == NULL);
    CHECK_EQ_INT(rc, CT_ENOENT);
    expect_msg("missing at create", want);
    /* removed after trainer_create: the replicas' build fails, once, with their message */
    CHECK_OK(write_text("corpus.txt", 4000));
    snprintf(cfg, sizeof cfg, "text_file=corpus.txt," TEXT_CFG);
    snprintf(want, sizeof want, "%s/corpus.txt", dir);
    t = make(cfg, 2, 0, 0, NULL, &rc);
    CHECK_EQ_INT(rc, 0);
    unlink("corpus.txt");
    trainer_stats st = {0};
    if (t) {
        rc = trainer_train(t, .max_retries = 3, .stats = &st);
        printf("trainer_train: %s\n", ct_last_error());
        CHECK_EQ_INT(rc, CT_ENOENT);
        expect_msg("removed", want);
        expect_msg("removed", "cannot open");
        expect_msg("removed", "trainer: replica ");
        expect_msg("removed", "not retried");
        CHECK_EQ_INT(st.retries_used, 0);
        CHECK_EQ_INT(st.replicas, 0);
        CHECK_EQ_INT((int)st.steps, 0);
    }
    trainer_shutdown(&t);
    double total = 0, free_cpu = 0;
    CHECK_OK(ct_cluster_resources("CPU", &total, &free_cpu));
    CHECK(total == 2 && free_cpu == 2);
}

static void case_shards(void)
{
    int rc;
    CHECK_OK(write_text("small.txt", 1000));
    trainer *t =
        make("text_file=small.txt,block_size=64,n_layer=1,n_head=1,n_embd=16", 2, 0, 0, NULL, &rc);
    CHECK(t == NULL);
    CHECK_EQ_INT(rc, CT_EINVAL);
    expect_msg("2 replicas", "small.txt: the validation split's shard 0 of 2 has 50 bytes");
    expect_msg("2 replicas", "opts.data \"text\" for replica 0 of 2");
    expect_msg("2 replicas", "num_replicas = 2");
    expect_nothing_started();
    /* a group may grow to max_replicas: its shards are checked */
    t = make("text_file=small.txt,block_size=64,n_layer=1,n_head=1,n_embd=16", 1, 2, 0, NULL, &rc);
    CHECK(t == NULL);
    CHECK_EQ_INT(rc, CT_EINVAL);
    expect_msg("max 2", "max_replicas = 2");
    expect_nothing_started();
    /* one replica reads the whole file: 100 bytes of validation hold a window */
    t = make("text_file=small.txt,block_size=64,n_layer=1,n_head=1,n_embd=16", 1, 0, 0, NULL, &rc);
    CHECK_EQ_INT(rc, 0);
    trainer_shutdown(&t);
    unlink("small.txt");
}

/* trainer_train of a request no node can hold: refused at once (an hour's timeout is not
 * waited), with the message's parts, no retry, no replica. 77 when the program lacks the
 * device's backend, else 0. */
static int expect_never(double cpus, const char *device, const char *s1, const char *s2)
{
    int rc;
    CHECK_OK(write_text("corpus.txt", 4000));
    trainer *t = make("text_file=corpus.txt," TEXT_CFG, 2, 0, cpus, device, &rc);
    if (t == NULL && rc == CT_ENOSYS && device) {
        printf("SKIP: %s\n", ct_last_error());
        unlink("corpus.txt");
        return 77;
    }
    CHECK_EQ_INT(rc, 0);
    trainer_stats st = {0};
    if (t) {
        rc = trainer_train(t, .max_retries = 3, .min_replicas_timeout_ms = 3600 * 1000,
                           .stats = &st);
        printf("trainer_train: %s\n", ct_last_error());
        CHECK_EQ_INT(rc, CT_EINVAL);
        expect_msg("never", s1);
        expect_msg("never", s2);
        expect_msg("never", "can never start");
        CHECK_EQ_INT(st.retries_used, 0);
        CHECK_EQ_INT(st.replicas, 0);
        expect_nothing_started();
    }
    trainer_shutdown(&t);
    unlink("corpus.txt");
    return 0;
}

int main(int argc, char **argv)
{
    tt_register();
    trainer_register_hook("record_path", record_path);
    ct_serve_if_worker();
    const char *which = argc > 1 ? argv[1] : "";
    h_init();
    char old[4096], dir[4096], tmpl[] = "/tmp/ct-failfast-XXXXXX";
    CHECK(getcwd(old, sizeof old) != NULL);
    if (!mkdtemp(tmpl)) {
        perror("mkdtemp");
        return 1;
    }
    /* the embedded node (and the replicas it starts) keeps the working directory of ct_init */
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    CHECK_OK(chdir(tmpl));
    CHECK(getcwd(dir, sizeof dir) != NULL);
    int skip = 0;
    if (!strcmp(which, "relative"))
        case_relative(dir);
    else if (!strcmp(which, "missing"))
        case_missing(dir);
    else if (!strcmp(which, "shards"))
        case_shards();
    else if (!strcmp(which, "never"))
        skip = expect_never(4, NULL, "no node has 4 CPUs", "nodes: 1 x {CPU: 2}");
    else if (!strcmp(which, "nogpu"))
        skip = expect_never(1, "cuda", "no node has a GPU", "nodes: 1 x {CPU: 2}");
    else {
        fprintf(stderr, "usage: %s relative|missing|shards|never|nogpu\n", argv[0]);
        h_failures++;
    }
    CHECK_OK(chdir(old));
    rmdir(tmpl);
    ct_shutdown();
    CHECK_EQ_INT(h_leftovers(3000), 0);
    if (h_failures)
        fprintf(stderr, "test_fail_fast %s: %d failure(s)\n", which, h_failures);
    return h_failures ? 1 : skip;
}
