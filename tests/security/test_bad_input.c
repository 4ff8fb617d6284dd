/* tests/security/test_bad_input.c — resources and sizes from peers are checked. A real ct-head,
 * a fake node with 4 CPUs and a driver, both raw peers. NaN, infinite, negative and huge
 * amounts, empty and repeated names, in RegisterNode, CreateActor and PgCreate bundles, each
 * get an Error naming the field (".amount" of the entry), and the node's free CPUs stay 4
 * (before: NaN passed every `< 0` check and left the node at CPU=nan; a bundle of CPU=-1000
 * added 1000 free CPUs). Also refused, naming the field: a malformed or missing job token, too
 * many bundles, a KV value or key over its limit. Valid requests still work afterwards (and
 * change the free CPUs as they should: the check can see a change). */
#include "sec.h"
#include <math.h>

/* CreateActor with one resource; the reply. */
static Ct__Envelope *create(peer *drv, const char *name, double amount)
{
    create_msg m;
    /* a valid request is placed on the fake node, which never answers: no reply then */
    return peer_call(drv, create_actor_msg(&m, "Bad", name, amount), 500);
}

/* PgCreate of nb bundles, bundle `odd` holding CPU=amount, the others CPU=1; the reply. */
static Ct__Envelope *pg_create(peer *drv, int nb, int odd, double amount)
{
    Ct__Envelope e;
    Ct__PgCreate p = CT__PG_CREATE__INIT;
    Ct__Bundle *b = calloc(nb, sizeof *b), **bp = calloc(nb, sizeof *bp);
    Ct__Resource *r = calloc(nb, sizeof *r), **rp = calloc(nb, sizeof *rp);
    const char *cpu = "CPU";
    for (int i = 0; i < nb; i++) {
        double v = i == odd ? amount : 1;
        ct__bundle__init(&b[i]);
        res_list(&r[i], &rp[i], 1, &cpu, &v);
        b[i].n_resources = 1;
        b[i].resources = &rp[i];
        bp[i] = &b[i];
    }
    ct__envelope__init(&e);
    p.n_bundles = nb;
    p.bundles = bp;
    e.body_case = CT__ENVELOPE__BODY_PG_CREATE;
    e.pg_create = &p;
    Ct__Envelope *rep = peer_call(drv, &e, 3000);
    free(b);
    free(bp);
    free(r);
    free(rp);
    return rep;
}

static Ct__Envelope *kv_put(peer *p, const char *key, size_t len)
{
    Ct__Envelope e;
    Ct__KvPut kp = CT__KV_PUT__INIT;
    void *val = calloc(1, len ? len : 1);
    ct__envelope__init(&e);
    kp.key = (char *)key;
    kp.value.data = val;
    kp.value.len = len;
    e.body_case = CT__ENVELOPE__BODY_KV_PUT;
    e.kv_put = &kp;
    Ct__Envelope *r = peer_call(p, &e, 3000);
    free(val);
    return r;
}

