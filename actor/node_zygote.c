/* actor/node_zygote.c — the node's zygote processes: one per executable (job token, path and
 * argv: the key), up to one per CPU (at most 4) each, MAX_ZYG in all. A zygote is the driver's
 * executable exec'd in zygote mode (worker.c): it forks each actor with CLONE_PARENT, so
 * actors are the node's children, and an actor starts in about a millisecond with the user's
 * code already loaded. Started here with LD_BIND_NOW, the cluster secret through an inherited
 * pipe and its stderr a pipe until it serves (node_stderr.c); ended when its process dies
 * (what waited on it fails, saying how it ended), when its job ends (JobEnded), when idle for
 * zyg_idle_ms with no actor here, or to make room for another executable's.
 *
 * Not in here: the start requests a zygote is given and its records (node_start.c), the zygote's
 * own loop (worker.c). */
#define _GNU_SOURCE /* pipe2, strerrordesc_np */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "actor/node_shared.h"
#include "common/auth.h"
#include "common/env.h"
#include "common/fault.h"

extern char **environ;

/* Closes z's descriptors and frees its key; its process is not touched. */
static void zygote_close(zygote *z)
{
    if (z->err_fd >= 0)
        close(z->err_fd);
    close(z->fd);
    if (z->peer_fd >= 0)
        close(z->peer_fd);
    free(z->key);
}

/* Takes zygote zi out of the table (its process ended or was killed). The actors it was to
 * start fail with why, and so do those queued for its executable when no zygote of it is left
 * or when the failure is permanent (its siblings fail the same way). */
static void zygote_remove(nodest *n, int zi, const char *why, bool permanent)
{
    zygote *z = &n->z[zi];
    for (int i = 0; i < n->na; i++)
        if (n->a[i].pid == 0 && n->a[i].zyg_pid == z->pid) {
            ct__node_report_start_failed(n, n->a[i].id, why, permanent);
            ct__node_actor_remove(n, i--);
        }
    bool sibling = false;
    for (int i = 0; i < n->nz && !sibling; i++)
        sibling = i != zi && n->z[i].keylen == z->keylen && !memcmp(n->z[i].key, z->key, z->keylen);
    for (int j = n->qh; j < n->qn && (permanent || !sibling); j++) {
        int ai = ct__node_actor_find(n, n->q[j].id);
        if (ai >= 0 && n->q[j].keylen == z->keylen && !memcmp(n->q[j].key, z->key, z->keylen)) {
            ct__node_report_start_failed(n, n->q[j].id, why, permanent);
            ct__node_actor_remove(n, ai); /* ct__node_feed_zygotes drops it */
        }
    }
    zygote_close(z);
    n->z[zi] = n->z[--n->nz];
}

/* One that never served tells how it ended and the end of its stderr; one that exited 126 or 127
 * before serving (an exec or a dynamic loader's failure: a missing shared library) fails for
 * good. */
void ct__node_zygote_gone(nodest *n, int zi, int status)
{
    zygote *z = &n->z[zi];
    ct__node_zygote_stderr(z);
    char how[96], tail[400], why[600];
    if (status == -1)
        snprintf(how, sizeof how, "ended");
    else if (WIFSIGNALED(status))
        snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
    bool permanent = false;
    if (z->served) {
        snprintf(why, sizeof why, "the zygote process died (pid %d %s)", (int)z->pid, how);
    } else {
        permanent = status != -1 && WIFEXITED(status) &&
                    (WEXITSTATUS(status) == 126 || WEXITSTATUS(status) == 127);
        ct__node_tail_lines(z->tail, z->tail_len, tail, sizeof tail);
        snprintf(why, sizeof why, "the zygote (pid %d) %s before serving%s%s", (int)z->pid, how,
                 tail[0] ? "; its stderr: " : " (nothing on its stderr)", tail);
    }
    CT_LOG(CT_LOG_WARN, "node", "%s", why);
    zygote_remove(n, zi, why, permanent);
}

/* Ends zygote zi (SIGKILL, reaped as no actor's exit); what waits on it fails with why. Its
 * actors are the node's children and live on. */
