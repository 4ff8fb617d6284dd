/* tests/trainer/test_live_recovery.c — recovery "live": when a replica dies, the survivors go on,
 * and a replacement healed from a live peer grows the group back within the epoch.
 * A ct-head and ct-nodes (argv[1]: "shm": one node of 4 CPUs, the ring over shared memory;
 * "tcp": 4 nodes of 1 CPU, the ring over TCP; "min": as shm with min_replicas 4; "two": as shm
 * with two replicas killed at once; "idle": replica 0 killed by the test between epochs;
 * "newcomer": as shm, and the first replacement SIGKILLs itself while it joins, in its build;
 * "peer": as shm, and the first replacement, while it joins, SIGKILLs the first serving peer;
 * "refuse": as shm, and the first 3 replacements fail their build, the later ones build;
 * "copy": as shm, and the first replacement is SIGKILLed by the test inside its heal's copy, the
 * peer's snapshot fetched, not yet checked nor loaded; "peer_copy": as shm, and the first
 * serving peer is SIGKILLed by the test inside its snapshot, the bytes written, not yet sealed
 * toward the newcomer's node: both held there by the test fault heal_hold, common/fault.h;
 * "checkdev": as shm with 2 replicas on the checking device, rank 1 killed: the one survivor
 * goes on alone, a replacement heals from its device's state and replays its 2 steps).
 * 4 replicas train the tt MLP on 216 synthetic samples (batch 8), SGD, a checkpoint every 4
 * steps, 2 epochs. The train step "logged" wraps the built-in one: after each completed step it
 * appends (step, world, rank, epoch, time, lr, hash of the weights the step started from,
 * sample indices) to a file per process; at step 3 (the fourth) of the group of 4, the ranks in
 * kill_mask (config; rank 2 on shm, rank 0, the one that writes checkpoints, on tcp, ranks 1 and
 * 2 in "two") write the time and SIGKILL themselves before their backward, once per run (a
 * marker file per rank).
 * Expected, but for min: the survivors discard the step in flight and go on at the smaller
 * world (live_recoveries 1, no retry); at the next step boundary (a checkpoint, an epoch's end)
 * a replacement is started on the freed CPU, loads a survivor's snapshot from the store and
 * joins: the group is 4 again with no restart (heals 1, two: 2, one per boundary; growths 0;
 * peer: the serving peer's death is a second live recovery, the replacement heals from the next
 * survivor, the group is 3, then 4 at the next step; newcomer, two, peer: the last replacement
 * joins at a step boundary inside a segment, not at a checkpoint),
 * the rest of the epoch dealt over 4 from the exact offset. The world of every step is as the
 * mode's table says; every step count is completed once by its world and never goes back in a
 * process; every step starts from the same weights on every rank, the replacement's first one
 * included (bit-identical, by hash); every sample of the epoch of the kill is seen exactly once;
 * on_world_size scales the lr by new / old: every step's lr is 0.05 x world / 4. The times from
 * the kill to the survivors' next step and to the first step of 4 again, and the heal's copy,
 * are printed, not asserted. shm runs twice: the two runs' final weights are bit-identical.
 * copy, expected: as newcomer (the survivors unharmed, the next replacement heals at the next
 * step boundary), and then the final weights are bit for bit those of a newcomer run (its
 * replacement killed in its build, at the same boundary). peer_copy, expected: as peer, and its
 * final weights are those of a peer run (the serving peer killed before its snapshot).
 * min, expected: 3 survivors are fewer than min_replicas 4: the driver restarts the group from
 * the checkpoint (one retry, live_recoveries 0), and the run still ends at 2 epochs.
 * refuse, expected: 3 replacements in a row refused end the heals of the group (no 4th try,
 * heals 0, though a 4th would build); the 3 go on to the epoch's end, whose checkpoint grows
 * the group back to 4 by a restart from it (growths 1, no retry).
 * durable: as shm, with every checkpoint also in a checkpoint directory (all kept: the one the
 * 3 survivors wrote at step 4 before the replacement healed, and the healed group's at steps 7
 * and 12); then a new trainer with recovery "restart" resumes from each one (no kill) and must
 * end at 2 epochs and 14 steps with the live run's final weights, bit for bit (the survivors'
 * step-4 checkpoint resumes at world 4 after its 120 samples, as the heal dealt them, and
 * on_world_size is told 3 -> 4, the checkpoint's world to the new one, and scales its rates as
 * the live group's were when it grew back). */
#include "tt.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

#define KILL_STEP 3

/* The group's size (checkdev: 2, else 4): config key "group" in the replicas */
static int group = 4;
#define N_TRAIN 216 /* synthetic n = 270: 20% of it is the validation set */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void fnv1a(uint64_t *hash, const void *p, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        *hash = (*hash ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
}

