/* trainer/pipeline/pipe_ckpt.c — checkpoints of a pipeline job (stage.h): every stage's parameters
 * and Adam state gathered into one file in the trainer's checkpoint format (trainer/train/ckpt.c:
 * model "gpt" with its config keys, optimizer "adam", the steps done), the file a single-process
 * GPT's trainer writes; ct_module_load reads its weights into a whole GPT. A stage starts from
 * one by loading it into a whole GPT and a whole Adam (ct__ckpt_load), then taking its own part:
 * the weights by name, and the optimizer entries of its own parameters (names are the GPT's).
 *
 * A stage's "state" reply (stage_actor.c): entries of a kind byte, u32 name length, the name,
 * then for 'P' (a parameter) and 'T' (an optimizer tensor) u64 numel and numel f32, for 'S' (an
 * optimizer scalar) one double. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "ct/optim.h"
#include "stage.h"
#include "trainer/train/internal.h"

/* the trainer's spec of a job's checkpoint: what ckpt.c writes and checks */
static void job_spec(const ct__pipe_job_opts *o, tr_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    snprintf(spec->model, sizeof spec->model, "gpt");
    snprintf(spec->optimizer, sizeof spec->optimizer, "adam");
    snprintf(spec->loss, sizeof spec->loss, "cross_entropy");
    snprintf(spec->config, sizeof spec->config,
             "n_layer=%d,n_head=%d,n_embd=%lld,block_size=%lld,vocab_size=%lld,dropout=%g,lr=%g",
             o->gpt.n_layer, o->gpt.n_head, (long long)o->gpt.n_embd, (long long)o->gpt.block_size,
             (long long)o->gpt.vocab_size, (double)o->gpt.dropout, (double)o->lr);
    spec->seed = o->seed;
    spec->batch = o->batch;
}

/* a whole GPT and an Adam over it */
static int whole_new(const ct__pipe_job_opts *o, ct_module **m, ct_optim **opt)
{
    const ct_param_ref *refs = NULL;
    int np = 0;
    *opt = NULL;
    if (!(*m = ct_nn_gpt_new(&o->gpt)))
        return CT_EINVAL;
    int rc = ct_module_params(*m, &refs, &np);
    if (rc == 0 && !(*opt = ct_optim_adam_new(refs, np, &(ct_adam_opts){.lr = o->lr})))
        rc = CT_EINVAL;
    return rc;
}

static void put(char **p, const void *src, size_t n)
{
    memcpy(*p, src, n);
    *p += n;
}

int ct__pipe_stage_state(ct_module *m, ct_optim *opt, void **out, size_t *out_len)
{
    const ct_named_tensor *sd = NULL;
    const ct_state_entry *oe = NULL;
    int nsd = 0, noe = 0, rc = ct_module_state_dict(m, &sd, &nsd);
    if (rc == 0)
        rc = ct_optim_state_dict(opt, &oe, &noe);
    if (rc < 0)
        return rc;
    size_t bytes = 0;
    for (int i = 0; i < nsd; i++)
        bytes += 13 + strlen(sd[i].name) + (size_t)ct_tensor_numel(sd[i].tensor) * 4;
    for (int i = 0; i < noe; i++)
        bytes += 5 + strlen(oe[i].name) +
                 (oe[i].kind == CT_STATE_TENSOR   ? 8 + (size_t)oe[i].numel * 4
                  : oe[i].kind == CT_STATE_SCALAR ? 8
                                                  : 0);
    char *buf = malloc(bytes ? bytes : 1), *p = buf;
    if (!buf)
        return ct__error(CT_ENOMEM, "pipeline checkpoint: out of memory");
    for (int i = 0; i < nsd; i++) {
        /* a read, not an op: on the tape the copy would hold its parameter to the next backward */
        bool grad_mode = ct_autograd_set_enabled(false);
        ct_tensor *host = ct_tensor_to(sd[i].tensor, CT_CPU);
        ct_autograd_set_enabled(grad_mode);
        if (!host) {
            free(buf);
            return CT_ENOMEM;
        }
        uint32_t nl = (uint32_t)strlen(sd[i].name);
        uint64_t numel = (uint64_t)ct_tensor_numel(host);
        put(&p, "P", 1);
        put(&p, &nl, 4);
        put(&p, sd[i].name, nl);
        put(&p, &numel, 8);
        put(&p, ct_tensor_data(host), numel * 4);
        ct_tensor_release(&host);
    }
    for (int i = 0; i < noe; i++) {
        if (oe[i].kind == CT_STATE_STRING)
            continue; /* "type": the whole model's optimizer is an Adam too */
        uint32_t nl = (uint32_t)strlen(oe[i].name);
        put(&p, oe[i].kind == CT_STATE_TENSOR ? "T" : "S", 1);
        put(&p, &nl, 4);
        put(&p, oe[i].name, nl);
        if (oe[i].kind == CT_STATE_TENSOR) {
            uint64_t numel = (uint64_t)oe[i].numel;
            put(&p, &numel, 8);
            put(&p, oe[i].data, numel * 4);
        } else {
            put(&p, &oe[i].scalar, 8);
        }
    }
    *out = buf;
    *out_len = (size_t)(p - buf);
    return 0;
}