static void retire_zygote(nodest *n, int zi, const char *why)
{
    zygote *z = &n->z[zi];
    CT_LOG(CT_LOG_INFO, "node", "retiring zygote %d: %s", (int)z->pid, why);
    if (!n->detached && z->pid > 0) {
        ct__node_kill_pid(n, z->pid);
        if (n->nretired == MAX_EARLY)
            memmove(n->retired, n->retired + 1, --n->nretired * sizeof *n->retired);
        n->retired[n->nretired++] = z->pid;
    }
    zygote_remove(n, zi, why, false);
}

/* Ends the least recently used zygote that nothing waits on (no spawn outstanding, every actor
 * it made has reported); its actors are the node's children and live on. */
static int evict_zygote(nodest *n)
{
    int best = -1;
    for (int i = 0; i < n->nz; i++) {
        if (n->z[i].outstanding)
            continue;
        bool queued = false; /* start requests wait for this executable */
        for (int j = n->qh; j < n->qn && !queued; j++)
            queued = n->q[j].keylen == n->z[i].keylen &&
                     !memcmp(n->q[j].key, n->z[i].key, n->z[i].keylen);
        if (queued)
            continue;
        bool waiting = false;
        for (int j = 0; j < n->na && !waiting; j++)
            waiting = n->a[j].zyg_pid == n->z[i].pid && !n->a[j].reported;
        if (!waiting && (best < 0 || n->z[i].last_used < n->z[best].last_used))
            best = i;
    }
    if (best < 0)
        return ct__error(CT_EBUSY, "node: all %d zygotes are busy", n->nz);
    retire_zygote(n, best, "room for another executable's");
    return 0;
}

bool ct__node_check_job_ended(nodest *n, const Ct__Envelope *e)
{
    (void)n;
    return ct__token_valid(e->job_ended->job_token ? e->job_ended->job_token : "");
}

/* The head says a job's driver is gone: the job's zygotes end (its actors get KillActor each). */
void ct__node_on_job_ended(nodest *n, Ct__Envelope *e)
{
    const char *tok = e->job_ended->job_token;
    size_t tl = strlen(tok) + 1; /* a zygote's key starts with its job's token and a NUL */
    for (int i = n->nz - 1; i >= 0; i--)
        if (n->z[i].keylen >= tl && !memcmp(n->z[i].key, tok, tl))
            retire_zygote(n, i, "its job ended");
}

/* Zygotes unused for zyg_idle_ms with no actor of theirs here and nothing queued for their
 * executable end: a job whose end the head could not tell this node (its actors here were
 * forgotten) leaves none for ever. */
void ct__node_retire_idle(nodest *n)
{
    int64_t now = ct__now_ms();
    for (int i = n->nz - 1; i >= 0; i--) {
        zygote *z = &n->z[i];
        bool busy = z->outstanding || now - z->last_used < n->zyg_idle_ms;
        for (int j = 0; j < n->na && !busy; j++)
            busy = n->a[j].zyg_pid == z->pid;
        for (int j = n->qh; j < n->qn && !busy; j++)
            busy = n->q[j].keylen == z->keylen && !memcmp(n->q[j].key, z->key, z->keylen);
        if (!busy)
            retire_zygote(n, i, "idle");
    }
}

/* Whether a zygote has this pid already. */
static bool zygote_pid_used(const nodest *n, pid_t pid)
{
    for (int i = 0; i < n->nz; i++)
        if (n->z[i].pid == pid)
            return true;
    return false;
}

/* Records a started zygote (pid, the node's end fd; peer_fd: detached only, else -1; err_fd: the
 * pipe on its stderr, or -1). Its index, or CT_ENOMEM with the zygote killed and the fds closed. */
