/* trainer/cpu/dnnl.c — the only file that calls oneDNN (2.x C API, dnnl.h).
 *
 * Each kernel builds a key (op kind + every shape number), looks it up in a hash-table cache,
 * and on a miss creates the primitive descriptor (backward ones with a forward pd as hint),
 * the primitive and one dnnl_memory per argument (created with no data; pointers are set per
 * call). Convolutions let oneDNN choose their layouts (format_tag_any): the entry then owns an
 * internal buffer and a reorder for each argument whose layout differs from the caller's, and
 * reorders in/out around the primitive.
 *
 * Activation layout. The blocked layout a convolution picks depends on the ISA (nChw16c with
 * AVX-512, nChw8c with AVX2), and oneDNN has JIT batch norm and pooling kernels only for the
 * layout of its own ISA: on another it falls back to reference kernels, 7-30x slower. So the
 * layout is not fixed here: detect_blocked_fmt() asks a convolution which one it picks and
 * keeps it when batch norm and pooling have JIT kernels for it, else activations stay plain.
 * Every primitive's implementation name is kept (ct__cpu_each_impl) so tests can assert that
 * no reference kernel runs in a training step.
 *
 * Not here: autograd bookkeeping (trainer/nn/ops.c), C-loop kernels (loops.c). */
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <oneapi/dnnl/dnnl_version.h>

#include "common/common.h"
#include "trainer/cpu/cpu.h"

enum {
    K_CONV_FWD = 1,
    K_CONV_BWD_D,
    K_CONV_BWD_W,
    K_IP_FWD,
    K_IP_BWD_D,
    K_IP_BWD_W,
    K_MATMUL,
    K_MATMUL_LP,
    K_BN_FWD_TRAIN,
    K_BN_FWD_INFER,
    K_BN_BWD,
    K_POOL_FWD,
    K_POOL_BWD,
    K_ELT_FWD,
    K_ELT_BWD,
    K_SM_FWD,
    K_SM_BWD,
    K_REORDER,
};

typedef struct key {
    int kind;
    int pad_;
    int64_t v[20];
    float f[2];
} key;

#define MAX_ARGS 10
typedef struct arg {
    int id;
    int out;
    dnnl_memory_t user;       /* caller's layout, handle set per call */
    dnnl_memory_t inner;      /* primitive's layout when it differs (owns a buffer), or NULL */
    dnnl_primitive_t reorder; /* user->inner for inputs, inner->user for outputs */
} arg;

typedef struct entry {
    key k;
    uint64_t hash;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    int nargs;
    arg a[MAX_ARGS];
    size_t ws_bytes;
    const char *impl; /* oneDNN's implementation name, owned by pd */
    int single;       /* small problem: create and run on one thread (fork/join costs more) */
    /* The primitive's own scratchpad (NULL: it needs none). oneDNN's ("library" mode) is per
     * thread and sized in the thread that created the primitive: one created on one thread
     * and run on another (the checking device's workers run the CPU's kernels) read past it. */
    dnnl_memory_t scratch;
    struct entry *next;
} entry;

/* Below this many multiply-adds (or element operations) a primitive runs single-threaded. */
#define SMALL_WORK (1 << 20)

#define NBUCKETS 512
static struct {
    pthread_mutex_t mu;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    entry *buckets[NBUCKETS];
    int64_t created;
    int blocked_fmt; /* CT__FMT_*, -1 before detect_blocked_fmt */
} G = {.mu = PTHREAD_MUTEX_INITIALIZER, .blocked_fmt = -1};

#define DN(call)                                                                                   \
    do {                                                                                           \
        dnnl_status_t st_ = (call);                                                                \
        if (st_ != dnnl_success) {                                                                 \
            rc = ct__error(CT_EDNNL, "oneDNN %s failed (status %d) at %s:%d", #call, (int)st_,     \
                           __FILE__, __LINE__);                                                    \
            goto err;                                                                              \
        }                                                                                          \
    } while (0)

/* Word-wise (a key is 22 words, built zeroed by designated initialisers): one hash per
 * primitive call, so its cost counts for small layers, where byte-wise FNV took 0.25 us. */
_Static_assert(sizeof(key) % sizeof(uint64_t) == 0, "key is hashed by 64-bit words");
static uint64_t key_hash(const key *k)
{
    uint64_t w[sizeof(*k) / sizeof(uint64_t)], h = 1469598103934665603ULL;
    memcpy(w, k, sizeof w);
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        h = (h ^ w[i]) * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 32); /* the bucket index takes the low bits */
}

static const char *pd_impl(const_dnnl_primitive_desc_t pd)
{
    const char *s = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s)
        return "?";
    return s;
}

bool ct__cpu_impl_is_ref(const char *impl)
{
    /* "ref:any", "bnorm_ref:any", "gemm:ref": a token "ref" between ':' and '_' separators */
    for (const char *p = impl; (p = strstr(p, "ref")) != NULL; p += 3) {
        bool start = p == impl || p[-1] == ':' || p[-1] == '_';
        bool end = p[3] == '\0' || p[3] == ':' || p[3] == '_';
        if (start && end)
            return true;
    }
    return false;
}

/* Creates op_desc's primitive descriptor (hint may be NULL) and tells whether its
 * implementation is a JIT one, i.e. not a reference kernel. */
static bool pd_is_fast(const void *op_desc, const_dnnl_primitive_desc_t hint,
                       dnnl_primitive_desc_t *out)
{
    *out = NULL;
    if (dnnl_primitive_desc_create(out, op_desc, NULL, G.engine, hint) != dnnl_success)
        return false;
    return !ct__cpu_impl_is_ref(pd_impl(*out));
}

/* See the file comment. The probe is a 3x3 convolution to 32 channels; the blocked layout is
 * kept only if training batch norm (fused ReLU) and max pooling, forward and backward, have
 * fast kernels for it. */
static int detect_blocked_fmt(void)
{
    /* CT_DNNL_BLOCKED=0 keeps activations plain; =8 or =16 forces that block (to measure) */
    const char *env = getenv("CT_DNNL_BLOCKED");
    if (env && (atoi(env) == 0 || atoi(env) == CT__FMT_BLK8 || atoi(env) == CT__FMT_BLK16))
        return atoi(env);
    int fmt = CT__FMT_PLAIN;
    dnnl_primitive_desc_t conv = NULL, bnf = NULL, bnb = NULL, plf = NULL, plb = NULL;
    dnnl_dims_t act = {2, 32, 8, 8}, wei = {32, 32, 3, 3}, pooled = {2, 32, 4, 4};
    dnnl_dims_t one = {1, 1}, two = {2, 2}, pad1 = {1, 1}, pad0 = {0, 0};
    dnnl_memory_desc_t src_any, wei_any, dst_any;
    dnnl_memory_desc_init_by_tag(&src_any, 4, act, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wei_any, 4, wei, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&dst_any, 4, act, dnnl_f32, dnnl_format_tag_any);
    dnnl_convolution_desc_t cd;
    if (dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct,
                                           &src_any, &wei_any, NULL, &dst_any, one, pad1,
                                           pad1) != dnnl_success ||
        dnnl_primitive_desc_create(&conv, &cd, NULL, G.engine, NULL) != dnnl_success)
        goto out;
    const dnnl_memory_desc_t *dst = dnnl_primitive_desc_query_md(conv, dnnl_query_dst_md, 0);
    const dnnl_blocking_desc_t *b = &dst->format_desc.blocking;
    if (dst->format_kind != dnnl_blocked || b->inner_nblks != 1 || b->inner_idxs[0] != 1 ||
        (b->inner_blks[0] != CT__FMT_BLK8 && b->inner_blks[0] != CT__FMT_BLK16))
        goto out;
    int cand = (int)b->inner_blks[0];
    dnnl_memory_desc_t data, small;
    dnnl_memory_desc_init_by_tag(&data, 4, act, dnnl_f32,
                                 cand == CT__FMT_BLK16 ? dnnl_nChw16c : dnnl_nChw8c);
    dnnl_memory_desc_init_by_tag(&small, 4, pooled, dnnl_f32,
                                 cand == CT__FMT_BLK16 ? dnnl_nChw16c : dnnl_nChw8c);
    unsigned flags = dnnl_use_scale | dnnl_use_shift | dnnl_fuse_norm_relu;
    dnnl_batch_normalization_desc_t bf, bb;
    dnnl_pooling_v2_desc_t pf, pb;
    dnnl_dims_t nodil = {0, 0};
    if (dnnl_batch_normalization_forward_desc_init(&bf, dnnl_forward_training, &data, 1e-5f,
                                                   flags) != dnnl_success ||
        !pd_is_fast(&bf, NULL, &bnf) ||
        dnnl_batch_normalization_backward_desc_init(&bb, dnnl_backward, &data, &data, 1e-5f,
                                                    flags) != dnnl_success ||
        !pd_is_fast(&bb, bnf, &bnb))
        goto out;
    if (dnnl_pooling_v2_forward_desc_init(&pf, dnnl_forward_training, dnnl_pooling_max, &data,
                                          &small, two, two, nodil, pad0, pad0) != dnnl_success ||
        !pd_is_fast(&pf, NULL, &plf) ||
        dnnl_pooling_v2_backward_desc_init(&pb, dnnl_pooling_max, &data, &small, two, two, nodil,
                                           pad0, pad0) != dnnl_success ||
        !pd_is_fast(&pb, plf, &plb))
        goto out;
    fmt = cand;