/* The FNV-1a hash of m's weights: its flat buffer on the CPU; on a device (the checking
 * device) each tensor copied to the host. */
static int start_hash(ct_module *m, uint64_t *out)
{
    const ct_named_tensor *sd;
    float *values, *grads;
    int64_t numel;
    int n, rc;
    *out = 1469598103934665603ull;
    if ((rc = ct_module_state_dict(m, &sd, &n)) < 0)
        return rc;
    if (n == 0 || ct_tensor_device(sd[0].tensor) == CT_CPU) {
        if ((rc = ct_module_flat(m, &values, &grads, &numel)) < 0)
            return rc;
        fnv1a(out, values, (size_t)numel * sizeof(float));
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const ct_tensor *t = sd[i].tensor;
        size_t bytes = (size_t)ct_tensor_numel(t) * ct_dtype_size(ct_tensor_dtype(t));
        void *host = malloc(bytes ? bytes : 1);
        if (!host)
            return CT_ENOMEM;
        if ((rc = ct_tensor_copy_to(t, host, bytes)) == 0)
            fnv1a(out, host, bytes);
        free(host);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The built-in step, logged; the kill at (KILL_STEP, kill_mask) of the whole group, once. */
static int logged_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    trainer_ctx *ctx = trainer_step_ctx(s);
    const char *dir = trainer_config_str(ctx, "log_dir", "/tmp");
    int rank = trainer_ctx_rank(ctx), world = trainer_ctx_world_size(ctx);
    int64_t step = trainer_step_count(s), kill_mask = trainer_config_int(ctx, "kill_mask", 4);
    char path[256], line[4096];
    if (world == trainer_config_int(ctx, "group", 4) && (kill_mask >> rank & 1) &&
        step == KILL_STEP) {
        snprintf(path, sizeof path, "%s/killed-%d", dir, rank);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd >= 0) { /* the first time only: a restarted group of 4 does not die again */
            int n = snprintf(line, sizeof line, "%lld\n", (long long)now_ns());
            if (write(fd, line, (size_t)n) != n)
                fprintf(stderr, "short write\n");
            close(fd);
            raise(SIGKILL);
        }
    }
    /* the weights this step starts from: every rank's must be the same bits (a replacement
     * healed from a peer too, at its first step) */
    uint64_t hash = 0;
    int rc = start_hash(trainer_step_model(s), &hash);
    if (rc < 0)
        return rc;
    rc = trainer_builtin_train_step(s, b, out);
    if (rc < 0)
        return rc;
    int n = snprintf(line, sizeof line, "%lld %d %d %lld %lld %.17g %llx", (long long)step, world,
                     rank, (long long)trainer_step_epoch(s), (long long)now_ns(),
                     ct_optim_get_lr(trainer_step_optim(s), 0), (unsigned long long)hash);
    for (int64_t i = 0; i < b->n && n < (int)sizeof line - 32; i++)
        n += snprintf(line + n, sizeof line - (size_t)n, " %lld", (long long)b->index[i]);
    line[n++] = '\n';
    snprintf(path, sizeof path, "%s/steps-%d", dir, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0 || write(fd, line, (size_t)n) != n)
        rc = CT_EIO;
    if (fd >= 0)
        close(fd);
    return rc;
}

/* The test's data: tt's synthetic blobs. With kill_mask bit 4 (16), a replica built after the
 * first kill (the replacement) SIGKILLs itself there, once: it dies while it joins, before it
 * fetches its peer's snapshot. */
/* The pid of the process whose step file has a step (`at`; -1: any) of world `world` by rank
 * `rank`; 0: none. */
static int pid_of(const char *dir, int64_t at, int world, int rank)
{
    char path[600];
    int pid = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && !pid && (e = readdir(d));) {
        if (strncmp(e->d_name, "steps-", 6))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *buf = tt_read_file(path, NULL), *save = NULL;
        for (char *l = buf ? strtok_r(buf, "\n", &save) : NULL; l && !pid;
             l = strtok_r(NULL, "\n", &save)) {
            long long step;
            int w, r;
            if (sscanf(l, "%lld %d %d", &step, &w, &r) == 3 && w == world && r == rank &&
                (at < 0 || step == at))
                pid = atoi(e->d_name + 6);
        }
        free(buf);
    }
    if (d)
        closedir(d);
    return pid;
}

/* Writes the time now into dir/name, once (O_EXCL): 1 the first time, else 0. */
static int mark_once(const char *dir, const char *name)
{
    char path[256], line[32];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return 0;
    int n = snprintf(line, sizeof line, "%lld\n", (long long)now_ns());
    if (write(fd, line, (size_t)n) != n)
        fprintf(stderr, "short write\n");
    close(fd);
    return 1;
}