int main(void)
{
    h_init();
    char addr[128], n_id[32] = "";
    pid_t head = h_start_head(addr, sizeof addr, "100", "60000");
    if (head < 0)
        return 1;
    peer node, drv, reg, anon, bad;
    CHECK_OK(peer_open(&node, addr, "node", NULL));
    CHECK_OK(peer_open(&drv, addr, "drv", "job"));
    CHECK_OK(peer_open(&reg, addr, "reg", NULL));
    CHECK_OK(peer_open(&anon, addr, "anon", NULL));
    CHECK_OK(peer_open(&bad, addr, "bad", "0123456789abcdef0123456789ABCDEF"));
    if (fake_node(&node, 4, n_id, sizeof n_id))
        goto out;
    CHECK(node_amount(&drv, n_id, "CPU", 0) == 4);

    /* 1. RegisterNode: nothing registers, and the error names the entry's field */
    const char *amt = "register_node.resources[0].amount";
    CHECK_ERR(register_node(&reg, "CPU", NAN), CT_EINVAL, amt, "nan");
    CHECK_ERR(register_node(&reg, "CPU", -1), CT_EINVAL, amt, "-1");
    CHECK_ERR(register_node(&reg, "CPU", INFINITY), CT_EINVAL, amt, "inf");
    CHECK_ERR(register_node(&reg, "CPU", 1e12), CT_EINVAL, amt, "1e+12");
    CHECK_ERR(register_node(&reg, "", 1), CT_EINVAL, "register_node.resources[0].name", NULL);
    {
        Ct__Envelope e;
        Ct__RegisterNode rn = CT__REGISTER_NODE__INIT;
        Ct__Resource r[2], *rp[2];
        const char *names[2] = {"CPU", "CPU"};
        double amounts[2] = {1, 1};
        res_list(r, rp, 2, names, amounts);
        ct__envelope__init(&e);
        rn.host = "127.0.0.1";
        rn.n_resources = 2;
        rn.resources = rp;
        e.body_case = CT__ENVELOPE__BODY_REGISTER_NODE;
        e.register_node = &rn;
        CHECK_ERR(peer_call(&reg, &e, 3000), CT_EINVAL, "register_node.resources[1].name", "twice");
    }
    Ct__Envelope *st = status(&drv);
    CHECK(st && st->status_reply->n_nodes == 1);
    ct__msg_free(st);

    /* 2. CreateActor: refused, and no CPU of the node is taken (or given) */
    amt = "create_actor.resources[0].amount";
    CHECK_ERR(create(&drv, "CPU", NAN), CT_EINVAL, amt, "nan");
    CHECK_ERR(create(&drv, "CPU", -NAN), CT_EINVAL, amt, "nan");
    CHECK_ERR(create(&drv, "CPU", -1), CT_EINVAL, amt, NULL);
    CHECK_ERR(create(&drv, "CPU", -INFINITY), CT_EINVAL, amt, "inf");
    CHECK_ERR(create(&drv, "CPU", 2e9), CT_EINVAL, amt, NULL);
    CHECK(node_amount(&drv, n_id, "CPU", 0) == 4);
    CHECK(node_amount(&drv, n_id, "CPU", 1) == 4);

    /* 3. PgCreate bundles: CPU=-1000 would have added 1000 free CPUs */
    CHECK_ERR(pg_create(&drv, 1, 0, -1000), CT_EINVAL, "pg_create.bundles[0].resources[0].amount",
              "-1000");
    CHECK_ERR(pg_create(&drv, 3, 2, NAN), CT_EINVAL, "pg_create.bundles[2].resources[0].amount",
              "nan");
    CHECK_ERR(pg_create(&drv, 4097, -1, 0), CT_EINVAL, "pg_create.bundles", "4097");
    CHECK(node_amount(&drv, n_id, "CPU", 0) == 4);
    st = status(&drv);
    CHECK(st && st->status_reply->n_pgs == 0);
    ct__msg_free(st);

    /* 4. tokens: a malformed one, none where a job must be named */
    {
        Ct__Envelope e;
        Ct__Ping pg = CT__PING__INIT;
        ct__envelope__init(&e);
        e.body_case = CT__ENVELOPE__BODY_PING;
        e.ping = &pg;
        CHECK_ERR(peer_call(&bad, &e, 3000), CT_EINVAL, "token", "hex");
    }
    CHECK_ERR(create(&anon, "CPU", 1), EPERM_, "token", "job token");
    CHECK_ERR(pg_create(&anon, 1, -1, 0), EPERM_, "token", "job token");
    CHECK_ERR(kv_put(&anon, "k", 1), EPERM_, "token", "job token");
    CHECK(node_amount(&drv, n_id, "CPU", 0) == 4);

    /* 5. KV sizes */
    CHECK_ERR(kv_put(&drv, "big", (512 << 10) + 1), CT_EINVAL, "kv_put.value", "524289");
    char *longkey = malloc(5000);
    memset(longkey, 'k', 4999);
    longkey[4999] = 0;
    CHECK_ERR(kv_put(&drv, longkey, 1), CT_EINVAL, "kv_put.key", NULL);
    free(longkey);

    /* 6. valid requests still work, and the free CPUs move as they should */
    Ct__Envelope *r = pg_create(&drv, 1, -1, 0);
    CHECK(r && r->body_case == CT__ENVELOPE__BODY_PG_CREATE_REPLY);
    ct__msg_free(r);
    CHECK(node_amount(&drv, n_id, "CPU", 0) == 3); /* the bundle's CPU is reserved */
    ct__msg_free(create(&drv, "CPU", 1));
    Ct__Envelope *sa = peer_wait(&node, 0, CT__ENVELOPE__BODY_START_ACTOR, 3000);
    CHECK(sa != NULL);
    ct__msg_free(sa);
    CHECK(node_amount(&drv, n_id, "CPU", 0) == 2);
    r = kv_put(&drv, "fine", 512 << 10);
    CHECK(r && r->body_case == CT__ENVELOPE__BODY_OK);
    ct__msg_free(r);
    CHECK(ping(&reg) == 0);
out:
    peer_close(&node);
    peer_close(&drv);
    peer_close(&reg);
    peer_close(&anon);
    peer_close(&bad);
    return sec_finish("security_bad_input", head);
}