out:
    if (fmt == CT__FMT_PLAIN)
        CT_LOG(CT_LOG_DEBUG, "dnnl", "activations stay plain NCHW (no fast blocked kernels)");
    dnnl_primitive_desc_t all[] = {conv, bnf, bnb, plf, plb};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i])
            dnnl_primitive_desc_destroy(all[i]);
    return fmt;
}

static int ensure_engine(void)
{
    int rc = 0;
    if (G.engine)
        return 0;
    DN(dnnl_engine_create(&G.engine, dnnl_cpu, 0));
    DN(dnnl_stream_create(&G.stream, G.engine, dnnl_stream_default_flags));
    if (G.blocked_fmt < 0)
        G.blocked_fmt = detect_blocked_fmt();
    return 0;
err:
    return rc;
}

static void entry_free(entry *e)
{
    if (!e)
        return;
    for (int i = 0; i < e->nargs; i++) {
        if (e->a[i].reorder)
            dnnl_primitive_destroy(e->a[i].reorder);
        if (e->a[i].inner)
            dnnl_memory_destroy(e->a[i].inner);
        if (e->a[i].user)
            dnnl_memory_destroy(e->a[i].user);
    }
    if (e->scratch)
        dnnl_memory_destroy(e->scratch);
    if (e->prim)
        dnnl_primitive_destroy(e->prim);
    if (e->pd)
        dnnl_primitive_desc_destroy(e->pd);
    free(e);
}

static entry *lookup(const key *k, uint64_t *hash)
{
    uint64_t h = key_hash(k);
    *hash = h;
    for (entry *e = G.buckets[h % NBUCKETS]; e; e = e->next)
        if (e->hash == h && memcmp(&e->k, k, sizeof(*k)) == 0)
            return e;
    return NULL;
}

static void insert(entry *e)
{
    entry **b = &G.buckets[e->hash % NBUCKETS];
    e->next = *b;
    *b = e;
    G.created++;
}

/* Argument spec for entry_make: md NULL means "use the primitive's own md" (workspace, stats). */
typedef struct aspec {
    int id;
    const dnnl_memory_desc_t *md;
    int out;
} aspec;

/* Creates pd from op_desc, the primitive and the argument memories. Takes nothing; on failure
 * everything created here is freed. */
static int entry_make(entry **out, const key *k, uint64_t hash, const void *op_desc,
                      const_dnnl_primitive_attr_t attr, const_dnnl_primitive_desc_t hint, int nargs,
                      const aspec *as, int64_t work)
{
    int rc = 0, prev_thr = omp_get_max_threads();
    dnnl_primitive_attr_t user_attr = NULL; /* attr, with the scratchpad ours (G.scratch) */
    entry *e = calloc(1, sizeof(*e));
    if (!e)
        return ct__error(CT_ENOMEM, "dnnl: out of memory");
    e->k = *k;
    e->hash = hash;
    e->single = work < SMALL_WORK && prev_thr > 1;
    if (e->single)
        omp_set_num_threads(1);
    if (attr)
        DN(dnnl_primitive_attr_clone(&user_attr, attr));
    else
        DN(dnnl_primitive_attr_create(&user_attr));
    DN(dnnl_primitive_attr_set_scratchpad_mode(user_attr, dnnl_scratchpad_mode_user));
    DN(dnnl_primitive_desc_create(&e->pd, op_desc, user_attr, G.engine, hint));
    DN(dnnl_primitive_create(&e->prim, e->pd));
    const dnnl_memory_desc_t *smd =
        dnnl_primitive_desc_query_md(e->pd, dnnl_query_scratchpad_md, 0);
    size_t sbytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (sbytes)
        DN(dnnl_memory_create(&e->scratch, smd, G.engine, DNNL_MEMORY_ALLOCATE));
    e->impl = pd_impl(e->pd);
    for (int i = 0; i < nargs; i++) {
        arg *a = &e->a[e->nargs++];
        a->id = as[i].id;
        a->out = as[i].out;
        const dnnl_memory_desc_t *pmd =
            dnnl_primitive_desc_query_md(e->pd, dnnl_query_exec_arg_md, as[i].id);
        if (!pmd) {
            rc = ct__error(CT_EDNNL, "dnnl: no memory desc for argument %d", as[i].id);
            goto err;
        }
        if (as[i].id == DNNL_ARG_WORKSPACE)
            e->ws_bytes = dnnl_memory_desc_get_size(pmd);
        const dnnl_memory_desc_t *umd = as[i].md ? as[i].md : pmd;
        DN(dnnl_memory_create(&a->user, umd, G.engine, DNNL_MEMORY_NONE));
        if (as[i].md && !dnnl_memory_desc_equal(umd, pmd)) {
            dnnl_primitive_desc_t rpd = NULL;
            DN(dnnl_memory_create(&a->inner, pmd, G.engine, DNNL_MEMORY_ALLOCATE));
            if (a->out)
                DN(dnnl_reorder_primitive_desc_create(&rpd, pmd, G.engine, umd, G.engine, NULL));
            else
                DN(dnnl_reorder_primitive_desc_create(&rpd, umd, G.engine, pmd, G.engine, NULL));
            dnnl_status_t st = dnnl_primitive_create(&a->reorder, rpd);
            dnnl_primitive_desc_destroy(rpd);
            DN(st);
        }
    }
    if (e->single)
        omp_set_num_threads(prev_thr);
    dnnl_primitive_attr_destroy(user_attr);
    *out = e;
    return 0;
err:
    if (e->single)
        omp_set_num_threads(prev_thr);
    if (user_attr)
        dnnl_primitive_attr_destroy(user_attr);
    entry_free(e);
    return rc;
}

/* Runs e with ptrs[i] as the data of argument i. Caller holds G.mu. */
static int entry_run(entry *e, void *const *ptrs)
{
    int rc = 0, prev_thr = 0;
    if (e->single) {
        prev_thr = omp_get_max_threads();
        omp_set_num_threads(1);
    }
    dnnl_exec_arg_t args[MAX_ARGS + 1];
    for (int i = 0; i < e->nargs; i++) {
        arg *a = &e->a[i];
        DN(dnnl_memory_set_data_handle_v2(a->user, ptrs[i], G.stream));
        if (a->reorder && !a->out) {
            dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, a->user}, {DNNL_ARG_TO, a->inner}};
            DN(dnnl_primitive_execute(a->reorder, G.stream, 2, ra));
        }
        args[i].arg = a->id;
        args[i].memory = a->inner ? a->inner : a->user;
    }
    int nargs = e->nargs;
    if (e->scratch)
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch};
    DN(dnnl_primitive_execute(e->prim, G.stream, nargs, args));
    for (int i = 0; i < e->nargs; i++) {
        arg *a = &e->a[i];
        if (a->reorder && a->out) {
            dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, a->inner}, {DNNL_ARG_TO, a->user}};
            DN(dnnl_primitive_execute(a->reorder, G.stream, 2, ra));
        }
    }
    DN(dnnl_stream_wait(G.stream));
