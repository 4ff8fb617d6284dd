/* bench/pipeline/pipeline_nodes_bench.c — pipeline stages as actors on nodes (issue 40, item 5):
 * a ct-head and 2 ct-node processes of 1 CPU each on this machine, a GPT (LAYERS layers, 4
 * heads, n_embd C, block T, vocab 256, no dropout) split into 2 stage actors, one a node, whose
 * activations and gradients go over trainer/pipeline's p2p links (as the trainer_pipeline_nodes
 * tests run them), Adam, synthetic tokens, a batch of B rows, timed over STEPS steps after a
 * warm-up step:
 *
 *   nodes 1f1b:        M micro-batches in 1F1B's order;
 *   nodes unpipelined: the same job with M = 1 (stage 1 waits for stage 0's whole batch).
 *
 * Each row gives samples/s (rows of T tokens), wall ms per step and the CPU time per step of the
 * 2 stage actors (/proc/<pid>/stat), then the ratio of the two CPU times: on shared, loaded
 * cores wall time cannot judge the overlap. Run before pipeline_bench by run.sh (whose line is
 * the bench's last). Usage: pipeline_nodes_bench [STEPS [M [B [C [T [LAYERS]]]]]] (defaults
 * 5 8 32 256 64 4). */
#include <time.h>

#include "bench/bench_cluster.h"
#include "trainer/pipeline/stage.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds (user + system) process pid has used; -1 when unreadable */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the fields after the command name */
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* the 2 stage actors' CPU seconds */
static double stages_cpu_s(ct__pipe_job *j)
{
    double sum = 0;
    for (int s = 0; s < 2; s++) {
        double c = proc_cpu_s(ct_actor_pid(ct__pipe_job_actor(j, 0, s)));
        if (c < 0)
            return -1;
        sum += c;
    }
    return sum;
}

typedef struct {
    double wall, cpu; /* seconds per step */
} per_step;

/* a job of M micro-batches: STEPS steps after one; 0 or a CT_E* code */
static int time_job(ct__pipe_job_opts o, const char *group, int steps, per_step *out)
{
    ct__pipe_job *j = NULL;
    int rc = ct__pipe_job_start(&o, group, &j);
    double t0 = 0, c0 = 0, loss = 0;
    for (int s = 0; rc == 0 && s <= steps; s++) {
        if (s == 1) {
            t0 = now_s();
            c0 = stages_cpu_s(j);
        }
        rc = ct__pipe_job_step(j, s, &loss);
    }
    if (rc == 0) {
        double c1 = stages_cpu_s(j);
        out->wall = (now_s() - t0) / steps;
        out->cpu = c0 >= 0 && c1 >= 0 ? (c1 - c0) / steps : -1;
    }
    ct__pipe_job_end(&j);
    return rc;
}

int main(int argc, char **argv)
{
    ct_serve_if_worker();
    int steps = argc > 1 ? atoi(argv[1]) : 5, m = argc > 2 ? atoi(argv[2]) : 8;
    int batch = argc > 3 ? atoi(argv[3]) : 32, c = argc > 4 ? atoi(argv[4]) : 256;
    int t = argc > 5 ? atoi(argv[5]) : 64, layers = argc > 6 ? atoi(argv[6]) : 4;
    if (steps < 1 || m < 1 || batch < m || c < 4 || c % 4 || t < 2 || layers < 2) {
        fprintf(stderr, "usage: pipeline_nodes_bench [STEPS [M [B [C [T [LAYERS]]]]]]\n");
        return 2;
    }
    char addr[128];
    if (bc_start_head("pipeline_nodes_bench", addr, sizeof addr) < 0)
        return 1;
    char *nargs[] = {"--cpus", "1", "--store-memory", "256M", NULL};
    for (int i = 0; i < 2; i++)
        if (bc_start_node("pipeline_nodes_bench", addr, nargs, 60000) < 0)
            return 1;
    double total = 0, free_cpu = 0;
    for (double until = now_s() + 60; now_s() < until && total != 2; usleep(50000))
        if (ct_cluster_resources("CPU", &total, &free_cpu) != 0)
            total = 0;
    if (total != 2)
        return fprintf(stderr, "pipeline_nodes_bench: the cluster has %g CPUs, not 2\n", total), 1;

    ct__pipe_job_opts o = {.gpt = {.n_layer = layers,
                                   .n_head = 4,
                                   .n_embd = c,
                                   .block_size = t,
                                   .vocab_size = 256,
                                   .dropout = 0},
                           .stages = 2,
                           .pipelines = 1,
                           .micro_batches = m,
                           .schedule = CT_PIPE_1F1B,
                           .batch = batch,
                           .seed = 1,
                           .lr = 1e-3f,
                           .timeout_ms = 600000};
    per_step p1f1b = {0}, pflat = {0};
    int rc = time_job(o, "bench-1f1b", steps, &p1f1b);
    o.micro_batches = 1;
    if (rc == 0)
        rc = time_job(o, "bench-flat", steps, &pflat);
    if (rc < 0)
        return fprintf(stderr, "pipeline_nodes_bench: %s\n", ct_last_error()), 1;
    double load[1] = {0};
    getloadavg(load, 1);
    printf("pipeline_nodes_bench: 2 stage actors on 2 nodes of 1 CPU, GPT %d layers, n_embd %d, "
           "block %d, batch %d, M=%d, %d steps, load average %.1f on %ld cores\n",
           layers, c, t, batch, m, steps, load[0], sysconf(_SC_NPROCESSORS_ONLN));
    printf("nodes 1f1b:        %8.1f samples/s (%.1f ms/step, stages' CPU %.1f ms/step)\n",
           batch / p1f1b.wall, 1e3 * p1f1b.wall, 1e3 * p1f1b.cpu);
    printf("nodes unpipelined: %8.1f samples/s (%.1f ms/step, stages' CPU %.1f ms/step)\n",
           batch / pflat.wall, 1e3 * pflat.wall, 1e3 * pflat.cpu);
    printf("nodes: wall-time ratio %.2f (1f1b against unpipelined, >1 better), CPU-time ratio "
           "%.2f (1f1b's over unpipelined's)\n",
           pflat.wall / p1f1b.wall, p1f1b.cpu / pflat.cpu);
    ct_shutdown();
    return 0;
}
