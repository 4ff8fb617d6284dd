/* trainer/cpu/dnnl.c — the only file that calls oneDNN (2.x C API, dnnl.h).
 *
 * Each kernel builds a key (op kind + every shape number) and calls run(), which looks it up in a
 * hash-table cache. On a miss the kind's build function (the BUILD table, one row per kind)
 * fills a spec: the op descriptor, attributes, the forward pd as hint for a backward one, the
 * arguments; entry_make then creates the primitive descriptor, the primitive, its scratchpad
 * and one dnnl_memory per argument (created with no data; pointers are set per call). Convolutions
 * let oneDNN choose their layouts (format_tag_any): the entry then owns an internal buffer and a
 * reorder for each argument whose layout differs from the caller's, and reorders in/out around the
 * primitive. The cache's lock is held to find an entry, not while it runs: an entry (its
 * memories, buffers, scratchpad, stream) serves one thread at a time, and a thread that finds
 * every entry of its key busy makes another, so threads (a pipeline's stage threads) run
 * primitives at the same time. (Held while running, it made 2 stage threads of 1 core each run
 * one after the other: bench/pipeline's 1F1B could not beat the unpipelined run.)
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
#include "common/env.h"
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
    K_COUNT
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
    /* Its own stream, and whether a thread runs it now (guarded by G.mu): entries are run
     * outside the lock, each by one thread at a time; a thread that finds every entry of its
     * key busy makes another (run()). */
    dnnl_stream_t stream;
    int busy;
    struct entry *next;
} entry;

/* Below this many multiply-adds (or element operations) a primitive runs single-threaded. */
#define SMALL_WORK (1 << 20)

#define NBUCKETS 512
static struct {
    pthread_mutex_t mu;
    dnnl_engine_t engine;
    entry *buckets[NBUCKETS];
    int64_t created;
    int blocked_fmt; /* CT__FMT_*, -1 before detect_blocked_fmt */
} G = {.mu = PTHREAD_MUTEX_INITIALIZER, .blocked_fmt = -1};

/* DN_RC(dnnl_foo(...)): calls it; 0, or CT_EDNNL with a message naming the call and line. The
 * caller decides where to go: `if ((rc = DN_RC(...)) < 0) goto out;`. */
#define DN_RC(call) dn_status((call), #call, __LINE__)
static int dn_status(dnnl_status_t st, const char *call, int line)
{
    if (st == dnnl_success)
        return 0;
    return ct__error(CT_EDNNL, "oneDNN %s failed (status %d) at %s:%d", call, (int)st, __FILE__,
                     line);
}

/* Word-wise (a key is 22 words, built zeroed by designated initialisers): one hash per
 * primitive call, so its cost counts for small layers, where byte-wise FNV took 0.25 us. */
_Static_assert(sizeof(key) % sizeof(uint64_t) == 0, "key is hashed by 64-bit words");
static uint64_t key_hash(const key *k)
{
    uint64_t w[sizeof(*k) / sizeof(uint64_t)];
    memcpy(w, k, sizeof w);
    return ct__hash_words(w, sizeof w / sizeof w[0]);
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
    const char *env = ct__env(CT__ENV_DNNL_BLOCKED);
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
    if ((rc = DN_RC(dnnl_engine_create(&G.engine, dnnl_cpu, 0))) < 0)
        return rc;
    if (G.blocked_fmt < 0)
        G.blocked_fmt = detect_blocked_fmt();
    return 0;
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
    if (e->stream)
        dnnl_stream_destroy(e->stream);
    if (e->pd)
        dnnl_primitive_desc_destroy(e->pd);
    free(e);
}