/* With kill_mask bit 5 (32), the replacement, while it joins (in its build, before the driver
 * asks the serving peer for its snapshot), SIGKILLs the first serving peer (rank 0 of the group
 * of 3) once and waits until it is gone: the driver must ask the next peer. */
static void kill_serving_peer(trainer_ctx *ctx, const char *dir)
{
    char path[256];
    snprintf(path, sizeof path, "%s/killed-2", dir);
    if (!(trainer_config_int(ctx, "kill_mask", 4) & 32) || access(path, F_OK) != 0)
        return;
    int pid = pid_of(dir, -1, 3, 0);
    if (pid <= 0 || !mark_once(dir, "peer-killed"))
        return;
    kill(pid, SIGKILL);
    for (double until = h_now_ms() + 10000; h_now_ms() < until && !h_gone(pid);)
        usleep(1000);
}

/* With kill_mask bit 6 (64), the first 3 replicas built after the first kill (replacements)
 * fail their build, each marking refused-K; the later ones build. */
static int refuse_build(trainer_ctx *ctx, const char *dir)
{
    char path[256], name[32];
    snprintf(path, sizeof path, "%s/killed-2", dir);
    if (!(trainer_config_int(ctx, "kill_mask", 4) & 64) || access(path, F_OK) != 0)
        return 0;
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "refused-%d", k);
        if (mark_once(dir, name)) {
            fprintf(stderr, "test: replacement %d refused (kill_mask 64)\n", k);
            return CT_EINVAL;
        }
    }
    return 0;
}

static int dying_data(trainer_ctx *ctx, trainer_data *d)
{
    const char *dir = trainer_config_str(ctx, "log_dir", "/tmp");
    char path[256], line[32];
    kill_serving_peer(ctx, dir);
    int rc = refuse_build(ctx, dir);
    if (rc < 0)
        return rc;
    snprintf(path, sizeof path, "%s/killed-2", dir);
    if ((trainer_config_int(ctx, "kill_mask", 4) & 16) && access(path, F_OK) == 0) {
        snprintf(path, sizeof path, "%s/newcomer-killed", dir);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd >= 0) {
            int n = snprintf(line, sizeof line, "%lld\n", (long long)now_ns());
            if (write(fd, line, (size_t)n) != n)
                fprintf(stderr, "short write\n");
            close(fd);
            raise(SIGKILL);
        }
    }
    return tt_synthetic(ctx, d);
}

/* copy, peer_copy: the file that arms heal_hold (CT_TEST_FAULTS is set before the nodes start,
 * so every replica has it); it exists during the run, and the first replica held in the heal's
 * copy writes its pid into it + ".held". */
static char hold_path[128];

/* The pid of the replica held by the heal_hold fault (it writes hold_path.held), waited for
 * up to 120 s or until *stop; 0 when none was held. */
static int held_pid(volatile int *stop)
{
    char held[160];
    snprintf(held, sizeof held, "%s.held", hold_path);
    for (double until = h_now_ms() + 120000; !*stop && h_now_ms() < until; usleep(2000)) {
        char *v = tt_read_file(held, NULL);
        int pid = v ? atoi(v) : 0;
        free(v);
        if (pid > 0)
            return pid;
    }
    return 0;
}

/* What the copy killer saw: the pid it killed (0: none held) and whether it was gone. */
typedef struct copy_kill {
    const char *dir;
    volatile int stop;
    int pid;
    bool gone;
} copy_kill;

/* Waits for a replica held in the heal's copy (hold_path.held), SIGKILLs it there, waits until
 * it is gone, marks copy-killed in dir, then lets the copy fault go (removes hold_path). */
static void *copy_killer(void *arg)
{
    copy_kill *k = arg;
    int pid = held_pid(&k->stop);
    if (pid > 0) {
        mark_once(k->dir, "copy-killed");
        kill(pid, SIGKILL);
        for (double gone = h_now_ms() + 10000; h_now_ms() < gone && !h_gone(pid);)
            usleep(1000);
        k->gone = h_gone(pid);
        k->pid = pid;
    }
    unlink(hold_path);
    return NULL;
}

/* overlap: waits for the replacement held in its heal's copy (hold_path.held), then, while it
 * is held there, for the survivors to complete steps 4 and 5 of the group of 3 (the steps after
 * its snapshot of step 4); then lets the copy go (removes hold_path). advanced: they did; pid:
 * the held replacement; gone: it had died meanwhile (it must not have). */
typedef struct overlap_watch {
    const char *dir;
    volatile int stop;
    int pid;
    bool advanced, gone;
} overlap_watch;

