/* fuzz/make_seeds.c — writes the generated part of the seed corpus (fuzz/corpus/): packed
 * envelopes of a few message kinds as fuzz_envelope records (a driver's session, a training job's
 * reports and status), a ZMTP stream carrying a Call for
 * fuzz_zmtp, a small safetensors file for fuzz_safetensors, a node's session (head envelopes
 * and zygote records) and object orders for fuzz_node, handshake streams for fuzz_auth, and
 * data-port and ZeroMQ chunk requests for fuzz_dataport. Run by hand when ct.proto changes:
 * `build/bin/fuzz_make_seeds fuzz/corpus`. Not part of any test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor/runtime.h"
#include "common/auth.h"
#include "objectstore/crc32c.h"
#include "objectstore/xfer_data.h"
#include "proto/msg.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

static int write_out(const char *dir, const char *name, const void *b, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) {
        fprintf(stderr, "make_seeds: cannot write %s\n", path);
        if (f)
            fclose(f);
        return -1;
    }
    return fclose(f);
}

/* Appends e as one fuzz_envelope record from peer to buf at *n (capacity cap). */
static void add_record(uint8_t *buf, size_t *n, size_t cap, int peer, Ct__Envelope *e)
{
    size_t len = ct__envelope__get_packed_size(e);
    if (*n + 3 + len > cap || len > 0xFFFF)
        return;
    buf[*n] = (uint8_t)peer;
    buf[*n + 1] = (uint8_t)len;
    buf[*n + 2] = (uint8_t)(len >> 8);
    ct__envelope__pack(e, buf + *n + 3);
    *n += 3 + len;
}

/* Appends n raw bytes as one record of kind to buf at *len (capacity cap). */
static void add_raw(uint8_t *buf, size_t *len, size_t cap, int kind, const void *b, size_t n)
{
    if (*len + 3 + n > cap || n > 0xFFFF)
        return;
    buf[*len] = (uint8_t)kind;
    buf[*len + 1] = (uint8_t)n;
    buf[*len + 2] = (uint8_t)(n >> 8);
    memcpy(buf + *len + 3, b, n);
    *len += 3 + n;
}