/* An entry of key k (idle_only: one no thread runs now), or NULL. */
static entry *lookup(const key *k, uint64_t *hash, bool idle_only)
{
    uint64_t h = key_hash(k);
    *hash = h;
    for (entry *e = G.buckets[h % NBUCKETS]; e; e = e->next)
        if (e->hash == h && memcmp(&e->k, k, sizeof(*k)) == 0 && !(idle_only && e->busy))
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

/* ---------------- one primitive: its spec, made once, run per call ---------------- */

/* A build function's list of arguments: md NULL means "use the primitive's own md"
 * (workspace); out: the primitive writes it. */
typedef struct aspec {
    int id;
    const dnnl_memory_desc_t *md;
    int out;
} aspec;

/* An argument as the spec keeps it: the md copied, as the build function's go out of scope. */
typedef struct sarg {
    int id;
    int out;
    bool own; /* the primitive's own md (md unused) */
    dnnl_memory_desc_t md;
} sarg;

/* What entry_make needs to create one primitive; a kind's build function (BUILD, below) fills
 * it on a cache miss. The arguments are in the order of the kernel's data pointers, optional
 * ones (bias, workspace) last, so that leaving one out shortens the list. */
typedef struct spec {
    union {
        dnnl_convolution_desc_t conv;
        dnnl_deconvolution_desc_t deconv;
        dnnl_inner_product_desc_t ip;
        dnnl_matmul_desc_t mm;
        dnnl_batch_normalization_desc_t bn;
        dnnl_pooling_v2_desc_t pool;
        dnnl_eltwise_desc_t elt;
        dnnl_softmax_v2_desc_t sm;
    } op;                            /* the op descriptor, unless pd is set */
    dnnl_primitive_desc_t pd;        /* made by the build function (a reorder's), or NULL */
    dnnl_primitive_attr_t attr;      /* NULL: default attributes */
    dnnl_primitive_desc_t hint;      /* a forward pd made for a backward one, or NULL */
    const_dnnl_primitive_desc_t fwd; /* else a cached forward entry's pd as the hint, or NULL */
    int nargs;
    sarg a[MAX_ARGS];
    int64_t work; /* multiply-adds or element operations: small ones run on one thread */
} spec;

/* Frees what the build function made and entry_make did not take. */
static void spec_fini(spec *s)
{
    dnnl_primitive_desc_t pds[2] = {s->pd, s->hint};
    for (int i = 0; i < 2; i++)
        if (pds[i])
            dnnl_primitive_desc_destroy(pds[i]);
    if (s->attr)
        dnnl_primitive_attr_destroy(s->attr);
}

/* s's arguments: the first n of as. */
static void spec_args(spec *s, int n, const aspec *as)
{
    for (int i = 0; i < n; i++) {
        sarg *a = &s->a[s->nargs++];
        a->id = as[i].id;
        a->out = as[i].out;
        a->own = as[i].md == NULL;
        if (as[i].md)
            a->md = *as[i].md;
    }
}

/* a->inner, a buffer in the primitive's layout pmd, and the reorder between it and the
 * caller's layout umd: umd to pmd for an input, pmd to umd for an output. */
static int layout_reorder(arg *a, const dnnl_memory_desc_t *umd, const dnnl_memory_desc_t *pmd)
{
    int rc;
    dnnl_primitive_desc_t rpd = NULL;
    if ((rc = DN_RC(dnnl_memory_create(&a->inner, pmd, G.engine, DNNL_MEMORY_ALLOCATE))) < 0)
        return rc;
    if (a->out)
        rc = DN_RC(dnnl_reorder_primitive_desc_create(&rpd, pmd, G.engine, umd, G.engine, NULL));
    else
        rc = DN_RC(dnnl_reorder_primitive_desc_create(&rpd, umd, G.engine, pmd, G.engine, NULL));
    if (rc < 0)
        return rc;
    rc = DN_RC(dnnl_primitive_create(&a->reorder, rpd));
    dnnl_primitive_desc_destroy(rpd);
    return rc;
}

static int reorder_run(dnnl_stream_t st, dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to)
{
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    return DN_RC(dnnl_primitive_execute(r, st, 2, ra));
}

/* Creates an entry from s: the primitive desc (unless s carries one, which the entry then
 * takes), the primitive, its scratchpad and the argument memories. On failure everything
 * created here is freed. */
static int entry_make(entry **out, const key *k, uint64_t hash, spec *s)
{
    int rc = 0, prev_thr = omp_get_max_threads();
    dnnl_primitive_attr_t user_attr = NULL; /* s->attr, with the scratchpad ours (e->scratch) */
    entry *e = calloc(1, sizeof(*e));
    if (!e)
        return ct__error(CT_ENOMEM, "dnnl: out of memory");
    e->k = *k;
    e->hash = hash;
    e->single = s->work < SMALL_WORK && prev_thr > 1;
    if (e->single)
        omp_set_num_threads(1);
    if (s->pd) {
        e->pd = s->pd;
        s->pd = NULL;
    } else {
        const_dnnl_primitive_desc_t hint = s->hint ? s->hint : s->fwd;
        rc = s->attr ? DN_RC(dnnl_primitive_attr_clone(&user_attr, s->attr))
                     : DN_RC(dnnl_primitive_attr_create(&user_attr));
        if (rc < 0 ||
            (rc = DN_RC(dnnl_primitive_attr_set_scratchpad_mode(user_attr,
                                                                dnnl_scratchpad_mode_user))) < 0 ||
            (rc = DN_RC(dnnl_primitive_desc_create(&e->pd, &s->op, user_attr, G.engine, hint))) < 0)
            goto out;
    }
    if ((rc = DN_RC(dnnl_primitive_create(&e->prim, e->pd))) < 0 ||
        (rc = DN_RC(dnnl_stream_create(&e->stream, G.engine, dnnl_stream_default_flags))) < 0)
        goto out;
    const dnnl_memory_desc_t *smd =
        dnnl_primitive_desc_query_md(e->pd, dnnl_query_scratchpad_md, 0);
    size_t sbytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (sbytes &&
        (rc = DN_RC(dnnl_memory_create(&e->scratch, smd, G.engine, DNNL_MEMORY_ALLOCATE))) < 0)
        goto out;
    e->impl = pd_impl(e->pd);
    for (int i = 0; i < s->nargs; i++) {
        const sarg *as = &s->a[i];
        arg *a = &e->a[e->nargs++];
        a->id = as->id;
        a->out = as->out;
        const dnnl_memory_desc_t *pmd =
            dnnl_primitive_desc_query_md(e->pd, dnnl_query_exec_arg_md, as->id);
        if (!pmd) {
            rc = ct__error(CT_EDNNL, "dnnl: no memory desc for argument %d", as->id);
            goto out;
        }
        if (as->id == DNNL_ARG_WORKSPACE)
            e->ws_bytes = dnnl_memory_desc_get_size(pmd);
        const dnnl_memory_desc_t *umd = as->own ? pmd : &as->md;
        if ((rc = DN_RC(dnnl_memory_create(&a->user, umd, G.engine, DNNL_MEMORY_NONE))) < 0)
            goto out;
        if (!as->own && !dnnl_memory_desc_equal(umd, pmd) && (rc = layout_reorder(a, umd, pmd)) < 0)
            goto out;
    }
out:
    if (e->single)
        omp_set_num_threads(prev_thr);
    if (user_attr)
        dnnl_primitive_attr_destroy(user_attr);
    if (rc < 0)
        entry_free(e);
    else
        *out = e;
    return rc;
}

/* Runs e with ptrs[i] as the data of argument i. The caller has marked e busy (G.mu is not
 * held: other threads run other entries meanwhile). */
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
        if ((rc = DN_RC(dnnl_memory_set_data_handle_v2(a->user, ptrs[i], e->stream))) < 0)
            goto out;
        if (a->reorder && !a->out &&
            (rc = reorder_run(e->stream, a->reorder, a->user, a->inner)) < 0)
            goto out;
        args[i].arg = a->id;
        args[i].memory = a->inner ? a->inner : a->user;
    }
    int nargs = e->nargs;
    if (e->scratch)
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch};
    if ((rc = DN_RC(dnnl_primitive_execute(e->prim, e->stream, nargs, args))) < 0)
        goto out;
    for (int i = 0; i < e->nargs; i++) {
        arg *a = &e->a[i];
        if (a->reorder && a->out &&
            (rc = reorder_run(e->stream, a->reorder, a->inner, a->user)) < 0)
            goto out;
    }
    rc = DN_RC(dnnl_stream_wait(e->stream));
