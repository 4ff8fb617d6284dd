/* actor/api_embedded.c — the embedded cluster of ct_init(NULL): the driver's own executable
 * forked in head mode and in node mode on 127.0.0.1 ephemeral ports, tied to the driver with
 * PR_SET_PDEATHSIG and a pipe, so they end with it however it ends (a signal, exit without
 * ct_shutdown, kill -9); the node removes its shard and directory on the way out. The driver's
 * signal dispositions are left alone: no handler is installed here. Not in here: the head
 * (head/) and node (node.c) themselves. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>
#include "actor/api_internal.h"
#include "actor/runtime.h"
#include "actor/zmtp.h"
#include "common/auth.h"
#include "common/common.h"
#include "head/head.h"
#include "objectstore/store.h"
#include "objectstore/transfer.h"
#include "proto/msg.h"

/* ---- the embedded cluster ---- */

/* ---- init / shutdown ---- */

static int read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t n = 0;
    int64_t until = ct__now_ms() + timeout_ms;
    while (n + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        int64_t left = until - ct__now_ms();
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return CT_ETIMEDOUT;
        ssize_t r = read(fd, buf + n, 1);
        if (r <= 0)
            return CT_EIO;
        if (buf[n] == '\n')
            break;
        n++;
    }
    buf[n] = 0;
    return 0;
}

/* Starts the embedded head and node as forked children that die with this process. */
int ct__embedded_start(const ct_init_opts *o, int timeout_ms, char *addr, size_t cap)
{
    int watch[2], ready[2], rc = 0;
    char line[150];
    if (pipe2(watch, O_CLOEXEC) || pipe2(ready, O_CLOEXEC))
        return ct__error(-errno, "ct_init: pipe: %s", strerror(errno));
    pid_t me = getpid();
    for (int which = 0; which < 2; which++) {
        pid_t pid = fork();
        if (pid < 0) {
            rc = ct__error(-errno, "ct_init: fork: %s", strerror(errno));
            goto out;
        }
        if (pid == 0) {
            /* The driver's end, however it comes (a signal, exit without ct_shutdown, kill
             * -9), sends the node SIGINT, its "stop now": it ends its actors and zygotes and
             * removes its shard and directory on the way out, which SIGKILL would leave behind.
             * The application's handlers are not the node's: default until ct__node_run sets
             * its own, before it makes any file. The head keeps no file: SIGKILL. */
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            prctl(PR_SET_PDEATHSIG, which ? SIGINT : SIGKILL);
            if (getppid() != me)
                _exit(1);
            close(watch[1]);
            close(ready[0]);
            prctl(PR_SET_NAME, which ? "ct-node" : "ct-head"); /* as the daemons show in ps */
            int r;
            if (which == 0) {
                ct_head_opts ho = {.host = "127.0.0.1",
                                   .heartbeat_ms = o->heartbeat_ms,
                                   .dead_after_ms = o->dead_after_ms,
                                   .ready_fd = ready[1],
                                   .watch_fd = watch[0]};
                r = ct__head_run(&ho);
            } else {
                ct_node_opts no = {.head = addr,
                                   .cpus = o->cpus > 0 ? o->cpus : -1,
                                   .gpus = o->gpus > 0 ? o->gpus : 0,
                                   .resources = o->resources,
                                   .store_memory = o->store_memory,
                                   .watch_fd = watch[0],
                                   .ready_fd = ready[1]};
                r = ct__node_run(&no);
            }
            if (r)
                CT_LOG(CT_LOG_ERROR, which ? "node" : "head", "%s", ct_last_error());
            _exit(r ? 1 : 0);
        }
        if (which == 0)
            ct__client.head_pid = pid;
        else
            ct__client.node_pid = pid;
        if ((rc = read_line(ready[0], line, sizeof line, timeout_ms))) {
            rc = ct__error(rc, "ct_init: the embedded %s did not start", which ? "node" : "head");
            goto out;
        }
        if (which == 1 && !strncmp(line, "registered ", 11))
            snprintf(ct__client.emb_node, sizeof ct__client.emb_node, "%.31s", line + 11);
        if (which == 0) {
            if (strncmp(line, "listening on ", 13)) {
                rc = ct__error(CT_EPROTO, "ct_init: embedded head said '%s'", line);
                goto out;
            }
            snprintf(addr, cap, "%s", line + 13);
        }
    }
out:
    close(watch[0]);
    close(ready[0]);
    close(ready[1]);
    ct__client.watch_wr = watch[1];
    return rc;
}

/* Ends the embedded head and node: closing the watch pipe makes them exit cleanly (the node
 * removes its shard and directory); SIGKILL after 2 s, and whatever a killed node left is
 * purged. */
void ct__embedded_stop(void)
{
    pid_t pids[2] = {ct__client.node_pid, ct__client.head_pid};
    if (ct__client.watch_wr >= 0)
        close(ct__client.watch_wr);
    ct__client.watch_wr = -1;
    int64_t until = ct__now_ms() + 2000;
    for (int i = 0; i < 2; i++) {
        if (pids[i] <= 0)
            continue;
        while (waitpid(pids[i], NULL, WNOHANG) == 0) {
            if (ct__now_ms() > until) {
                kill(pids[i], SIGKILL);
                waitpid(pids[i], NULL, 0);
                break;
            }
            usleep(2000);
        }
    }
    if (ct__client.node_pid > 0)
        ct__objnode_purge_pid(ct__client.node_pid);
    ct__client.node_pid = ct__client.head_pid = 0;
    ct__client.emb_node[0] = 0;
}
