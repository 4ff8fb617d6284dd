/* trainer/pipeline/p2p.h — point-to-point links between the stage actors of one pipeline: the
 * activations of a micro-batch go forward on them, their gradients backward.
 *
 * Each stage process listens on one TCP port (the ring's address rule: $CT_COMM_HOST, else the
 * first non-loopback IPv4 address, else 127.0.0.1), publishes "host:port" in the rendezvous under
 * "<group>/p2p/<stage>", and for every link (a, b) with a < b, a connects to b. Every connection
 * starts with the cluster's challenge-response (common/auth.h) and a hello naming the group and
 * the connecting stage, so a stray or another group's stage is refused. Messages are tensors
 * (f32, up to 8 dimensions) under a 64-bit tag; each link has a reader thread that takes every
 * message off the socket as it comes and queues it, so a send never waits for the peer's
 * matching receive (1F1B's stages send forward and backward at the same time without deadlock).
 * A receive waits for its tag. A peer that dies closes its sockets: the pending and later
 * receives fail with CT_EDEAD at once. Not thread-safe for one link except send against recv. */
#ifndef CT_PIPELINE_P2P_H
#define CT_PIPELINE_P2P_H

#include <stdint.h>

#include "ct/collective.h"
#include "ct/tensor.h"

typedef struct ct__p2p ct__p2p;

/* Opens this stage's links: to each of peers[0..npeers) (other stages of the same pipeline,
 * distinct, not me). group names the pipeline's incarnation (unique per try, as a communicator's
 * group id). Every stage of a link must call it with the other in its peers. Within timeout_ms.
 * *out owned (ct__p2p_close). */
int ct__p2p_open(const ct_rendezvous *rdv, const char *group, int me, const int *peers, int npeers,
                 int timeout_ms, ct__p2p **out);
/* Sends t (f32, any device: copied through the host) to peer under tag. */
int ct__p2p_send(ct__p2p *p, int peer, uint64_t tag, ct_tensor *t);
/* The tensor sent by peer under tag, on the CPU (caller owns it), waiting up to timeout_ms;
 * CT_EDEAD when the link broke, CT_ETIMEDOUT. */
int ct__p2p_recv(ct__p2p *p, int peer, uint64_t tag, int timeout_ms, ct_tensor **out);
/* Bytes sent and received so far over all links. */
void ct__p2p_bytes(const ct__p2p *p, uint64_t *sent, uint64_t *received);
void ct__p2p_close(ct__p2p **p);

/* A tag: the step, what travels (0 an activation, 1 its gradient, 2 a tied weight's gradient),
 * and the micro-batch. */
static inline uint64_t ct__p2p_tag(int64_t step, int kind, int micro_batch)
{
    return ((uint64_t)step << 24) | ((uint64_t)(kind & 0xff) << 16) |
           (uint64_t)(micro_batch & 0xffff);
}

#endif
