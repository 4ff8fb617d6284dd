/* tests/trainer/test_node_drain.c — a node told to stop (SIGTERM) saves the work first.
 * The test starts a ct-head and two ct-nodes with 2 CPUs each; 2 replicas run SPREAD, one per
 * node, with a checkpoint (and a validation) every 4 steps. At the validation of step 4 of
 * epoch 2 it sends SIGTERM to the node that runs a replica and is not the driver's: the node
 * tells the head (Heartbeat.draining), the head pushes NODE_DRAINING and tells the node to wait
 * for its replica (the trainer's replicas subscribe to the event), the replica checkpoints at
 * the next step boundary and leaves the group, the driver adopts that checkpoint and starts a
 * new group on the node that remains (2 CPUs: 2 replicas again), and the drained node exits
 * with status 0 once its replica is gone.
 * Expected: one drain, no retry; the drain's checkpoint (in checkpoint_dir, at the step
 * recorded) is after the SIGTERM's step and inside epoch 2; the job ends with exactly
 * epochs x steps-per-epoch optimizer steps (none lost, none trained twice). The driver's log
 * names the draining node, and ctup status counts the drain apart from the retries, by reason
 * (mid_epoch, or segment_end when the event came as the segment ended).
 * With the argument "shrink" the nodes have 1 CPU each: after the drain only 1 replica fits,
 * and the driver's line about the smaller group gives the drain as its reason (not the free
 * CPUs alone); epoch 3 trains with 1 replica. */
#include "tt.h"
#include <dirent.h>

typedef struct scenario {
    pid_t node_pid[2];
    char node_id[2][32];
    int64_t steps_per_epoch; /* from epoch 1 */
    int64_t term_step;       /* the optimizer step the SIGTERM came after */
    pid_t termed;
    char termed_id[32]; /* its node id */
    int replicas[8], n;
} scenario;

static const char *node_cpus = "2"; /* "1" in the shrink run */

static pid_t start_node(const char *addr, char *id, size_t idsize)
{
    ct_event ev;
    pid_t pid = h_start_node(addr, "--cpus", node_cpus, "--store-memory", "256M", NULL, NULL);
    for (double until = h_now_ms() + 5000; pid > 0 && h_now_ms() < until;)
        if (ct_events_next(&ev, 200) == 0 && ev.type == CT_EVENT_NODE_JOINED && ev.pid == pid) {
            snprintf(id, idsize, "%s", ev.node_id);
            return pid;
        }
    fprintf(stderr, "node %d did not join\n", (int)pid);
    return -1;
}

static int on_epoch(trainer *t, const trainer_stats *st, void *user)
{
    (void)t;
    scenario *s = user;
    if (st->epoch == 1)
        s->steps_per_epoch = st->steps;
    if (s->n < 8)
        s->replicas[s->n++] = st->replicas;
    printf("epoch %lld: steps=%lld replicas=%d retries=%d drains=%d\n", (long long)st->epoch,
           (long long)st->steps, st->replicas, st->retries_used, st->drains);
    return 0;
}

/* At step 4 of epoch 2 (a segment's end): SIGTERM to the node of a replica, not the driver's. */
static int on_validate(trainer *t, const trainer_stats *st, void *user)
{
    scenario *s = user;
    if (s->termed || !s->steps_per_epoch || st->val_step != s->steps_per_epoch + 4)
        return 0;
    const char *mine = ct_object_node();
    for (int i = 0; i < st->replicas && !s->termed; i++) {
        trainer_replica_info info;
        if (trainer_replica_info_get(t, i, &info) < 0 || !strcmp(info.node_id, mine))
            continue;
        for (int k = 0; k < 2; k++)
            if (!strcmp(s->node_id[k], info.node_id)) {
                printf("SIGTERM to %s (pid %d, replica %d) after step %lld; the driver uses %s\n",
                       info.node_id, (int)s->node_pid[k], i, (long long)st->val_step, mine);
                s->term_step = st->val_step;
                s->termed = s->node_pid[k];
                snprintf(s->termed_id, sizeof s->termed_id, "%s", s->node_id[k]);
                kill(s->node_pid[k], SIGTERM);
            }
    }
    if (!s->termed) {
        fprintf(stderr, "no replica on a node other than the driver's (%s)\n", mine);
        return CT_EINVAL;
    }
    return 0;
}

/* Whether dir holds the checkpoint file of step (ckptdir.c's name). */
static bool has_ckpt_at(const char *dir, int64_t step)
{
    char want[64];
    snprintf(want, sizeof want, "-step%06lld.safetensors", (long long)step);
    DIR *d = opendir(dir);
    struct dirent *de;
    bool found = false;
    while (d && (de = readdir(d)) && !found) {
        size_t n = strlen(de->d_name), w = strlen(want);
        found = n > w && !strcmp(de->d_name + n - w, want);
    }
    if (d)
        closedir(d);
    return found;
}

