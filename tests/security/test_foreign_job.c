/* tests/security/test_foreign_job.c — one job cannot change another's state. A real ct-head
 * and ct-node; this process is a driver (libct, its own job token) with a Counter actor, an
 * object, a placement group and KV keys (one written by the driver, one by its actor: same
 * job). Raw peers then try what the probe did: "evil" with a job token of its own, "anon" with
 * none. Each attempt is refused with an Error naming the field, and the state is unchanged:
 * - KvPut / KvDel of the job's keys (the rendezvous address keeps its value);
 * - KillActor, and ActorExited / ActorReady as if from the actor's node (the actor still
 *   answers; its address in the status is the one its node reported);
 * - ObjFree of the job's object (it is still readable);
 * - PgRemove of the job's group, and CreateActor into it (it stays READY);
 * - a heartbeat claiming the real node's id (the node still starts the job's actors).
 * The job itself still may do all of it (same token in the driver and its actors). */
#include "sec.h"
#include "../runtime/classes.h"
#include "ct/ct.h"

static Ct__Envelope *kv(peer *p, const char *key, const char *value, int del)
{
    Ct__Envelope e;
    Ct__KvPut kp = CT__KV_PUT__INIT;
    Ct__KvDel kd = CT__KV_DEL__INIT;
    ct__envelope__init(&e);
    if (del) {
        kd.key = (char *)key;
        e.body_case = CT__ENVELOPE__BODY_KV_DEL;
        e.kv_del = &kd;
    } else {
        kp.key = (char *)key;
        kp.value.data = (uint8_t *)value;
        kp.value.len = strlen(value) + 1;
        e.body_case = CT__ENVELOPE__BODY_KV_PUT;
        e.kv_put = &kp;
    }
    return peer_call(p, &e, 3000);
}

/* 0 when key holds want. */
static int kv_is(const char *key, const char *want)
{
    void *v = NULL;
    size_t n = 0;
    int rc = ct_kv_get(key, &v, &n, 1000);
    if (!rc && (n != strlen(want) + 1 || memcmp(v, want, n))) {
        fprintf(stderr, "%s holds '%.*s', want '%s'\n", key, (int)n, (char *)v, want);
        rc = -1;
    }
    free(v);
    return rc;
}

