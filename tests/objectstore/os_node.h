/* tests/objectstore/os_node.h — a "node" for the transfer tests: a forked process with its own
 * shard and transfer server on 127.0.0.1, holding objects made by os_fill. It reports its
 * endpoint through a pipe and then waits to be killed; the parent purges its shared memory. */
#ifndef CT_TESTS_OS_NODE_H
#define CT_TESTS_OS_NODE_H

#include "tests/objectstore/os_test.h"
#include "objectstore/store.h"
#include "objectstore/transfer.h"

typedef struct os_obj {
    uint64_t key, seed, size;
} os_obj;

typedef struct os_node {
    pid_t pid;
    char name[64];
    char endpoint[256];
    uint16_t data_port; /* its transfer server's data port */
} os_node;

/* Starts a node holding objs; delay_ms slows each chunk reply. Returns 0 or -1. */
static inline int os_node_start(os_node *n, const char *tag, const os_obj *objs, int nobjs,
                                uint64_t cap, int delay_ms)
{
    int fd[2];
    snprintf(n->name, sizeof n->name, "ostest-%s-%d", tag, (int)getpid());
    if (pipe(fd))
        return -1;
    n->pid = os_fork();
    if (n->pid < 0)
        return -1;
    if (n->pid == 0) {
        close(fd[0]);
        ct__log_set_who(n->name);
        ct_store *s = ct_store_new(&(ct_store_opts){.name = n->name, .memory_cap = cap});
        if (!s) {
            fprintf(stderr, "node %s: %s\n", n->name, ct_last_error());
            _exit(2);
        }
        for (int i = 0; i < nobjs; i++) {
            ct_object_id id;
            void *p;
            os_id(&id, objs[i].key);
            if (ct_store_create(s, &id, objs[i].size, &p)) {
                fprintf(stderr, "node %s: %s\n", n->name, ct_last_error());
                _exit(3);
            }
            os_fill(p, objs[i].size, objs[i].seed);
            ct_store_seal(s, &id);
        }
        ct_xfer_server *srv = ct_xfer_server_new(s, &(ct_xfer_server_opts){.delay_ms = delay_ms});
        if (!srv) {
            fprintf(stderr, "node %s: %s\n", n->name, ct_last_error());
            _exit(4);
        }
        char ep[256];
        snprintf(ep, sizeof ep, "%s", ct_xfer_server_endpoint(srv));
        uint16_t port = ct_xfer_server_data_port(srv);
        if (write(fd[1], ep, sizeof ep) != sizeof ep || write(fd[1], &port, 2) != 2)
            _exit(5);
        for (;;)
            pause();
    }
    close(fd[1]);
    ssize_t got = read(fd[0], n->endpoint, sizeof n->endpoint);
    if (got == sizeof n->endpoint && read(fd[0], &n->data_port, 2) != 2)
        got = -1;
    close(fd[0]);
    if (got != sizeof n->endpoint) {
        fprintf(stderr, "node %s did not start\n", n->name);
        return -1;
    }
    return 0;
}

/* Kills and reaps the node and removes the shared memory it leaves behind. */
static inline void os_node_stop(os_node *n)
{
    if (n->pid > 0) {
        os_kill(n->pid);
        ct_store_purge(n->name);
        n->pid = 0;
    }
}

#endif