int main(int argc, char **argv)
{
    tt_register();
    ct_serve_if_worker();
    h_init();
    bool shrink = argc > 1 && !strcmp(argv[1], "shrink");
    if (shrink)
        node_cpus = "1";
    char addr[128], dir[] = "/tmp/ct-drain.XXXXXX";
    scenario s = {0};
    trainer *t = NULL;
    if (!mkdtemp(dir))
        return 1;
    if (h_start_head(addr, sizeof addr, "100", "10000") < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    CHECK_OK(ct_events_subscribe(1u << CT_EVENT_NODE_JOINED));
    for (int k = 0; k < 2; k++)
        if ((s.node_pid[k] = start_node(addr, s.node_id[k], sizeof s.node_id[k])) < 0) {
            h_failures++;
            goto out;
        }
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "fashion_mnist",
                                            .optimizer = "adam",
                                            .config = "limit=2048,val_limit=200",
                                            .num_replicas = 2,
                                            .placement = CT_SPREAD,
                                            .epochs = 3,
                                            .seed = 3},
                            &t));
    if (!t)
        goto out;
    trainer_stats st = {0};
    /* the driver's log (this process's stderr) goes to a file meanwhile, read after */
    char log_path[64];
    snprintf(log_path, sizeof log_path, "%s/driver.log", dir);
    fflush(stderr);
    int saved_err = dup(2), log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (log_fd >= 0)
        dup2(log_fd, 2);
    CHECK_OK(trainer_train(t, .max_retries = 2, .checkpoint_every_steps = 4,
                           .validate_every_steps = 4, .checkpoint_dir = dir,
                           .checkpoint_num_to_keep = TRAINER_KEEP_ALL, .on_epoch = on_epoch,
                           .on_validate = on_validate, .user = &s, .stats = &st));
    fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);
    if (log_fd >= 0)
        close(log_fd);
    char *log = tt_read_file(log_path, NULL);
    fprintf(stderr, "%s", log ? log : "(no driver log)\n");
    /* the user sees the drain in the driver's log, naming the node; the smaller group after it
     * (shrink: the other node fits 1 replica) says the node drained */
    char drained[96], why[128];
    snprintf(drained, sizeof drained, "node %s is draining", s.termed_id);
    snprintf(why, sizeof why, "(was 2): node %s drained (told to stop), and 1 fit in the free CPUs",
             s.termed_id);
    CHECK(log && strstr(log, drained) != NULL);
    if (shrink)
        CHECK(log && strstr(log, why) != NULL && strstr(log, ": only 1 fit") == NULL);
    else
        CHECK(log && strstr(log, "fit in the free CPUs") == NULL);
    free(log);
    /* the head heard of the drain: ctup status's job row counts it apart from the retries */
    char status_cmd[PATH_MAX + 200];
    snprintf(status_cmd, sizeof status_cmd, "%s status --address %s", h_bin("ctup"), addr);
    bool seen = false;
    for (double until = h_now_ms() + 10000; h_now_ms() < until && !seen; usleep(200000)) {
        char *status = h_capture(status_cmd);
        const char *row = status ? strstr(status, "\ndriver-") : NULL;
        /* by where it caught the group: at a step mid-segment (the usual), or at the
         * segment's end when the event came late on a loaded machine */
        seen = row && (strstr(row, " 0 (drains mid_epoch=1)\n") != NULL ||
                       strstr(row, " 0 (drains segment_end=1)\n") != NULL);
        if (seen || h_now_ms() + 200 >= until)
            printf("%s", status ? status : "(no ctup status output)\n");
        free(status);
    }
    CHECK(seen);
    CHECK(s.termed > 0);
    CHECK_EQ_INT(st.epoch, 3);
    CHECK_EQ_INT(st.drains, 1);
    CHECK_EQ_INT(st.retries_used, 0);
    if (shrink) { /* 2 replicas, then 1 after the drain */
        CHECK_EQ_INT(s.n, 3);
        CHECK_EQ_INT(s.replicas[0], 2);
        CHECK_EQ_INT(s.replicas[s.n - 1], 1);
        goto reap;
    }
    /* no step lost, none trained twice: the undisturbed count (2 replicas throughout) */
    CHECK(s.steps_per_epoch > 8);
    CHECK_EQ_INT(st.steps, 3 * s.steps_per_epoch);
    /* the drain's checkpoint: after the SIGTERM, inside epoch 2, and written to the directory */
    printf("drain checkpoint at step %lld (SIGTERM after step %lld, epoch 2 ends at %lld)\n",
           (long long)st.drain_step, (long long)s.term_step, (long long)2 * s.steps_per_epoch);
    CHECK(st.drain_step > s.term_step);
    CHECK(st.drain_step < 2 * s.steps_per_epoch);
    CHECK(has_ckpt_at(dir, st.drain_step));
    CHECK_EQ_INT(s.n, 3);
    for (int i = 0; i < s.n; i++)
        CHECK_EQ_INT(s.replicas[i], 2);
reap:
    /* the drained node exited by itself, with status 0, once its replica was gone (not after
     * its 60 s drain bound: the job is over by then) */
    if (s.termed > 0) {
        int ws = h_reap(s.termed, 0, 20000);
        CHECK(ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    }
out:
    trainer_shutdown(&t);
    ct_shutdown();
    h_kill_all();
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (h_failures)
        fprintf(stderr, "test_node_drain: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