static void env(Ct__Envelope *e, uint64_t req)
{
    ct__env_init(e, req, "driver", 0);
    e->token = TOKEN;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR (writes CORPUS_DIR/fuzz_*/gen-*)\n", argv[0]);
        return 2;
    }
    const char *root = argv[1];
    static uint8_t buf[1 << 16];
    size_t n = 0;
    int rc = 0;

    /* fuzz_envelope: a driver's session */
    Ct__Envelope e;
    Ct__Ping ping = CT__PING__INIT;
    env(&e, 1);
    e.body_case = CT__ENVELOPE__BODY_PING;
    e.ping = &ping;
    add_record(buf, &n, sizeof buf, 1, &e);
    Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
    hb.driver = 1;
    env(&e, 2);
    e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    add_record(buf, &n, sizeof buf, 1, &e);
    Ct__KvPut put = CT__KV_PUT__INIT;
    put.key = "rendezvous/0";
    put.value.data = (uint8_t *)"127.0.0.1:5000";
    put.value.len = 14;
    env(&e, 3);
    e.body_case = CT__ENVELOPE__BODY_KV_PUT;
    e.kv_put = &put;
    add_record(buf, &n, sizeof buf, 1, &e);
    Ct__KvGet get = CT__KV_GET__INIT;
    get.key = "rendezvous/0";
    env(&e, 4);
    e.body_case = CT__ENVELOPE__BODY_KV_GET;
    e.kv_get = &get;
    add_record(buf, &n, sizeof buf, 2, &e);
    Ct__Resource cpu = CT__RESOURCE__INIT, *res[1] = {&cpu};
    cpu.name = "CPU";
    cpu.amount = 1;
    Ct__Bundle b = CT__BUNDLE__INIT, *bundles[1] = {&b};
    b.n_resources = 1;
    b.resources = res;
    Ct__PgCreate pg = CT__PG_CREATE__INIT;
    pg.n_bundles = 1;
    pg.bundles = bundles;
    env(&e, 5);
    e.body_case = CT__ENVELOPE__BODY_PG_CREATE;
    e.pg_create = &pg;
    add_record(buf, &n, sizeof buf, 1, &e);
    Ct__CreateActor ca = CT__CREATE_ACTOR__INIT;
    ca.class_name = "Worker";
    ca.n_resources = 1;
    ca.resources = res;
    ca.exe_path = "/bin/true";
    ca.bundle_index = -1;
    env(&e, 6);
    e.body_case = CT__ENVELOPE__BODY_CREATE_ACTOR;
    e.create_actor = &ca;
    add_record(buf, &n, sizeof buf, 1, &e);
    Ct__Status st = CT__STATUS__INIT;
    env(&e, 7);
    e.body_case = CT__ENVELOPE__BODY_STATUS;
    e.status = &st;
    add_record(buf, &n, sizeof buf, 3, &e);
    rc |= write_out(root, "fuzz_envelope/gen-driver", buf, n);

    /* fuzz_envelope: a driver's training job reports its progress twice (a retry between:
     * the head notes it as an event), then asks for the status (its jobs' rows) */
    n = 0;
    env(&e, 1);
    e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    add_record(buf, &n, sizeof buf, 1, &e);
    Ct__TrainPoint pt[2] = {CT__TRAIN_POINT__INIT, CT__TRAIN_POINT__INIT},
                   *pts[2] = {&pt[0], &pt[1]};
    pt[0].step = 1, pt[0].loss = 2.3, pt[0].samples_per_second = 100;
    pt[1].step = 2, pt[1].loss = 2.1, pt[1].samples_per_second = 110;
    double bounds[3] = {0.01, 0.1, 1};
    uint64_t counts[3] = {1, 1, 0};
    Ct__TrainHistogram hist = CT__TRAIN_HISTOGRAM__INIT, *hists[1] = {&hist};
    hist.name = "step";
    hist.n_bounds = hist.n_counts = 3;
    hist.bounds = bounds;
    hist.counts = counts;
    hist.count = 2;
    hist.sum = 0.06;
    Ct__TrainRetries retry = CT__TRAIN_RETRIES__INIT, *retries[1] = {&retry};
    retry.reason = "node_lost";
    Ct__TrainReport tr = CT__TRAIN_REPORT__INIT;
    tr.job = "seed-job";
    tr.step = 2;
    tr.loss = 2.1;
    tr.samples_per_second = 110;
    tr.replicas_alive = 2;
    tr.n_points = 2;
    tr.points = pts;
    tr.n_histograms = 1;
    tr.histograms = hists;
    tr.epochs = 3;
    tr.eta_seconds = 10;
    tr.checkpoints = 1;
    tr.checkpoint_step = 2;
    env(&e, 0);
    e.body_case = CT__ENVELOPE__BODY_TRAIN_REPORT;
    e.train_report = &tr;
    add_record(buf, &n, sizeof buf, 1, &e);
    retry.count = 1;
    tr.n_retries = 1;
    tr.retries = retries;
    tr.step = 1; /* rewound to a checkpoint */
    tr.n_points = 1;
    add_record(buf, &n, sizeof buf, 1, &e);
    env(&e, 2);
    e.body_case = CT__ENVELOPE__BODY_STATUS;
    e.status = &st;
    add_record(buf, &n, sizeof buf, 1, &e);
    rc |= write_out(root, "fuzz_envelope/gen-train", buf, n);

    /* fuzz_envelope: a node registers, then object-directory messages */
    n = 0;
    Ct__RegisterNode rn = CT__REGISTER_NODE__INIT;
    rn.host = "127.0.0.1";
    rn.n_resources = 1;
    rn.resources = res;
    rn.pid = 1234;
    env(&e, 1);
    e.sender = "node";
    e.token = "";
    e.body_case = CT__ENVELOPE__BODY_REGISTER_NODE;
    e.register_node = &rn;
    add_record(buf, &n, sizeof buf, 9, &e);
    uint8_t oid[20] = {1, 2, 3};
    ProtobufCBinaryData ids[1] = {{sizeof oid, oid}};
    Ct__ObjLocate loc = CT__OBJ_LOCATE__INIT;
    loc.n_object_ids = 1;
    loc.object_ids = ids;
    env(&e, 2);
    e.body_case = CT__ENVELOPE__BODY_OBJ_LOCATE;
    e.obj_locate = &loc;
    add_record(buf, &n, sizeof buf, 1, &e);
    Ct__ObjFree of = CT__OBJ_FREE__INIT;
    of.object_id = ids[0];
    env(&e, 3);
    e.body_case = CT__ENVELOPE__BODY_OBJ_FREE;
    e.obj_free = &of;
    add_record(buf, &n, sizeof buf, 1, &e);
    Ct__KvDel del = CT__KV_DEL__INIT;
    del.key = "rendezvous/0";
    env(&e, 4);
    e.body_case = CT__ENVELOPE__BODY_KV_DEL;
    e.kv_del = &del;
    add_record(buf, &n, sizeof buf, 1, &e);
    rc |= write_out(root, "fuzz_envelope/gen-node", buf, n);

    /* fuzz_zmtp: greeting, READY, one Call envelope */
    n = 0;
    static const uint8_t greet[64] = {0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 0, 'N', 'U', 'L', 'L'};
    memcpy(buf, greet, sizeof greet);
    n = sizeof greet;
    static const uint8_t ready[] = {0x04, 28,  5,   'R', 'E', 'A', 'D', 'Y', 11,  'S',
                                    'o',  'c', 'k', 'e', 't', '-', 'T', 'y', 'p', 'e',
                                    0,    0,   0,   6,   'D', 'E', 'A', 'L', 'E', 'R'};
    memcpy(buf + n, ready, sizeof ready);
    n += sizeof ready;
    static const uint8_t pingcmd[] = {0x04, 9, 4, 'P', 'I', 'N', 'G', 0, 10, 'a', 'b'};
    memcpy(buf + n, pingcmd, sizeof pingcmd);
    n += sizeof pingcmd;
    Ct__Call call = CT__CALL__INIT;
    call.method = "step";
    call.args.data = (uint8_t *)"\x01\x02\x03";
    call.args.len = 3;
    env(&e, 8);
    e.body_case = CT__ENVELOPE__BODY_CALL;
    e.call = &call;
    size_t len = ct__envelope__get_packed_size(&e);
    buf[n++] = 0;
    buf[n++] = (uint8_t)len;
    ct__envelope__pack(&e, buf + n);
    n += len;
    rc |= write_out(root, "fuzz_zmtp/gen-call", buf, n);

    /* fuzz_safetensors: {"w": F32 [2], "b": I64 [1]} with metadata */
    static const char hdr[] = "{\"__metadata__\":{\"format\":\"pt\"},"
                              "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}}";
    uint64_t hl = sizeof hdr - 1;
    n = 0;
    memcpy(buf, &hl, 8);
    memcpy(buf + 8, hdr, hl);
    n = 8 + hl;
    float w[2] = {1.5f, -2};
    int64_t bias = 7;
    memcpy(buf + n, w, sizeof w);
    memcpy(buf + n + sizeof w, &bias, sizeof bias);
    n += sizeof w + sizeof bias;
    rc |= write_out(root, "fuzz_safetensors/gen-small", buf, n);

    /* fuzz_node: start two actors, the zygote reports, a kill, the job's end, the head's verdict */
    n = 0;
    char *argv_[] = {"/bin/true", "--zygote"};
    Ct__StartActor sa = CT__START_ACTOR__INIT;
    sa.actor_id = "a1";
    sa.class_name = "Worker";
    sa.exe_path = "/bin/true";
    sa.n_argv = 2;
    sa.argv = argv_;
    sa.args.data = (uint8_t *)"args";
    sa.args.len = 4;
    sa.job_token = TOKEN;
    env(&e, 1);
    e.sender = "head";
    e.body_case = CT__ENVELOPE__BODY_START_ACTOR;
    e.start_actor = &sa;
    add_record(buf, &n, sizeof buf, 0, &e);
    sa.actor_id = "a2";
    add_record(buf, &n, sizeof buf, 0, &e);
    ct__zrep zr;
    memset(&zr, 0, sizeof zr);
    snprintf(zr.actor_id, sizeof zr.actor_id, "a1");
    zr.pid = 4242;
    zr.kind = CT_ZREP_SPAWNED;
    add_raw(buf, &n, sizeof buf, 1, &zr, sizeof zr);
    zr.kind = CT_ZREP_READY;
    snprintf(zr.text, sizeof zr.text, "tcp://127.0.0.1:4000");
    add_raw(buf, &n, sizeof buf, 1, &zr, sizeof zr);
    snprintf(zr.actor_id, sizeof zr.actor_id, "a2");
    zr.kind = CT_ZREP_FAILED;
    snprintf(zr.text, sizeof zr.text, "create failed");
    add_raw(buf, &n, sizeof buf, 1, &zr, sizeof zr);
    Ct__KillActor ka = CT__KILL_ACTOR__INIT;
    ka.actor_id = "a1";
    env(&e, 2);
    e.body_case = CT__ENVELOPE__BODY_KILL_ACTOR;
    e.kill_actor = &ka;
    add_record(buf, &n, sizeof buf, 0, &e);
    Ct__JobEnded je = CT__JOB_ENDED__INIT; /* the job's zygote ends */
    je.job_token = TOKEN;
    env(&e, 2);
    e.body_case = CT__ENVELOPE__BODY_JOB_ENDED;
    e.job_ended = &je;
    add_record(buf, &n, sizeof buf, 0, &e);
    Ct__Error er = CT__ERROR__INIT;
    er.code = -1;
    er.message = "unknown node";
    er.field = "heartbeat.node_id";
    env(&e, 3);
    e.body_case = CT__ENVELOPE__BODY_ERROR;
    e.error = &er;
    add_record(buf, &n, sizeof buf, 0, &e);
    rc |= write_out(root, "fuzz_node/gen-session", buf, n);
    /* ... and the object node's orders: a pull of the held object (answered at once), one of
     * another (passes the checks), a delete */
    n = 0;
    uint8_t held[20] = {0x01}, other[20] = {0x02};
    char *holders[] = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2"};
    uint32_t ports[] = {1, 2};
    Ct__ObjPull op = CT__OBJ_PULL__INIT;
    op.object_id.data = held;
    op.object_id.len = sizeof held;
    op.n_holders = 2;
    op.holders = holders;
    op.n_data_ports = 2;
    op.data_ports = ports;
    op.size = 4;
    env(&e, 4);
    e.body_case = CT__ENVELOPE__BODY_OBJ_PULL;
    e.obj_pull = &op;
    add_record(buf, &n, sizeof buf, 0, &e);
    op.object_id.data = other;
    add_record(buf, &n, sizeof buf, 0, &e);
    Ct__ObjDelete od = CT__OBJ_DELETE__INIT;
    od.object_id.data = held;
    od.object_id.len = sizeof held;
    env(&e, 5);
    e.body_case = CT__ENVELOPE__BODY_OBJ_DELETE;
    e.obj_delete = &od;
    add_record(buf, &n, sizeof buf, 0, &e);
    rc |= write_out(root, "fuzz_node/gen-objnode", buf, n);

    /* fuzz_auth: each mode, with a greeting and a Call behind the handshake where it passes */
    static const uint8_t magic_c1[CT_AUTH_C1_LEN] = {'C', 'T', 'A', '1'};
    for (int mode = 0; mode < 5; mode++) {
        char name[64];
        n = 0;
        buf[n++] = (uint8_t)mode;
        if (mode == 0 || mode == 1) {
            memcpy(buf + n, magic_c1, sizeof magic_c1); /* a C1 with the right magic */
            n += sizeof magic_c1 + CT_AUTH_C2_LEN;
        }
        memcpy(buf + n, greet, sizeof greet);
        n += sizeof greet;
        memcpy(buf + n, ready, sizeof ready);
        n += sizeof ready;
        memcpy(buf + n, pingcmd, sizeof pingcmd);
        n += sizeof pingcmd;
        env(&e, 8);
        e.body_case = CT__ENVELOPE__BODY_CALL;
        e.call = &call;
        len = ct__envelope__get_packed_size(&e);
        buf[n++] = 0;
        buf[n++] = (uint8_t)len;
        ct__envelope__pack(&e, buf + n);
        n += len;
        snprintf(name, sizeof name, "fuzz_auth/gen-mode%d", mode);
        rc |= write_out(root, name, buf, n);
    }

    /* fuzz_dataport: data-port requests for each object (one out of range), then ZeroMQ ones */
    n = 0;
    buf[n++] = 0;
    const uint64_t ranges[4][3] = {{1, 0, 0}, {2, 10, 50}, {3, 0, 5000}, {3, 4990, 20}};
    for (int k = 0; k < 4; k++) {
        ct_xd_req rq = {CT_XD_REQ_MAGIC, 0, {(uint8_t)ranges[k][0]}, 0, ranges[k][1], ranges[k][2]};
        memcpy(buf + n, &rq, sizeof rq);
        n += sizeof rq;
    }
    rc |= write_out(root, "fuzz_dataport/gen-data-port", buf, n);
    /* an upload of 64 bytes (a new id), its chunk and trailer after the 16 requests' room */
    n = 0;
    buf[n++] = 0;
    ct_xd_req up = {CT_XD_REQ_MAGIC, CT_XD_FLAG_PUT, {0x10}, 0, 0, 64};
    memset(buf + n, 0, 16 * sizeof up);
    memcpy(buf + n, &up, sizeof up);
    n += 16 * sizeof up;
    for (int i = 0; i < 64; i++)
        buf[n + (size_t)i] = (uint8_t)(i * 3);
    uint32_t trailer[2] = {ct__crc32c(0, buf + n, 64), CT_XD_END_MAGIC};
    n += 64;
    memcpy(buf + n, trailer, sizeof trailer);
    n += sizeof trailer;
    rc |= write_out(root, "fuzz_dataport/gen-upload", buf, n);
    uint8_t oid3[20] = {3};
    Ct__ObjXfer x = CT__OBJ_XFER__INIT;
    x.major = CT_PROTO_MAJOR;
    x.minor = CT_PROTO_MINOR;
    x.req_id = 7;
    x.sender = "puller";
    Ct__ObjStat ost = CT__OBJ_STAT__INIT;
    ost.object_id.data = oid3;
    ost.object_id.len = sizeof oid3;
    x.body_case = CT__OBJ_XFER__BODY_STAT;
    x.stat = &ost;
    buf[0] = 1;
    n = 1 + ct__obj_xfer__pack(&x, buf + 1);
    rc |= write_out(root, "fuzz_dataport/gen-zmq-stat", buf, n);
    Ct__ObjChunk och = CT__OBJ_CHUNK__INIT;
    och.object_id = ost.object_id;
    och.offset = 4096;
    och.size = 4096;
    och.clip = 1;
    x.body_case = CT__OBJ_XFER__BODY_CHUNK;
    x.chunk = &och;
    n = 1 + ct__obj_xfer__pack(&x, buf + 1);
    rc |= write_out(root, "fuzz_dataport/gen-zmq-chunk", buf, n);
    buf[0] = 3; /* the same as two frames */
    rc |= write_out(root, "fuzz_dataport/gen-zmq-chunk-2frames", buf, n);
    return rc ? 1 : 0;
}
