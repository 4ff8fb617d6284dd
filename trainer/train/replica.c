/* trainer/train/replica.c — the replica actor: one process of a training group. It builds the
 * model, data, optimizer, loss and scheduler from the registered creators (method "build":
 * only what the program and the spec decide, so that the driver can tell such failures from the
 * node's), then (method "setup") joins the group's communicator (head KV rendezvous), binds its
 * threads to CPUs of its own (cpu_binding.c),
 * restores the checkpoint it is given from the object store, and trains epochs: per batch
 * the train step (step.c; the built-in one or the user's: forward, backward with gradients
 * averaged in buckets while backward runs (ct_bucketer driven by gradient-ready hooks),
 * optimizer step; with accumulation, groups of batches whose last one reduces and steps); the
 * scheduler's step after each epoch (or after each optimizer step, or never:
 * trainer_opts.scheduler_step), rank 0's buffers broadcast at the end of each epoch; rank 0
 * then writes the checkpoint straight into the store. A call trains a segment of an epoch (up
 * to a number of optimizer steps: a checkpoint within the epoch); the loader stays where the
 * segment ended, or seeks to the position a checkpoint gives. Random draws are reseeded
 * before every batch from (seed, epoch, rank, batch), so a segment repeats bit for bit from
 * any batch. Also evaluates its slice of the validation set: when the driver asks, and during
 * training (every N optimizer steps, at the epoch's end; within the segment, before its
 * checkpoint), where every rank's sums are gathered so that all see the same result and step a
 * plateau scheduler alike.
 * While a segment runs, per-step records go to the driver when it asks (records.c).
 * A sharded dataset (trainer_data.sharded) is read as it is, padded to the longest shard.
 * Several models: one bucketer per model, weights and buffers broadcast per model, one weight
 * hash over all.
 * After a peer's death the driver may ask the survivors to "regroup" (live recovery): a new
 * communicator under a new group id, the state agreed, the epoch's rest re-sharded; those
 * methods, and "snapshot" / "heal" for a replacement, are in replica_live.c. The replica's state
 * (struct replica) is in replica.h.
 * Not here: deciding anything about failures (the driver does; a replica just fails its call). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "common/fault.h"
#include "ct/collective.h"
#include "ct/metrics.h"
#include "objectstore/crc32c.h"
#include "replica.h"
#include "trainer/backend/backend.h"

static void replica_free(void *state)
{
    replica *r = state;
    if (!r)
        return;
    for (int i = 0; i < r->st.nmodels; i++) {
        ct_module_on_grad_ready(r->st.models[i], NULL, NULL);
        ct_bucketer_destroy(&r->bucketers[i]); /* before the communicator it uses */
    }
    ct_comm_destroy(&r->ncomm);
    ct_comm_destroy(&r->comm);
    ct__uploader_free(&r->up_x);
    ct__uploader_free(&r->up_y);
    ct_rendezvous_kv_destroy(&r->rdv);
    ct_loader_destroy(&r->loader); /* before the datasets */
    ct__trainer_state_free(&r->st);
    ct__trainer_ctx_free(&r->ctx);
    free(r->vals);
    ct__rec_free(&r->rec);
    ct__gradlog_reset(&r->log);
    free(r);
}