static void *watch_overlap(void *arg)
{
    overlap_watch *k = arg;
    int pid = held_pid(&k->stop);
    if (pid > 0) {
        k->pid = pid;
        for (double wait = h_now_ms() + 120000; !k->stop && h_now_ms() < wait; usleep(5000))
            if (pid_of(k->dir, 4, 3, 0) > 0 && pid_of(k->dir, 5, 3, 0) > 0) {
                k->advanced = true;
                break;
            }
        k->gone = h_gone(pid);
        printf("overlap: the replacement (pid %d) held in its copy while the 3 did steps 4 and "
               "5: %s\n",
               pid, k->advanced ? "yes" : "no");
    }
    unlink(hold_path);
    return NULL;
}

typedef struct run {
    trainer_stats st;
    float *w;
    int64_t nw;
} run;

/* What the step files of dir say: one run's checks. worlds: the world each step must run with
 * ("4443...": step 3 by 3 ranks; NULL: not checked, nor the samples); every sample of epoch
 * kill_epoch seen once. Every step starts from the same weights on every rank. */
static void check_steps(const char *dir, int64_t steps, const char *worlds, int64_t kill_epoch)
{
    enum { MAXS = 64 };
    int count[MAXS][5] = {{0}}, world_of[MAXS] = {0};
    unsigned long long hash_of[MAXS] = {0};
    int seen[N_TRAIN] = {0}, bad_hash = 0;
    bool live = worlds != NULL;
    int64_t short_step = -1; /* the first step of fewer than 4: the discarded one, done again */
    for (int64_t s = 0; worlds && worlds[s] && short_step < 0; s++)
        if (worlds[s] != '0' + group)
            short_step = s;
    int64_t next_after_kill = 0, kill_ns = 0, back = 0, bad_lr = 0, back_ns = 0;
    char path[600];
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) { /* the first kill's time */
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *k = strncmp(e->d_name, "killed-", 7) ? NULL : tt_read_file(path, NULL);
        int64_t ns = k ? strtoll(k, NULL, 10) : 0;
        if (ns > 0 && (!kill_ns || ns < kill_ns))
            kill_ns = ns;
        free(k);
    }
    if (d)
        rewinddir(d);
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "steps-", 6))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *buf = tt_read_file(path, NULL), *save = NULL;
        long long last = -1;
        for (char *l = buf ? strtok_r(buf, "\n", &save) : NULL; l;
             l = strtok_r(NULL, "\n", &save)) {
            long long step, epoch, t;
            unsigned long long hash;
            int world, rank, off = 0;
            double lr = 0;
            if (sscanf(l, "%lld %d %d %lld %lld %lf %llx%n", &step, &world, &rank, &epoch, &t, &lr,
                       &hash, &off) != 7 ||
                step < 0 || step >= MAXS || rank < 0 || rank >= 4) {
                fprintf(stderr, "bad line in %s: %s\n", path, l);
                h_failures++;
                continue;
            }
            back += step <= last; /* the step counter never goes back in a process */
            /* on_world_size scales the rate by new / old: live, and at the growth */
            if (fabs(lr - 0.05 * world / group) > 1e-9 && !bad_lr++)
                fprintf(stderr, "step %lld rank %d: lr %.17g, not %.17g\n", step, rank, lr,
                        0.05 * world / group);
            last = step;
            count[step][rank]++;
            if (world_of[step] && world_of[step] != world) {
                fprintf(stderr, "step %lld ran with %d and %d ranks\n", step, world_of[step],
                        world);
                h_failures++;
            }
            world_of[step] = world;
            if (hash_of[step] && hash_of[step] != hash) {
                fprintf(stderr, "step %lld: rank %d starts from weights %llx, another from %llx\n",
                        step, rank, hash, hash_of[step]);
                bad_hash++;
            }
            hash_of[step] = hash;
            if (step == short_step && (!next_after_kill || t < next_after_kill))
                next_after_kill = t; /* the survivors' first step */
            if (step > short_step && world == group && short_step >= 0 && (!back_ns || t < back_ns))
                back_ns = t; /* ... and the first of 4 again */
            for (char *p = l + off; live && epoch == kill_epoch && *p;) {
                char *end;
                long long idx = strtoll(p, &end, 10);
                if (end == p)
                    break;
                if (idx >= 0 && idx < N_TRAIN)
                    seen[idx]++;
                p = end;
            }
        }
        free(buf);
    }
    if (d)
        closedir(d);
    CHECK_EQ_INT(back, 0);
    CHECK_EQ_INT(bad_lr, 0);
    CHECK_EQ_INT(bad_hash, 0);
    if (!live)
        return;
    int bad_steps = 0, once = 0;
    CHECK_EQ_INT((int64_t)strlen(worlds), steps);
    for (int64_t s = 0; s < steps && s < MAXS; s++) {
        /* 4 until the kill, fewer from the discarded step on until replacements healed from
         * the survivors joined at a step boundary, then 4 again */
        int want = s < (int64_t)strlen(worlds) ? worlds[s] - '0' : group;
        for (int r = 0; r < 4; r++)
            if (count[s][r] != (r < want ? 1 : 0)) {
                fprintf(stderr, "step %lld rank %d: completed %d times\n", (long long)s, r,
                        count[s][r]);
                bad_steps++;
            }
        if (world_of[s] != want) {
            fprintf(stderr, "step %lld: world %d, not %d\n", (long long)s, world_of[s], want);
            bad_steps++;
        }
    }
    for (int64_t s = steps; s < MAXS; s++)
        for (int r = 0; r < 4; r++)
            bad_steps += count[s][r] != 0;
    for (int i = 0; i < N_TRAIN; i++)
        once += seen[i] == 1;
    CHECK_EQ_INT(bad_steps, 0);
    CHECK_EQ_INT(once, N_TRAIN);
    CHECK(next_after_kill > kill_ns && kill_ns > 0);
    CHECK(back_ns > kill_ns);
    printf("kill to the survivors' next step: %.1f ms\n", (next_after_kill - kill_ns) / 1e6);
    printf("kill to the first step of %d again (a replacement healed from a peer): %.1f ms\n",
           group, (back_ns - kill_ns) / 1e6);
}

