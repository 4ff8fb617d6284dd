/* cluster/head_query.c — ctup's one question to a head: its tables (the Status message), for
 * `ctup status` and for the providers' wait until the nodes have joined.
 *
 * Not in here: printing the tables (ctup.c), starting anything (provider*.c). */
#define _GNU_SOURCE
#include <stdio.h>
#include <zmq.h>
#include "cluster/provider.h"
#include "common/auth.h"
#include "common/common.h"
#include "proto/msg.h"

int ct__cluster_query_status(const char *addr, int timeout_ms, Ct__Envelope **rep)
{
    int rc = 0;
    *rep = NULL;
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    char ep[320];
    snprintf(ep, sizeof ep, "tcp://%s", addr);
    Ct__Envelope e;
    Ct__Status st = CT__STATUS__INIT;
    if ((rc = ct__auth_zmq_client(s)))
        goto out;
    if (zmq_connect(s, ep) != 0) {
        rc = ct__error(CT_EINVAL, "--address: '%s' is not host:port (%s)", addr,
                       zmq_strerror(zmq_errno()));
        goto out;
    }
    ct__env_init(&e, 1, "ctup", timeout_ms);
    e.body_case = CT__ENVELOPE__BODY_STATUS;
    e.status = &st;
    if ((rc = ct__msg_send(s, NULL, &e, 0)))
        goto out;
    zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) <= 0) {
        rc = ct__error(CT_ETIMEDOUT,
                       "no answer from a head at %s within %d ms (is it up, and is this its "
                       "cluster's secret?)",
                       addr, timeout_ms);
        goto out;
    }
    if ((rc = ct__msg_recv(s, NULL, rep, 0, "ctup")) ||
        (rc = ct__msg_expect(*rep, CT__ENVELOPE__BODY_STATUS_REPLY, "status"))) {
        ct__msg_free(*rep);
        *rep = NULL;
    }
out:
    zmq_close(s);
    zmq_ctx_term(ctx);
    return rc;
}

int ct__cluster_alive_nodes(const char *address, int timeout_ms, const pid_t *pids, int n_pids)
{
    Ct__Envelope *rep = NULL;
    int rc = ct__cluster_query_status(address, timeout_ms, &rep);
    if (rc)
        return rc;
    Ct__StatusReply *r = rep->status_reply;
    int have = 0;
    for (size_t j = 0; j < r->n_nodes; j++) {
        bool counted = !pids;
        for (int i = 0; pids && i < n_pids && !counted; i++)
            counted = r->nodes[j]->pid == pids[i];
        have += counted && r->nodes[j]->alive;
    }
    ct__msg_free(rep);
    return have;
}