static int replica_new(const void *args, size_t len, void **state)
{
    if (len != sizeof(tr_spec))
        return ct__error(CT_EINVAL, "trainer replica: creation args of %zu bytes, expected %zu",
                         len, sizeof(tr_spec));
    replica *r = calloc(1, sizeof *r);
    if (!r)
        return CT_ENOMEM;
    memcpy(&r->spec, args, sizeof r->spec);
    *state = r;
    return 0;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The training loader. A sharded dataset is this rank's own: not split again, shuffled by a
 * permutation from (seed, rank, epoch), and padded by repeating its order to the longest
 * shard's length (gathered here), so that every rank runs as many steps. */
int ct__replica_loader_new(replica *r)
{
    const tr_setup_args *a = &r->setup;
    ct_loader_opts lo = {.batch_size = r->spec.batch,
                         .shuffle = true,
                         .seed = r->spec.seed,
                         .rank = a->rank,
                         .world_size = a->world,
                         .prefetch = r->st.data.prefetch < 0    ? 0
                                     : r->st.data.prefetch == 0 ? 2
                                                                : r->st.data.prefetch,
                         .transform = r->st.data.transform};
    if (r->st.data.sharded) {
        int64_t *lens = calloc((size_t)a->world, sizeof *lens);
        if (!lens)
            return CT_ENOMEM;
        lens[a->rank] = ct_dataset_length(r->st.data.train);
        int rc = ct_comm_allgather(r->comm, lens + a->rank, lens, 1, CT_I64, 0);
        for (int k = 0; rc == 0 && k < a->world; k++) {
            if (lens[k] == 0)
                rc = ct__error(CT_EINVAL,
                               "trainer replica: the sharded training set of rank %d is empty "
                               "(more ranks than records?)",
                               k);
            lo.pad_to = lens[k] > lo.pad_to ? lens[k] : lo.pad_to;
        }
        free(lens);
        if (rc < 0)
            return rc;
        lo.rank = 0;
        lo.world_size = 1;
        lo.seed = mix(r->spec.seed ^ mix((uint64_t)a->rank));
    }
    return ct_loader_new(r->st.data.train, &lo, &r->loader);
}

static int grad_ready(int i, void *user)
{
    grad_hook *h = user;
    return ct_bucketer_mark_ready(h->r->bucketers[h->model], h->r->nparams[h->model] - 1 - i);
}

/* Buckets over model m's parameters' gradients in reverse order, driven by its gradient-ready
 * hook. All bucketers share the communicator: one reduces at a time (step.c puts the others
 * in no_sync mode while it runs). */
int ct__replica_bucketer_new(replica *r, int m)
{
    const ct_param_ref *ps;
    int np, rc;
    if ((rc = ct_module_params(r->st.models[m], &ps, &np)) < 0)
        return rc;
    float **grads = malloc(sizeof *grads * (size_t)(np ? np : 1));
    size_t *counts = malloc(sizeof *counts * (size_t)(np ? np : 1));
    ct_device *devices = malloc(sizeof *devices * (size_t)(np ? np : 1));
    if (!grads || !counts || !devices) {
        rc = CT_ENOMEM;
        goto out;
    }
    for (int k = 0; k < np; k++) {
        grads[k] = ps[np - 1 - k].grad;
        counts[k] = (size_t)ps[np - 1 - k].numel;
        /* a model across devices (devices_per_replica): each device's gradients in buckets
         * of their own, reduced there */
        devices[k] = r->device == CT_CPU ? CT_CPU : ps[np - 1 - k].device;
    }
    size_t bucket = (size_t)((r->spec.bucket_mb > 0 ? r->spec.bucket_mb : 25) * 1024 * 1024);
    size_t first = bucket < (1u << 20) ? bucket : (1u << 20);
    /* DDP's buckets (the first 1 MiB, then 25 MB) start allreduces while backward runs. When
     * the whole group is bound to this machine's CPUs (cpu_binding.c) and the gradients are in
     * host memory, an allreduce is copies and sums in shared memory on the replica's own CPUs:
     * during backward it takes them, and their caches, from backward and hides nothing. Then
     * all gradients are one bucket, reduced after backward: 2 replicas x 1 thread of
     * bench/gpt_train's GPT on 2 CPUs made 2.3% more tokens/s on average (11 paired runs of
     * gpt_text, 9 faster, 0.93-1.09). A bucket_mb that is set is used as given. */
    if (r->spec.bucket_mb <= 0 && r->device == CT_CPU && !r->ncomm &&
        r->bound_here == ct_comm_world_size(r->comm)) {
        size_t all = 0;
        for (int k = 0; k < np; k++)
            all += counts[k] * sizeof(float);
        first = bucket = all > 0 ? all : 1;
        CT_LOG(CT_LOG_DEBUG, "trainer", "model %d: one bucket of %zu bytes, reduced after backward",
               m, all);
    }
    r->nparams[m] = np;
    /* in place: the gradients are ct_module_params' views of one buffer, padding between them */
    if ((rc = ct_bucketer_new(r->ncomm ? r->ncomm : r->comm, grads, counts, np,
                              &(ct_bucketer_opts){.first_bucket_bytes = first,
                                                  .bucket_bytes = bucket,
                                                  .device = r->device,
                                                  .devices = devices,
                                                  .shard = r->spec.zero >= 1,
                                                  .in_place = true},
                              &r->bucketers[m])) < 0)
        goto out;
    /* ZeRO-1: the optimizer keeps state for, and steps, only what this rank's chunks hold */
    if (r->spec.zero >= 1 &&
        (rc = ct__zero_shard(r->st.models[m], r->st.optims[m], r->bucketers[m])) < 0)
        goto out;
    r->hooks[m] = (grad_hook){r, m};
    rc = ct_module_on_grad_ready(r->st.models[m], grad_ready, &r->hooks[m]);
out:
    free(grads);
    free(counts);
    free(devices);
    return rc;
}

/* Rank 0's bytes at p, memory of device d (the CPU's or one of the replica's devices), to every
 * rank: on a device through host memory (once per setup and per epoch: parameters and
 * buffers). */
static int broadcast_dev(replica *r, ct_device d, void *p, size_t bytes)
{
    const ct__backend *bk = d == CT_CPU ? NULL : d == r->device ? r->bk : ct__backend_of(d);
    if (d == CT_CPU)
        return ct_comm_broadcast(r->comm, p, bytes, CT_U8, 0, 0);
    if (!bk)
        return CT_ENOSYS; /* ct__backend_of said why */
    void *h = malloc(bytes ? bytes : 1);
    if (!h)
        return CT_ENOMEM;
    int rc = r->setup.rank == 0 ? bk->download(h, p, bytes) : 0;
    if (rc == 0)
        rc = ct_comm_broadcast(r->comm, h, bytes, CT_U8, 0, 0);
    if (rc == 0 && r->setup.rank != 0)
        rc = bk->upload(p, h, bytes);
    free(h);
    return rc;
}

/* Rank 0's parameters to every rank: each model's flat buffer, or for a model across devices
 * each parameter on its device. */
static int broadcast_params(replica *r)
{
    for (int m = 0; m < r->st.nmodels; m++) {
        float *values, *grads;
        int64_t numel;
        const ct_param_ref *ps;
        int np, rc = ct_module_params(r->st.models[m], &ps, &np);
        if (rc < 0)
            return rc;
        if (ct_module_flat(r->st.models[m], &values, &grads, &numel) == 0) {
            rc = broadcast_dev(r, r->device, values, (size_t)numel * sizeof(float));
        } else {
            for (int k = 0; k < np && rc == 0; k++)
                rc = broadcast_dev(r, ps[k].device, ps[k].value,
                                   (size_t)ps[k].numel * sizeof(float));
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* 64 bits of n bytes: the CRC-32C of each half. Hardware CRC-32C runs at memory speed; the
 * byte-wise FNV-1a this replaced took 0.56 s for a 93 MB model, and a heal hashes the weights
 * three times (snapshot, heal, the quorum). Every rank uses this one, so equal weights give
 * equal hashes; a difference confined to one half changes that half's CRC. */
static uint64_t bytes_hash(const void *p, size_t n)
{
    size_t half = n / 2;
    return (uint64_t)ct__crc32c(0, p, half) << 32 | ct__crc32c(0, (const char *)p + half, n - half);
}

/* The hash of a model's weights (bytes_hash): its flat buffer, or for a model across devices
 * its parameters one after another (each a hash of its own, mixed) */
static int model_weights_hash(replica *r, ct_module *model, uint64_t *out)
{
    float *values, *grads;
    int64_t numel;
    const ct_param_ref *ps;
    int np = 1, rc = 0;
    bool flat = ct_module_flat(model, &values, &grads, &numel) == 0;
    if (!flat && (rc = ct_module_params(model, &ps, &np)) < 0)
        return rc;
    for (int k = 0; k < np; k++) {
        float *v = flat ? values : ps[k].value;
        ct_device d = flat ? r->device : ps[k].device;
        size_t bytes = (size_t)(flat ? numel : ps[k].numel) * sizeof(float);
        const ct__backend *bk = d == CT_CPU ? NULL : ct__backend_of(d);
        float *host = v;
        if (d != CT_CPU && (!bk || !(host = malloc(bytes ? bytes : 1))))
            return bk ? CT_ENOMEM : CT_ENOSYS;
        if (bk && (rc = bk->download(host, v, bytes)) < 0) {
            free(host);
            return rc;
        }
        uint64_t h = bytes_hash(host, bytes);
        if (host != v)
            free(host);
        *out = k ? mix(*out ^ h) : h;
    }
    return 0;
}

static int broadcast_model_buffers(replica *r, ct_module *model)
{
    const ct_named_tensor *sd;
    const ct_param_ref *ps;
    int n, np, rc;
    if ((rc = ct_module_state_dict(model, &sd, &n)) < 0 ||
        (rc = ct_module_params(model, &ps, &np)) < 0)
        return rc;
    for (int i = 0; i < n; i++) {
        bool is_param = false;
        for (int k = 0; k < np && !is_param; k++)
            is_param = !strcmp(ps[k].name, sd[i].name);
        if (is_param)
            continue;
        ct_tensor *t = sd[i].tensor;
        size_t bytes = (size_t)ct_tensor_numel(t) * ct_dtype_size(ct_tensor_dtype(t));
        if ((rc = broadcast_dev(r, ct_tensor_device(t), ct_tensor_data(t), bytes)) < 0)
            return rc;
    }
    return 0;
}

static int broadcast_buffers(replica *r)
{
    int rc = 0;
    for (int m = 0; m < r->st.nmodels && rc == 0; m++)
        rc = broadcast_model_buffers(r, r->st.models[m]);
    return rc;
}

/* Every optimizer's learning rates times factor (trainer_scale_lr; <= 0 or 1: unchanged). */
static int scale_lrs(replica *r, double factor)
{
    int rc = 0;
    for (int m = 0; factor > 0 && factor != 1 && m < r->st.nmodels; m++)
        for (int g = 0; rc == 0 && g < ct_optim_num_groups(r->st.optims[m]); g++)
            rc = ct_optim_set_lr(r->st.optims[m], g, ct_optim_get_lr(r->st.optims[m], g) * factor);
    return rc;
}

/* The hash of all models' weights (one over all; on a device through host memory). */
int ct__replica_weights_hash(replica *r, uint64_t *out)
{
    *out = 0;
    for (int m = 0; m < r->st.nmodels; m++) {
        uint64_t h = 0;
        int rc = model_weights_hash(r, r->st.models[m], &h);
        if (rc < 0)
            return rc;
        *out = m ? mix(*out ^ h) : h;
    }
    return 0;
}

/* The first half of a replica's setup ("build"): what depends only on the program and the spec,
 * the same on every node: the config, the creators (hook, data, models on the device,
 * optimizers, losses, scheduler) and the steps. The driver ends the job at once on such a failure
 * (trainer.c, no_retry); so the errors here that come from the node (its device) carry codes it
 * retries. */
static int replica_build(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    replica *r = state;
    (void)res;
    (void)rlen;
    if (len != sizeof(tr_setup_args))
        return ct__error(CT_EINVAL, "trainer replica: build args of %zu bytes", len);
    if (r->st.nmodels)
        return ct__error(CT_EINVAL, "trainer replica: build called twice");
    memcpy(&r->setup, args, sizeof r->setup);
    const tr_setup_args *a = &r->setup;
    int rc;
    /* a node told to stop waits for the replicas of a job that listens: they checkpoint first
     * (drain_heard, train_epoch) */
    if (ct_events_subscribe(1u << CT_EVENT_NODE_DRAINING) < 0)
        CT_LOG(CT_LOG_WARN, "trainer",
               "replica %d: no drain events (a node told to stop ends "
               "this replica without a checkpoint): %s",
               a->rank, ct_last_error());
    ct_nn_set_threads(r->spec.threads > 0 ? r->spec.threads : 1);
    r->device = (ct_device)r->spec.device;
    if (r->device != CT_CPU) {
        /* the driver checked that the program has the device's backend: a replica that cannot
         * use it has a node without a usable device (CT_ECUDA, retried), not a wrong program */
        if (!(r->bk = ct__backend_of(r->device)))
            return ct__error(ct_device_kind(r->device) == CT_CUDA ? CT_ECUDA : CT_ENOSYS,
                             "trainer replica %d: %s", a->rank, ct_last_error());
        if ((rc = ct__uploader_init(&r->up_x, r->device)) < 0 ||
            (rc = ct__uploader_init(&r->up_y, r->device)) < 0)
            return rc;
    }
    if ((rc = ct__trainer_ctx_init(&r->ctx, r->spec.config, a->rank, a->world, r->spec.seed,
                                   a->start_epoch, r->spec.epochs, false)) < 0)
        return rc;
    if ((rc = ct__trainer_state_build(&r->spec, &r->ctx, true, &r->st)) < 0)
        return rc;
    /* MFU's denominator, sent with every step record: this replica's own device (its CPU
     * threads, or its GPU) in the run's precision */
    const ct__backend *own = r->bk ? r->bk : ct__backend_of(CT_CPU);
    r->rec.peak_flops = own && own->peak_flops
                            ? own->peak_flops(trainer_ctx_precision(&r->ctx),
                                              r->spec.threads > 0 ? r->spec.threads : 1)
                            : 0;
    r->train_step = ct__trainer_step_fn(&r->spec, true);
    r->validate_step = ct__trainer_step_fn(&r->spec, false);
    if (!r->train_step || !r->validate_step)
        return ct__error(CT_ENOTREG,
                         "trainer replica %d: %s step \"%s\" is not registered in this process "
                         "(register steps before ct_init, in every process)",
                         a->rank, !r->train_step ? "train" : "validate",
                         !r->train_step ? r->spec.train_step : r->spec.validate_step);
    return 0;
}

/* The group's ring communicator (r->comm) for r->setup's group, rank and world: at setup and
 * at a live recovery's regroup alike. */
int ct__replica_open_ring(replica *r)
{
    return ct_comm_new(&(ct_comm_opts){.rendezvous = r->rdv,
                                       .group_id = r->setup.group,
                                       .rank = r->setup.rank,
                                       .world_size = r->setup.world,
                                       .node_id = ct_self_node_id(),
                                       .timeout_ms = r->spec.comm_timeout_ms,
                                       .topology = (ct_comm_topology)r->spec.topology},
                       &r->comm);
}

/* The second half ("setup", after every replica's build): what involves the node and the peers:
 * the communicator, CPU binding, the loader, the checkpoint, the first broadcasts. Its failures
 * are retried. */
static int replica_setup(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    replica *r = state;
    (void)args;
    (void)res;
    (void)rlen;
    if (len != 0 || !r->st.nmodels || r->comm)
        return ct__error(CT_EINVAL, "trainer replica: setup %s",
                         len              ? "takes no args"
                         : !r->st.nmodels ? "before build"
                                          : "called twice");
    const tr_setup_args *a = &r->setup;
    int rc;
    if (!(r->rdv = ct_rendezvous_kv_new("trainer/")))
        return CT_ENOMEM;
    if ((rc = ct__replica_open_ring(r)) < 0)
        return rc;
    /* CUDA: the gradients over NCCL on the GPU CUDA_VISIBLE_DEVICES gives (the checking
     * device's go over the ring: bucket.c) */
    char ngroup[80];
    snprintf(ngroup, sizeof ngroup, "%s-nccl", a->group);
    if (ct_device_kind(r->device) == CT_CUDA &&
        (rc = ct_comm_new(&(ct_comm_opts){.rendezvous = r->rdv,
                                          .group_id = ngroup,
                                          .rank = a->rank,
                                          .world_size = a->world,
                                          .node_id = ct_self_node_id(),
                                          .backend = CT_COMM_NCCL,
                                          .timeout_ms = r->spec.comm_timeout_ms},
                          &r->ncomm)) < 0)
        return rc;
    /* before the loader's and the bucketer's threads start: they inherit the binding */
    if ((rc = ct__replica_bind_cpus(r->comm, r->spec.threads, r->spec.bind_cpus,
                                    r->spec.comm_timeout_ms)) < 0)
        return rc;
    r->bound_here = rc;
    if ((rc = ct__replica_loader_new(r)) < 0)
        return rc;
    if (a->has_ckpt) {
        ct_object_view v = {0};
        if ((rc = ct_get(&a->ckpt, 30000, &v)) < 0)
            return ct__trainer_error_prefix(rc, "trainer replica %d: fetching the checkpoint",
                                            a->rank);
        rc = ct__ckpt_load(&r->st, &r->spec, v.data, v.size);
        ct_object_release(&v);
        if (rc < 0)
            return rc;
        /* the driver's on_world_size rescaled the rates for this group size (every optimizer's) */
        if ((rc = scale_lrs(r, a->lr_scale)) < 0)
            return rc;
    }
    r->st.epoch = a->start_epoch;
    r->st.batch = a->start_batch;
    r->st.offset = a->start_offset;
    if ((rc = broadcast_params(r)) < 0 || (rc = broadcast_buffers(r)) < 0)
        return rc;
    for (int m = 0; m < r->st.nmodels && rc == 0; m++)
        rc = ct__replica_bucketer_new(r, m);
    r->live.clean = rc == 0;
    return rc;
}

/* The generator's seed for a batch: a function of where the batch is, not of what ran before,
 * so that training resumed at any batch draws the same dropout masks. */
static uint64_t batch_seed(const replica *r, int64_t epoch, int64_t batch)
{
    uint64_t e = mix(r->spec.seed ^ mix((uint64_t)epoch * 1000003u + (uint64_t)r->setup.rank));
    /* after a live re-shard batches are numbered from the offset on (tr_state.offset) */
    uint64_t off = r->st.offset ? mix((uint64_t)r->st.offset) : 0;
    return mix(e + off + (uint64_t)batch);
}

/* Rank 0 writes the checkpoint straight into the store and seals it with TR_CKPT_COPIES
 * copies, or one per live node with a store when there are fewer (*asked); *copies gets how
 * many nodes hold it then (fewer than asked is the driver's to report). */
static int write_checkpoint(replica *r, const tr_zero_state *full, ct_object_id *id, int *copies,
                            int *asked)
{
    int live = ct_object_store_nodes();
    *asked = live > 0 && live < TR_CKPT_COPIES ? live : TR_CKPT_COPIES;
    tr_ckpt_plan *p = NULL;
    void *dst = NULL;
    int rc = ct__ckpt_plan(&r->st, &r->spec, r->setup.world, full, &p);
    if (rc < 0)
        return rc;
    size_t size = ct__ckpt_size(p);
    if ((rc = ct_object_create(size, id, &dst)) < 0)
        goto out;
    ct__ckpt_write(p, dst);
    const char *dn = r->setup.driver_node[0] ? r->setup.driver_node : NULL;
    if ((rc = ct_object_seal(id, &(ct_put_opts){.replicas = *asked, .node = dn})) < 0) {
        /* the seal's reason is the error: an abort of an object the seal got to ("already
         * sealed", the head's answer failed) would replace it */
        char why[512];
        snprintf(why, sizeof why, "%s", ct_last_error());
        ct_object_abort(id);
        rc = ct__error(rc, "%s", why);
        goto out;
    }
    char nodes[8][32];
    if (ct_object_nodes(id, nodes, 8, copies, NULL) < 0)
        *copies = 0; /* unknown: reported as too few */
out:
    ct__ckpt_plan_free(&p);
    return rc;
}

static int train_epoch(replica *r, const tr_epoch_args *a, void **res, size_t *rlen);
static int validate_inline(replica *r, int64_t epoch);
static int plateau_train_loss(replica *r, double loss_sum, int64_t samples, bool epoch_end);

/* A failed epoch. When this rank failed by itself (a step's error, e.g. the one-backward rule;
 * its communicator still fine), its reason goes to the KV under the group, then the
 * communicator is aborted: the peers blocked in a collective this rank will never join see it
 * leave at once instead of waiting for comm_timeout_ms, and report the reason they find. */
static int epoch_failed(replica *r, int rc)
{
    char key[128], msg[720], here[600];
    snprintf(here, sizeof here, "%s", ct_last_error());
    snprintf(key, sizeof key, "trainer/%s/error", r->setup.group);
    if (r->ncomm) /* NCCL's peers see this rank leave too (its failure or a peer's) */
        ct_comm_abort(r->ncomm);
    if (ct_comm_status(r->comm) == 0) {
        snprintf(msg, sizeof msg, "replica %d: %s", r->setup.rank, here);
        ct_kv_put(key, msg, strlen(msg) + 1);
        ct_comm_abort(r->comm);
        return ct__error(rc, "%s", msg);
    }
    void *v = NULL;
    size_t n = 0;
    if (ct_kv_get(key, &v, &n, 0) == 0 && v && n > 0) {
        snprintf(msg, sizeof msg, "%.*s", (int)n, (const char *)v);
        free(v);
        return ct__error(rc, "trainer replica %d: a peer failed first: %s (here: %s)",
                         r->setup.rank, msg, here);
    }
    free(v);
    return rc;
}

/* Whether this replica's node was told to stop (a NODE_DRAINING event about it): polls the
 * events that came, without waiting (a step boundary's cost: one non-blocking read). */
static bool drain_heard(replica *r)
{
    ct_event ev;
    /* ZeRO: a checkpoint needs every rank's optimizer shards, which one leaving replica does
     * not have; its node's stop ends it without one (the driver recovers from the last) */
    if (r->spec.zero)
        return false;
    while (!r->draining && ct_events_next(&ev, 0) == 0)
        if (ev.type == CT_EVENT_NODE_DRAINING && !strcmp(ev.node_id, ct_self_node_id())) {
            r->draining = true;
            CT_LOG(CT_LOG_INFO, "trainer",
                   "replica %d: node %s is draining: checkpoint at the "
                   "next step boundary",
                   r->setup.rank, ev.node_id);
        }
    return r->draining;
}

/* The test fault train_hold=STEP:PATH (common/fault.h): with STEP optimizer steps done, the
 * replica waits while the file PATH exists, so that a test lands a kill mid-training however
 * loaded the machine is (tests/cluster/test_slurm.sh). */
static void hold_if_asked(replica *r)
{
    char v[512];
    if (!ct__fault(CT__FAULT_TRAIN_HOLD, v, sizeof v))
        return;
    const char *path = strchr(v, ':');
    if (!path || strtoll(v, NULL, 10) != r->st.step)
        return;
    path++;
    if (access(path, F_OK) == 0)
        CT_LOG(CT_LOG_WARN, "trainer", "replica %d: held at step %lld while %s exists (test fault)",
               r->setup.rank, (long long)r->st.step, path);
    while (access(path, F_OK) == 0)
        usleep(20 * 1000);
}

/* Wraps a loader batch as tensors (x: n × sample shape, f32; y: n, i64, or n × target shape,
 * f32; borrowed from the loader) and runs step fn on it. */
/* The loader's next batch (ct_loader_next), its wait counted in the step record. */
static int next_batch(replica *r, ct_batch *b)
{
    int64_t t0 = ct__now_ns();
    int rc = ct_loader_next(r->loader, b);
    r->rec.data_ns += ct__now_ns() - t0;
    return rc;
}

static int run_batch(replica *r, trainer_step *s, trainer_step_fn fn, const ct_batch *b,
                     trainer_step_out *so)
{
    int64_t xs[CT_DATA_MAX_DIMS + 1] = {b->n}, ys[CT_DATA_MAX_DIMS + 1] = {b->n};
    for (int d = 0; d < b->ndim; d++)
        xs[d + 1] = b->shape[d];
    for (int d = 0; d < b->tndim; d++)
        ys[d + 1] = b->tshape[d];
    ct_tensor *x = NULL, *y = NULL;
    int rc = 0;
    if (r->device == CT_CPU) {
        x = ct_tensor_wrap(CT_F32, b->ndim + 1, xs, (void *)b->x);
        y = b->tndim ? ct_tensor_wrap(CT_F32, b->tndim + 1, ys, (void *)b->target)
                     : ct_tensor_wrap(CT_I64, 1, ys, (void *)b->y);
    } else if ((rc = ct__uploader_put(&r->up_x, CT_F32, b->ndim + 1, xs, b->x, &x)) == 0) {
        rc = b->tndim ? ct__uploader_put(&r->up_y, CT_F32, b->tndim + 1, ys, b->target, &y)
                      : ct__uploader_put(&r->up_y, CT_I64, 1, ys, b->y, &y);
    }
    if (rc == 0)
        rc = x && y ? ct__trainer_step_run(s, fn, &(trainer_batch){x, y, b->n, b->index}, so)
                    : CT_ENOMEM;
    ct_tensor_release(&x);
    ct_tensor_release(&y);
    return rc;
}

static int replica_train_epoch(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    replica *r = state;
    if (len != sizeof(tr_epoch_args) || !r->bucketers[0])
        return ct__error(CT_EINVAL, "trainer replica: train_epoch before setup or bad args");
    tr_epoch_args ea;
    memcpy(&ea, args, sizeof ea);
    int rc = train_epoch(r, &ea, res, rlen);
    return rc < 0 ? epoch_failed(r, rc) : rc;
}

/* A segment of the epoch: per batch the train step (and after every validate_every-th
 * optimizer step a validation), until a->steps optimizer steps are done or the epoch ends; at
 * the epoch's end the scheduler and rank 0's buffers to all (buffers differ between ranks
 * within an epoch; they do not change what a training step computes) and the epoch's
 * validation; a train_loss plateau's sums; then the weights' hash and (rank 0) the checkpoint,
 * so that it holds the scheduler as the segment's validations left it. */
static int train_epoch(replica *r, const tr_epoch_args *a, void **res, size_t *rlen)
{
    tr_epoch_args ea = *a;
    tr_report rep = {.magic = TR_REPORT_MAGIC,
                     .rank = r->setup.rank,
                     .world = r->setup.world,
                     .epoch = ea.epoch};
    snprintf(rep.group, sizeof rep.group, "%s", r->setup.group);
    trainer_step s = {.ctx = &r->ctx,
                      .st = &r->st,
                      .bucketers = r->bucketers,
                      .name = r->spec.train_step[0] ? r->spec.train_step : "(built-in)",
                      .training = true,
                      .comm = r->comm,
                      .zero = r->spec.zero >= 1,
                      .epoch = ea.epoch,
                      .live = ea.live,
                      .metrics = &rep.metrics};
    int rc = scale_lrs(r, ea.lr_scale); /* a live recovery's new world (trainer_scale_lr) */
    if (rc == 0 && (!r->pos_valid || r->pos_epoch != ea.epoch || r->pos_batch != ea.start_batch ||
                    r->pos_offset != ea.offset))
        rc = ct_loader_seek_offset(r->loader, ea.epoch, ea.offset, ea.start_batch);
    r->pos_valid = false; /* until this segment ends well */
    r->st.offset = ea.offset;
    r->live.ok = r->live.clean = false;
    r->live.step0 = r->st.step;
    s.index = ea.start_batch;
    if (!ea.record_grads) { /* not (or no longer) a heal's serving peer */
        ct__gradlog_reset(&r->log);
    } else if (!r->log.on) { /* the snapshot's step: the replacement replays from here */
        r->log.on = true;
        r->log.step0 = r->st.step;
    }
    s.log = r->log.on ? &r->log : NULL;
    ct__rec_begin(&r->rec, &s, r->setup.group, r->setup.rank, ea.report_ms);
    int64_t t0 = ct__now_ns(), steps = 0;
    /* accumulation groups of k batches (the epoch's last one may be shorter; every rank has as
     * many batches, so all agree on which batch reduces) */
    int64_t k = r->spec.accumulate > 1 ? r->spec.accumulate : 1;
    int64_t nb = ct_loader_num_batches(r->loader);
    /* a plateau scheduler steps on its metric (validate_inline, plateau_train_loss), not here */
    bool plateau = r->st.plateau_metric[0] != 0;
    r->nvals = 0;
    /* a drain heard mid-epoch ends the segment at the step boundary (after its validation):
     * this replica checkpoints there and leaves; its peers, blocked in the next step's
     * collective, fail, and the driver goes on from this checkpoint without them or it */
    bool drained_mid = false;
    /* a pause before the budget's end: a step boundary for the driver, no checkpoint there */
    bool pausing = ea.pause_steps > 0 && (ea.steps <= 0 || ea.pause_steps < ea.steps);
    int64_t budget = pausing ? ea.pause_steps : ea.steps;
    ct_batch b;
    while (rc == 0 && !drained_mid && (budget <= 0 || steps < budget) &&
           (rc = next_batch(r, &b)) > 0) {
        trainer_step_out so;
        int64_t g0 = s.index - s.index % k, left = nb - g0;
        s.accum_pos = (int)(s.index - g0);
        s.accum_len = (int)(left < k ? left : k);
        if (s.accum_len <= s.accum_pos) /* defensive: more batches than the loader said */
            s.accum_len = s.accum_pos + 1;
        for (int m = 0; m < r->st.nmodels && s.accum_pos == 0; m++)
            ct_module_zero_grad(r->st.models[m]);
        hold_if_asked(r);
        ct_nn_manual_seed(batch_seed(r, ea.epoch, s.index));
        rc = run_batch(r, &s, r->train_step, &b, &so);
        if (rc < 0 && ct_comm_status(r->comm) != 0) {
            /* the communicator broke inside the step (a peer died: not this rank's own error,
             * which leaves it fine until epoch_failed): the step's gradients are discarded and
             * the survivors may go on from its first batch ("regroup") */
            r->live.ok = true;
            r->live.epoch = ea.epoch;
            r->live.offset = ea.offset;
            r->live.index = g0;
            r->live.rep = rep;
        }
        s.index++;
        if (rc == 0) {
            rep.loss_sum += so.loss_sum;
            rep.samples += so.samples;
            /* a step the loss scaler skipped (inf/NaN gradients, on every rank alike) is a
             * step: the accumulation group is done, the scheduler and the counts go on */
            r->st.skipped += s.skipped;
            rep.skipped += s.skipped;
            bool stepped = s.updates || s.skipped;
            if (stepped) {
                steps++;
                rep.steps++;
                r->st.step++;
                if (s.log && ct__gradlog_step(s.log) < 0) { /* the whole state instead */
                    ct__gradlog_reset(s.log);
                    s.log = NULL;
                }
            }
            ct__rec_batch(&r->rec, &s, &so, nb); /* before the scheduler: the lr it used */
            if (stepped && r->st.sched && !plateau && r->spec.sched_every == TR_SCHED_BATCH)
                rc = ct_sched_step(r->st.sched);
            /* with rank 0's buffers, as the model checkpoints would have them */
            if (rc == 0 && stepped && ea.validate_every > 0 &&
                r->st.step % ea.validate_every == 0 && (rc = broadcast_buffers(r)) == 0) {
                rc = validate_inline(r, ea.epoch);
                ct__rec_idle(&r->rec); /* the next step's time leaves the validation out */
            }
            if (!r->first_step_done) {
                r->first_step_done = true;
                rep.first_step_ns = ct__now_ns();
            }
            if (rc == 0 && stepped && s.index < nb && drain_heard(r))
                drained_mid = true;
        }
    }
    /* device gradients: the last step's allreduces may run after its finish returned (the
     * compute stream waits for them, the host did not): their failure is this segment's */
    for (int m = 0; rc == 0 && m < r->st.nmodels; m++)
        if (r->bucketers[m])
            rc = ct_bucketer_wait(r->bucketers[m]);
    ct__rec_flush(&r->rec); /* in the KV before the reply: the driver reads them all */
    bool done = s.index >= nb;
    ea.checkpoint = ea.checkpoint && (!pausing || done);
    if (rc == 0 && done && r->st.sched && !plateau && r->spec.sched_every == TR_SCHED_EPOCH)
        rc = ct_sched_step(r->st.sched);
    if (rc == 0 && done)
        rc = broadcast_buffers(r);
    /* at the epoch's end its validation, unless one ran at its last step already (in this
     * segment: a validation follows its step at once); then (every segment) a train_loss
     * plateau's sums; all before the checkpoint, which holds the scheduler's state */
    if (rc == 0 && done && ea.validate_end &&
        !(r->nvals && r->vals[r->nvals - 1].step == r->st.step))
        rc = validate_inline(r, ea.epoch);
    if (rc == 0 && !drained_mid) /* its sums are gathered: the peers are gone */
        rc = plateau_train_loss(r, rep.loss_sum, rep.samples, done);
    if (rc < 0)
        return rc;
    /* at an epoch's end every rank ran the end's collectives: a drain heard there ends the
     * group after this segment, with rank 0's checkpoint when the segment writes one */
    bool drained_end = !drained_mid && done && drain_heard(r);
    r->st.epoch = done ? ea.epoch + 1 : ea.epoch;
    r->st.batch = done ? 0 : s.index;
    r->st.offset = done ? 0 : ea.offset;
    r->pos_valid = !done;
    r->pos_epoch = ea.epoch;
    r->pos_batch = s.index;
    r->pos_offset = ea.offset;
    rep.end_batch = r->st.batch;
    rep.end_offset = r->st.offset;
    rep.epoch_done = done;
    rep.seconds = (double)(ct__now_ns() - t0) * 1e-9;
    if ((rc = ct__replica_weights_hash(r, &rep.weights_hash)) <
        0) /* all models' weights in one hash */
        return rc;
    /* ZeRO: every rank gathers the optimizer's shards for rank 0's checkpoint */
    tr_zero_state zs[TR_MAX_MODELS] = {{0}};
    bool gathered = r->spec.zero && ea.checkpoint;
    for (int m = 0; gathered && rc == 0 && m < r->st.nmodels; m++)
        rc = ct__zero_gather_state(r->comm, r->st.optims[m], &zs[m]);
    if (rc == 0 &&
        ((ea.checkpoint && r->setup.rank == 0) || drained_mid || (drained_end && !ea.checkpoint))) {
        int64_t c0 = ct__now_ns();
        rc = write_checkpoint(r, gathered ? zs : NULL, &rep.ckpt, &rep.copies, &rep.copies_asked);
        rep.has_ckpt = rc == 0;
        rep.ckpt_seconds = (double)(ct__now_ns() - c0) * 1e-9;
    }
    for (int m = 0; m < r->st.nmodels; m++)
        ct__zero_state_free(&zs[m]);
    if (rc < 0)
        return rc;
    for (int m = 0; m < r->st.nmodels; m++)
        rep.optim_state_bytes += ct_optim_state_bytes(r->st.optims[m]);
    rep.drained = drained_mid || drained_end;
    rep.skipped_total = r->st.skipped;
    rep.loss_scale = r->st.scaler ? ct_grad_scaler_scale(r->st.scaler) : 0;
    if (drained_mid) { /* the peers wait in the next step's collective: they fail now */
        CT_LOG(CT_LOG_INFO, "trainer",
               "replica %d: checkpoint at step %lld (epoch %lld batch "
               "%lld) written; leaving the group (its node is draining)",
               r->setup.rank, (long long)r->st.step, (long long)r->st.epoch,
               (long long)r->st.batch);
        ct_comm_abort(r->comm);
    }
    rep.nval = r->nvals;
    size_t vbytes = (size_t)r->nvals * sizeof *r->vals;
    if (!(*res = malloc(sizeof rep + vbytes)))
        return CT_ENOMEM;
    memcpy(*res, &rep, sizeof rep);
    if (vbytes)
        memcpy((char *)*res + sizeof rep, r->vals, vbytes);
    *rlen = sizeof rep + vbytes;
    r->live.clean = !drained_mid; /* a peer's death before the next segment: go on from here */
    return 0;
}

/* Loss and top-1 hits on this rank's contiguous slice of the validation set (its whole
 * validation set when sharded) into v's sums; s_epoch: the epoch validate steps see. */
static int validate_local(replica *r, int64_t s_epoch, tr_val_result *v)
{
    trainer_step s = {.ctx = &r->ctx,
                      .st = &r->st,
                      .name = r->spec.validate_step[0] ? r->spec.validate_step : "(built-in)",
                      .training = false,
                      .epoch = s_epoch,
                      .metrics = &v->metrics};
    ct_dataset *slice = NULL;
    ct_loader *ld = NULL;
    int rc = 0;
    if (!r->st.data.val)
        return 0;
    int64_t n = ct_dataset_length(r->st.data.val), w = r->setup.world, k = r->setup.rank;
    int64_t lo = r->st.data.sharded ? 0 : n * k / w, hi = r->st.data.sharded ? n : n * (k + 1) / w;
    /* validation sees the images as they are: normalised, never cropped or flipped */
    const ct_transform_opts *tt = &r->st.data.transform;
    ct_transform_opts vt = {.mean = tt->mean, .std = tt->std, .n_mean = tt->n_mean};
    /* in batches of the training's size, whose buffers the CPU's cache of them holds: a GPT's
     * validation in batches of 500 windows made 64 MB of logits at a time */
    if ((rc = ct_dataset_subset(r->st.data.val, lo, hi - lo, &slice)) < 0 ||
        (rc = ct_loader_new(
             slice, &(ct_loader_opts){.batch_size = r->spec.batch, .prefetch = 2, .transform = vt},
             &ld)) < 0)
        goto out;
    for (int m = 0; m < r->st.nmodels; m++)
        ct_module_train(r->st.models[m], false);
    bool was = ct_autograd_set_enabled(false);
    ct_batch b;
    while ((rc = ct_loader_next(ld, &b)) > 0) {
        trainer_step_out so;
        rc = run_batch(r, &s, r->validate_step, &b, &so);
        s.index++;
        if (rc < 0)
            break;
        v->loss_sum += so.loss_sum;
        v->correct += so.correct;
        v->total += so.samples;
    }
    ct_autograd_set_enabled(was);
    for (int m = 0; m < r->st.nmodels; m++)
        ct_module_train(r->st.models[m], true);
    if (rc > 0)
        rc = 0;
out:
    ct_loader_destroy(&ld);
    ct_dataset_destroy(&slice);
    return rc;
}

/* sum[0..n) = every rank's mine[0..n) added in rank order: the same bits on every rank. */
static int gather_sum(replica *r, const double *mine, int n, double *sum)
{
    int w = r->setup.world, k = r->setup.rank;
    double *all = malloc(sizeof *all * (size_t)(n * w));
    if (!all)
        return CT_ENOMEM;
    memcpy(all + k * n, mine, sizeof *all * (size_t)n);
    int rc = ct_comm_allgather(r->comm, all + k * n, all, sizeof *all * (size_t)n, CT_U8, 0);
    for (int i = 0; rc == 0 && i < n; i++) {
        sum[i] = 0;
        for (int j = 0; j < w; j++)
            sum[i] += all[j * n + i];
    }
    free(all);
    return rc;
}

/* The plateau scheduler's value from a gathered validation (config plateau_metric). */
static int plateau_value(const replica *r, const tr_val_result *v, double *val)
{
    const char *m = r->st.plateau_metric;
    if (!v->total)
        return ct__error(CT_EINVAL,
                         "trainer: plateau scheduler: no validation samples to measure \"%s\" "
                         "on (trainer_data.val is empty or NULL)",
                         m);
    if (!strcmp(m, "val_loss")) {
        *val = v->loss_sum / (double)v->total;
        return 0;
    }
    if (!strcmp(m, "val_accuracy")) {
        *val = (double)v->correct / (double)v->total;
        return 0;
    }
    for (int i = 0; i < v->metrics.n; i++)
        if (!strcmp(v->metrics.names[i], m) && v->metrics.weight[i] > 0) {
            *val = v->metrics.sum[i] / v->metrics.weight[i];
            return 0;
        }
    return ct__error(CT_EINVAL,
                     "trainer config: key \"plateau_metric\": \"%s\" is not val_loss, "
                     "val_accuracy, train_loss or a metric of the validate step",
                     m);
}

/* A validation during training: this rank's sums, gathered from every rank, kept for the
 * epoch's report and given to a plateau scheduler that monitors a validation value. */
static int validate_inline(replica *r, int64_t epoch)
{
    enum { M = TRAINER_MAX_METRICS, N = 3 + 2 * M };
    tr_val_result v = {.epoch = epoch, .step = r->st.step};
    int rc = validate_local(r, epoch, &v);
    if (rc < 0)
        return rc;
    double mine[N] = {v.loss_sum, (double)v.correct, (double)v.total}, sum[N];
    for (int i = 0; i < M; i++) {
        mine[3 + i] = v.metrics.sum[i];
        mine[3 + M + i] = v.metrics.weight[i];
    }
    if ((rc = gather_sum(r, mine, N, sum)) < 0)
        return rc;
    v.loss_sum = sum[0];
    v.correct = (int64_t)sum[1];
    v.total = (int64_t)sum[2];
    for (int i = 0; i < M; i++) {
        v.metrics.sum[i] = sum[3 + i];
        v.metrics.weight[i] = sum[3 + M + i];
    }
    const char *m = r->st.plateau_metric;
    if (m[0] && strcmp(m, "train_loss") && r->spec.sched_every != TR_SCHED_MANUAL) {
        double val = 0;
        if ((rc = plateau_value(r, &v, &val)) < 0 ||
            (rc = ct_sched_step_metric(r->st.sched, val)) < 0)
            return rc;
    }
    if (r->nvals == r->capvals) {
        int cap = r->capvals ? 2 * r->capvals : 8;
        tr_val_result *nv = realloc(r->vals, sizeof *nv * (size_t)cap);
        if (!nv)
            return CT_ENOMEM;
        r->vals = nv;
        r->capvals = cap;
    }
    r->vals[r->nvals++] = v;
    return 0;
}

/* plateau_metric train_loss: a segment's training loss and samples over all ranks are added
 * to the epoch's (tr_state: a checkpoint within the epoch keeps them); at the epoch's end the
 * scheduler steps on their mean. */
static int plateau_train_loss(replica *r, double loss_sum, int64_t samples, bool epoch_end)
{
    if (strcmp(r->st.plateau_metric, "train_loss") || r->spec.sched_every == TR_SCHED_MANUAL)
        return 0;
    double mine[2] = {loss_sum, (double)samples}, sum[2];
    int rc = gather_sum(r, mine, 2, sum);
    if (rc < 0)
        return rc;
    r->st.epoch_loss_sum += sum[0];
    r->st.epoch_samples += (int64_t)sum[1];
    if (!epoch_end)
        return 0;
    double mean = r->st.epoch_samples > 0 ? r->st.epoch_loss_sum / (double)r->st.epoch_samples : 0;
    r->st.epoch_loss_sum = 0;
    r->st.epoch_samples = 0;
    return ct_sched_step_metric(r->st.sched, mean);
}

/* The "validate" method: this rank's sums; the driver adds them up. */
static int replica_validate(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    replica *r = state;
    (void)args;
    (void)len;
    if (!r->bucketers[0])
        return ct__error(CT_EINVAL, "trainer replica: validate before setup");
    tr_val_report rep = {.magic = TR_VAL_REPORT_MAGIC,
                         .rank = r->setup.rank,
                         .world = r->setup.world,
                         .seq = ++r->validations};
    snprintf(rep.group, sizeof rep.group, "%s", r->setup.group);
    tr_val_result v = {0};
    int rc = validate_local(r, r->st.epoch, &v);
    if (rc < 0)
        return rc;
    rep.metrics = v.metrics;
    rep.loss_sum = v.loss_sum;
    rep.correct = v.correct;
    rep.total = v.total;
    if (!(*res = malloc(sizeof rep)))
        return CT_ENOMEM;
    memcpy(*res, &rep, sizeof rep);
    *rlen = sizeof rep;
    return 0;
}

int ct__trainer_register_replica_class(void)
{
    static int done;
    if (done)
        return 0;
    int rc = ct_actor_class_register(
        TR_REPLICA_CLASS, &(ct_actor_class){.create = replica_new,
                                            .destroy = replica_free,
                                            .methods = {{"build", replica_build},
                                                        {"setup", replica_setup},
                                                        {"train_epoch", replica_train_epoch},
                                                        {"regroup", ct__replica_regroup},
                                                        {"snapshot", ct__replica_snapshot},
                                                        {"heal", ct__replica_heal},
                                                        {"validate", replica_validate}}});
    done = rc == 0;
    return rc;
}

/* Every process that links the trainer registers the class before main, so replica processes
 * (this executable again) know it without the user doing anything. */
__attribute__((constructor)) static void register_at_load(void)
{
    ct__trainer_register_replica_class();
}