err:
    if (e->single)
        omp_set_num_threads(prev_thr);
    return rc;
}

static dnnl_memory_desc_t md_tag_dt(int nd, const int64_t *dims, dnnl_format_tag_t tag,
                                    dnnl_data_type_t dt)
{
    dnnl_memory_desc_t md;
    dnnl_dims_t d;
    for (int i = 0; i < nd; i++)
        d[i] = dims[i];
    dnnl_memory_desc_init_by_tag(&md, nd, d, dt, tag);
    return md;
}

static dnnl_memory_desc_t md_tag(int nd, const int64_t *dims, dnnl_format_tag_t tag)
{
    return md_tag_dt(nd, dims, tag, dnnl_f32);
}

/* ---------------- autocast (low precision) ---------------- */

/* oneDNN's type for an autocast dtype; f32 otherwise */
static dnnl_data_type_t lp_type(int dt)
{
    return dt == CT_BF16 ? dnnl_bf16 : dt == CT_F16 ? dnnl_f16 : dnnl_f32;
}

static const char *isa_name(unsigned isa)
{
    static const struct {
        unsigned v;
        const char *name;
    } t[] = {{dnnl_cpu_isa_avx512_core_amx, "AMX"},
             {dnnl_cpu_isa_avx512_core_bf16, "AVX512_BF16"},
             {dnnl_cpu_isa_avx512_core_vnni, "AVX512_VNNI"},
             {dnnl_cpu_isa_avx512_core, "AVX512"},
             {dnnl_cpu_isa_avx2_vnni, "AVX2_VNNI"},
             {dnnl_cpu_isa_avx2, "AVX2"},
             {dnnl_cpu_isa_avx, "AVX"},
             {dnnl_cpu_isa_sse41, "SSE4.1"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if ((isa & t[i].v) == t[i].v)
            return t[i].name;
    return "none";
}

/* Kernels in bf16 need AVX512_BF16 or AMX (oneDNN's effective ISA, which counts the CPU's
 * flags, the OS's register state and DNNL_MAX_CPU_ISA; on older CPUs oneDNN would emulate bf16
 * on AVX-512 or fall back to reference kernels, both far slower than f32). oneDNN 2.x has no
 * f16 kernels for CPUs at all. */
int ct__cpu_lp_check(int dt, const char *op)
{
    if (dt == CT_F32)
        return 0;
    if (dt == CT_BF16) {
        unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
        unsigned need = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
        if ((isa & need) == need)
            return 0;
        return ct__error(CT_ENOSYS,
                         "%s in bf16 is not available on device cpu: this CPU lacks AVX512_BF16 "
                         "and AMX-BF16 (oneDNN's effective ISA is %s); use the f32 precision, a "
                         "GPU, or a CPU with bf16",
                         op, isa_name(isa));
    }
    if (dt == CT_F16)
        return ct__error(CT_ENOSYS,
                         "%s in f16 is not available on device cpu: oneDNN %d.%d has no f16 CPU "
                         "kernels (f16 needs AVX512_FP16, which it does not use); use bf16 or f32",
                         op, DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR);
    return ct__error(CT_EINVAL, "%s: precision %d is not an autocast dtype", op, dt);
}

static dnnl_format_tag_t plain_tag(int nd)
{
    static const dnnl_format_tag_t t[] = {
        dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd, dnnl_abcde};
    return t[nd];
}

static dnnl_memory_desc_t md_plain(int nd, const int64_t *dims)
{
    return md_tag(nd, dims, plain_tag(nd));
}

/* (n,c,h,w) activation in layout fmt. */
static dnnl_memory_desc_t md_act(const int64_t *dims, int fmt)
{
    return md_tag(4, dims,
                  fmt == CT__FMT_BLK16  ? dnnl_nChw16c
                  : fmt == CT__FMT_BLK8 ? dnnl_nChw8c
                                        : dnnl_nchw);
}

int ct__cpu_blocked_fmt(void)
{
    pthread_mutex_lock(&G.mu);
    int fmt = ensure_engine() == 0 ? G.blocked_fmt : CT__FMT_PLAIN;
    pthread_mutex_unlock(&G.mu);
    return fmt;
}

int ct__cpu_each_impl(void (*fn)(const char *op, const char *impl, void *arg), void *arg)
{
    int n = 0;
    pthread_mutex_lock(&G.mu);
    for (int i = 0; i < NBUCKETS; i++)
        for (entry *e = G.buckets[i]; e; e = e->next, n++) {
            dnnl_primitive_kind_t kind = dnnl_undefined_primitive;
            dnnl_primitive_desc_query(e->pd, dnnl_query_primitive_kind, 0, &kind);
            fn(dnnl_prim_kind2str(kind), e->impl, arg);
            for (int a = 0; a < e->nargs; a++) /* the layout reorders around the primitive */
                if (e->a[a].reorder) {
                    const_dnnl_primitive_desc_t rpd = NULL;
                    dnnl_primitive_get_primitive_desc(e->a[a].reorder, &rpd);
                    fn("reorder", rpd ? pd_impl(rpd) : "?", arg);
                }
        }
    pthread_mutex_unlock(&G.mu);
    return n;
}

int ct__cpu_reorder(int64_t n, int64_t c, int64_t h, int64_t w, const float *src, int sfmt,
                    float *dst, int dfmt)
{
    int rc = 0;
    key k = {.kind = K_REORDER, .v = {n, c, h, w, sfmt, dfmt}};
    uint64_t hh;
    dnnl_primitive_desc_t rpd = NULL;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0)
        goto err;
    entry *e = lookup(&k, &hh);
    if (!e) {
        int64_t dims[4] = {n, c, h, w};
        dnnl_memory_desc_t sm = md_act(dims, sfmt), dm = md_act(dims, dfmt);
        e = calloc(1, sizeof(*e));
        if (!e) {
            rc = ct__error(CT_ENOMEM, "dnnl: out of memory");
            goto err;
        }
        e->k = k;
        e->hash = hh;
        e->nargs = 2;
        e->single = n * c * h * w < SMALL_WORK / 8 && omp_get_max_threads() > 1;
        e->a[0].id = DNNL_ARG_FROM;
        e->a[1].id = DNNL_ARG_TO;
        e->a[1].out = 1;
        if (dnnl_reorder_primitive_desc_create(&rpd, &sm, G.engine, &dm, G.engine, NULL) !=
                dnnl_success ||
            dnnl_primitive_create(&e->prim, rpd) != dnnl_success ||
            dnnl_memory_create(&e->a[0].user, &sm, G.engine, DNNL_MEMORY_NONE) != dnnl_success ||
            dnnl_memory_create(&e->a[1].user, &dm, G.engine, DNNL_MEMORY_NONE) != dnnl_success) {
            entry_free(e);
            rc = ct__error(CT_EDNNL, "dnnl: creating a reorder from layout %d to %d failed", sfmt,
                           dfmt);
            goto err;
        }
        e->pd = rpd;
        e->impl = pd_impl(rpd);
        rpd = NULL;
        insert(e);
    }
    void *ptrs[2] = {(void *)src, dst};
    rc = entry_run(e, ptrs);
err:
    if (rpd)
        dnnl_primitive_desc_destroy(rpd);
    pthread_mutex_unlock(&G.mu);
    return rc;
}

/* ---------------- convolution / deconvolution ---------------- */

static int64_t conv_work(const ct__conv_p *p)
{
    return p->n * p->oc * p->oh * p->ow * p->ic * p->kh * p->kw;
}

static void conv_key(key *k, int kind, const ct__conv_p *p)
{
    memset(k, 0, sizeof(*k));
    k->kind = kind;
    /* the layouts too: one shape runs plain on a device's tensors (the checking device calls
     * these kernels) and blocked on the CPU's */
    int64_t v[20] = {p->n,  p->ic,   p->ih,         p->iw,   p->oc,   p->oh, p->ow,
                     p->kh, p->kw,   p->sh,         p->sw,   p->ph,   p->pw, p->dh,
                     p->dw, p->bias, p->transposed, p->xfmt, p->yfmt, p->dt};
    memcpy(k->v, v, sizeof(v));
}

typedef struct conv_mds {
    dnnl_memory_desc_t src, wei, bia, dst;         /* user (plain) */
    dnnl_memory_desc_t src_a, wei_a, bia_a, dst_a; /* for the op desc (any when blocked) */
    dnnl_dims_t strides, dil, padl, padr;
} conv_mds;

/* role: K_CONV_FWD, K_CONV_BWD_D or K_CONV_BWD_W. Under autocast (p->dt) the op's two inputs
 * (src and weights forward; weights and diff_dst for data; src and diff_dst for weights) have
 * the low type in any layout: entry_make adds the reorders from the caller's f32, which round
 * to nearest even; the output stays f32. */
static void conv_mds_init(conv_mds *m, const ct__conv_p *p, int role)
{
    int64_t src[4] = {p->n, p->ic, p->ih, p->iw}, dst[4] = {p->n, p->oc, p->oh, p->ow};
    int64_t wei[4] = {p->oc, p->ic, p->kh, p->kw}, bia[1] = {p->oc};
    m->src = md_act(src, p->xfmt);
    m->dst = md_act(dst, p->yfmt);
    m->wei = md_tag(4, wei, p->transposed ? dnnl_iohw : dnnl_oihw);
    m->bia = md_plain(1, bia);
    if (G.blocked_fmt != CT__FMT_PLAIN) {
        m->src_a = md_tag(4, src, dnnl_format_tag_any);
        m->dst_a = md_tag(4, dst, dnnl_format_tag_any);
        m->wei_a = md_tag(4, wei, dnnl_format_tag_any);
    } else {
        m->src_a = m->src;
        m->dst_a = m->dst;
        m->wei_a = m->wei;
    }
    m->bia_a = m->bia;
    if (p->dt != CT_F32) {
        dnnl_data_type_t lt = lp_type(p->dt);
        m->src_a = md_tag_dt(4, src, dnnl_format_tag_any, role != K_CONV_BWD_D ? lt : dnnl_f32);
        m->wei_a = md_tag_dt(4, wei, dnnl_format_tag_any, role != K_CONV_BWD_W ? lt : dnnl_f32);
        m->dst_a = md_tag_dt(4, dst, dnnl_format_tag_any, role != K_CONV_FWD ? lt : dnnl_f32);
    }
    int64_t ekh = (p->kh - 1) * p->dh + 1, ekw = (p->kw - 1) * p->dw + 1;
    m->strides[0] = p->sh;
    m->strides[1] = p->sw;
    m->dil[0] = p->dh - 1;
    m->dil[1] = p->dw - 1;
    m->padl[0] = p->ph;
    m->padl[1] = p->pw;
    if (!p->transposed) {
        m->padr[0] = (p->oh - 1) * p->sh + ekh - p->ih - p->ph;
        m->padr[1] = (p->ow - 1) * p->sw + ekw - p->iw - p->pw;
    } else {
        m->padr[0] = (p->ih - 1) * p->sh + ekh - p->oh - p->ph;
        m->padr[1] = (p->iw - 1) * p->sw + ekw - p->ow - p->pw;
    }
}

static int conv_fwd_pd(dnnl_primitive_desc_t *pd, const ct__conv_p *p, conv_mds *m)
{
    int rc = 0;
    dnnl_convolution_desc_t cd;
    dnnl_deconvolution_desc_t dd;
    if (!p->transposed) {
        DN(dnnl_dilated_convolution_forward_desc_init(
            &cd, dnnl_forward_training, dnnl_convolution_direct, &m->src_a, &m->wei_a,
            p->bias ? &m->bia_a : NULL, &m->dst_a, m->strides, m->dil, m->padl, m->padr));
        DN(dnnl_primitive_desc_create(pd, &cd, NULL, G.engine, NULL));
    } else {
        DN(dnnl_dilated_deconvolution_forward_desc_init(
            &dd, dnnl_forward_training, dnnl_deconvolution_direct, &m->src_a, &m->wei_a,
            p->bias ? &m->bia_a : NULL, &m->dst_a, m->strides, m->dil, m->padl, m->padr));
        DN(dnnl_primitive_desc_create(pd, &dd, NULL, G.engine, NULL));
    }
    return 0;
err:
    return rc;
}

int ct__cpu_conv_fwd(const ct__conv_p *p, const float *x, const float *w, const float *b, float *y)
{
    int rc = 0;
    key k;
    uint64_t h;
    conv_key(&k, K_CONV_FWD, p);
    if ((rc = ct__cpu_lp_check(p->dt, "conv_fwd")) < 0)
        return rc;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0)
        goto err;
    entry *e = lookup(&k, &h);
    if (!e) {
        conv_mds m;
        conv_mds_init(&m, p, K_CONV_FWD);
        dnnl_convolution_desc_t cd;
        dnnl_deconvolution_desc_t dd;
        const void *desc;
        if (!p->transposed) {
            DN(dnnl_dilated_convolution_forward_desc_init(
                &cd, dnnl_forward_training, dnnl_convolution_direct, &m.src_a, &m.wei_a,
                p->bias ? &m.bia_a : NULL, &m.dst_a, m.strides, m.dil, m.padl, m.padr));
            desc = &cd;
        } else {
            DN(dnnl_dilated_deconvolution_forward_desc_init(
                &dd, dnnl_forward_training, dnnl_deconvolution_direct, &m.src_a, &m.wei_a,
                p->bias ? &m.bia_a : NULL, &m.dst_a, m.strides, m.dil, m.padl, m.padr));
            desc = &dd;
        }
        aspec as[4] = {{DNNL_ARG_SRC, &m.src, 0},
                       {DNNL_ARG_WEIGHTS, &m.wei, 0},
                       {DNNL_ARG_DST, &m.dst, 1},
                       {DNNL_ARG_BIAS, &m.bia, 0}};
        if ((rc = entry_make(&e, &k, h, desc, NULL, NULL, p->bias ? 4 : 3, as, conv_work(p))) < 0)
            goto err;
        insert(e);
    }
    void *ptrs[4] = {(void *)x, (void *)w, y, (void *)b};
    rc = entry_run(e, ptrs);
err:
    pthread_mutex_unlock(&G.mu);
    return rc;
}