int main(void)
{
    register_test_classes();
    ct_serve_if_worker();
    h_init();
    char addr[128], st[16] = "", where[160] = "";
    pid_t head = h_start_head(addr, sizeof addr, "100", "1000");
    if (head < 0)
        return 1;
    h_start_node(addr, "--cpus", "4", NULL, NULL, NULL, NULL);
    ct_init_opts io = {.address = addr};
    ct_actor *a = NULL, *b = NULL;
    ct_placement_group *pg = NULL;
    peer evil, anon;
    CHECK_OK(peer_open(&evil, addr, "evil", "job"));
    CHECK_OK(peer_open(&anon, addr, "anon", NULL));
    CHECK_OK(ct_init(&io));
    CHECK_OK(ct_actor_create("Counter", &(ct_resources){.cpu = 1, .bundle = -1}, NULL, 0, &a));
    if (!a)
        goto out;
    const char *aid = ct_actor_id(a), *nid = ct_actor_node(a);

    /* 1. KV: a key of the driver, one of its actor; the job changes both, others neither */
    CHECK_OK(ct_kv_put("sec/rendezvous", "tcp://10.0.0.1:29500", 21));
    void *res = NULL;
    size_t n = 0;
    CHECK_OK(ct_actor_call(a, "kv", "sec/by-actor=mine", 17, &res, &n, 3000));
    free(res);
    CHECK_ERR(kv(&evil, "sec/rendezvous", "tcp://6.6.6.6:666", 0), EPERM_, "kv_put.key",
              "another job");
    CHECK_ERR(kv(&anon, "sec/rendezvous", "tcp://6.6.6.6:666", 0), EPERM_, "token", "job token");
    CHECK_ERR(kv(&evil, "sec/rendezvous", NULL, 1), EPERM_, "kv_del.key", "another job");
    CHECK_ERR(kv(&evil, "sec/by-actor", "evil", 0), EPERM_, "kv_put.key", "another job");
    CHECK_OK(kv_is("sec/rendezvous", "tcp://10.0.0.1:29500"));
    CHECK_OK(kv_is("sec/by-actor", "mine"));
    CHECK_OK(ct_kv_put("sec/by-actor", "driver", 7)); /* the actor's key is the driver's job's */
    CHECK_OK(kv_is("sec/by-actor", "driver"));
    Ct__Envelope *r = kv(&evil, "sec/evil-own", "x", 0); /* a key of its own is fine */
    CHECK(r && r->body_case == CT__ENVELOPE__BODY_OK);
    ct__msg_free(r);
    CHECK_EQ_INT(ct_kv_put("sec/evil-own", "y", 2), EPERM_); /* and the driver cannot change it */

    /* 2. the actor: killed, reported dead, its address rewritten, all by a foreign peer */
    Ct__Envelope e;
    Ct__KillActor k = CT__KILL_ACTOR__INIT;
    ct__envelope__init(&e);
    k.actor_id = (char *)aid;
    e.body_case = CT__ENVELOPE__BODY_KILL_ACTOR;
    e.kill_actor = &k;
    CHECK_ERR(peer_call(&evil, &e, 3000), EPERM_, "kill_actor.actor_id", "another job");
    Ct__ActorExited x = CT__ACTOR_EXITED__INIT;
    ct__envelope__init(&e);
    x.actor_id = (char *)aid;
    x.pid = ct_actor_pid(a);
    x.term_signal = 9;
    e.body_case = CT__ENVELOPE__BODY_ACTOR_EXITED;
    e.actor_exited = &x;
    peer_send(&evil, &e);
    CHECK_ERR(peer_wait(&evil, 0, 0, 3000), EPERM_, "actor_exited.actor_id", "hosting");
    Ct__ActorReady rd = CT__ACTOR_READY__INIT;
    ct__envelope__init(&e);
    rd.actor_id = (char *)aid;
    rd.address = "tcp://6.6.6.6:666";
    e.body_case = CT__ENVELOPE__BODY_ACTOR_READY;
    e.actor_ready = &rd;
    peer_send(&anon, &e);
    CHECK_ERR(peer_wait(&anon, 0, 0, 3000), EPERM_, "actor_ready.actor_id", "hosting");
    usleep(200000);
    CHECK_OK(counter_answers(a));
    CHECK_OK(actor_info(&anon, aid, st, where));
    CHECK_STR(st, "ALIVE");
    CHECK(strcmp(where, "tcp://6.6.6.6:666") != 0);

    /* 3. an object of the job */
    ct_object_id oid;
    CHECK_OK(ct_put("payload", 8, NULL, &oid));
    Ct__ObjFree fr = CT__OBJ_FREE__INIT;
    ct__envelope__init(&e);
    fr.object_id.data = oid.b;
    fr.object_id.len = CT_OBJECT_ID_LEN;
    e.body_case = CT__ENVELOPE__BODY_OBJ_FREE;
    e.obj_free = &fr;
    CHECK_ERR(peer_call(&evil, &e, 3000), EPERM_, "obj_free.object_id", "another job");
    CHECK_ERR(peer_call(&anon, &e, 3000), EPERM_, "token", "job token");
    ct_object_view v = {0};
    CHECK_OK(ct_get(&oid, 2000, &v));
    CHECK(v.size == 8 && v.data && !memcmp(v.data, "payload", 8));
    ct_object_release(&v);

    /* 4. a placement group of the job */
    CHECK_OK(ct_placement_group_create(&(ct_bundle){.cpu = 1}, 1, CT_PACK, &pg));
    CHECK_OK(pg ? ct_placement_group_wait(pg, 3000) : -1);
    if (pg) {
        Ct__PgRemove pr = CT__PG_REMOVE__INIT;
        ct__envelope__init(&e);
        pr.pg_id = (char *)ct_placement_group_id(pg);
        e.body_case = CT__ENVELOPE__BODY_PG_REMOVE;
        e.pg_remove = &pr;
        CHECK_ERR(peer_call(&evil, &e, 3000), EPERM_, "pg_remove.pg_id", "another job");
        Ct__CreateActor c = CT__CREATE_ACTOR__INIT;
        ct__envelope__init(&e);
        c.class_name = "Counter";
        c.exe_path = "/bin/true";
        c.pg_id = (char *)ct_placement_group_id(pg);
        c.bundle_index = -1;
        e.body_case = CT__ENVELOPE__BODY_CREATE_ACTOR;
        e.create_actor = &c;
        CHECK_ERR(peer_call(&evil, &e, 3000), EPERM_, "create_actor.pg_id", "another job");
        CHECK_OK(ct_placement_group_wait(pg, 0));
    }

    /* 5. a heartbeat claiming the real node: refused, and the node still starts actors */
    Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
    ct__envelope__init(&e);
    hb.node_id = (char *)nid;
    e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    CHECK_ERR(peer_call(&evil, &e, 3000), EPERM_, "heartbeat.node_id", "token");
    CHECK_OK(ct_actor_create("Counter", &(ct_resources){.cpu = 1, .bundle = -1}, NULL, 0, &b));
    CHECK_OK(b ? counter_answers(b) : -1);
    if (b)
        CHECK_STR(ct_actor_node(b), nid);

    /* 6. the job itself may: free, kill, remove, delete */
    CHECK_OK(ct_free(&oid));
    CHECK_OK(ct_kv_del("sec/rendezvous"));
    CHECK_OK(ct_placement_group_remove(&pg));
    CHECK_OK(ct_actor_kill(a)); /* the kill lands a moment after the head's answer */
    double until = h_now_ms() + 3000;
    while (!counter_answers(a) && h_now_ms() < until)
        usleep(10000);
    CHECK(counter_answers(a) != 0);
out:
    ct_actor_release(&a);
    ct_actor_release(&b);
    ct_shutdown();
    peer_close(&evil);
    peer_close(&anon);
    return sec_finish("security_foreign_job", head);
}
