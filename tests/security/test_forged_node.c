/* tests/security/test_forged_node.c — only node N speaks for node N. A real ct-head, and raw
 * peers: "node" registers as node N (the head gives it N's token), "drv" is a driver with a
 * job token, "evil" a second connection that claims to be N (with no token, its own job's
 * token, or a malformed one). Each claim is refused with an Error naming the field, and:
 * - N's route is unchanged: N, not evil, gets the StartActor of actors created afterwards;
 * - an actor hosted on N is reported ready, failed or exited only by N (its address and state
 *   stay what N said) and killed only by its job;
 * - the object directory takes ObjNodeInfo / ObjAdded / ObjRemoved / ObjPullDone about N only
 *   from N (a location is neither added, removed nor rerouted by evil);
 * - one node per connection. */
#include "sec.h"

/* CreateActor of 1 CPU from drv; its request id. */
static uint64_t create(peer *drv)
{
    create_msg m;
    return peer_send(drv, create_actor_msg(&m, "Forged", "CPU", 1));
}

static Ct__Envelope *heartbeat(peer *p, const char *node_id, int liveness_only)
{
    return peer_wait(p, send_heartbeat(p, node_id, liveness_only, NULL), 0, 2000);
}

static void actor_ready(peer *p, const char *actor_id, const char *address)
{
    Ct__Envelope e;
    Ct__ActorReady a = CT__ACTOR_READY__INIT;
    ct__envelope__init(&e);
    a.actor_id = (char *)actor_id;
    a.address = (char *)address;
    a.pid = 4242;
    e.body_case = CT__ENVELOPE__BODY_ACTOR_READY;
    e.actor_ready = &a;
    peer_send(p, &e);
}

static void actor_exited(peer *p, const char *actor_id)
{
    Ct__Envelope e;
    Ct__ActorExited x = CT__ACTOR_EXITED__INIT;
    ct__envelope__init(&e);
    x.actor_id = (char *)actor_id;
    x.pid = 4242;
    x.term_signal = 9;
    e.body_case = CT__ENVELOPE__BODY_ACTOR_EXITED;
    e.actor_exited = &x;
    peer_send(p, &e);
}

static void start_failed(peer *p, const char *actor_id)
{
    Ct__Envelope e;
    Ct__StartFailed f = CT__START_FAILED__INIT;
    ct__envelope__init(&e);
    f.actor_id = (char *)actor_id;
    f.reason = "forged";
    e.body_case = CT__ENVELOPE__BODY_START_FAILED;
    e.start_failed = &f;
    peer_send(p, &e);
}

static void kill_actor(peer *p, const char *actor_id)
{
    Ct__Envelope e;
    Ct__KillActor k = CT__KILL_ACTOR__INIT;
    ct__envelope__init(&e);
    k.actor_id = (char *)actor_id;
    e.body_case = CT__ENVELOPE__BODY_KILL_ACTOR;
    e.kill_actor = &k;
    peer_send(p, &e);
}

static void node_info(peer *p, const char *node_id, const char *xfer)
{
    Ct__Envelope e;
    Ct__ObjNodeInfo ni = CT__OBJ_NODE_INFO__INIT;
    ct__envelope__init(&e);
    ni.node_id = (char *)node_id;
    ni.store_name = "node.forged";
    ni.xfer_address = (char *)xfer;
    ni.memory_cap = 1 << 20;
    ni.host = "127.0.0.1";
    e.body_case = CT__ENVELOPE__BODY_OBJ_NODE_INFO;
    e.obj_node_info = &ni;
    peer_send(p, &e);
}

static void obj_added(peer *p, const char *node_id, uint8_t *oid)
{
    Ct__Envelope e;
    Ct__ObjAdded a = CT__OBJ_ADDED__INIT;
    ct__envelope__init(&e);
    a.node_id = (char *)node_id;
    a.object_id.data = oid;
    a.object_id.len = 20;
    a.size = 100;
    e.body_case = CT__ENVELOPE__BODY_OBJ_ADDED;
    e.obj_added = &a;
    peer_send(p, &e);
}

static void obj_removed(peer *p, const char *node_id, uint8_t *oid)
{
    Ct__Envelope e;
    Ct__ObjRemoved r = CT__OBJ_REMOVED__INIT;
    ct__envelope__init(&e);
    r.node_id = (char *)node_id;
    r.object_id.data = oid;
    r.object_id.len = 20;
    e.body_case = CT__ENVELOPE__BODY_OBJ_REMOVED;
    e.obj_removed = &r;
    peer_send(p, &e);
}