/* one entry of a state reply at *at: kind, name (not NUL-terminated), its data */
typedef struct {
    char kind;
    const char *name;
    uint32_t nl;
    uint64_t numel;
    const char *data;
} entry;

static int next_entry(const char *buf, size_t len, size_t *at, entry *e)
{
    if (len - *at < 5)
        return CT_EPROTO;
    e->kind = buf[*at];
    memcpy(&e->nl, buf + *at + 1, 4);
    if (len - *at - 5 < e->nl)
        return CT_EPROTO;
    e->name = buf + *at + 5;
    size_t at2 = *at + 5 + e->nl;
    if (e->kind == 'S') {
        if (len - at2 < 8)
            return CT_EPROTO;
        e->numel = 1;
        e->data = buf + at2;
        *at = at2 + 8;
        return 0;
    }
    if ((e->kind != 'P' && e->kind != 'T') || len - at2 < 8)
        return CT_EPROTO;
    memcpy(&e->numel, buf + at2, 8);
    if ((len - at2 - 8) / 4 < e->numel)
        return CT_EPROTO;
    e->data = buf + at2 + 8;
    *at = at2 + 8 + e->numel * 4;
    return 0;
}

/* the stages' replies into the whole model and the optimizer entries oe (names point into the
 * replies; the first stage's entry of a name wins: the tied embedding's copies are equal) */
static int merge(ct_module *whole, const char *kind, void *const *replies, const size_t *lens,
                 int stages, ct_state_entry *oe, char (*names)[160], float **copies, int cap,
                 int *noe)
{
    const ct_named_tensor *sd = NULL;
    int nsd = 0, rc = ct_module_state_dict(whole, &sd, &nsd);
    *noe = 0;
    oe[(*noe)++] = (ct_state_entry){.name = "type", .kind = CT_STATE_STRING, .str = kind};
    for (int s = 0; s < stages && rc == 0; s++) {
        const char *buf = replies[s];
        for (size_t at = 0; rc == 0 && at < lens[s];) {
            entry e;
            if ((rc = next_entry(buf, lens[s], &at, &e)) < 0) {
                rc = ct__error(rc, "pipeline checkpoint: stage %d's state is malformed", s);
                break;
            }
            if (e.kind == 'P') {
                int k = 0;
                while (k < nsd && (strlen(sd[k].name) != e.nl || memcmp(sd[k].name, e.name, e.nl)))
                    k++;
                if (k == nsd || (uint64_t)ct_tensor_numel(sd[k].tensor) != e.numel)
                    rc = ct__error(CT_EPROTO,
                                   "pipeline checkpoint: stage %d's \"%.*s\" is not "
                                   "the GPT's",
                                   s, (int)e.nl, e.name);
                else
                    memcpy(ct_tensor_data(sd[k].tensor), e.data, e.numel * 4);
                continue;
            }
            if (e.nl >= sizeof names[0])
                return ct__error(CT_EPROTO, "pipeline checkpoint: a name too long");
            int k = 1;
            while (k < *noe && (strlen(oe[k].name) != e.nl || memcmp(oe[k].name, e.name, e.nl)))
                k++;
            if (k < *noe)
                continue; /* the tied embedding's, from the last stage: equal */
            if (*noe == cap)
                return ct__error(CT_ENOMEM, "pipeline checkpoint: too many optimizer entries");
            snprintf(names[*noe], sizeof names[0], "%.*s", (int)e.nl, e.name);
            ct_state_entry *o = &oe[(*noe)++];
            *o = (ct_state_entry){.name = names[*noe - 1]};
            if (e.kind == 'T') {
                o->kind = CT_STATE_TENSOR;
                o->numel = (int64_t)e.numel;
                /* the reply's bytes may be unaligned for floats */
                if (!(copies[*noe - 1] = malloc(e.numel ? e.numel * 4 : 1)))
                    return ct__error(CT_ENOMEM, "pipeline checkpoint: out of memory");
                memcpy(copies[*noe - 1], e.data, e.numel * 4);
                o->data = copies[*noe - 1];
            } else {
                o->kind = CT_STATE_SCALAR;
                memcpy(&o->scalar, e.data, 8);
            }
        }
    }
    return rc;
}

