/* tests/trainer/test_node_loss.c — losing a node, shrinking, growing back.
 * The test starts a ct-head (heartbeat 100 ms; a killed node is
 * seen dead at once through its death-watch connection, a silent one after 10 s) and two ct-nodes
 * with one CPU each, so the 2 replicas run one per node. After epoch 1 it kills (SIGKILL, by pid)
 * the node that is not the driver's: the replica there dies with it, the survivor's collective
 * fails, the head declares the node dead, and the trainer restarts with the 1 replica that fits,
 * from the epoch-1 checkpoint (its copy on the driver's node survived). After the next epoch the
 * test starts a third node; at the following epoch boundary the group grows back to 2.
 * Expected: replicas per completed epoch 2, 1, 2, 2; one retry used; the checkpoint of the
 * 1-node epoch counted as under-replicated (1 copy where there were 2); training completes. */
#include "tt.h"

typedef struct scenario {
    pid_t node_pid[3];
    char node_id[3][32];
    int nodes;
    const char *addr;
    bool killed, grew;
    int replicas[16], n;
    double kill_ms, seen_ms;
} scenario;

static int start_node(scenario *s)
{
    pid_t pid = tt_start_node_joined(s->addr, s->node_id[s->nodes], sizeof s->node_id[0]);
    if (pid < 0)
        return -1;
    s->node_pid[s->nodes++] = pid;
    return 0;
}

/* Whether pid runs (not gone, not a zombie). */
static bool replica_alive(int pid)
{
    char path[64], line[256] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    const char *rp = strrchr(line, ')');
    return ok && rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

static int on_epoch(trainer *t, const trainer_stats *st, void *user)
{
    scenario *s = user;
    if (s->n < 16)
        s->replicas[s->n++] = st->replicas;
    printf("epoch %lld: replicas=%d retries=%d train_loss=%.4f\n", (long long)st->epoch,
           st->replicas, st->retries_used, st->train_loss);
    if (st->epoch == 1 && !s->killed) {
        const char *mine = ct_object_node();
        for (int i = 0; i < st->replicas; i++) {
            trainer_replica_info info;
            if (trainer_replica_info_get(t, i, &info) < 0 || !strcmp(info.node_id, mine))
                continue;
            for (int k = 0; k < s->nodes; k++)
                if (!strcmp(s->node_id[k], info.node_id)) {
                    printf("killing %s (pid %d), which runs replica %d; the driver uses %s\n",
                           info.node_id, (int)s->node_pid[k], i, mine);
                    s->kill_ms = h_now_ms();
                    kill(s->node_pid[k], SIGKILL);
                    s->killed = true;
                    /* A node with a large shard takes tens of ms to die, and its actors die
                     * only then: wait until the replica is gone, so that epoch 2 surely runs
                     * into the loss (it could finish first: ~1 in 3 runs did). */
                    for (double until = h_now_ms() + 3000; h_now_ms() < until; usleep(2000))
                        if (!replica_alive(info.pid))
                            break;
                }
        }
        if (!s->killed) {
            fprintf(stderr, "no replica on a node other than the driver's (%s)\n", mine);
            return CT_EINVAL;
        }
    } else if (s->killed && !s->grew && st->replicas == 1) {
        if (start_node(s) < 0)
            return CT_EIO;
        double total = 0, free_cpu = 0, until = h_now_ms() + 5000;
        while (h_now_ms() < until && ct_cluster_resources("CPU", &total, &free_cpu) == 0 &&
               free_cpu < 1)
            usleep(10000);
        printf("started %s: %g CPUs, %g free\n", s->node_id[s->nodes - 1], total, free_cpu);
        s->grew = true;
    }
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
    CHECK_OK(ct_events_subscribe(1u << CT_EVENT_NODE_JOINED));
    if (start_node(&s) < 0 || start_node(&s) < 0) {
        h_failures++;
        goto out;
    }
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "fashion_mnist",
                                            .optimizer = "adam",
                                            .scheduler = "steplr",
                                            .config = "limit=2048,val_limit=500,gamma=0.5",
                                            .num_replicas = 2,
                                            .epochs = 4,
                                            .seed = 3,
                                            .recovery = "restart"},
                            &t));
    if (!t)
        goto out;
    trainer_stats st = {0};
    CHECK_OK(trainer_train(t, .max_retries = 2, .on_epoch = on_epoch, .user = &s, .stats = &st));
    CHECK(s.killed);
    CHECK(s.grew);
    CHECK_EQ_INT(st.epoch, 4);
    CHECK_EQ_INT(st.retries_used, 1);
    CHECK_EQ_INT(st.replicas, 2);
    /* the checkpoint after the node's loss had 1 copy where the earlier ones had 2 */
    CHECK(st.checkpoints_under_replicated >= 1);
    CHECK_EQ_INT(s.n, 4);
    int want[4] = {2, 1, 2, 2};
    for (int i = 0; i < 4 && i < s.n; i++)
        CHECK_EQ_INT(s.replicas[i], want[i]);
    if (st.failure_seen_ns)
        printf("node killed -> new group's first step: %.0f ms\n",
               st.group_first_step_ns / 1e6 - s.kill_ms);
    /* Not a timing target: recovery must not wait out a 60 s deadline (the checkpoint's second
     * copy on the dead node, or a replica blocked on the dead one; both happened). */
    CHECK(st.failure_seen_ns && st.group_first_step_ns / 1e6 - s.kill_ms < 20000);
    CHECK_OK(trainer_validate(t, &st));
    CHECK(st.val_samples == 500);
    CHECK(st.val_accuracy > 0.5);
    printf("validation: accuracy %.4f loss %.4f over %lld samples\n", st.val_accuracy, st.val_loss,
           (long long)st.val_samples);
out:
    trainer_shutdown(&t);
    ct_shutdown();
    h_kill_all();
    if (h_failures)
        fprintf(stderr, "test_node_loss: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