static int add_zygote(nodest *n, const char *exe, const char *key, size_t keylen, pid_t pid, int fd,
                      int peer_fd, int err_fd)
{
    zygote *z = &n->z[n->nz];
    z->key = malloc(keylen);
    if (!z->key) {
        ct__node_kill_pid(n, pid);
        close(fd);
        if (peer_fd >= 0)
            close(peer_fd);
        if (err_fd >= 0)
            close(err_fd);
        return ct__error(CT_ENOMEM, "node: out of memory");
    }
    memcpy(z->key, key, keylen);
    z->keylen = keylen;
    z->outstanding = 0;
    z->last_used = ct__now_ms();
    if (n->detached) /* a pid of its own, which no kill ever reaches */
        for (pid = 1000000; zygote_pid_used(n, pid); pid++)
            ;
    z->pid = pid;
    z->fd = fd;
    z->peer_fd = peer_fd;
    z->err_fd = err_fd;
    z->tail_len = 0;
    z->served = false;
    n->nz++;
    CT_LOG(CT_LOG_INFO, "node", "zygote %d for %s", (int)z->pid, exe);
    return n->nz - 1;
}

int ct__node_zygote_spawn(nodest *n, Ct__StartActor *s, const char *exe, int exe_fd,
                          const char *key, size_t keylen, bool may_evict)
{
    if (exe_fd < 0 && access(exe, X_OK) != 0)
        return ct__error(CT_ENOENT, "start_actor.exe_path: %s: %s", exe, strerror(errno));
    if (n->nz >= n->max_zyg) {
        int rc = may_evict ? evict_zygote(n) : CT_EBUSY;
        if (rc)
            return rc;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return ct__error(-errno, "node: socketpair: %s", strerror(errno));
    int big = 1 << 20;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    if (n->detached) /* everything but the process: the fuzzer plays the zygote on sv[1] */
        return add_zygote(n, exe, key, keylen, -1, sv[0], sv[1], -1);
    /* everything the child needs is built before fork: the node has threads */
    size_t nenv = 0;
    while (environ[nenv])
        nenv++;
    char vars[12][300]; /* the zygote's own variables, after the inherited ones, then NULL */
    char **env = calloc(nenv + CT_ARRAY_LEN(vars) + 1, sizeof *env);
    char **argv = calloc(s->n_argv + 2, sizeof *argv);
    if (!env || !argv) {
        free(env);
        free(argv);
        close(sv[0]);
        close(sv[1]);
        return ct__error(CT_ENOMEM, "node: out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < nenv; i++)
        if (strncmp(environ[i], "CT_", 3) || !strncmp(environ[i], "CT_LOG_LEVEL=", 13) ||
            !strncmp(environ[i], CT__FAULT_ENV "=", sizeof CT__FAULT_ENV))
            env[k++] = environ[i];
    snprintf(vars[0], sizeof vars[0], "CT_MODE=zygote");
    snprintf(vars[1], sizeof vars[1], "CT_ZYGOTE_FD=%d", sv[1]);
    snprintf(vars[2], sizeof vars[2], "CT_HEAD=%s", n->head);
    snprintf(vars[3], sizeof vars[3], "CT_NODE_ID=%s", n->id);
    snprintf(vars[4], sizeof vars[4], "CT_NODE_HOST=%s", n->host);
    snprintf(vars[5], sizeof vars[5], "CT_NODE_PID=%d", (int)getpid());
    /* the job's token, which its actors present to the head (one zygote per job: the key) */
    snprintf(vars[6], sizeof vars[6], "CT_JOB_TOKEN=%s",
             ct__token_valid(s->job_token) ? s->job_token : "");
    /* every symbol bound once in the zygote: otherwise each actor resolves (and dirties the GOT
     * pages of) every function it calls for the first time, ~25% of an actor's start */
    int nv = 7;
    /* the cluster secret through a pipe the zygote inherits, never in the environment (which
     * any process of this user can read in /proc) */
    int secret_fd = -1;
    if (ct__auth_off()) {
        snprintf(vars[nv++], sizeof vars[0], "CT_AUTH=off");
    } else {
        secret_fd = ct__auth_secret_pipe();
        if (secret_fd < 0) {
            free(env);
            free(argv);
            close(sv[0]);
            close(sv[1]);
            return secret_fd;
        }
        snprintf(vars[nv++], sizeof vars[0], "CT_SECRET_FD=%d", secret_fd);
    }
    if (!ct__env(CT__ENV_LD_BIND_NOW)) {
        snprintf(vars[nv++], sizeof vars[0], "LD_BIND_NOW=1");
        snprintf(vars[nv++], sizeof vars[0], "CT_ZYGOTE_BIND_NOW=1");
    }
    /* its stderr is a pipe until it serves (read_err); CT_STDERR_FD is the node's own stderr,
     * which it then puts back. Without a pipe it just has the node's. */
    int errp[2] = {-1, -1}, keep_err = -1;
    if (pipe2(errp, O_CLOEXEC) == 0) {
        keep_err = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
        if (keep_err < 0)
            keep_err = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (keep_err < 0) {
            close(errp[0]);
            close(errp[1]);
            errp[0] = errp[1] = -1;
        } else {
            fcntl(errp[0], F_SETFL, O_NONBLOCK);
            snprintf(vars[nv++], sizeof vars[0], "CT_STDERR_FD=%d", keep_err);
        }
    }
    char execmsg[600]; /* an exec failure's message, written by the child to the pipe */
    int execlen = snprintf(execmsg, sizeof execmsg, "ct-node: cannot execute %s: ", exe);
    if (execlen < 0 || execlen >= (int)sizeof execmsg)
        execlen = 0;
    for (int i = 0; i < nv; i++)
        env[k++] = vars[i];
    env[k] = NULL;
    for (size_t i = 0; i < s->n_argv; i++)
        argv[i] = s->argv[i];
    if (!s->n_argv)
        argv[0] = (char *)exe;
    /* Test hook: a spare zygote (one that no start waits for) execs this much later, as it may
     * on a busy machine */
    long late = may_evict ? 0 : ct__fault_num(CT__FAULT_NODE_SPARE_EXEC_DELAY_MS);
    struct timespec late_ts = {0, 0};
    if (late > 0)
        late_ts = (struct timespec){late / 1000, (late % 1000) * 1000000};
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me)
            _exit(1);
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        fcntl(sv[1], F_SETFD, 0); /* keep the zygote's end across exec */
        if (secret_fd >= 0)
            fcntl(secret_fd, F_SETFD, 0);
        if (errp[1] >= 0) {
            fcntl(keep_err, F_SETFD, 0);
            dup2(errp[1], STDERR_FILENO);
        }
        if (late_ts.tv_sec || late_ts.tv_nsec)
            nanosleep(&late_ts, NULL);
        if (exe_fd >= 0) /* the checked file itself (an ELF: its descriptor closes on exec) */
            fexecve(exe_fd, argv, env);
        else
            execve(exe, argv, env);
        /* only async-signal-safe calls here (the node has threads); strerrordesc_np is a
         * table lookup */
        const char *desc = strerrordesc_np(errno);
        (void)!write(STDERR_FILENO, execmsg, execlen);
        (void)!write(STDERR_FILENO, desc ? desc : "error", desc ? strlen(desc) : 5);
        (void)!write(STDERR_FILENO, "\n", 1);
        _exit(127);
    }
    int fork_errno = errno;
    free(env);
    free(argv);
    close(sv[1]);
    if (secret_fd >= 0)
        close(secret_fd);
    if (errp[1] >= 0) {
        close(errp[1]);
        close(keep_err);
    }
    if (pid < 0) {
        close(sv[0]);
        if (errp[0] >= 0)
            close(errp[0]);
        return ct__error(-fork_errno, "node: fork: %s", strerror(fork_errno));
    }
    return add_zygote(n, exe, key, keylen, pid, sv[0], -1, errp[0]);
}

bool ct__node_zygote_exited(nodest *n, pid_t pid, int status)
{
    for (int i = 0; i < n->nretired; i++)
        if (n->retired[i] == pid) {
            n->retired[i] = n->retired[--n->nretired];
            return true;
        }
    for (int i = 0; i < n->nz; i++)
        if (n->z[i].pid == pid) {
            ct__node_zygote_gone(n, i, status);
            return true;
        }
    return false;
}

int ct__node_zygotes_end(nodest *n, pid_t *pids, int cap)
{
    int np = 0;
    for (int i = 0; i < n->nz; i++) {
        zygote *z = &n->z[i];
        ct__node_kill_pid(n, z->pid);
        if (z->pid > 0 && np < cap)
            pids[np++] = z->pid;
        zygote_close(z);
    }
    n->nz = 0;
    return np;
}
