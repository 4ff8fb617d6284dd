/* tests/trainer/test_min_replicas.c — min_replicas: below it the trainer waits, not trains.
 * A ct-head (heartbeat 100 ms; a killed node is
 * seen dead at once through its death-watch connection, a silent one after 10 s) and three ct-nodes
 * with one CPU each; 3 replicas of one CPU (num_replicas 3, min_replicas 2), a checkpoint every 4
 * steps, 3 epochs of 8 steps (1536 samples, batch 64, 3 ranks). After the first epoch (on_epoch) it
 * SIGKILLs the two nodes that are not the driver's: the group fails (one retry), the head declares
 * the nodes dead, one replica fits and the driver waits. A watcher thread sees the CPUs drop to 1
 * and checks that for 1.5 s no step is trained (metrics.jsonl gets no step record), then
 * starts a node: a group of 2 goes on from the first epoch's checkpoint (12 steps an epoch).
 * on_world_size is told 0 -> 3, then 3 -> 2 only after the new node was started, and scales
 * the lr by 2/3 (sgd lr 0.03 -> 0.02, seen in the step records). Expected: 3 epochs,
 * 8 + 12 + 12 = 32 steps, one retry, no growth (max 3, 2 fit), equal weights. */
#include "tt.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct scenario {
    const char *addr;
    char log_dir[64];
    pid_t node_pid[4];
    char node_id[4][32];
    int nodes;
    atomic_int killed;         /* on_epoch killed the two nodes */
    atomic_int watch_ok;       /* the watcher did its part */
    atomic_int finish;         /* the watcher may end (its node dies with it: PR_SET_PDEATHSIG) */
    int steps_at, steps_later; /* step records at the start and end of the watched wait */
    double node_start_ms;      /* the watcher started its node */
    int hook_old[8], hook_new[8], nhook;
    int64_t hook_steps[8];
    double hook_ms[8];
} scenario;

/* The step records in metrics.jsonl so far. */
static int step_records(const scenario *s)
{
    char path[128], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", s->log_dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, "\"type\":\"step\"") != NULL;
    if (f)
        fclose(f);
    return n;
}

static int start_node(scenario *s)
{
    pid_t pid = tt_start_node_joined(s->addr, s->node_id[s->nodes], sizeof s->node_id[0]);
    if (pid < 0)
        return -1;
    s->node_pid[s->nodes++] = pid;
    return 0;
}

/* While the driver waits: no step is trained; then a node comes back. (It does not read ct
 * events: the trainer consumes them.) Stays until finish: the node dies with this thread. */
static void *watcher(void *arg)
{
    scenario *s = arg;
    while (!atomic_load(&s->killed) && !atomic_load(&s->finish))
        usleep(10000);
    if (atomic_load(&s->finish) || !tt_wait_total_cpus(1, 10000))
        return NULL;
    usleep(300000); /* the driver ends the failed group and starts waiting */
    s->steps_at = step_records(s);
    usleep(1500000);
    s->steps_later = step_records(s);
    printf("waiting: %d step records, %d after 1.5 s; starting a node\n", s->steps_at,
           s->steps_later);
    s->node_start_ms = h_now_ms();
    pid_t pid = h_start_node(s->addr, "--cpus", "1", "--store-memory", "256M", NULL, NULL);
    if (pid > 0 && tt_wait_total_cpus(2, 10000))
        atomic_store(&s->watch_ok, 1);
    while (!atomic_load(&s->finish))
        usleep(10000);
    return NULL;
}

static int on_world_size(trainer *t, int old_size, int new_size, void *user)
{
    scenario *s = user;
    trainer_stats st;
    if (s->nhook >= 8 || trainer_get_stats(t, &st) < 0)
        return CT_EINVAL;
    s->hook_old[s->nhook] = old_size;
    s->hook_new[s->nhook] = new_size;
    s->hook_steps[s->nhook] = st.steps;
    s->hook_ms[s->nhook++] = h_now_ms();
    printf("on_world_size: %d -> %d at step %lld\n", old_size, new_size, (long long)st.steps);
    return old_size > 0 ? trainer_scale_lr(t, (double)new_size / old_size) : 0;
}

static int on_epoch(trainer *t, const trainer_stats *st, void *user)
{
    scenario *s = user;
    printf("epoch %lld: replicas=%d steps=%lld retries=%d\n", (long long)st->epoch, st->replicas,
           (long long)st->steps, st->retries_used);
    if (st->epoch != 1 || atomic_load(&s->killed))
        return 0;
    const char *mine = ct_object_node();
    int pids[3] = {0}, killed = 0;
    for (int i = 0; i < st->replicas && i < 3; i++) {
        trainer_replica_info info;
        if (trainer_replica_info_get(t, i, &info) == 0 && strcmp(info.node_id, mine))
            pids[i] = info.pid;
    }
    for (int k = 0; k < s->nodes; k++)
        if (strcmp(s->node_id[k], mine)) {
            printf("killing %s (pid %d); the driver uses %s\n", s->node_id[k], (int)s->node_pid[k],
                   mine);
            kill(s->node_pid[k], SIGKILL);
            killed++;
        }
    /* the replicas die with their nodes (tens of ms): then the next segment surely fails */
    for (int i = 0; i < 3; i++)
        for (double until = h_now_ms() + 3000; pids[i] && h_now_ms() < until; usleep(2000))
            if (h_gone(pids[i]))
                break;
    atomic_store(&s->killed, 1);
    return killed == 2 ? 0 : CT_EINVAL;
}

