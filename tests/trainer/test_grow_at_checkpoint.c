/* tests/trainer/test_grow_at_checkpoint.c — a group grows at a checkpoint within an epoch.
 * A ct-head and one ct-node with one CPU: num_replicas 2 (max 2), one CPU each, so the group
 * starts with the 1 replica that fits. 2 epochs of 32 steps for one replica (2048 samples,
 * batch 64), a checkpoint and a validation every 4 steps. At the first validation from step 8
 * on (on_validate, after that segment's checkpoint was adopted) the test starts a second node
 * and waits until the head counts its CPU. The driver then ends the group right after that
 * checkpoint and starts 2 replicas from it: on_world_size is told 1 -> 2 at that step, a
 * multiple of 4 before the epoch's end, and the 2 ranks start at the batch where as many
 * samples were seen (step 8 of 1 rank: batch 4 of 2 ranks' 16). Expected: one growth, no retry,
 * 8 + 12 + 16 = 36 steps, equal weights. */
#include "tt.h"

typedef struct scenario {
    const char *addr;
    pid_t node_pid[2];
    int nodes;
    int64_t joined_step; /* the validation's step at which the second node joined */
    int hook_old[8], hook_new[8], nhook;
    int64_t hook_steps[8], hook_epoch[8];
} scenario;

static int start_node(scenario *s, double cpus_after)
{
    pid_t pid = h_start_node(s->addr, "--cpus", "1", "--store-memory", "256M", NULL, NULL);
    if (pid < 0 || !tt_wait_total_cpus(cpus_after, 10000))
        return CT_EIO;
    s->node_pid[s->nodes++] = pid;
    return 0;
}

static int on_validate(trainer *t, const trainer_stats *st, void *user)
{
    scenario *s = user;
    (void)t;
    if (s->nodes == 1 && st->val_step >= 8) {
        s->joined_step = st->val_step;
        printf("validation at step %lld: starting a second node\n", (long long)st->val_step);
        return start_node(s, 2);
    }
    return 0;
}

static int on_world_size(trainer *t, int old_size, int new_size, void *user)
{
    scenario *s = user;
    trainer_stats st;
    if (s->nhook >= 8 || trainer_get_stats(t, &st) < 0)
        return CT_EINVAL;
    s->hook_old[s->nhook] = old_size;
    s->hook_new[s->nhook] = new_size;
    s->hook_epoch[s->nhook] = st.epoch;
    s->hook_steps[s->nhook++] = st.steps;
    printf("on_world_size: %d -> %d after %lld epochs, at step %lld\n", old_size, new_size,
           (long long)st.epoch, (long long)st.steps);
    return 0;
}

int main(void)
{
    tt_register();
    ct_serve_if_worker();
    h_init();
    char addr[128];
    scenario s = {.addr = addr};
    trainer *t = NULL;
    if (h_start_head(addr, sizeof addr, "100", "10000") < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    if (start_node(&s, 1) < 0) {
        h_failures++;
        goto out;
    }
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "synthetic",
                                            .optimizer = "sgd",
                                            .config = "n=2560,lr=0.05",
                                            .num_replicas = 2,
                                            .cpus_per_replica = 1,
                                            .epochs = 2,
                                            .seed = 9},
                            &t));
    if (!t)
        goto out;
    trainer_stats st = {0};
    CHECK_OK(trainer_train(t, .checkpoint_every_steps = 4, .validate_every_steps = 4,
                           .on_validate = on_validate, .on_world_size = on_world_size, .user = &s,
                           .stats = &st));
    CHECK_EQ_INT(s.nodes, 2);
    CHECK_EQ_INT(s.joined_step, 8);
    CHECK_EQ_INT(s.nhook, 2);
    CHECK_EQ_INT(s.hook_old[0], 0);
    CHECK_EQ_INT(s.hook_new[0], 1);
    CHECK_EQ_INT(s.hook_old[1], 1);
    CHECK_EQ_INT(s.hook_new[1], 2);
    /* it grew at the first checkpoint after the join: step 8, within epoch 0 (32 steps) */
    CHECK_EQ_INT(s.hook_steps[1], s.joined_step);
    CHECK_EQ_INT(s.hook_steps[1] % 4, 0);
    CHECK(s.hook_steps[1] > 0 && s.hook_steps[1] < 32);
    CHECK_EQ_INT(s.hook_epoch[1], 0);
    CHECK_EQ_INT(st.growths, 1);
    CHECK_EQ_INT(st.retries_used, 0);
    CHECK_EQ_INT(st.replicas, 2);
    CHECK_EQ_INT(st.group_start_step, 8);
    CHECK_EQ_INT(st.epoch, 2);
    CHECK_EQ_INT(st.steps, 8 + 12 + 16);
    CHECK(st.weights_agree);
out:
    trainer_shutdown(&t);
    ct_shutdown();
    h_kill_all();
    if (h_failures)
        fprintf(stderr, "test_grow_at_checkpoint: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