out:
    if (e->single)
        omp_set_num_threads(prev_thr);
    return rc;
}

/* Runs k's primitive (made on first use, then cached) with ptrs[i] as argument i's data. */
static int run(const key *k, const void *p, void *const *ptrs);
/* The workspace size of k's primitive. */
static size_t ws_bytes(const key *k, const void *p);

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

/* ---------------- the kinds: how each primitive is made ---------------- */

/* Fills s for k's primitive. p: the kernel's parameters where the key does not hold them all
 * (ct__conv_p, ct__bn_p, ct__pool_p), else NULL. */
typedef int (*build_fn)(spec *s, const key *k, const void *p);
static int cached(entry **out, const key *k, const void *p);
static int cached_entry(entry **out, const key *k, const void *p, bool idle_only);
static int build(spec *s, const key *k, const void *p);

/* s->hint: the forward primitive desc of kind fwd_kind (k with that kind) that the backward
 * one in s is made from; oneDNN only reads it, so it is not cached. */
static int hint_make(spec *s, const key *k, int fwd_kind, const void *p)
{
    spec f;
    key fk = *k;
    fk.kind = fwd_kind;
    memset(&f, 0, sizeof f);
    int rc = build(&f, &fk, p);
    if (rc == 0)
        rc = DN_RC(dnnl_primitive_desc_create(&s->hint, &f.op, NULL, G.engine, NULL));
    spec_fini(&f);
    return rc;
}

/* s->fwd: the pd of the cached forward entry of kind fwd_kind (k with that kind), made and
 * cached first when missing: the backward pass runs after that forward one. */
static int hint_cached(spec *s, const key *k, int fwd_kind, const void *p)
{
    entry *fwd;
    key fk = *k;
    fk.kind = fwd_kind;
    int rc = cached(&fwd, &fk, p);
    if (rc == 0)
        s->fwd = fwd->pd;
    return rc;
}

/* Key: (n, c, h, w, source layout, destination layout). */
static int reorder_build(spec *s, const key *k, const void *unused)
{
    (void)unused;
    const int64_t *dims = k->v;
    int sfmt = (int)k->v[4], dfmt = (int)k->v[5];
    dnnl_memory_desc_t sm = md_act(dims, sfmt), dm = md_act(dims, dfmt);
    if (dnnl_reorder_primitive_desc_create(&s->pd, &sm, G.engine, &dm, G.engine, NULL) !=
        dnnl_success)
        return ct__error(CT_EDNNL, "dnnl: creating a reorder from layout %d to %d failed", sfmt,
                         dfmt);
    aspec as[2] = {{DNNL_ARG_FROM, &sm, 0}, {DNNL_ARG_TO, &dm, 1}};
    spec_args(s, 2, as);
    /* a copy: one thread below an eighth of the work of other primitives */
    s->work = 8 * dims[0] * dims[1] * dims[2] * dims[3];
    return 0;
}

int ct__cpu_reorder(int64_t n, int64_t c, int64_t h, int64_t w, const float *src, int sfmt,
                    float *dst, int dfmt)
{
    key k = {.kind = K_REORDER, .v = {n, c, h, w, sfmt, dfmt}};
    void *ptrs[2] = {(void *)src, dst};
    return run(&k, NULL, ptrs);
}

/* ---------------- convolution / deconvolution ---------------- */

/* A convolution's or inner product's arguments for pass (0 forward, 1 data gradient, 2 weight
 * gradient: its kind minus the forward kind), from the caller's mds, in the kernels' pointer
 * order: the bias last, left out without one. */
static void weighted_args(spec *s, int pass, bool bias, const dnnl_memory_desc_t *src,
                          const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bia,
                          const dnnl_memory_desc_t *dst)
{
    aspec fwd[4] = {{DNNL_ARG_SRC, src, 0},
                    {DNNL_ARG_WEIGHTS, wei, 0},
                    {DNNL_ARG_DST, dst, 1},
                    {DNNL_ARG_BIAS, bia, 0}};
    aspec bwd_d[3] = {
        {DNNL_ARG_WEIGHTS, wei, 0}, {DNNL_ARG_DIFF_DST, dst, 0}, {DNNL_ARG_DIFF_SRC, src, 1}};
    aspec bwd_w[4] = {{DNNL_ARG_SRC, src, 0},
                      {DNNL_ARG_DIFF_DST, dst, 0},
                      {DNNL_ARG_DIFF_WEIGHTS, wei, 1},
                      {DNNL_ARG_DIFF_BIAS, bia, 1}};
    if (pass == 1)
        spec_args(s, 3, bwd_d);
    else
        spec_args(s, bias ? 4 : 3, pass == 0 ? fwd : bwd_w);
}

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