int ct__cpu_conv_bwd_data(const ct__conv_p *p, const float *w, const float *dy, float *dx)
{
    int rc = 0;
    key k;
    uint64_t h;
    dnnl_primitive_desc_t hint = NULL;
    conv_key(&k, K_CONV_BWD_D, p);
    if ((rc = ct__cpu_lp_check(p->dt, "conv_bwd_data")) < 0)
        return rc;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0)
        goto err;
    entry *e = lookup(&k, &h);
    if (!e) {
        conv_mds m, mf;
        conv_mds_init(&m, p, K_CONV_BWD_D);
        conv_mds_init(&mf, p, K_CONV_FWD);
        if ((rc = conv_fwd_pd(&hint, p, &mf)) < 0)
            goto err;
        dnnl_convolution_desc_t cd;
        dnnl_deconvolution_desc_t dd;
        const void *desc;
        if (!p->transposed) {
            DN(dnnl_dilated_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct,
                                                                &m.src_a, &m.wei_a, &m.dst_a,
                                                                m.strides, m.dil, m.padl, m.padr));
            desc = &cd;
        } else {
            DN(dnnl_dilated_deconvolution_backward_data_desc_init(
                &dd, dnnl_deconvolution_direct, &m.src_a, &m.wei_a, &m.dst_a, m.strides, m.dil,
                m.padl, m.padr));
            desc = &dd;
        }
        aspec as[3] = {{DNNL_ARG_WEIGHTS, &m.wei, 0},
                       {DNNL_ARG_DIFF_DST, &m.dst, 0},
                       {DNNL_ARG_DIFF_SRC, &m.src, 1}};
        if ((rc = entry_make(&e, &k, h, desc, NULL, hint, 3, as, conv_work(p))) < 0)
            goto err;
        insert(e);
    }
    void *ptrs[3] = {(void *)w, (void *)dy, dx};
    rc = entry_run(e, ptrs);
err:
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    pthread_mutex_unlock(&G.mu);
    return rc;
}

