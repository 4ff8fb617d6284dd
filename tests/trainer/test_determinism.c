/* tests/trainer/test_determinism.c — recovery from a killed replica is exact.
 * Trains 3 epochs of a small MLP (argument "cnn": a small CNN with BatchNorm and Dropout) with
 * 2 replicas undisturbed; then again with replica 1
 * stopped in the middle of epoch 2 (the probe loss parks it at its 22nd step and puts its pid
 * in the KV) and killed by this test with SIGKILL, by pid (checked against the trainer's
 * replica pid). Training must complete with retries_used == 1, the group restarted from the
 * epoch-1 checkpoint with the same world size, and the final weights must be bit-identical to
 * the undisturbed run's (same data order from seed + epoch, dropout reseeded per epoch, the
 * optimizer and scheduler state restored exactly). Last, the same kill with checkpoints off:
 * the group starts over from epoch 0 and still ends with the same weights. */
#include "tt.h"

#include <pthread.h>

static const char *model = "mlp";

/* the probed trainer of the model, 3 epochs, seed 11 */
static trainer *make(int probe_step)
{
    return tt_make_probed(model, probe_step, 3, 11);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        model = argv[1];
    tt_register();
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    int64_t n1 = 0, n2 = 0;
    float *w1 = NULL, *w2 = NULL;
    trainer_stats st1 = {0}, st2 = {0};

    trainer *t = make(0);
    CHECK(t != NULL);
    if (!t)
        goto out;
    CHECK_OK(trainer_train(t, .max_retries = 1, .stats = &st1));
    CHECK_EQ_INT(st1.epoch, 3);
    CHECK_EQ_INT(st1.retries_used, 0);
    CHECK(st1.weights_agree);
    w1 = tt_weights(trainer_get_model(t), &n1);
    trainer_shutdown(&t);

    t = make(16 + 6); /* replica 1's 6th step of epoch 2 */
    CHECK(t != NULL);
    if (!t)
        goto out;
    ct_kv_put("tt/probe/armed", "1", 1);
    tt_killer k = {.t = t};
    pthread_t th;
    pthread_create(&th, NULL, tt_kill_probe, &k);
    CHECK_OK(trainer_train(t, .max_retries = 1, .stats = &st2));
    pthread_join(th, NULL);
    CHECK(k.killed_pid > 0);
    CHECK_EQ_INT(k.killed_pid, k.replica_pid);
    CHECK_EQ_INT(st2.epoch, 3);
    CHECK_EQ_INT(st2.steps, st1.steps);
    CHECK_EQ_INT(st2.retries_used, 1);
    CHECK_EQ_INT(st2.replicas, 2);
    CHECK(st2.weights_agree);
    CHECK(h_wait_gone(k.killed_pid, 2000));
    w2 = tt_weights(trainer_get_model(t), &n2);
    CHECK_EQ_INT(n1, n2);
    if (w1 && w2 && n1 == n2) {
        int64_t diff = 0, first = -1;
        for (int64_t i = 0; i < n1; i++)
            if (memcmp(&w1[i], &w2[i], sizeof(float))) {
                diff++;
                first = first < 0 ? i : first;
            }
        if (diff) {
            fprintf(stderr, "%lld of %lld weights differ; first at %lld: %.9g vs %.9g\n",
                    (long long)diff, (long long)n1, (long long)first, w1[first], w2[first]);
            h_failures++;
        }
    } else {
        h_failures++;
    }
    if (st2.failure_seen_ns && st2.group_first_step_ns)
        printf("kill -> failure seen %.1f ms, -> first step of the new group %.1f ms\n",
               (st2.failure_seen_ns - k.kill_ns) / 1e6,
               (st2.group_first_step_ns - k.kill_ns) / 1e6);
    trainer_shutdown(&t);

    /* checkpoints off: the same kill restarts from epoch 0, and still ends bit-identical */
    t = make(16 + 6);
    CHECK(t != NULL);
    if (!t)
        goto out;
    ct_kv_put("tt/probe/armed", "1", 1);
    tt_killer k2 = {.t = t};
    trainer_stats st3 = {0};
    pthread_create(&th, NULL, tt_kill_probe, &k2);
    CHECK_OK(
        trainer_train(t, .max_retries = 1, .checkpoint = TRAINER_CHECKPOINT_NONE, .stats = &st3));
    pthread_join(th, NULL);
    CHECK(k2.killed_pid > 0);
    CHECK_EQ_INT(st3.retries_used, 1);
    CHECK_EQ_INT(st3.epoch, 3);
    CHECK_EQ_INT(st3.steps, st1.steps);
    free(w2);
    w2 = tt_weights(trainer_get_model(t), &n2);
    CHECK(w1 && w2 && n1 == n2 && memcmp(w1, w2, sizeof(float) * (size_t)n1) == 0);
    trainer_shutdown(&t);
out:
    free(w1);
    free(w2);
    ct_shutdown();
    if (h_failures)
        fprintf(stderr, "test_determinism: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