/* s->op: the op descriptor of kind role (K_CONV_*) on p: a convolution, or a deconvolution when
 * p is transposed. */
static int conv_desc(spec *s, const ct__conv_p *p, const conv_mds *m, int role)
{
    const dnnl_memory_desc_t *bia = p->bias ? &m->bia_a : NULL;
    dnnl_convolution_desc_t *cd = &s->op.conv;
    dnnl_deconvolution_desc_t *dd = &s->op.deconv;
    const dnnl_alg_kind_t conv = dnnl_convolution_direct, deconv = dnnl_deconvolution_direct;
    switch (role) {
    case K_CONV_FWD:
        if (!p->transposed)
            return DN_RC(dnnl_dilated_convolution_forward_desc_init(
                cd, dnnl_forward_training, conv, &m->src_a, &m->wei_a, bia, &m->dst_a, m->strides,
                m->dil, m->padl, m->padr));
        return DN_RC(dnnl_dilated_deconvolution_forward_desc_init(
            dd, dnnl_forward_training, deconv, &m->src_a, &m->wei_a, bia, &m->dst_a, m->strides,
            m->dil, m->padl, m->padr));
    case K_CONV_BWD_D:
        if (!p->transposed)
            return DN_RC(dnnl_dilated_convolution_backward_data_desc_init(
                cd, conv, &m->src_a, &m->wei_a, &m->dst_a, m->strides, m->dil, m->padl, m->padr));
        return DN_RC(dnnl_dilated_deconvolution_backward_data_desc_init(
            dd, deconv, &m->src_a, &m->wei_a, &m->dst_a, m->strides, m->dil, m->padl, m->padr));
    default:
        if (!p->transposed)
            return DN_RC(dnnl_dilated_convolution_backward_weights_desc_init(
                cd, conv, &m->src_a, &m->wei_a, bia, &m->dst_a, m->strides, m->dil, m->padl,
                m->padr));
        return DN_RC(dnnl_dilated_deconvolution_backward_weights_desc_init(
            dd, deconv, &m->src_a, &m->wei_a, bia, &m->dst_a, m->strides, m->dil, m->padl,
            m->padr));
    }
}

/* The three convolution kinds; the backward ones take the forward pd as their hint. */
static int conv_build(spec *s, const key *k, const void *arg)
{
    const ct__conv_p *p = arg;
    int role = k->kind, rc = 0;
    conv_mds m;
    conv_mds_init(&m, p, role);
    if ((role != K_CONV_FWD && (rc = hint_make(s, k, K_CONV_FWD, p)) < 0) ||
        (rc = conv_desc(s, p, &m, role)) < 0)
        return rc;
    weighted_args(s, role - K_CONV_FWD, p->bias, &m.src, &m.wei, &m.bia, &m.dst);
    s->work = conv_work(p);
    return 0;
}

/* Runs the convolution kind on p's shapes; op names it in a precision refusal. */
static int conv_run(int kind, const char *op, const ct__conv_p *p, void *const *ptrs)
{
    int rc = ct__cpu_lp_check(p->dt, op);
    if (rc < 0)
        return rc;
    key k;
    conv_key(&k, kind, p);
    return run(&k, p, ptrs);
}

int ct__cpu_conv_fwd(const ct__conv_p *p, const float *x, const float *w, const float *b, float *y)
{
    void *ptrs[4] = {(void *)x, (void *)w, y, (void *)b};
    return conv_run(K_CONV_FWD, "conv_fwd", p, ptrs);
}

int ct__cpu_conv_bwd_data(const ct__conv_p *p, const float *w, const float *dy, float *dx)
{
    void *ptrs[3] = {(void *)w, (void *)dy, dx};
    return conv_run(K_CONV_BWD_D, "conv_bwd_data", p, ptrs);
}