/* Checks the lr of every step record: 0.03 in epoch 0 (3 replicas), 0.02 in epochs 1 and 2
 * (2 replicas); returns the step records of epochs 1 and 2. */
static int check_lrs(const scenario *s)
{
    char path[128], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", s->log_dir);
    FILE *f = fopen(path, "r");
    int late = 0;
    CHECK(f != NULL);
    while (f && fgets(line, sizeof line, f)) {
        long long epoch = -1;
        double lr = -1;
        const char *e = strstr(line, "\"epoch\":"), *l = strstr(line, "\"lr\":");
        if (!strstr(line, "\"type\":\"step\"") || !e || !l)
            continue;
        sscanf(e + 8, "%lld", &epoch);
        sscanf(l + 5, "%lf", &lr);
        double want = epoch < 1 ? 0.03 : 0.02;
        if (fabs(lr - want) > 1e-9) {
            fprintf(stderr, "epoch %lld: lr %.17g, not %g\n", epoch, lr, want);
            h_failures++;
        }
        late += epoch >= 1;
    }
    if (f)
        fclose(f);
    return late;
}

int main(void)
{
    tt_register();
    ct_serve_if_worker();
    h_init();
    char addr[128], cmd[160];
    scenario s = {.addr = addr};
    trainer *t = NULL;
    pthread_t th;
    bool th_started = false;
    snprintf(s.log_dir, sizeof s.log_dir, "/tmp/ct-test-minrep.XXXXXX");
    if (!mkdtemp(s.log_dir) || h_start_head(addr, sizeof addr, "100", "10000") < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    CHECK_OK(ct_events_subscribe(1u << CT_EVENT_NODE_JOINED));
    for (int i = 0; i < 3; i++)
        if (start_node(&s) < 0) {
            h_failures++;
            goto out;
        }
    if (!tt_wait_total_cpus(3, 5000)) {
        h_failures++;
        goto out;
    }
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "synthetic",
                                            .optimizer = "sgd",
                                            .config = "n=1920,lr=0.03",
                                            .num_replicas = 3,
                                            .min_replicas = 2,
                                            .cpus_per_replica = 1,
                                            .epochs = 3,
                                            .seed = 5},
                            &t));
    if (!t)
        goto out;
    th_started = pthread_create(&th, NULL, watcher, &s) == 0;
    CHECK(th_started);
    trainer_stats st = {0};
    CHECK_OK(trainer_train(t, .max_retries = 2, .checkpoint_every_steps = 4, .backoff_base_ms = 100,
                           .backoff_cap_ms = 400, .on_world_size = on_world_size,
                           .on_epoch = on_epoch, .user = &s, .log_dir = s.log_dir,
                           .progress = TRAINER_PROGRESS_OFF, .stats = &st));
    CHECK(atomic_load(&s.watch_ok));
    /* no training while one replica fitted */
    CHECK(s.steps_at > 0);
    CHECK_EQ_INT(s.steps_later, s.steps_at);
    CHECK_EQ_INT(s.nhook, 2);
    CHECK_EQ_INT(s.hook_old[0], 0);
    CHECK_EQ_INT(s.hook_new[0], 3);
    CHECK_EQ_INT(s.hook_old[1], 3);
    CHECK_EQ_INT(s.hook_new[1], 2);
    CHECK_EQ_INT(s.hook_steps[1], 8); /* the first epoch's checkpoint */
    CHECK(s.nhook == 2 && s.node_start_ms > 0 && s.hook_ms[1] > s.node_start_ms);
    /* and it went on to the end with 2 */
    CHECK_EQ_INT(st.epoch, 3);
    CHECK_EQ_INT(st.steps, 8 + 12 + 12);
    CHECK_EQ_INT(st.group_start_step, 8);
    CHECK_EQ_INT(st.replicas, 2);
    CHECK_EQ_INT(st.retries_used, 1);
    CHECK_EQ_INT(st.growths, 0);
    CHECK(st.weights_agree);
    CHECK_EQ_INT(check_lrs(&s), 24);
out:
    trainer_shutdown(&t);
    atomic_store(&s.finish, 1);
    if (th_started)
        pthread_join(th, NULL);
    ct_shutdown();
    h_kill_all();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s.log_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s.log_dir);
    if (h_failures)
        fprintf(stderr, "test_min_replicas: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
