/* head/supervise.c — `ct-head --supervise ...`: runs ct-head (the same arguments, without
 * --supervise) as its child and starts it again when it ends, within a second, on the same
 * address (the port the first one printed) with the same secret (the environment and
 * --secret-file are passed on) and the same state (--state-dir; without one, a private
 * directory in /tmp that the supervisor makes and removes when it ends, which a supervisor
 * killed outright cannot: so ctup up names one, in the cluster's log directory, that ctup down
 * removes). systemd's Restart=always is the model; ctup up starts the head this way
 * (cluster/provider.c), so a head that crashes or is killed comes back and the nodes register
 * again (actor/node_head.c, "Head loss").
 *
 * The child's stdout goes through the supervisor (its "listening on H:P" is copied once, so
 * that whoever started the supervisor reads the line as from ct-head itself); its stderr is
 * the supervisor's. SIGTERM/SIGINT to the supervisor stop the child (SIGTERM) first, then the
 * supervisor; the child gets PR_SET_PDEATHSIG, so a supervisor killed outright takes it along.
 * A child that lived less than a second is started again after a second, not at once. The
 * first child that ends before it served (a bad argument, its port taken) is not started
 * again: the supervisor exits with its status, as that head would have alone. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "head/head.h"

static volatile sig_atomic_t sup_stop;
static volatile pid_t sup_child;

static void on_stop(int sig)
{
    (void)sig;
    sup_stop = 1;
    if (sup_child > 0)
        kill(sup_child, SIGTERM);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Copies the child's stdout (fd) to ours until EOF; the first "listening on H:P" gives port. */
static void relay(int fd, char *port, size_t cap, int *printed)
{
    char line[512];
    size_t n = 0;
    for (;;) {
        char c;
        ssize_t r = read(fd, &c, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return;
        if (c != '\n') {
            if (n + 1 < sizeof line)
                line[n++] = c;
            continue;
        }
        line[n] = 0;
        n = 0;
        const char *colon = strrchr(line, ':');
        if (!strncmp(line, "listening on ", 13) && colon) {
            if (!port[0])
                snprintf(port, cap, "%s", colon + 1);
            if ((*printed)++)
                continue; /* a restart's line: the starter read the first one */
        }
        printf("%s\n", line);
        fflush(stdout);
    }
}

int ct__head_supervise(int argc, char **argv)
{
    prctl(PR_SET_NAME, "ct-head-super"); /* in ps beside its child, the ct-head */
    /* the child's argv: ours without --supervise; --port replaced once the first one serves;
     * --state-dir added when absent */
    char **cargv = calloc((size_t)argc + 8, sizeof *cargv);
    char port[16] = "", dir[64] = "", restarts[16] = "0", why[96] = "";
    int nc = 0, port_i = -1;
    bool has_state = false;
    if (!cargv)
        return 1;
    static char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        fprintf(stderr, "ct-head: --supervise: /proc/self/exe: %s\n", strerror(errno));
        free(cargv);
        return 1;
    }
    self[sl] = 0;
    cargv[nc++] = self;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--supervise"))
            continue;
        if (!strcmp(argv[i], "--restarts") || !strcmp(argv[i], "--restart-reason")) { /* ours */
            i++;
            continue;
        }
        if (!strcmp(argv[i], "--state-dir"))
            has_state = true;
        if (!strcmp(argv[i], "--port") && i + 1 < argc) {
            cargv[nc++] = argv[i++];
            port_i = nc;
        }
        cargv[nc++] = argv[i];
    }
    if (!has_state) {
        snprintf(dir, sizeof dir, "/tmp/ct-head-state.XXXXXX");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "ct-head: --supervise: mkdtemp: %s\n", strerror(errno));
            free(cargv);
            return 1;
        }
        cargv[nc++] = "--state-dir";
        cargv[nc++] = dir;
    }
    /* how many times the head was started again, for its metrics (ct_head_restarts_total) */
    cargv[nc++] = "--restarts";
    cargv[nc++] = restarts;
    int why_i = nc; /* "--restart-reason" and why, from the second start on (its events) */
    cargv[nc] = NULL;
    struct sigaction sa = {0};
    sa.sa_handler = on_stop; /* no SA_RESTART: a read in relay returns EINTR */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    int printed = 0, status = 0, starts = 0;
    while (!sup_stop) {
        if (port[0] && port_i >= 0)
            cargv[port_i] = port;
        snprintf(restarts, sizeof restarts, "%d", starts);
        int p[2];
        if (pipe2(p, O_CLOEXEC)) {
            fprintf(stderr, "ct-head: --supervise: pipe: %s\n", strerror(errno));
            break;
        }
        double t0 = now_s();
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            dup2(p[1], STDOUT_FILENO);
            execv(self, cargv);
            _exit(127);
        }
        close(p[1]);
        if (pid < 0) {
            close(p[0]);
            fprintf(stderr, "ct-head: --supervise: fork: %s\n", strerror(errno));
            break;
        }
        sup_child = pid;
        if (sup_stop)
            kill(pid, SIGTERM);
        starts++;
        relay(p[0], port, sizeof port, &printed);
        close(p[0]);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        sup_child = 0;
        if (sup_stop || !printed)
            break; /* stopped; or the first head never served (a bad argument, a port taken):
                      its status is ours, as if it ran alone */
        fprintf(stderr, "ct-head: --supervise: the head (pid %d) %s %d; starting it again%s%s\n",
                (int)pid, WIFSIGNALED(status) ? "was killed by signal" : "exited with status",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
                port[0] ? " on port " : "", port);
        snprintf(why, sizeof why, "the head before (pid %d) %s %d", (int)pid,
                 WIFSIGNALED(status) ? "was killed by signal" : "exited with status",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        cargv[why_i] = "--restart-reason";
        cargv[why_i + 1] = why;
        cargv[why_i + 2] = NULL;
        if (now_s() - t0 < 1) /* a head that cannot start: not in a tight loop */
            sleep(1);
        else
            usleep(100 * 1000);
    }
    if (dir[0]) {
        char f[128];
        snprintf(f, sizeof f, "%s/head.wal", dir);
        unlink(f);
        snprintf(f, sizeof f, "%s/head.wal.new", dir);
        unlink(f);
        rmdir(dir);
    }
    free(cargv);
    (void)starts;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}