static void pull_done(peer *p, const char *node_id, uint8_t *oid)
{
    Ct__Envelope e;
    Ct__ObjPullDone d = CT__OBJ_PULL_DONE__INIT;
    ct__envelope__init(&e);
    d.node_id = (char *)node_id;
    d.object_id.data = oid;
    d.object_id.len = 20;
    d.size = 100;
    e.body_case = CT__ENVELOPE__BODY_OBJ_PULL_DONE;
    e.obj_pull_done = &d;
    peer_send(p, &e);
}

/* Where the directory says oid is: 1 and its first holder's node id / address, 0 unknown. */
static int locate(peer *p, uint8_t *oid, char *node, char *addr)
{
    Ct__Envelope e;
    Ct__ObjLocate l = CT__OBJ_LOCATE__INIT;
    ProtobufCBinaryData b = {20, oid};
    ct__envelope__init(&e);
    l.n_object_ids = 1;
    l.object_ids = &b;
    e.body_case = CT__ENVELOPE__BODY_OBJ_LOCATE;
    e.obj_locate = &l;
    Ct__Envelope *r = peer_call(p, &e, 3000);
    int found = -1;
    if (r && r->body_case == CT__ENVELOPE__BODY_OBJ_LOCATE_REPLY &&
        r->obj_locate_reply->n_objects == 1) {
        Ct__ObjLocation *o = r->obj_locate_reply->objects[0];
        found = o->found && o->n_node_ids > 0;
        if (found) {
            snprintf(node, 32, "%s", o->node_ids[0]);
            snprintf(addr, 160, "%s", o->n_addresses ? o->addresses[0] : "");
        }
    }
    ct__msg_free(r);
    return found;
}

