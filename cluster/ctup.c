/* cluster/ctup.c — ctup, the cluster launcher. Only `ctup status --address H:P` exists so
 * far: it asks the head for its tables and prints the nodes (resources free/total, state),
 * each live node's object store (transfer address, objects, bytes used, capacity), the
 * actors (class, node, pid, state) and placement groups. Not in here yet: up/down/submit/exec. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>
#include "common/common.h"
#include "proto/msg.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ctup status --address H:P [--timeout-ms N]\n"
            "  status   print the cluster's nodes, object stores, actors and placement groups\n");
}

static int status(const char *addr, int timeout_ms)
{
    int rc = 1;
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    char ep[300];
    snprintf(ep, sizeof ep, "tcp://%s", addr);
    Ct__Envelope e, *rep = NULL;
    Ct__Status st = CT__STATUS__INIT;
    if (zmq_connect(s, ep) != 0) {
        fprintf(stderr, "ctup: --address: '%s' is not host:port (%s)\n", addr,
                zmq_strerror(zmq_errno()));
        goto out;
    }
    ct__env_init(&e, 1, "ctup", timeout_ms);
    e.body_case = CT__ENVELOPE__BODY_STATUS;
    e.status = &st;
    if (ct__msg_send(s, NULL, &e, 0)) {
        fprintf(stderr, "ctup: %s\n", ct_last_error());
        goto out;
    }
    zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) <= 0) {
        fprintf(stderr, "ctup: no answer from a head at %s within %d ms\n", addr, timeout_ms);
        goto out;
    }
    if (ct__msg_recv(s, NULL, &rep, 0, "ctup") ||
        ct__msg_expect(rep, CT__ENVELOPE__BODY_STATUS_REPLY, "status")) {
        fprintf(stderr, "ctup: %s\n", ct_last_error());
        goto out;
    }
    Ct__StatusReply *r = rep->status_reply;
    size_t alive = 0;
    for (size_t i = 0; i < r->n_nodes; i++)
        alive += r->nodes[i]->alive;
    printf("head %s: %zu nodes (%zu alive), %zu actors\n", addr, r->n_nodes, alive, r->n_actors);
    printf("%-10s %-16s %-6s %-8s %s\n", "NODE", "HOST", "STATE", "PID", "RESOURCES (free/total)");
    for (size_t i = 0; i < r->n_nodes; i++) {
        Ct__NodeInfo *n = r->nodes[i];
        printf("%-10s %-16s %-6s %-8d", n->node_id, n->host, n->alive ? "ALIVE" : "DEAD", n->pid);
        for (size_t j = 0; j < n->n_total; j++)
            printf(" %s=%g/%g", n->total[j]->name,
                   ct__res_get(n->free, n->n_free, n->total[j]->name), n->total[j]->amount);
        printf("\n");
    }
    printf("%-10s %-24s %-10s %-12s %s\n", "STORE", "TRANSFER", "OBJECTS", "USED MiB",
           "CAPACITY MiB");
    for (size_t i = 0; i < r->n_nodes; i++) {
        Ct__NodeInfo *n = r->nodes[i];
        if (!n->alive || !*n->xfer_address)
            continue;
        printf("%-10s %-24s %-10llu %-12.1f %.1f\n", n->node_id, n->xfer_address,
               (unsigned long long)n->store_objects, (double)n->store_bytes / (1 << 20),
               (double)n->store_capacity / (1 << 20));
    }
    printf("%-10s %-16s %-10s %-8s %s\n", "ACTOR", "CLASS", "NODE", "PID", "STATE");
    for (size_t i = 0; i < r->n_actors; i++) {
        Ct__ActorInfo *a = r->actors[i];
        printf("%-10s %-16s %-10s %-8d %s\n", a->actor_id, a->class_name,
               *a->node_id ? a->node_id : "-", a->pid, a->state);
    }
    if (r->n_pgs) {
        printf("%-10s %-8s %s\n", "GROUP", "STATE", "BUNDLE NODES");
        for (size_t i = 0; i < r->n_pgs; i++) {
            Ct__PgInfo *g = r->pgs[i];
            printf("%-10s %-8s", g->pg_id, g->state);
            for (size_t j = 0; j < g->n_bundle_nodes; j++)
                printf("%s%s", j ? "," : " ", *g->bundle_nodes[j] ? g->bundle_nodes[j] : "-");
            printf("\n");
        }
    }
    rc = 0;
out:
    ct__msg_free(rep);
    zmq_close(s);
    zmq_ctx_term(ctx);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "status")) {
        fprintf(stderr, "ctup: unknown command '%s' (only 'status' exists so far)\n", argv[1]);
        return 2;
    }
    const char *addr = getenv("CT_ADDRESS");
    int timeout = 3000;
    for (int i = 2; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--address") && v) {
            addr = v;
            i++;
        } else if (!strcmp(argv[i], "--timeout-ms") && v && atoi(v) > 0) {
            timeout = atoi(v);
            i++;
        } else if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "ctup status: bad argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!addr || !strchr(addr, ':')) {
        fprintf(stderr, "ctup status: --address H:P is required (or CT_ADDRESS)\n");
        return 2;
    }
    return status(addr, timeout);
}