/* The linear scaling rule, as an elastic job would have it. After the live shrink it also
 * waits for the head to free the killed replicas' CPUs, so that the group grows back at the
 * step-4 checkpoint on a loaded machine too (the same steps in every run). */
static int on_world_size(trainer *t, int old_size, int new_size, void *user)
{
    (void)user;
    double total = 0, free_cpu = 0;
    for (double until = h_now_ms() + 10000; new_size < old_size && h_now_ms() < until; usleep(2000))
        if (ct_cluster_resources("CPU", &total, &free_cpu) == 0 && free_cpu >= old_size - new_size)
            break;
    return old_size > 0 ? trainer_scale_lr(t, (double)new_size / old_size) : 0;
}

/* idle: after epoch 1, with every replica idle between two segments, replica 0 (the checkpoint
 * writer) is killed; the others fail in the next segment's first step and go on from there. */
static int kill_idle(trainer *t, const trainer_stats *st, void *user)
{
    trainer_replica_info info;
    if (st->epoch != 1 || trainer_replica_info_get(t, 0, &info) < 0)
        return 0;
    char path[300], line[32];
    snprintf(path, sizeof path, "%s/killed-0", (const char *)user);
    FILE *f = fopen(path, "w");
    snprintf(line, sizeof line, "%lld\n", (long long)now_ns());
    if (f) {
        fputs(line, f);
        fclose(f);
    }
    kill(info.pid, SIGKILL);
    for (double until = h_now_ms() + 5000; h_now_ms() < until && !h_gone(info.pid);)
        usleep(1000);
    return 0;
}

/* durable: a new trainer with recovery "restart" resumes from each checkpoint the live run
 * wrote to ckdir and trains to the end with no kill: it ends where the live run ended, its
 * final weights the same bits (live: the live run's stats and weights). */
static void resume_each(const char *dir, const char *ckdir, const run *live)
{
    static const struct {
        int64_t epoch, step;
        int world;     /* the group that wrote it */
        int64_t steps; /* the resumed run's; -1: the live run's, and its weights too */
    } want[] = {{0, 4, 3, 14}, {1, 8, 4, -1}, {1, 12, 4, -1}};
    for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
        char file[400], cfg[300], logs[200];
        snprintf(file, sizeof file, "%s/ckpt-epoch%04lld-step%06lld.safetensors", ckdir,
                 (long long)want[k].epoch, (long long)want[k].step);
        snprintf(logs, sizeof logs, "%s/resume-%zu", dir, k);
        if (access(file, F_OK) != 0 || mkdir(logs, 0755) != 0) {
            fprintf(stderr, "durable: no checkpoint %s in the checkpoint directory\n", file);
            h_failures++;
            continue;
        }
        snprintf(cfg, sizeof cfg, "n=270,lr=0.05,log_dir=%s,kill_mask=0", logs);
        trainer *t = NULL;
        trainer_stats st = {0};
        CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                                .data = "dying",
                                                .optimizer = "sgd",
                                                .train_step = "logged",
                                                .config = cfg,
                                                .num_replicas = 4,
                                                .batch_size = 8,
                                                .cpus_per_replica = 1,
                                                .no_cpu_binding = true,
                                                .epochs = 2,
                                                .seed = 11,
                                                .recovery = "restart"},
                                &t));
        if (!t)
            continue;
        CHECK_OK(trainer_train(t, .resume = file, .checkpoint_every_steps = 4,
                               .on_world_size = on_world_size, .stats = &st));
        int64_t nw = 0;
        float *w = tt_weights(trainer_get_model(t), &nw);
        printf("durable: resumed from step %lld (written by %d replicas): epochs %lld, steps "
               "%lld, replicas %d, retries %d\n",
               (long long)want[k].step, want[k].world, (long long)st.epoch, (long long)st.steps,
               st.replicas, st.retries_used);
        CHECK_EQ_INT(st.epoch, 2);
        CHECK_EQ_INT(st.steps, want[k].steps < 0 ? live->st.steps : want[k].steps);
        CHECK_EQ_INT(st.retries_used, 0);
        CHECK_EQ_INT(st.live_recoveries, 0);
        CHECK(st.weights_agree);
        char what[160];
        snprintf(what, sizeof what,
                 "the live run and a restart resumed from its step-%lld checkpoint",
                 (long long)want[k].step);
        if (want[k].steps < 0)
            tt_same_weights(live->w, w, live->nw, nw, what);
        /* the resumed steps: from the checkpoint's step on, each once, never back */
        check_steps(logs, st.steps, NULL, 0);
        free(w);
        trainer_shutdown(&t);
    }
}