int main(void)
{
    h_init();
    char addr[128], n_id[32] = "", actor[32] = "", state[16] = "", where[160] = "";
    char hn[32] = "", ha[160] = "";
    /* the fake node never heartbeats: it must not be declared dead while the test runs */
    pid_t head = h_start_head(addr, sizeof addr, "100", "60000");
    if (head < 0)
        return 1;
    peer node, drv, evil, bad;
    CHECK_OK(peer_open(&node, addr, "node", NULL));
    CHECK_OK(peer_open(&drv, addr, "drv", "job"));
    CHECK_OK(peer_open(&evil, addr, "evil", "job"));
    CHECK_OK(peer_open(&bad, addr, "bad", "not-a-token"));
    if (fake_node(&node, 4, n_id, sizeof n_id))
        goto out;
    CHECK_EQ_INT(ct__token_valid(node.token), 1);

    /* 1. heartbeats claiming N from another connection: no token, a job's token, liveness
     *    only, a malformed token; and a second registration on N's connection */
    char mine[CT_TOKEN_LEN + 1];
    snprintf(mine, sizeof mine, "%s", evil.token);
    evil.token[0] = 0;
    CHECK_ERR(heartbeat(&evil, n_id, 0), EPERM_, "heartbeat.node_id", "token");
    snprintf(evil.token, sizeof evil.token, "%s", mine);
    CHECK_ERR(heartbeat(&evil, n_id, 0), EPERM_, "heartbeat.node_id", "token");
    CHECK_ERR(heartbeat(&evil, n_id, 1), EPERM_, "heartbeat.node_id", "token");
    CHECK_ERR(heartbeat(&bad, n_id, 0), CT_EINVAL, "token", "hex");
    CHECK_ERR(register_node(&node, "CPU", 4), CT_EEXIST, "register_node", n_id);

    /* 2. N's route is unchanged: N gets the actor, evil nothing */
    uint64_t creq = create(&drv);
    Ct__Envelope *sa = peer_wait(&node, 0, CT__ENVELOPE__BODY_START_ACTOR, 3000);
    CHECK(sa != NULL);
    if (sa) {
        snprintf(actor, sizeof actor, "%s", sa->start_actor->actor_id);
        CHECK_STR(sa->start_actor->job_token, drv.token); /* the actor's job: its creator's */
    }
    ct__msg_free(sa);
    CHECK_NOTHING(&evil, CT__ENVELOPE__BODY_START_ACTOR, 200);
    CHECK(node_amount(&drv, n_id, "CPU", 0) == 3);

    /* 3. evil reports it ready (its own address), failed, exited; evil kills it */
    actor_ready(&evil, actor, "tcp://6.6.6.6:666");
    CHECK_ERR(peer_wait(&evil, 0, 0, 2000), EPERM_, "actor_ready.actor_id", "hosting");
    CHECK_NOTHING(&drv, CT__ENVELOPE__BODY_CREATE_ACTOR_REPLY, 200);
    actor_ready(&node, actor, "tcp://127.0.0.1:5555"); /* N's own report */
    Ct__Envelope *cr = peer_wait(&drv, creq, 0, 3000);
    CHECK(cr && cr->body_case == CT__ENVELOPE__BODY_CREATE_ACTOR_REPLY);
    if (cr && cr->body_case == CT__ENVELOPE__BODY_CREATE_ACTOR_REPLY) {
        CHECK_STR(cr->create_actor_reply->address, "tcp://127.0.0.1:5555");
        CHECK_STR(cr->create_actor_reply->node_id, n_id);
    }
    ct__msg_free(cr);
    actor_ready(&evil, actor, "tcp://6.6.6.6:666"); /* rewriting the address of a live actor */
    CHECK_ERR(peer_wait(&evil, 0, 0, 2000), EPERM_, "actor_ready.actor_id", "hosting");
    actor_exited(&evil, actor);
    CHECK_ERR(peer_wait(&evil, 0, 0, 2000), EPERM_, "actor_exited.actor_id", "hosting");
    start_failed(&evil, actor);
    CHECK_ERR(peer_wait(&evil, 0, 0, 2000), EPERM_, "start_failed.actor_id", "hosting");
    kill_actor(&evil, actor);
    CHECK_ERR(peer_wait(&evil, 0, 0, 2000), EPERM_, "kill_actor.actor_id", "another job");
    CHECK_NOTHING(&node, CT__ENVELOPE__BODY_KILL_ACTOR, 200);
    CHECK_OK(actor_info(&drv, actor, state, where));
    CHECK_STR(state, "ALIVE");
    CHECK_STR(where, "tcp://127.0.0.1:5555");
    CHECK(node_amount(&drv, n_id, "CPU", 0) == 3); /* its CPU was not freed */

    /* 4. the object directory: N's shard, then evil's reports about N */
    uint8_t x[20], y[20];
    memset(x, 0xAA, sizeof x);
    memset(y, 0xBB, sizeof y);
    node_info(&node, n_id, "tcp://127.0.0.1:7777");
    obj_added(&evil, n_id, x);
    CHECK_ERR(peer_wait(&evil, 0, 0, 2000), EPERM_, "obj_added.node_id", "token");
    CHECK_EQ_INT(locate(&drv, x, hn, ha), 0);
    obj_added(&node, n_id, x); /* N's own report */
    CHECK(ping(&node) == 0);   /* handled once the ping behind it (same connection) is */
    CHECK_EQ_INT(locate(&drv, x, hn, ha), 1);
    CHECK_STR(hn, n_id);
    obj_removed(&evil, n_id, x);
    CHECK_ERR(peer_wait(&evil, 0, 0, 2000), EPERM_, "obj_removed.node_id", "token");
    CHECK_EQ_INT(locate(&drv, x, hn, ha), 1);
    pull_done(&evil, n_id, y);
    CHECK_ERR(peer_wait(&evil, 0, 0, 2000), EPERM_, "obj_pull_done.node_id", "token");
    CHECK_EQ_INT(locate(&drv, y, hn, ha), 0);
    pull_done(&node, n_id, y);
    CHECK(ping(&node) == 0);
    CHECK_EQ_INT(locate(&drv, y, hn, ha), 1);
    node_info(&evil, n_id, "tcp://6.6.6.6:666"); /* rerouting pulls of N's objects */
    CHECK_ERR(peer_wait(&evil, 0, 0, 2000), EPERM_, "obj_node_info.node_id", "token");
    CHECK_EQ_INT(locate(&drv, x, hn, ha), 1);
    CHECK_STR(ha, "tcp://127.0.0.1:7777");
    obj_removed(&node, n_id, x); /* N's own report */
    CHECK(ping(&node) == 0);
    CHECK_EQ_INT(locate(&drv, x, hn, ha), 0);

    /* 5. after all that, N still gets the actors */
    create(&drv);
    sa = peer_wait(&node, 0, CT__ENVELOPE__BODY_START_ACTOR, 3000);
    CHECK(sa != NULL);
    ct__msg_free(sa);
    CHECK_NOTHING(&evil, CT__ENVELOPE__BODY_START_ACTOR, 200);
    CHECK(ping(&evil) == 0);
out:
    peer_close(&node);
    peer_close(&drv);
    peer_close(&evil);
    peer_close(&bad);
    return sec_finish("security_forged_node", head);
}