int ct__cpu_conv_bwd_weights(const ct__conv_p *p, const float *x, const float *dy, float *dw,
                             float *db)
{
    void *ptrs[4] = {(void *)x, (void *)dy, dw, db};
    return conv_run(K_CONV_BWD_W, "conv_bwd_weights", p, ptrs);
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

/* Whether a Linear's forward for n rows (k and m the other sizes) runs in gemm_rows.c: at most
 * CT__CPU_ROWS_MAX rows, past gemm.c's small products, on one thread where oneDNN's kernels have
 * AVX-512 (its inner product copies the whole weight on every call, which a micro-batch of 32 rows
 * does not pay for; gemm_rows.c's header has the figures). */
static bool rows_here(int64_t n, int64_t k, int64_t m)
{
    if (n < 1 || n > CT__CPU_ROWS_MAX || n * k * m <= SMALL_WORK || omp_get_max_threads() != 1 ||
        !ct__cpu_rows_runs())
        return false;
    unsigned avx512 = (unsigned)dnnl_cpu_isa_avx512_core;
    return ((unsigned)dnnl_get_effective_cpu_isa() & avx512) == avx512;
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

/* The three inner-product kinds. Key: (n, ic, oc, bias; no bias for K_IP_BWD_D). The backward
 * ones take a forward pd as their hint: with a bias for the data gradient, whether the layer
 * has one or not. */
static int ip_build(spec *s, const key *k, const void *unused)
{
    int64_t n = k->v[0], ic = k->v[1], oc = k->v[2];
    int role = k->kind, rc = 0;
    ip_mds m;
    ip_mds_init(&m, n, ic, oc);
    const dnnl_memory_desc_t *bia = k->v[3] ? &m.bia : NULL;
    key fk = *k;
    fk.v[3] = role == K_IP_BWD_D ? 1 : k->v[3];
    if (role != K_IP_FWD && (rc = hint_make(s, &fk, K_IP_FWD, unused)) < 0)
        return rc;
    if (role == K_IP_FWD)
        rc = DN_RC(dnnl_inner_product_forward_desc_init(&s->op.ip, dnnl_forward_training, &m.src,
                                                        &m.wei, bia, &m.dst));
    else if (role == K_IP_BWD_D)
        rc = DN_RC(dnnl_inner_product_backward_data_desc_init(&s->op.ip, &m.src, &m.wei, &m.dst));
    else
        rc = DN_RC(
            dnnl_inner_product_backward_weights_desc_init(&s->op.ip, &m.src, &m.wei, bia, &m.dst));
    if (rc < 0)
        return rc;
    weighted_args(s, role - K_IP_FWD, bia != NULL, &m.src, &m.wei, &m.bia, &m.dst);
    s->work = n * ic * oc;
    return 0;
}

int ct__cpu_ip_fwd(int64_t n, int64_t ic, int64_t oc, const float *x, const float *w,
                   const float *b, float *y)
{
    if (gemm_here(n, ic, oc, false, true)) /* y = x w^T + b */
        return ct__cpu_gemm(n, ic, oc, x, false, w, true, y, false, b);
    if (rows_here(n, ic, oc))
        return ct__cpu_rows_fwd(n, ic, oc, x, w, b, y);
    key k = {.kind = K_IP_FWD, .v = {n, ic, oc, b != NULL}};
    void *ptrs[4] = {(void *)x, (void *)w, y, (void *)b};
    return run(&k, NULL, ptrs);
}

int ct__cpu_ip_bwd_data(int64_t n, int64_t ic, int64_t oc, const float *w, const float *dy,
                        float *dx)
{
    if (gemm_here(n, oc, ic, false, false)) /* dx = dy w */
        return ct__cpu_gemm(n, oc, ic, dy, false, w, false, dx, false, NULL);
    key k = {.kind = K_IP_BWD_D, .v = {n, ic, oc}};
    void *ptrs[3] = {(void *)w, (void *)dy, dx};
    return run(&k, NULL, ptrs);
}

int ct__cpu_ip_bwd_weights(int64_t n, int64_t ic, int64_t oc, const float *x, const float *dy,
                           float *dw, float *db)
{
    if (gemm_here(oc, n, ic, true, false)) /* dw = dy^T x, db = dy's column sums */
        return ct__cpu_gemm_wgrad(oc, n, ic, dy, x, dw, db);
    key k = {.kind = K_IP_BWD_W, .v = {n, ic, oc, db != NULL}};
    void *ptrs[4] = {(void *)x, (void *)dy, dw, db};
    return run(&k, NULL, ptrs);
}

/* ---------------- matmul ---------------- */

/* c (m x n, f32) = op(a) op(b), or += with accumulate; the operands are the caller's f32,
 * multiplied in f32 (K_MATMUL) or in the key's autocast dtype (K_MATMUL_LP: oneDNN reorders,
 * that is rounds, them, since entry_make's arguments are f32 and the primitive's are not),
 * accumulated in f32. Key: (m, k, n, ta, tb, accumulate, dtype). */
static int matmul_build(spec *s, const key *k, const void *unused)
{
    (void)unused;
    int64_t m = k->v[0], kk = k->v[1], n = k->v[2];
    bool ta = k->v[3] != 0, tb = k->v[4] != 0, accumulate = k->v[5] != 0;
    dnnl_data_type_t in = k->kind == K_MATMUL_LP ? lp_type((int)k->v[6]) : dnnl_f32;
    int rc;
    dnnl_post_ops_t po = NULL;
    dnnl_memory_desc_t am, bm, cm, aim, bim;
    dnnl_dims_t ad = {m, kk}, bd = {kk, n}, cd = {m, n};
    dnnl_dims_t as_ = {ta ? 1 : kk, ta ? m : 1}, bs = {tb ? 1 : n, tb ? kk : 1}, cs = {n, 1};
    if ((rc = DN_RC(dnnl_memory_desc_init_by_strides(&am, 2, ad, dnnl_f32, as_))) < 0 ||
        (rc = DN_RC(dnnl_memory_desc_init_by_strides(&bm, 2, bd, dnnl_f32, bs))) < 0 ||
        (rc = DN_RC(dnnl_memory_desc_init_by_strides(&aim, 2, ad, in, as_))) < 0 ||
        (rc = DN_RC(dnnl_memory_desc_init_by_strides(&bim, 2, bd, in, bs))) < 0 ||
        (rc = DN_RC(dnnl_memory_desc_init_by_strides(&cm, 2, cd, dnnl_f32, cs))) < 0 ||
        (rc = DN_RC(dnnl_primitive_attr_create(&s->attr))) < 0)
        goto out;
    /* the attributes keep a copy of the post-ops */
    if (accumulate && ((rc = DN_RC(dnnl_post_ops_create(&po))) < 0 ||
                       (rc = DN_RC(dnnl_post_ops_append_sum(po, 1.0f))) < 0 ||
                       (rc = DN_RC(dnnl_primitive_attr_set_post_ops(s->attr, po))) < 0))
        goto out;
    if ((rc = DN_RC(dnnl_matmul_desc_init(&s->op.mm, &aim, &bim, NULL, &cm))) < 0)
        goto out;
    aspec as[3] = {{DNNL_ARG_SRC, &am, 0}, {DNNL_ARG_WEIGHTS, &bm, 0}, {DNNL_ARG_DST, &cm, 1}};
    spec_args(s, 3, as);
    s->work = m * kk * n;
out:
    if (po)
        dnnl_post_ops_destroy(po);
    return rc;
}

int ct__cpu_matmul(int64_t m, int64_t kk, int64_t n, const float *a, bool ta, const float *b,
                   bool tb, float *c, bool accumulate)
{
    if (gemm_here(m, kk, n, ta, tb))
        return ct__cpu_gemm(m, kk, n, a, ta, b, tb, c, accumulate, NULL);
    key k = {.kind = K_MATMUL, .v = {m, kk, n, ta, tb, accumulate}};
    void *ptrs[3] = {(void *)a, (void *)b, c};
    return run(&k, NULL, ptrs);
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
    void *ptrs[3] = {(void *)a, (void *)b, c};
    return run(&k, NULL, ptrs);
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

static int bn_train_build(spec *s, const key *k, const void *arg)
{
    (void)k;
    const ct__bn_p *p = arg;
    dnnl_memory_desc_t data, vec;
    bn_mds(p, &data, &vec);
    int rc = DN_RC(dnnl_batch_normalization_forward_desc_init(&s->op.bn, dnnl_forward_training,
                                                              &data, p->eps, bn_flags(p)));
    if (rc < 0)
        return rc;
    aspec as[7] = {{DNNL_ARG_SRC, &data, 0},     {DNNL_ARG_SCALE, &vec, 0},
                   {DNNL_ARG_SHIFT, &vec, 0},    {DNNL_ARG_DST, &data, 1},
                   {DNNL_ARG_MEAN, &vec, 1},     {DNNL_ARG_VARIANCE, &vec, 1},
                   {DNNL_ARG_WORKSPACE, NULL, 1}};
    spec_args(s, p->relu ? 7 : 6, as);
    s->work = 4 * p->n * p->c * p->hw;
    return 0;
}

static int bn_infer_build(spec *s, const key *k, const void *arg)
{
    (void)k;
    const ct__bn_p *p = arg;
    dnnl_memory_desc_t data, vec;
    bn_mds(p, &data, &vec);
    int rc = DN_RC(dnnl_batch_normalization_forward_desc_init(
        &s->op.bn, dnnl_forward_inference, &data, p->eps, bn_flags(p) | dnnl_use_global_stats));
    if (rc < 0)
        return rc;
    aspec as[6] = {{DNNL_ARG_SRC, &data, 0},     {DNNL_ARG_SCALE, &vec, 0},
                   {DNNL_ARG_SHIFT, &vec, 0},    {DNNL_ARG_MEAN, &vec, 0},
                   {DNNL_ARG_VARIANCE, &vec, 0}, {DNNL_ARG_DST, &data, 1}};
    spec_args(s, 6, as);
    s->work = 4 * p->n * p->c * p->hw;
    return 0;
}

static int bn_bwd_build(spec *s, const key *k, const void *arg)
{
    const ct__bn_p *p = arg;
    dnnl_memory_desc_t data, vec;
    bn_mds(p, &data, &vec);
    int rc;
    if ((rc = hint_make(s, k, K_BN_FWD_TRAIN, p)) < 0 ||
        (rc = DN_RC(dnnl_batch_normalization_backward_desc_init(&s->op.bn, dnnl_backward, &data,
                                                                &data, p->eps, bn_flags(p)))) < 0)
        return rc;
    aspec as[10] = {{DNNL_ARG_SRC, &data, 0},       {DNNL_ARG_DIFF_DST, &data, 0},
                    {DNNL_ARG_SCALE, &vec, 0},      {DNNL_ARG_MEAN, &vec, 0},
                    {DNNL_ARG_VARIANCE, &vec, 0},   {DNNL_ARG_DIFF_SRC, &data, 1},
                    {DNNL_ARG_DIFF_SCALE, &vec, 1}, {DNNL_ARG_DIFF_SHIFT, &vec, 1},
                    {DNNL_ARG_SHIFT, &vec, 0},      {DNNL_ARG_WORKSPACE, NULL, 0}};
    spec_args(s, p->relu ? 10 : 9, as);
    s->work = 6 * p->n * p->c * p->hw;
    return 0;
}

size_t ct__cpu_bn_ws_bytes(const ct__bn_p *p)
{
    key k;
    bn_key(&k, K_BN_FWD_TRAIN, p);
    return ws_bytes(&k, p);
}

int ct__cpu_bn_fwd_train(const ct__bn_p *p, const float *x, const float *scale, const float *shift,
                         float *y, float *mean, float *var, void *ws)
{
    key k;
    bn_key(&k, K_BN_FWD_TRAIN, p);
    void *ptrs[7] = {(void *)x, (void *)scale, (void *)shift, y, mean, var, ws};
    return run(&k, p, ptrs);
}

int ct__cpu_bn_fwd_infer(const ct__bn_p *p, const float *x, const float *scale, const float *shift,
                         const float *mean, const float *var, float *y)
{
    key k;
    bn_key(&k, K_BN_FWD_INFER, p);
    void *ptrs[6] = {(void *)x, (void *)scale, (void *)shift, (void *)mean, (void *)var, y};
    return run(&k, p, ptrs);
}

int ct__cpu_bn_bwd(const ct__bn_p *p, const float *x, const float *dy, const float *scale,
                   const float *mean, const float *var, const void *ws, float *dx, float *dscale,
                   float *dshift)
{
    key k;
    bn_key(&k, K_BN_BWD, p);
    /* shift is not read by the backward pass, but oneDNN 2.6 wants the argument */
    void *ptrs[10] = {(void *)x, (void *)dy, (void *)scale, (void *)mean,  (void *)var,
                      dx,        dscale,     dshift,        (void *)scale, (void *)ws};
    return run(&k, p, ptrs);
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

/* Key: pool_key's, with f[0] 1 when training. */
static int pool_fwd_build(spec *s, const key *k, const void *arg)
{
    const ct__pool_p *p = arg;
    bool training = k->f[0] != 0.0f;
    pool_mds m;
    pool_mds_init(&m, p);
    int rc = DN_RC(dnnl_pooling_v2_forward_desc_init(
        &s->op.pool, training ? dnnl_forward_training : dnnl_forward_inference, m.alg, &m.src,
        &m.dst, m.strides, m.kernel, m.dil, m.padl, m.padr));
    if (rc < 0)
        return rc;
    bool ws = training && p->alg == CT__POOL_MAX;
    aspec as[3] = {
        {DNNL_ARG_SRC, &m.src, 0}, {DNNL_ARG_DST, &m.dst, 1}, {DNNL_ARG_WORKSPACE, NULL, 1}};
    spec_args(s, ws ? 3 : 2, as);
    s->work = pool_work(p);
    return 0;
}

static int pool_bwd_build(spec *s, const key *k, const void *arg)
{
    const ct__pool_p *p = arg;
    int rc = hint_cached(s, k, K_POOL_FWD, p);
    if (rc < 0)
        return rc;
    pool_mds m;
    pool_mds_init(&m, p);
    if ((rc = DN_RC(dnnl_pooling_v2_backward_desc_init(
             &s->op.pool, m.alg, &m.src, &m.dst, m.strides, m.kernel, m.dil, m.padl, m.padr))) < 0)
        return rc;
    bool w = p->alg == CT__POOL_MAX;
    aspec as[3] = {{DNNL_ARG_DIFF_DST, &m.dst, 0},
                   {DNNL_ARG_DIFF_SRC, &m.src, 1},
                   {DNNL_ARG_WORKSPACE, NULL, 0}};
    spec_args(s, w ? 3 : 2, as);
    s->work = pool_work(p);
    return 0;
}

size_t ct__cpu_pool_ws_bytes(const ct__pool_p *p)
{
    key k;
    pool_key(&k, K_POOL_FWD, p, true);
    return ws_bytes(&k, p);
}

int ct__cpu_pool_fwd(const ct__pool_p *p, const float *x, float *y, void *ws, bool training)
{
    key k;
    pool_key(&k, K_POOL_FWD, p, training);
    void *ptrs[3] = {(void *)x, y, ws};
    return run(&k, p, ptrs);
}

int ct__cpu_pool_bwd(const ct__pool_p *p, const float *dy, const void *ws, float *dx)
{
    key k;
    pool_key(&k, K_POOL_BWD, p, true);
    void *ptrs[3] = {(void *)dy, dx, (void *)ws};
    return run(&k, p, ptrs);
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

/* Key: (alg, n), f[0] alpha. */
static int elt_fwd_build(spec *s, const key *k, const void *unused)
{
    (void)unused;
    int64_t n = k->v[1];
    dnnl_memory_desc_t md = md_plain(1, &n);
    int rc = DN_RC(dnnl_eltwise_forward_desc_init(&s->op.elt, dnnl_forward_training,
                                                  elt_alg((int)k->v[0]), &md, k->f[0], 0.0f));
    if (rc < 0)
        return rc;
    aspec as[2] = {{DNNL_ARG_SRC, &md, 0}, {DNNL_ARG_DST, &md, 1}};
    spec_args(s, 2, as);
    s->work = 8 * n;
    return 0;
}

static int elt_bwd_build(spec *s, const key *k, const void *unused)
{
    int64_t n = k->v[1];
    dnnl_memory_desc_t md = md_plain(1, &n);
    int rc;
    if ((rc = hint_cached(s, k, K_ELT_FWD, unused)) < 0 ||
        (rc = DN_RC(dnnl_eltwise_backward_desc_init(&s->op.elt, elt_alg((int)k->v[0]), &md, &md,
                                                    k->f[0], 0.0f))) < 0)
        return rc;
    aspec as[3] = {
        {DNNL_ARG_DST, &md, 0}, {DNNL_ARG_DIFF_DST, &md, 0}, {DNNL_ARG_DIFF_SRC, &md, 1}};
    spec_args(s, 3, as);
    s->work = 8 * n;
    return 0;
}

int ct__cpu_eltwise_fwd(int alg, float alpha, int64_t n, const float *x, float *y)
{
    key k = {.kind = K_ELT_FWD, .v = {alg, n}, .f = {alpha}};
    void *ptrs[2] = {(void *)x, y};
    return run(&k, NULL, ptrs);
}

int ct__cpu_eltwise_bwd(int alg, float alpha, int64_t n, const float *y, const float *dy, float *dx)
{
    key k = {.kind = K_ELT_BWD, .v = {alg, n}, .f = {alpha}};
    void *ptrs[3] = {(void *)y, (void *)dy, dx};
    return run(&k, NULL, ptrs);
}

/* ---------------- softmax ---------------- */

/* Key: (log, rows, cols). */
static int sm_fwd_build(spec *s, const key *k, const void *unused)
{
    (void)unused;
    int64_t dims[2] = {k->v[1], k->v[2]};
    dnnl_memory_desc_t md = md_plain(2, dims);
    int rc = DN_RC(dnnl_softmax_v2_forward_desc_init(
        &s->op.sm, dnnl_forward_training, k->v[0] ? dnnl_softmax_log : dnnl_softmax_accurate, &md,
        &md, 1));
    if (rc < 0)
        return rc;
    aspec as[2] = {{DNNL_ARG_SRC, &md, 0}, {DNNL_ARG_DST, &md, 1}};
    spec_args(s, 2, as);
    s->work = 8 * dims[0] * dims[1];
    return 0;
}

static int sm_bwd_build(spec *s, const key *k, const void *unused)
{
    int64_t dims[2] = {k->v[1], k->v[2]};
    dnnl_memory_desc_t md = md_plain(2, dims);
    int rc;
    if ((rc = hint_cached(s, k, K_SM_FWD, unused)) < 0 ||
        (rc = DN_RC(dnnl_softmax_v2_backward_desc_init(
             &s->op.sm, k->v[0] ? dnnl_softmax_log : dnnl_softmax_accurate, &md, &md, &md, 1))) < 0)
        return rc;
    aspec as[3] = {
        {DNNL_ARG_DST, &md, 0}, {DNNL_ARG_DIFF_DST, &md, 0}, {DNNL_ARG_DIFF_SRC, &md, 1}};
    spec_args(s, 3, as);
    s->work = 8 * dims[0] * dims[1];
    return 0;
}

int ct__cpu_softmax_fwd(bool log, int64_t rows, int64_t cols, const float *x, float *y)
{
    key k = {.kind = K_SM_FWD, .v = {log, rows, cols}};
    void *ptrs[2] = {(void *)x, y};
    return run(&k, NULL, ptrs);
}

int ct__cpu_softmax_bwd(bool log, int64_t rows, int64_t cols, const float *y, const float *dy,
                        float *dx)
{
    key k = {.kind = K_SM_BWD, .v = {log, rows, cols}};
    void *ptrs[3] = {(void *)y, (void *)dy, dx};
    return run(&k, NULL, ptrs);
}

/* ---------------- the cache: a kind's build function, made once, run per call ---------------- */

/* Each kind's build function: the only table of primitives. */
static const build_fn BUILD[K_COUNT] = {
    [K_CONV_FWD] = conv_build,         [K_CONV_BWD_D] = conv_build,
    [K_CONV_BWD_W] = conv_build,       [K_IP_FWD] = ip_build,
    [K_IP_BWD_D] = ip_build,           [K_IP_BWD_W] = ip_build,
    [K_MATMUL] = matmul_build,         [K_MATMUL_LP] = matmul_build,
    [K_BN_FWD_TRAIN] = bn_train_build, [K_BN_FWD_INFER] = bn_infer_build,
    [K_BN_BWD] = bn_bwd_build,         [K_POOL_FWD] = pool_fwd_build,
    [K_POOL_BWD] = pool_bwd_build,     [K_ELT_FWD] = elt_fwd_build,
    [K_ELT_BWD] = elt_bwd_build,       [K_SM_FWD] = sm_fwd_build,
    [K_SM_BWD] = sm_bwd_build,         [K_REORDER] = reorder_build,
};

static int build(spec *s, const key *k, const void *p)
{
    if (k->kind <= 0 || k->kind >= K_COUNT || !BUILD[k->kind])
        return ct__error(CT_EINVAL, "dnnl: no build function for primitive kind %d", k->kind);
    return BUILD[k->kind](s, k, p);
}

/* *out: k's entry, made by its kind's build function and cached on the first call. Caller
 * holds G.mu, the engine made. */
static int cached(entry **out, const key *k, const void *p)
{
    return cached_entry(out, k, p, false);
}

/* An entry of k (idle_only: one no thread runs now), made and cached when there is none. */
static int cached_entry(entry **out, const key *k, const void *p, bool idle_only)
{
    uint64_t h;
    entry *e = lookup(k, &h, idle_only);
    if (e) {
        *out = e;
        return 0;
    }
    spec s;
    memset(&s, 0, sizeof s);
    int rc;
    if ((rc = build(&s, k, p)) == 0 && (rc = entry_make(&e, k, h, &s)) == 0) {
        insert(e);
        *out = e;
    }
    spec_fini(&s);
    return rc;
}

/* Runs k's primitive with ptrs[i] as the data of its argument i: G.mu is held to find (or
 * make) an idle entry of k and mark it busy, not while it runs, so that threads (the stage
 * threads of a pipeline) run their primitives at the same time; two threads with the same
 * shape each get an entry of their own. */
static int run(const key *k, const void *p, void *const *ptrs)
{
    entry *e;
    int rc;
    pthread_mutex_lock(&G.mu);
    if ((rc = ensure_engine()) == 0 && (rc = cached_entry(&e, k, p, true)) == 0)
        e->busy = 1;
    pthread_mutex_unlock(&G.mu);
    if (rc < 0)
        return rc;
    rc = entry_run(e, ptrs);
    pthread_mutex_lock(&G.mu);
    e->busy = 0;
    pthread_mutex_unlock(&G.mu);
    return rc;
}

/* The workspace size of k's primitive; 0 when it has none or cannot be made. */
static size_t ws_bytes(const key *k, const void *p)
{
    entry *e;
    size_t n = 0;
    pthread_mutex_lock(&G.mu);
    if (ensure_engine() == 0 && cached(&e, k, p) == 0)
        n = e->ws_bytes;
    pthread_mutex_unlock(&G.mu);
    return n;
}

/* ---------------- misc ---------------- */

void ct__cpu_set_threads(int n)
{
    if (n <= 0) { /* the count OpenMP starts with: OMP_NUM_THREADS, or all cores */
        const char *env = ct__env(CT__ENV_OMP_NUM_THREADS);
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
    if (G.engine)
        dnnl_engine_destroy(G.engine);
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