int ct__cpu_conv_bwd_weights(const ct__conv_p *p, const float *x, const float *dy, float *dw,
                             float *db)
{
    int rc = 0;
    key k;
    uint64_t h;
    dnnl_primitive_desc_t hint = NULL;
    conv_key(&k, K_CONV_BWD_W, p);
    if ((rc = ct__cpu_lp_check(p->dt, "conv_bwd_weights")) < 0)
        return rc;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0)
        goto err;
    entry *e = lookup(&k, &h);
    if (!e) {
        conv_mds m, mf;
        conv_mds_init(&m, p, K_CONV_BWD_W);
        conv_mds_init(&mf, p, K_CONV_FWD);
        if ((rc = conv_fwd_pd(&hint, p, &mf)) < 0)
            goto err;
        dnnl_convolution_desc_t cd;
        dnnl_deconvolution_desc_t dd;
        const void *desc;
        if (!p->transposed) {
            DN(dnnl_dilated_convolution_backward_weights_desc_init(
                &cd, dnnl_convolution_direct, &m.src_a, &m.wei_a, p->bias ? &m.bia_a : NULL,
                &m.dst_a, m.strides, m.dil, m.padl, m.padr));
            desc = &cd;
        } else {
            DN(dnnl_dilated_deconvolution_backward_weights_desc_init(
                &dd, dnnl_deconvolution_direct, &m.src_a, &m.wei_a, p->bias ? &m.bia_a : NULL,
                &m.dst_a, m.strides, m.dil, m.padl, m.padr));
            desc = &dd;
        }
        aspec as[4] = {{DNNL_ARG_SRC, &m.src, 0},
                       {DNNL_ARG_DIFF_DST, &m.dst, 0},
                       {DNNL_ARG_DIFF_WEIGHTS, &m.wei, 1},
                       {DNNL_ARG_DIFF_BIAS, &m.bia, 1}};
        if ((rc = entry_make(&e, &k, h, desc, NULL, hint, p->bias ? 4 : 3, as, conv_work(p))) < 0)
            goto err;
        insert(e);
    }
    void *ptrs[4] = {(void *)x, (void *)dy, dw, db};
    rc = entry_run(e, ptrs);
err:
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    pthread_mutex_unlock(&G.mu);
    return rc;
}

/* ---------------- inner product ---------------- */

/* Whether a Linear's or matmul's product runs in gemm.c (ct__cpu_gemm) and not in oneDNN: the
 * CPU has AVX2 and FMA, not both operands are transposed, and either the product is small
 * (oneDNN would run it on one thread, at a fixed cost per call that is most of its time) or it
 * runs on one thread and oneDNN's kernels use no AVX-512 (with one thread and AVX2 both, gemm.c
 * computes weight gradients faster and the rest at par: its header has the figures). */
static bool gemm_here(int64_t m, int64_t k, int64_t n, bool ta, bool tb)
{
    if (!ct__cpu_gemm_runs() || (ta && tb) || m <= 0 || k <= 0 || n <= 0)
        return false;
    if (m * k * n <= SMALL_WORK)
        return true;
    unsigned avx512 = (unsigned)dnnl_cpu_isa_avx512_core;
    return omp_get_max_threads() == 1 &&
           ((unsigned)dnnl_get_effective_cpu_isa() & avx512) != avx512;
}

typedef struct ip_mds {
    dnnl_memory_desc_t src, wei, bia, dst;
} ip_mds;

static void ip_mds_init(ip_mds *m, int64_t n, int64_t ic, int64_t oc)
{
    int64_t s[2] = {n, ic}, w[2] = {oc, ic}, d[2] = {n, oc}, b[1] = {oc};
    m->src = md_plain(2, s);
    m->wei = md_plain(2, w);
    m->dst = md_plain(2, d);
    m->bia = md_plain(1, b);
}

static int ip_fwd_pd(dnnl_primitive_desc_t *pd, ip_mds *m, bool bias)
{
    int rc = 0;
    dnnl_inner_product_desc_t d;
    DN(dnnl_inner_product_forward_desc_init(&d, dnnl_forward_training, &m->src, &m->wei,
                                            bias ? &m->bia : NULL, &m->dst));
    DN(dnnl_primitive_desc_create(pd, &d, NULL, G.engine, NULL));
    return 0;
err:
    return rc;
}

int ct__cpu_ip_fwd(int64_t n, int64_t ic, int64_t oc, const float *x, const float *w,
                   const float *b, float *y)
{
    if (gemm_here(n, ic, oc, false, true)) /* y = x w^T + b */
        return ct__cpu_gemm(n, ic, oc, x, false, w, true, y, false, b);
    int rc = 0;
    key k = {.kind = K_IP_FWD, .v = {n, ic, oc, b != NULL}};
    uint64_t h;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0)
        goto err;
    entry *e = lookup(&k, &h);
    if (!e) {
        ip_mds m;
        ip_mds_init(&m, n, ic, oc);
        dnnl_inner_product_desc_t d;
        DN(dnnl_inner_product_forward_desc_init(&d, dnnl_forward_training, &m.src, &m.wei,
                                                b ? &m.bia : NULL, &m.dst));
        aspec as[4] = {{DNNL_ARG_SRC, &m.src, 0},
                       {DNNL_ARG_WEIGHTS, &m.wei, 0},
                       {DNNL_ARG_DST, &m.dst, 1},
                       {DNNL_ARG_BIAS, &m.bia, 0}};
        if ((rc = entry_make(&e, &k, h, &d, NULL, NULL, b ? 4 : 3, as, n * ic * oc)) < 0)
            goto err;
        insert(e);
    }
    void *ptrs[4] = {(void *)x, (void *)w, y, (void *)b};
    rc = entry_run(e, ptrs);
err:
    pthread_mutex_unlock(&G.mu);
    return rc;
}

int ct__cpu_ip_bwd_data(int64_t n, int64_t ic, int64_t oc, const float *w, const float *dy,
                        float *dx)
{
    if (gemm_here(n, oc, ic, false, false)) /* dx = dy w */
        return ct__cpu_gemm(n, oc, ic, dy, false, w, false, dx, false, NULL);
    int rc = 0;
    key k = {.kind = K_IP_BWD_D, .v = {n, ic, oc}};
    uint64_t h;
    dnnl_primitive_desc_t hint = NULL;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0)
        goto err;
    entry *e = lookup(&k, &h);
    if (!e) {
        ip_mds m;
        ip_mds_init(&m, n, ic, oc);
        if ((rc = ip_fwd_pd(&hint, &m, true)) < 0)
            goto err;
        dnnl_inner_product_desc_t d;
        DN(dnnl_inner_product_backward_data_desc_init(&d, &m.src, &m.wei, &m.dst));
        aspec as[3] = {{DNNL_ARG_WEIGHTS, &m.wei, 0},
                       {DNNL_ARG_DIFF_DST, &m.dst, 0},
                       {DNNL_ARG_DIFF_SRC, &m.src, 1}};
        if ((rc = entry_make(&e, &k, h, &d, NULL, hint, 3, as, n * ic * oc)) < 0)
            goto err;
        insert(e);
    }
    void *ptrs[3] = {(void *)w, (void *)dy, dx};
    rc = entry_run(e, ptrs);
err:
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    pthread_mutex_unlock(&G.mu);
    return rc;
}

int ct__cpu_ip_bwd_weights(int64_t n, int64_t ic, int64_t oc, const float *x, const float *dy,
                           float *dw, float *db)
{
    if (gemm_here(oc, n, ic, true, false)) /* dw = dy^T x, db = dy's column sums */
        return ct__cpu_gemm_wgrad(oc, n, ic, dy, x, dw, db);
    int rc = 0;
    key k = {.kind = K_IP_BWD_W, .v = {n, ic, oc, db != NULL}};
    uint64_t h;
    dnnl_primitive_desc_t hint = NULL;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0)
        goto err;
    entry *e = lookup(&k, &h);
    if (!e) {
        ip_mds m;
        ip_mds_init(&m, n, ic, oc);
        if ((rc = ip_fwd_pd(&hint, &m, db != NULL)) < 0)
            goto err;
        dnnl_inner_product_desc_t d;
        DN(dnnl_inner_product_backward_weights_desc_init(&d, &m.src, &m.wei, db ? &m.bia : NULL,
                                                         &m.dst));
        aspec as[4] = {{DNNL_ARG_SRC, &m.src, 0},
                       {DNNL_ARG_DIFF_DST, &m.dst, 0},
                       {DNNL_ARG_DIFF_WEIGHTS, &m.wei, 1},
                       {DNNL_ARG_DIFF_BIAS, &m.bia, 1}};
        if ((rc = entry_make(&e, &k, h, &d, NULL, hint, db ? 4 : 3, as, n * ic * oc)) < 0)
            goto err;
        insert(e);
    }
    void *ptrs[4] = {(void *)x, (void *)dy, dw, db};
    rc = entry_run(e, ptrs);