/* One run of 4 replicas with the kill; its stats and final weights into *out. */
static void one_run(const char *mode, run *out)
{
    char dir[64], cfg[200], cmd[160];
    snprintf(dir, sizeof dir, "/tmp/ct-test-live.XXXXXX");
    if (!mkdtemp(dir)) {
        h_failures++;
        return;
    }
    bool min = !strcmp(mode, "min");
    bool two = !strcmp(mode, "two");
    bool idle = !strcmp(mode, "idle");
    bool newcomer = !strcmp(mode, "newcomer");
    bool peer = !strcmp(mode, "peer");
    bool durable = !strcmp(mode, "durable");
    bool refuse = !strcmp(mode, "refuse");
    bool copy = !strcmp(mode, "copy"), peer_copy = !strcmp(mode, "peer_copy");
    bool overlap = !strcmp(mode, "overlap");
    bool quorum = !strcmp(mode, "quorum"); /* as copy, the kill in the quorum's rendezvous */
    bool checkdev = !strcmp(mode, "checkdev");
    copy |= quorum;
    char ckdir[128];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", dir);
    snprintf(cfg, sizeof cfg, "n=270,lr=0.05,log_dir=%s,group=%d,kill_mask=%d", dir, group,
             !strcmp(mode, "tcp") ? 1
             : checkdev           ? 2
             : two                ? 6
             : idle               ? 0
             : newcomer           ? 4 | 16
             : peer               ? 4 | 32
             : refuse             ? 4 | 64
                                  : 4);
    copy_kill ck = {.dir = dir};
    overlap_watch ow = {.dir = dir};
    pthread_t killer, watcher;
    bool killing = false, watching = false;
    if (copy || peer_copy) { /* arm heal_hold: the file exists until the killer struck */
        FILE *f = fopen(hold_path, "w");
        CHECK(f != NULL);
        if (f)
            fclose(f);
        killing = f && pthread_create(&killer, NULL, copy_killer, &ck) == 0;
        CHECK(killing);
    }
    if (overlap) { /* arm heal_hold: the file exists until the survivors went on */
        FILE *f = fopen(hold_path, "w");
        CHECK(f != NULL);
        if (f)
            fclose(f);
        watching = f && pthread_create(&watcher, NULL, watch_overlap, &ow) == 0;
        CHECK(watching);
    }
    trainer *t = NULL;
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "dying",
                                            .optimizer = "sgd",
                                            .train_step = "logged",
                                            .config = cfg,
                                            .num_replicas = group,
                                            .min_replicas = min ? 4 : 0,
                                            .batch_size = 8,
                                            .cpus_per_replica = 1,
                                            .no_cpu_binding = true,
                                            .epochs = 2,
                                            .seed = 11,
                                            .device = checkdev ? "checkdev" : NULL},
                            &t));
    if (t) {
        CHECK_OK(trainer_train(
            t, .max_retries = 2, .checkpoint_every_steps = 4, .backoff_base_ms = 100,
            .backoff_cap_ms = 400, .on_world_size = on_world_size,
            .on_epoch = idle ? kill_idle : NULL, .user = dir, .stats = &out->st,
            .checkpoint_dir = durable ? ckdir : NULL, .checkpoint_num_to_keep = TRAINER_KEEP_ALL));
        if (killing) {
            ck.stop = 1;
            pthread_join(killer, NULL);
            killing = false;
            /* the replica held in the copy was killed there: for copy a newcomer that never
             * trained a step, for peer_copy the first serving peer, rank 0 of the group of 3 */
            CHECK(ck.pid > 0 && ck.gone);
            if (peer_copy)
                CHECK_EQ_INT(pid_of(dir, KILL_STEP, 3, 0), ck.pid);
            char steps[128];
            snprintf(steps, sizeof steps, "%s/steps-%d", dir, ck.pid);
            if (copy)
                CHECK(access(steps, F_OK) != 0);
            printf("%s: killed pid %d inside the heal's copy\n", mode, ck.pid);
        }
        if (watching) {
            ow.stop = 1;
            pthread_join(watcher, NULL);
            watching = false;
            /* the survivors trained on while the replacement was held inside its copy, and
             * that replacement, alive there, then entered and trained at world 4 */
            CHECK(ow.advanced);
            CHECK(ow.pid > 0 && !ow.gone);
            char steps[128];
            snprintf(steps, sizeof steps, "%s/steps-%d", dir, ow.pid);
            CHECK(access(steps, F_OK) == 0);
        }
        out->w = tt_weights(trainer_get_model(t), &out->nw);
        printf("%s: epochs %lld, steps %lld, replicas %d, live recoveries %d, heals %d, retries "
               "%d\n",
               mode, (long long)out->st.epoch, (long long)out->st.steps, out->st.replicas,
               out->st.live_recoveries, out->st.heals, out->st.retries_used);
        if (out->st.heals)
            printf("%s: last heal: failure seen to the group of %d agreed %.1f ms; snapshot of "
                   "%lld bytes put, fetched and loaded in %.1f ms\n",
                   mode, group, out->st.heal_ns / 1e6, (long long)out->st.heal_bytes,
                   out->st.heal_copy_ns / 1e6);
        CHECK_EQ_INT(out->st.epoch, 2);
        CHECK(out->st.weights_agree);
        /* the world each step ran with: a replacement heals from a survivor at the first step
         * boundary after the loss (a checkpoint every 4 steps, an epoch's end), its weights
         * the survivors' bit for bit, and the epoch's rest is dealt over 4 from where it is */
        const char *worlds = NULL;
        int64_t kill_epoch = 0;
        if (idle) {
            /* epoch 0: 7 steps of 4; epoch 1: its first step by 3 (24 samples); at the step-8
             * checkpoint the replacement copies while the 3 go on, steps 8 and 9; it enters at
             * step 10: the 144 left by 4 */
            worlds = "4444444"
                     "3"
                     "33"
                     "44444";
            kill_epoch = 1;
        } else if (refuse) {
            char path[300];
            int refused = 0;
            for (int k = 0; k < 4; k++) {
                snprintf(path, sizeof path, "%s/refused-%d", dir, k);
                refused += access(path, F_OK) == 0;
            }
            CHECK_EQ_INT(refused, 3);
            CHECK_EQ_INT(out->st.live_recoveries, 1);
            CHECK_EQ_INT(out->st.heals, 0); /* a 4th replacement would have built */
            CHECK_EQ_INT(out->st.growths, 1);
            CHECK_EQ_INT(out->st.retries_used, 0);
            CHECK_EQ_INT(out->st.replicas, 4);
        } else if (min) {
            CHECK_EQ_INT(out->st.live_recoveries, 0);
            CHECK_EQ_INT(out->st.retries_used, 1);
            CHECK_EQ_INT(out->st.replicas, 4);
        } else if (two) {
            /* step 3 by 2 (16 samples); at the step-4 checkpoint one replacement copies while
             * the 2 go on, steps 4 and 5 (a group smaller than before its loss pauses after
             * every step); it enters at step 6, done by 3; at the boundary after it, 2 steps
             * left in the epoch, too few to overlap, the second replacement heals while the 3
             * wait: the 48 left by 4; epoch 1: 7 of 4 */
            worlds = "444222344"
                     "4444444";
        } else if (peer || peer_copy) {
            /* at the step-4 checkpoint the first serving peer dies: the 2 left and the
             * replacement, healed from the next peer while they wait (the ring of 3 they were in
             * is broken: they meet again at once), go on as 3 for step 4; the next replacement
             * copies while they go on, steps 5 and 6, and enters at step 7: the 24 left by 4 */
            worlds = "44433334"
                     "4444444";
        } else if (checkdev) {
            /* step 3 by the one survivor (8 samples); at the step-4 checkpoint the replacement
             * copies its device's state while it goes on alone, steps 4 and 5 (16 samples); it
             * replays them on its device and enters at step 6: the 144 left by 2; epoch 1: 14
             * of 2 */
            worlds = "2221"
                     "11"
                     "222222222"
                     "22222222222222";
        } else if (newcomer || copy) {
            /* the replacement dies at the step-4 checkpoint (copy: while the 3 go on, steps 4
             * and 5; it is dropped at step 6, where it would have entered; quorum: it dies in
             * the quorum of step 6, and the 3 give it up and meet again at once, no restart):
             * the 3 go on; the next one copies while they go on (newcomer: steps 5 and 6) or
             * heals while they wait (copy, at step 7: one step left); it enters at step 7: the
             * 24 left by 4 */
            worlds = "44433334"
                     "4444444";
        } else {
            /* step 3 by 3; at the step-4 checkpoint the replacement copies while the 3 go on,
             * steps 4 and 5 (48 samples); it replays them and enters at step 6: the 48 left by 4
             * (overlap: the same, its copy held until the 3 did steps 4 and 5) */
            worlds = "4443"
                     "33"
                     "44"
                     "4444444";
        }
        if (worlds) {
            CHECK_EQ_INT(out->st.live_recoveries, peer || peer_copy ? 2 : 1);
            CHECK_EQ_INT(out->st.retries_used, 0);
            CHECK_EQ_INT(out->st.growths, 0); /* no restart: the group healed */
            CHECK_EQ_INT(out->st.heals, two || peer || peer_copy ? 2 : 1);
            CHECK_EQ_INT(out->st.replicas, group);
            CHECK_EQ_INT(out->st.steps, (int64_t)strlen(worlds));
            /* the last replacement replayed the survivors' 2 steps since its snapshot (none
             * where it healed while they waited: two's and copy's second) */
            CHECK_EQ_INT(out->st.heal_replayed_steps, two || copy ? 0 : 2);
        }
        check_steps(dir, out->st.steps, worlds, kill_epoch);
    }
    if (killing) { /* trainer_create failed: the killer never strikes */
        ck.stop = 1;
        pthread_join(killer, NULL);
    }
    if (watching) {
        ow.stop = 1;
        pthread_join(watcher, NULL);
    }
    trainer_shutdown(&t);
    if (copy || peer_copy || overlap) {
        char held[160];
        snprintf(held, sizeof held, "%s.held", hold_path);
        unlink(hold_path);
        unlink(held);
    }
    if (durable && out->w)
        resume_each(dir, ckdir, out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

int main(int argc, char **argv)
{
    tt_register();
    trainer_register_train_step("logged", logged_step);
    trainer_register_data("dying", dying_data);
    trainer_register_step_keys("logged", "log_dir,kill_mask,group");
    ct_serve_if_worker();
    h_init();
    const char *mode = argc > 1 ? argv[1] : "shm";
    bool tcp = !strcmp(mode, "tcp");
    if (!strcmp(mode, "checkdev"))
        group = 2;
    bool copy = !strcmp(mode, "copy"), peer_copy = !strcmp(mode, "peer_copy");
    bool overlap = !strcmp(mode, "overlap"), quorum = !strcmp(mode, "quorum");
    copy |= quorum;
    char addr[128];
    if (copy || peer_copy || overlap) { /* before the nodes start: they pass it on to all */
        char faults[200];
        snprintf(hold_path, sizeof hold_path, "/tmp/ct-test-live-hold.%d", (int)getpid());
        snprintf(faults, sizeof faults, "heal_hold=%s:%s",
                 peer_copy ? "peer"
                 : quorum  ? "quorum"
                           : "newcomer",
                 hold_path);
        setenv("CT_TEST_FAULTS", faults, 1);
    }
    if (h_start_head(addr, sizeof addr, "100", "3000") < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    for (int i = 0; i < (tcp ? 4 : 1); i++)
        h_start_node(addr, "--cpus", tcp ? "1" : "4", "--store-memory", "256M", NULL, NULL);
    if (!tt_wait_total_cpus(4, 10000)) {
        h_failures++;
        goto out;
    }
    run a = {0}, b = {0};
    one_run(mode, &a);
    if (!strcmp(mode, "shm") || group == 2) { /* the same kill at the same step: the same weights */
        one_run(mode, &b);
        tt_same_weights(a.w, b.w, a.nw, b.nw, "two runs with the same kill");
    }
    if (copy || peer_copy) { /* the same as a replica killed at the same boundary before it */
        hold_path[0] = 0;
        unsetenv("CT_TEST_FAULTS");
        one_run(copy ? "newcomer" : "peer", &b);
        tt_same_weights(a.w, b.w, a.nw, b.nw,
                        quorum ? "a newcomer killed in its quorum and one killed in its build"
                        : copy ? "a newcomer killed in its copy and one killed in its build"
                               : "a serving peer killed in its snapshot and one killed before it");
    }
    if (overlap) { /* the same as a run whose replacement's copy was not held */
        hold_path[0] = 0;
        unsetenv("CT_TEST_FAULTS");
        one_run("shm", &b);
        tt_same_weights(a.w, b.w, a.nw, b.nw,
                        "a replacement whose copy was held while the survivors went on and one "
                        "not held");
    }
    free(a.w);
    free(b.w);
out:
    ct_shutdown();
    h_kill_all();
    if (h_failures)
        fprintf(stderr, "test_live_recovery %s: %d failure(s)\n", mode, h_failures);
    return h_failures ? 1 : 0;
}
