/* tests/trainer/test_retries.c — retries run out, and backoff while nothing fits.
 * 1. max_retries = 1 and replica 1 kills itself (SIGKILL) at its 3rd step in every group:
 *    the first death is recovered, the second makes trainer_train return CT_ERETRY with a
 *    message naming the replica and the signal; every replica is gone afterwards (the
 *    cluster's CPUs are all free again) and, after ct_shutdown, no process of this test is left.
 * 2. Replicas that fit the cluster but not its free CPUs (a placement group holds one of the
 *    two): trainer_train waits for min_replicas (2) to fit, backing off (base 50 ms, factor 2)
 *    between rounds without spending retries, and returns CT_ETIMEDOUT saying no resources
 *    fit, and that free CPUs are short, once min_replicas_timeout_ms passed. (Replicas no node
 *    could ever hold fail at once: test_fail_fast.c.) */
#include "tt.h"

static trainer *make(const char *cfg, int min_replicas)
{
    trainer *t = NULL;
    if (trainer_create(&(trainer_opts){.model = "mlp",
                                       .data = "fashion_mnist",
                                       .optimizer = "sgd",
                                       .loss = "probe",
                                       .config = cfg,
                                       .num_replicas = 2,
                                       .min_replicas = min_replicas,
                                       .epochs = 2,
                                       .recovery = "restart"},
                       &t) < 0)
        fprintf(stderr, "trainer_create: %s\n", ct_last_error());
    return t;
}

int main(void)
{
    tt_register();
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    double total = 0, free_cpu = 0;
    ct_placement_group *pg = NULL;

    trainer *t = make("limit=1024,val_limit=100,probe_step=3,probe_action=die,probe_epoch0=0", 0);
    CHECK(t != NULL);
    if (!t)
        goto out;
    trainer_stats st = {0};
    int rc = trainer_train(t, .max_retries = 1, .stats = &st);
    CHECK_EQ_INT(rc, CT_ERETRY);
    const char *msg = ct_last_error();
    printf("trainer_train: %s\n", msg);
    CHECK(strstr(msg, "replica 1") != NULL);
    CHECK(strstr(msg, "signal 9") != NULL);
    CHECK(strstr(msg, "retry") != NULL);
    CHECK_EQ_INT(st.retries_used, 1);
    CHECK_EQ_INT(st.replicas, 0);
    CHECK_EQ_INT(st.epoch, 0);
    CHECK_OK(ct_cluster_resources("CPU", &total, &free_cpu));
    CHECK(total == 2 && free_cpu == 2);
    trainer_shutdown(&t);

    /* one of the 2 CPUs held: min_replicas 2 waits rounds with backoff, no retry spent, then
     * CT_ETIMEDOUT */
    CHECK_OK(ct_placement_group_create(&(ct_bundle){.cpu = 1}, 1, CT_PACK, &pg));
    CHECK_OK(ct_placement_group_wait(pg, 10000));
    t = make("limit=1024,val_limit=100", 2);
    CHECK(t != NULL);
    if (!t)
        goto out;
    double t0 = h_now_ms();
    rc = trainer_train(t, .max_retries = 2, .backoff_base_ms = 50, .backoff_factor = 2,
                       .backoff_jitter = 0.1, .min_replicas_timeout_ms = 400, .stats = &st);
    double ms = h_now_ms() - t0;
    CHECK_EQ_INT(rc, CT_ETIMEDOUT);
    printf("trainer_train: %s (after %.0f ms)\n", ct_last_error(), ms);
    CHECK(strstr(ct_last_error(), "no resources") != NULL);
    CHECK(strstr(ct_last_error(), "min_replicas 2") != NULL);
    CHECK(strstr(ct_last_error(), "too few free CPUs") != NULL);
    CHECK(strstr(ct_last_error(), "nodes: 1 x {CPU: 2}") != NULL);
    CHECK(ms >= 395); /* the wait is 400 ms on the trainer's clock; ours rounds apart by < 1 ms */
    CHECK(ms < 5000);
    CHECK_EQ_INT(st.retries_used, 0);
    CHECK_EQ_INT(st.replicas, 0);
    trainer_shutdown(&t);
out:
    if (pg)
        CHECK_OK(ct_placement_group_remove(&pg));
    ct_shutdown();
    CHECK_EQ_INT(h_leftovers(3000), 0);
    if (h_failures)
        fprintf(stderr, "test_retries: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