err:
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    pthread_mutex_unlock(&G.mu);
    return rc;
}

/* ---------------- matmul ---------------- */

/* c (m x n, f32) = op(a) op(b), or += with accumulate; the operands are the caller's f32,
 * multiplied in `in` (f32, or bf16/f16 for autocast: oneDNN reorders, that is rounds, them
 * when entry_make's arguments are f32 and the primitive's are not), accumulated in f32. */
static int matmul_run(key k, dnnl_data_type_t in, int64_t m, int64_t kk, int64_t n, const float *a,
                      bool ta, const float *b, bool tb, float *c, bool accumulate)
{
    int rc = 0;
    uint64_t h;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0)
        goto err;
    entry *e = lookup(&k, &h);
    if (!e) {
        dnnl_memory_desc_t am, bm, cm, aim, bim;
        dnnl_dims_t ad = {m, kk}, bd = {kk, n}, cd = {m, n};
        dnnl_dims_t as_ = {ta ? 1 : kk, ta ? m : 1}, bs = {tb ? 1 : n, tb ? kk : 1}, cs = {n, 1};
        DN(dnnl_memory_desc_init_by_strides(&am, 2, ad, dnnl_f32, as_));
        DN(dnnl_memory_desc_init_by_strides(&bm, 2, bd, dnnl_f32, bs));
        DN(dnnl_memory_desc_init_by_strides(&aim, 2, ad, in, as_));
        DN(dnnl_memory_desc_init_by_strides(&bim, 2, bd, in, bs));
        DN(dnnl_memory_desc_init_by_strides(&cm, 2, cd, dnnl_f32, cs));
        DN(dnnl_primitive_attr_create(&attr));
        if (accumulate) {
            DN(dnnl_post_ops_create(&po));
            DN(dnnl_post_ops_append_sum(po, 1.0f));
            DN(dnnl_primitive_attr_set_post_ops(attr, po));
        }
        dnnl_matmul_desc_t d;
        DN(dnnl_matmul_desc_init(&d, &aim, &bim, NULL, &cm));
        aspec as[3] = {{DNNL_ARG_SRC, &am, 0}, {DNNL_ARG_WEIGHTS, &bm, 0}, {DNNL_ARG_DST, &cm, 1}};
        if ((rc = entry_make(&e, &k, h, &d, attr, NULL, 3, as, m * kk * n)) < 0)
            goto err;
        insert(e);
    }
    void *ptrs[3] = {(void *)a, (void *)b, c};
    rc = entry_run(e, ptrs);
err:
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    pthread_mutex_unlock(&G.mu);
    return rc;
}

int ct__cpu_matmul(int64_t m, int64_t kk, int64_t n, const float *a, bool ta, const float *b,
                   bool tb, float *c, bool accumulate)
{
    if (gemm_here(m, kk, n, ta, tb))
        return ct__cpu_gemm(m, kk, n, a, ta, b, tb, c, accumulate, NULL);
    key k = {.kind = K_MATMUL, .v = {m, kk, n, ta, tb, accumulate}};
    return matmul_run(k, dnnl_f32, m, kk, n, a, ta, b, tb, c, accumulate);
}

/* Autocast matmul: a and b are the caller's f32, rounded to dt, the product accumulated in
 * f32 into c (f32). */
int ct__cpu_matmul_lp(int dt, int64_t m, int64_t kk, int64_t n, const float *a, bool ta,
                      const float *b, bool tb, float *c, bool accumulate)
{
    int rc = ct__cpu_lp_check(dt, "matmul");
    if (rc < 0)
        return rc;
    key k = {.kind = K_MATMUL_LP, .v = {m, kk, n, ta, tb, accumulate, dt}};
    return matmul_run(k, lp_type(dt), m, kk, n, a, ta, b, tb, c, accumulate);
}

/* ---------------- batch norm ---------------- */

static void bn_mds(const ct__bn_p *p, dnnl_memory_desc_t *data, dnnl_memory_desc_t *vec)
{
    int64_t c[1] = {p->c};
    if (p->fmt != CT__FMT_PLAIN) {
        int64_t d[4] = {p->n, p->c, p->h, p->w};
        *data = md_act(d, p->fmt);
    } else {
        int64_t d[4] = {p->n, p->c, p->hw, 1};
        *data = md_plain(4, d);
    }
    *vec = md_plain(1, c);
}

static void bn_key(key *k, int kind, const ct__bn_p *p)
{
    memset(k, 0, sizeof(*k));
    k->kind = kind;
    k->v[0] = p->n;
    k->v[1] = p->c;
    k->v[2] = p->hw;
    k->v[3] = p->h;
    k->v[4] = p->w;
    k->v[5] = p->fmt;
    k->v[6] = p->relu;
    k->f[0] = p->eps;
}

static const unsigned BN_FLAGS = dnnl_use_scale | dnnl_use_shift;

static unsigned bn_flags(const ct__bn_p *p)
{
    return BN_FLAGS | (p->relu ? dnnl_fuse_norm_relu : 0);
}

static int bn_train_pd(dnnl_primitive_desc_t *pd, const ct__bn_p *p, dnnl_memory_desc_t *data)
{
    int rc = 0;
    dnnl_batch_normalization_desc_t d;
    DN(dnnl_batch_normalization_forward_desc_init(&d, dnnl_forward_training, data, p->eps,
                                                  bn_flags(p)));
    DN(dnnl_primitive_desc_create(pd, &d, NULL, G.engine, NULL));
    return 0;
err:
    return rc;
}

static int bn_get_train(entry **out, const ct__bn_p *p)
{
    int rc = 0;
    key k;
    uint64_t h;
    bn_key(&k, K_BN_FWD_TRAIN, p);
    entry *e = lookup(&k, &h);
    if (!e) {
        dnnl_memory_desc_t data, vec;
        bn_mds(p, &data, &vec);
        dnnl_batch_normalization_desc_t d;
        DN(dnnl_batch_normalization_forward_desc_init(&d, dnnl_forward_training, &data, p->eps,
                                                      bn_flags(p)));
        aspec as[7] = {{DNNL_ARG_SRC, &data, 0},     {DNNL_ARG_SCALE, &vec, 0},
                       {DNNL_ARG_SHIFT, &vec, 0},    {DNNL_ARG_DST, &data, 1},
                       {DNNL_ARG_MEAN, &vec, 1},     {DNNL_ARG_VARIANCE, &vec, 1},
                       {DNNL_ARG_WORKSPACE, NULL, 1}};
        if ((rc = entry_make(&e, &k, h, &d, NULL, NULL, p->relu ? 7 : 6, as,
                             4 * p->n * p->c * p->hw)) < 0)
            goto err;
        insert(e);
    }
    *out = e;
    return 0;
err:
    return rc;
}

size_t ct__cpu_bn_ws_bytes(const ct__bn_p *p)
{
    entry *e = NULL;
    size_t n = 0;
    pthread_mutex_lock(&G.mu);
    if (ensure_engine() == 0 && bn_get_train(&e, p) == 0)
        n = e->ws_bytes;
    pthread_mutex_unlock(&G.mu);
    return n;
}

int ct__cpu_bn_fwd_train(const ct__bn_p *p, const float *x, const float *scale, const float *shift,
                         float *y, float *mean, float *var, void *ws)
{
    int rc = 0;
    entry *e;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0 || (rc = bn_get_train(&e, p)) < 0)
        goto err;
    void *ptrs[7] = {(void *)x, (void *)scale, (void *)shift, y, mean, var, ws};
    rc = entry_run(e, ptrs);