static int write_file(const char *path, const void *buf, size_t len)
{
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int rc = f && fwrite(buf, 1, len, f) == len ? 0 : CT_EIO;
    if (f && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        rc = CT_EIO;
    if (f && fclose(f) != 0)
        rc = CT_EIO;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = CT_EIO;
    if (rc < 0)
        return ct__error(rc, "pipeline checkpoint: cannot write %s", path);
    return 0;
}

int ct__pipe_gather(ct_module *whole, ct_optim *opt, void *const *replies, const size_t *lens,
                    int stages)
{
    enum { CAP = 4096 };
    ct_state_entry *oe = calloc(CAP, sizeof *oe);
    char(*names)[160] = calloc(CAP, sizeof *names);
    float **copies = calloc(CAP, sizeof *copies);
    int noe = 0, rc = oe && names && copies
                          ? merge(whole, ct_optim_kind(opt), replies, lens, stages, oe, names,
                                  copies, CAP, &noe)
                          : ct__error(CT_ENOMEM, "pipeline checkpoint: out of memory");
    if (rc == 0 && (rc = ct_optim_load_state_dict(opt, oe, noe)) < 0)
        ct__error(rc, "pipeline checkpoint: the stages' optimizer state: %s", ct_last_error());
    for (int i = 0; copies && i < CAP; i++)
        free(copies[i]);
    free(copies);
    free(oe);
    free(names);
    return rc;
}

int ct__pipe_ckpt_save(const ct__pipe_job_opts *o, void *const *replies, const size_t *lens,
                       int64_t step, const char *path)
{
    ct_module *whole = NULL;
    ct_optim *adam = NULL;
    tr_ckpt_plan *plan = NULL;
    void *buf = NULL;
    int rc = whole_new(o, &whole, &adam);
    if (rc == 0)
        rc = ct__pipe_gather(whole, adam, replies, lens, o->stages);
    tr_spec spec;
    job_spec(o, &spec);
    tr_state st = {.nmodels = 1, .models = {whole}, .optims = {adam}, .step = step, .world = 1};
    if (rc == 0)
        rc = ct__ckpt_plan(&st, &spec, 1, NULL, &plan);
    size_t size = plan ? ct__ckpt_size(plan) : 0;
    if (rc == 0 && !(buf = malloc(size)))
        rc = ct__error(CT_ENOMEM, "pipeline checkpoint: out of memory");
    if (rc == 0) {
        ct__ckpt_write(plan, buf);
        rc = write_file(path, buf, size);
    }
    free(buf);
    ct__ckpt_plan_free(&plan);
    ct_optim_destroy(&adam);
    ct_module_destroy(&whole);
    return rc;
}

/* is entry name "<param>.<state>" of one of m's parameters (or not a parameter's: kept)? */
static bool mine(const char *name, const ct_param_ref *refs, int np)
{
    if (!strcmp(name, "type") || !strncmp(name, "param_groups.", 13))
        return true;
    for (int i = 0; i < np; i++) {
        size_t n = strlen(refs[i].name);
        if (!strncmp(name, refs[i].name, n) && name[n] == '.' && !strchr(name + n + 1, '.'))
            return true;
    }
    return false;
}

int ct__pipe_take_part(ct_module *whole, ct_optim *whole_opt, ct_module *stage, ct_optim *opt)
{
    const ct_named_tensor *sd = NULL;
    const ct_state_entry *oe = NULL;
    const ct_param_ref *refs = NULL;
    int nsd = 0, noe = 0, np = 0, rc = ct_module_state_dict(whole, &sd, &nsd);
    if (rc == 0)
        rc = ct_module_load_state_dict(stage, sd, nsd, false);
    if (rc == 0 && (rc = ct_optim_state_dict(whole_opt, &oe, &noe)) == 0)
        rc = ct_module_params(stage, &refs, &np);
    ct_state_entry *keep = rc == 0 ? calloc((size_t)noe + 1, sizeof *keep) : NULL;
    int nk = 0;
    if (rc == 0 && !keep)
        rc = ct__error(CT_ENOMEM, "pipeline checkpoint: out of memory");
    for (int i = 0; rc == 0 && i < noe; i++)
        if (mine(oe[i].name, refs, np))
            keep[nk++] = oe[i];
    if (rc == 0 && (rc = ct_optim_load_state_dict(opt, keep, nk)) < 0)
        ct__error(rc, "pipeline checkpoint: a stage's optimizer state: %s", ct_last_error());
    free(keep);
    return rc;
}

int ct__pipe_ckpt_load_stage(const ct__pipe_job_opts *o, const char *path, ct_module *stage,
                             ct_optim *opt, int64_t *step)
{
    size_t len = 0;
    void *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct__error(CT_ENOENT, "pipeline checkpoint: cannot open %s", path);
    if (fseek(f, 0, SEEK_END) == 0 && (len = (size_t)ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc(len)) && fread(buf, 1, len, f) != len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (!buf)
        return ct__error(CT_EIO, "pipeline checkpoint: cannot read %s", path);
    ct_module *whole = NULL;
    ct_optim *adam = NULL;
    tr_spec spec;
    job_spec(o, &spec);
    int rc = whole_new(o, &whole, &adam);
    tr_state st = {.nmodels = 1, .models = {whole}, .optims = {adam}, .world = 1};
    if (rc == 0 && (rc = ct__ckpt_load(&st, &spec, buf, len)) < 0)
        ct__error(rc, "pipeline checkpoint %s: %s", path, ct_last_error());
    if (rc == 0)
        rc = ct__pipe_take_part(whole, adam, stage, opt);
    if (rc == 0 && step)
        *step = st.step;
    free(buf);
    ct_optim_destroy(&adam);
    ct_module_destroy(&whole);
    return rc;
}