err:
    pthread_mutex_unlock(&G.mu);
    return rc;
}

int ct__cpu_bn_fwd_infer(const ct__bn_p *p, const float *x, const float *scale, const float *shift,
                         const float *mean, const float *var, float *y)
{
    int rc = 0;
    key k;
    uint64_t h;
    bn_key(&k, K_BN_FWD_INFER, p);
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0)
        goto err;
    entry *e = lookup(&k, &h);
    if (!e) {
        dnnl_memory_desc_t data, vec;
        bn_mds(p, &data, &vec);
        dnnl_batch_normalization_desc_t d;
        DN(dnnl_batch_normalization_forward_desc_init(&d, dnnl_forward_inference, &data, p->eps,
                                                      bn_flags(p) | dnnl_use_global_stats));
        aspec as[6] = {{DNNL_ARG_SRC, &data, 0},     {DNNL_ARG_SCALE, &vec, 0},
                       {DNNL_ARG_SHIFT, &vec, 0},    {DNNL_ARG_MEAN, &vec, 0},
                       {DNNL_ARG_VARIANCE, &vec, 0}, {DNNL_ARG_DST, &data, 1}};
        if ((rc = entry_make(&e, &k, h, &d, NULL, NULL, 6, as, 4 * p->n * p->c * p->hw)) < 0)
            goto err;
        insert(e);
    }
    void *ptrs[6] = {(void *)x, (void *)scale, (void *)shift, (void *)mean, (void *)var, y};
    rc = entry_run(e, ptrs);
err:
    pthread_mutex_unlock(&G.mu);
    return rc;
}

int ct__cpu_bn_bwd(const ct__bn_p *p, const float *x, const float *dy, const float *scale,
                   const float *mean, const float *var, const void *ws, float *dx, float *dscale,
                   float *dshift)
{
    int rc = 0;
    key k;
    uint64_t h;
    dnnl_primitive_desc_t hint = NULL;
    bn_key(&k, K_BN_BWD, p);
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0)
        goto err;
    entry *e = lookup(&k, &h);
    if (!e) {
        dnnl_memory_desc_t data, vec;
        bn_mds(p, &data, &vec);
        if ((rc = bn_train_pd(&hint, p, &data)) < 0)
            goto err;
        dnnl_batch_normalization_desc_t d;
        DN(dnnl_batch_normalization_backward_desc_init(&d, dnnl_backward, &data, &data, p->eps,
                                                       bn_flags(p)));
        aspec as[10] = {{DNNL_ARG_SRC, &data, 0},       {DNNL_ARG_DIFF_DST, &data, 0},
                        {DNNL_ARG_SCALE, &vec, 0},      {DNNL_ARG_MEAN, &vec, 0},
                        {DNNL_ARG_VARIANCE, &vec, 0},   {DNNL_ARG_DIFF_SRC, &data, 1},
                        {DNNL_ARG_DIFF_SCALE, &vec, 1}, {DNNL_ARG_DIFF_SHIFT, &vec, 1},
                        {DNNL_ARG_SHIFT, &vec, 0},      {DNNL_ARG_WORKSPACE, NULL, 0}};
        if ((rc = entry_make(&e, &k, h, &d, NULL, hint, p->relu ? 10 : 9, as,
                             6 * p->n * p->c * p->hw)) < 0)
            goto err;
        insert(e);
    }
    /* shift is not read by the backward pass, but oneDNN 2.6 wants the argument */
    void *ptrs[10] = {(void *)x, (void *)dy, (void *)scale, (void *)mean,  (void *)var,
                      dx,        dscale,     dshift,        (void *)scale, (void *)ws};
    rc = entry_run(e, ptrs);
err:
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    pthread_mutex_unlock(&G.mu);
    return rc;
}

/* ---------------- pooling ---------------- */

typedef struct pool_mds {
    dnnl_memory_desc_t src, dst;
    dnnl_dims_t strides, kernel, dil, padl, padr;
    dnnl_alg_kind_t alg;
} pool_mds;

static void pool_mds_init(pool_mds *m, const ct__pool_p *p)
{
    int64_t s[4] = {p->n, p->c, p->ih, p->iw}, d[4] = {p->n, p->c, p->oh, p->ow};
    m->src = md_act(s, p->fmt);
    m->dst = md_act(d, p->fmt);
    m->strides[0] = p->sh;
    m->strides[1] = p->sw;
    m->kernel[0] = p->kh;
    m->kernel[1] = p->kw;
    m->dil[0] = m->dil[1] = 0;
    m->padl[0] = p->ph;
    m->padl[1] = p->pw;
    m->padr[0] = (p->oh - 1) * p->sh + p->kh - p->ih - p->ph;
    m->padr[1] = (p->ow - 1) * p->sw + p->kw - p->iw - p->pw;
    m->alg = p->alg == CT__POOL_MAX        ? dnnl_pooling_max
             : p->alg == CT__POOL_AVG_INCL ? dnnl_pooling_avg_include_padding
                                           : dnnl_pooling_avg_exclude_padding;
}

static int64_t pool_work(const ct__pool_p *p)
{
    return p->n * p->c * p->oh * p->ow * p->kh * p->kw;
}

static void pool_key(key *k, int kind, const ct__pool_p *p, bool training)
{
    memset(k, 0, sizeof(*k));
    k->kind = kind;
    /* field by field: the struct's tail padding is not guaranteed to be zero */
    int64_t v[14] = {p->n,  p->c,  p->ih, p->iw, p->oh, p->ow,  p->kh,
                     p->kw, p->sh, p->sw, p->ph, p->pw, p->alg, p->fmt};
    memcpy(k->v, v, sizeof(v));
    k->f[0] = training ? 1.0f : 0.0f;
}

static int pool_get_fwd(entry **out, const ct__pool_p *p, bool training)
{
    int rc = 0;
    key k;
    uint64_t h;
    pool_key(&k, K_POOL_FWD, p, training);
    entry *e = lookup(&k, &h);
    if (!e) {
        pool_mds m;
        pool_mds_init(&m, p);
        dnnl_pooling_v2_desc_t d;
        DN(dnnl_pooling_v2_forward_desc_init(
            &d, training ? dnnl_forward_training : dnnl_forward_inference, m.alg, &m.src, &m.dst,
            m.strides, m.kernel, m.dil, m.padl, m.padr));
        bool ws = training && p->alg == CT__POOL_MAX;
        aspec as[3] = {
            {DNNL_ARG_SRC, &m.src, 0}, {DNNL_ARG_DST, &m.dst, 1}, {DNNL_ARG_WORKSPACE, NULL, 1}};
        if ((rc = entry_make(&e, &k, h, &d, NULL, NULL, ws ? 3 : 2, as, pool_work(p))) < 0)
            goto err;
        insert(e);
    }
    *out = e;
    return 0;
err:
    return rc;
}

size_t ct__cpu_pool_ws_bytes(const ct__pool_p *p)
{
    entry *e = NULL;
    size_t n = 0;
    pthread_mutex_lock(&G.mu);
    if (ensure_engine() == 0 && pool_get_fwd(&e, p, true) == 0)
        n = e->ws_bytes;
    pthread_mutex_unlock(&G.mu);
    return n;
}

int ct__cpu_pool_fwd(const ct__pool_p *p, const float *x, float *y, void *ws, bool training)
{
    int rc = 0;
    entry *e;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0 || (rc = pool_get_fwd(&e, p, training)) < 0)
        goto err;
    void *ptrs[3] = {(void *)x, y, ws};
    rc = entry_run(e, ptrs);
err:
    pthread_mutex_unlock(&G.mu);
    return rc;
}

int ct__cpu_pool_bwd(const ct__pool_p *p, const float *dy, const void *ws, float *dx)
{
    int rc = 0;
    key k;
    uint64_t h;
    entry *fwd;
    pool_key(&k, K_POOL_BWD, p, true);
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0)
        goto err;
    entry *e = lookup(&k, &h);
    if (!e) {
        if ((rc = pool_get_fwd(&fwd, p, true)) < 0)
            goto err;
        pool_mds m;
        pool_mds_init(&m, p);
        dnnl_pooling_v2_desc_t d;
        DN(dnnl_pooling_v2_backward_desc_init(&d, m.alg, &m.src, &m.dst, m.strides, m.kernel, m.dil,
                                              m.padl, m.padr));
        bool w = p->alg == CT__POOL_MAX;
        aspec as[3] = {{DNNL_ARG_DIFF_DST, &m.dst, 0},
                       {DNNL_ARG_DIFF_SRC, &m.src, 1},
                       {DNNL_ARG_WORKSPACE, NULL, 0}};
        if ((rc = entry_make(&e, &k, h, &d, NULL, fwd->pd, w ? 3 : 2, as, pool_work(p))) < 0)
            goto err;
        insert(e);
    }
    void *ptrs[3] = {(void *)dy, dx, (void *)ws};
    rc = entry_run(e, ptrs);
err:
    pthread_mutex_unlock(&G.mu);
    return rc;
}

/* ---------------- eltwise ---------------- */

static dnnl_alg_kind_t elt_alg(int alg)
{
    switch (alg) {
    case CT__ELT_RELU:
        return dnnl_eltwise_relu_use_dst_for_bwd;
    case CT__ELT_ELU:
        return dnnl_eltwise_elu_use_dst_for_bwd;
    case CT__ELT_TANH:
        return dnnl_eltwise_tanh_use_dst_for_bwd;
    default:
        return dnnl_eltwise_logistic_use_dst_for_bwd;
    }
}

static int elt_get_fwd(entry **out, int alg, float alpha, int64_t n)
{
    int rc = 0;
    key k = {.kind = K_ELT_FWD, .v = {alg, n}, .f = {alpha}};
    uint64_t h;
    entry *e = lookup(&k, &h);
    if (!e) {
        dnnl_memory_desc_t md = md_plain(1, &n);
        dnnl_eltwise_desc_t d;
        DN(dnnl_eltwise_forward_desc_init(&d, dnnl_forward_training, elt_alg(alg), &md, alpha,
                                          0.0f));
        aspec as[2] = {{DNNL_ARG_SRC, &md, 0}, {DNNL_ARG_DST, &md, 1}};
        if ((rc = entry_make(&e, &k, h, &d, NULL, NULL, 2, as, 8 * n)) < 0)
            goto err;
        insert(e);
    }
    *out = e;
    return 0;
err:
    return rc;
}

int ct__cpu_eltwise_fwd(int alg, float alpha, int64_t n, const float *x, float *y)
{
    int rc = 0;
    entry *e;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0 || (rc = elt_get_fwd(&e, alg, alpha, n)) < 0)
        goto err;
    void *ptrs[2] = {(void *)x, y};
    rc = entry_run(e, ptrs);
err:
    pthread_mutex_unlock(&G.mu);
    return rc;
}

int ct__cpu_eltwise_bwd(int alg, float alpha, int64_t n, const float *y, const float *dy, float *dx)
{
    int rc = 0;
    key k = {.kind = K_ELT_BWD, .v = {alg, n}, .f = {alpha}};
    uint64_t h;
    entry *fwd;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0)
        goto err;
    entry *e = lookup(&k, &h);
    if (!e) {
        if ((rc = elt_get_fwd(&fwd, alg, alpha, n)) < 0)
            goto err;
        dnnl_memory_desc_t md = md_plain(1, &n);
        dnnl_eltwise_desc_t d;
        DN(dnnl_eltwise_backward_desc_init(&d, elt_alg(alg), &md, &md, alpha, 0.0f));
        aspec as[3] = {
            {DNNL_ARG_DST, &md, 0}, {DNNL_ARG_DIFF_DST, &md, 0}, {DNNL_ARG_DIFF_SRC, &md, 1}};
        if ((rc = entry_make(&e, &k, h, &d, NULL, fwd->pd, 3, as, 8 * n)) < 0)
            goto err;
        insert(e);
    }
    void *ptrs[3] = {(void *)y, (void *)dy, dx};
    rc = entry_run(e, ptrs);
err:
    pthread_mutex_unlock(&G.mu);
    return rc;
}

/* ---------------- softmax ---------------- */

static int sm_get_fwd(entry **out, bool log, int64_t rows, int64_t cols)
{
    int rc = 0;
    key k = {.kind = K_SM_FWD, .v = {log, rows, cols}};
    uint64_t h;
    entry *e = lookup(&k, &h);
    if (!e) {
        int64_t dims[2] = {rows, cols};
        dnnl_memory_desc_t md = md_plain(2, dims);
        dnnl_softmax_v2_desc_t d;
        DN(dnnl_softmax_v2_forward_desc_init(&d, dnnl_forward_training,
                                             log ? dnnl_softmax_log : dnnl_softmax_accurate, &md,
                                             &md, 1));
        aspec as[2] = {{DNNL_ARG_SRC, &md, 0}, {DNNL_ARG_DST, &md, 1}};
        if ((rc = entry_make(&e, &k, h, &d, NULL, NULL, 2, as, 8 * rows * cols)) < 0)
            goto err;
        insert(e);
    }
    *out = e;
    return 0;
err:
    return rc;
}

int ct__cpu_softmax_fwd(bool log, int64_t rows, int64_t cols, const float *x, float *y)
{
    int rc = 0;
    entry *e;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0 || (rc = sm_get_fwd(&e, log, rows, cols)) < 0)
        goto err;
    void *ptrs[2] = {(void *)x, y};
    rc = entry_run(e, ptrs);
err:
    pthread_mutex_unlock(&G.mu);
    return rc;
}

int ct__cpu_softmax_bwd(bool log, int64_t rows, int64_t cols, const float *y, const float *dy,
                        float *dx)
{
    int rc = 0;
    key k = {.kind = K_SM_BWD, .v = {log, rows, cols}};
    uint64_t h;
    entry *fwd;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) < 0)
        goto err;
    entry *e = lookup(&k, &h);
    if (!e) {
        if ((rc = sm_get_fwd(&fwd, log, rows, cols)) < 0)
            goto err;
        int64_t dims[2] = {rows, cols};
        dnnl_memory_desc_t md = md_plain(2, dims);
        dnnl_softmax_v2_desc_t d;
        DN(dnnl_softmax_v2_backward_desc_init(&d, log ? dnnl_softmax_log : dnnl_softmax_accurate,
                                              &md, &md, &md, 1));
        aspec as[3] = {
            {DNNL_ARG_DST, &md, 0}, {DNNL_ARG_DIFF_DST, &md, 0}, {DNNL_ARG_DIFF_SRC, &md, 1}};
        if ((rc = entry_make(&e, &k, h, &d, NULL, fwd->pd, 3, as, 8 * rows * cols)) < 0)
            goto err;
        insert(e);
    }
    void *ptrs[3] = {(void *)y, (void *)dy, dx};
    rc = entry_run(e, ptrs);
err:
    pthread_mutex_unlock(&G.mu);
    return rc;
}

/* ---------------- misc ---------------- */

void ct__cpu_set_threads(int n)
{
    if (n <= 0) { /* the count OpenMP starts with: OMP_NUM_THREADS, or all cores */
        const char *env = getenv("OMP_NUM_THREADS");
        n = env && atoi(env) > 0 ? atoi(env) : omp_get_num_procs();
    }
    omp_set_num_threads(n);
}

int ct__cpu_threads(void)
{
    return omp_get_max_threads();
}

void ct__cpu_cache_clear(void)
{
    pthread_mutex_lock(&G.mu);
    for (int i = 0; i < NBUCKETS; i++) {
        entry *e = G.buckets[i];
        while (e) {
            entry *nx = e->next;
            entry_free(e);
            e = nx;
        }
        G.buckets[i] = NULL;
    }
    if (G.stream)
        dnnl_stream_destroy(G.stream);
    if (G.engine)
        dnnl_engine_destroy(G.engine);
    G.stream = NULL;
    G.engine = NULL;
    pthread_mutex_unlock(&G.mu);
}

int64_t ct__cpu_primitives_created(void)
{
    pthread_mutex_lock(&G.mu);
    int64_t n = G.created;
    pthread_mutex_unlock(&G.mu);
    return n;
}
