/* trainer/train/trainer.c — the trainer's driver side: trainer_create (options, a check-run of
 * every creator), the replica group (actors created where resources fit, a fresh rendezvous
 * group id per attempt), the epoch loop with checkpoints adopted from the object store, the
 * recovery protocols: live (the survivors of a death go on: live.c; at the next step boundary
 * between segments a replacement heals from a live peer: heal.c; this file calls them) and
 * restart (end the group, wait for the head to
 * report the deaths, start as many replicas as fit from the last checkpoint, count retries; a
 * failure no retry could fix ends the job at once: no_retry), the elastic bounds (a request no node
 * could ever hold fails at once; wait with backoff while fewer than min_replicas fit, grow up to
 * max_replicas at every checkpoint, tell on_world_size), validation, save / restore. trainer_create
 * makes the built-in data creators' paths absolute and checks every rank's shard of sharded data.
 * An epoch runs as segments that end in a checkpoint every checkpoint_every_steps optimizer steps
 * (or one segment: the epoch); the driver sums the segments' statistics. Checkpoints also go to
 * checkpoint_dir, and trainer_train can resume from one there. The driver's state (struct
 * trainer) is in driver.h. Not here: the replica's training
 * step (replica.c), the checkpoint bytes (ckpt.c), the checkpoint directory's files (ckptdir.c),
 * the run log (progress.c; called at a few points: start / stop, each segment, epoch and
 * validation, polls while a segment runs). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "driver.h"
#include "trainer/backend/backend.h"

static int copy_name(char *dst, const char *src, const char *field, tr_kind kind, bool required)
{
    if (!src || !*src) {
        if (required)
            return ct__error(CT_EINVAL,
                             "trainer_create: opts.%s is required (a registered %s "
                             "name)",
                             field, ct__trainer_kind_name(kind));
        dst[0] = 0;
        return 0;
    }
    if (strlen(src) >= TR_NAME_MAX)
        return ct__error(CT_EINVAL, "trainer_create: opts.%s \"%s\" longer than %d bytes", field,
                         src, TR_NAME_MAX - 1);
    if (!ct__trainer_lookup(kind, src)) {
        char what[48];
        snprintf(what, sizeof what, "trainer_create: opts.%s", field);
        return ct__trainer_not_registered(kind, src, what);
    }
    snprintf(dst, TR_NAME_MAX, "%s", src);
    return 0;
}

/* A list of registered names (opts.model, .optimizer, .loss: one name, or one per model):
 * each must be registered; the list is copied as given. *n gets its length. */
static int copy_list(char *dst, const char *src, const char *field, tr_kind kind, int *n)
{
    char names[TR_MAX_MODELS][TR_NAME_MAX], what[32];
    snprintf(what, sizeof what, "trainer_create: opts.%s", field);
    if (!src || !*src)
        return copy_name(dst, src, field, kind, true);
    if (strlen(src) >= TR_LIST_MAX)
        return ct__error(CT_EINVAL, "%s \"%s\" longer than %d bytes", what, src, TR_LIST_MAX - 1);
    if ((*n = ct__trainer_split_names(src, names, TR_MAX_MODELS, what)) < 0)
        return *n;
    for (int i = 0; i < *n; i++)
        if (!ct__trainer_lookup(kind, names[i]))
            return ct__trainer_not_registered(kind, names[i], what);
    snprintf(dst, TR_LIST_MAX, "%s", src);
    return 0;
}

/* "(1, 3)" into buf. */
static const char *shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, ")");
    return buf;
}

/* 0 when this CPU has kernels for autocast dtype dt (the CPU table's supports); else
 * CT_ENOSYS naming the config key and the instruction set that is missing. */
static int lowp_cpu_check(ct_dtype dt)
{
    const ct__backend *bk = ct__backend_of(CT_CPU);
    ct__op_desc op = {.kind = CT__OP_LOWP, .name = "matmul", .dt = (int)dt};
    if (!bk || ct__supports(bk, &op) < 0)
        return ct__trainer_error_prefix(CT_ENOSYS, "trainer_create: config key \"precision\" = %s",
                                        dt == CT_F16 ? "f16" : "bf16");
    return 0;
}

/* One training sample through the model and the loss, as the built-in train step runs them (in
 * eval mode, without autograd, on the driver's copy): data that does not fit the model, or an
 * output the loss cannot take with the targets, fails here, naming both shapes, instead of
 * inside every replica. An empty training set (e.g. a driver that reads no shard) is left to
 * the replicas. */
static int check_shapes(const tr_spec *s, tr_state *st)
{
    ct_loader *ld = NULL;
    ct_batch b;
    ct_tensor *x = NULL, *y = NULL, *out = NULL, *loss = NULL;
    char xs[96], ys[96], os[96];
    int rc = ct_loader_new(
        st->data.train,
        &(ct_loader_opts){.batch_size = 1, .seed = s->seed, .transform = st->data.transform}, &ld);
    if (rc == 0 && (rc = ct_loader_next(ld, &b)) <= 0) {
        ct_loader_destroy(&ld);
        return rc < 0 ? ct__trainer_error_prefix(rc, "trainer_create: data \"%s\"", s->data) : 0;
    }
    if (rc < 0)
        return ct__trainer_error_prefix(rc, "trainer_create: data \"%s\"", s->data);
    int64_t shp[CT_DATA_MAX_DIMS + 1] = {1}, tshp[CT_DATA_MAX_DIMS + 1] = {1};
    for (int d = 0; d < b.ndim; d++)
        shp[d + 1] = b.shape[d];
    for (int d = 0; d < b.tndim; d++)
        tshp[d + 1] = b.tshape[d];
    shape_str(xs, sizeof xs, b.ndim + 1, shp);
    shape_str(ys, sizeof ys, b.tndim + 1, tshp);
    x = ct_tensor_wrap(CT_F32, b.ndim + 1, shp, (void *)b.x);
    y = b.tndim ? ct_tensor_wrap(CT_F32, b.tndim + 1, tshp, (void *)b.target)
                : ct_tensor_wrap(CT_I64, 1, tshp, (void *)b.y);
    ct_module *m = st->models[0];
    bool training = ct_module_is_training(m), grad = ct_autograd_set_enabled(false);
    ct_module_train(m, false);
    if (!x || !y) {
        rc = ct__error(CT_ENOMEM, "trainer_create: out of memory");
    } else if (!(out = ct_module_forward(m, x))) {
        rc = ct__trainer_error_prefix(CT_ERANGE,
                                      "trainer_create: opts.model \"%s\" does not take the "
                                      "samples of opts.data \"%s\": a batch x %s",
                                      s->model, s->data, xs);
    } else if (!(loss = st->losses[0](out, y))) {
        shape_str(os, sizeof os, ct_tensor_ndim(out), ct_tensor_shape(out));
        rc = ct__trainer_error_prefix(CT_ERANGE,
                                      "trainer_create: opts.loss \"%s\" does not take the "
                                      "output %s of opts.model \"%s\" with the %s %s of "
                                      "opts.data \"%s\"",
                                      s->loss, os, s->model, b.tndim ? "targets" : "labels", ys,
                                      s->data);
    }
    ct_module_train(m, training);
    ct_autograd_set_enabled(grad);
    ct_tensor_release(&loss);
    ct_tensor_release(&out);
    ct_tensor_release(&x);
    ct_tensor_release(&y);
    ct_loader_destroy(&ld);
    return rc < 0 ? rc : 0;
}

/* Sharded data (trainer_data.sharded: each rank reads only its own shard): builds every rank's
 * shard of a group of `world` replicas, one at a time, as that rank's replica would (rank r of
 * world, the same config; the creator sees trainer_ctx_is_driver() as in the check-run), so that
 * a shard too small for the data's windows, or an empty one, fails here, naming the rank, and not
 * in every replica of every retry. world is the largest group (max_replicas): a smaller group's
 * shards are larger. */
static int check_shards(const tr_spec *s, int world, bool elastic)
{
    for (int r = 0; r < world; r++) {
        trainer_ctx ctx;
        trainer_data d;
        int rc = ct__trainer_ctx_init(&ctx, s->config, r, world, s->seed, 0, s->epochs, true);
        if (rc < 0)
            return rc;
        if ((rc = ct__trainer_data_build(s, &ctx, &d)) == 0) {
            if (ct_dataset_length(d.train) == 0)
                rc = ct__error(CT_EINVAL,
                               "its sharded training set is empty (more ranks than records?)");
            ct__trainer_data_free(&d);
        }
        ct__trainer_ctx_free(&ctx);
        if (rc < 0)
            return ct__trainer_error_prefix(
                rc,
                "trainer_create: opts.data \"%s\" for replica %d of %d (each replica reads its "
                "own shard; %s %d; use fewer replicas or more data)",
                s->data, r, world,
                elastic ? "a group may have max_replicas =" : "num_replicas =", world);
    }
    return 0;
}

/* Config key devices_per_replica = k > 1 on device: CT_EINVAL where it cannot be (the CPU, or
 * indices past the last); CUDA replicas ask for k GPUs at least, then CT_ENOSYS: their
 * gradients are averaged over NCCL, one GPU a communicator. On the checking device each
 * device's gradients are bucketed and averaged on that device (ct_bucketer_opts.devices). */
static int devices_check(ct_device device, int k, trainer *t)
{
    char name[32];
    ct_device_name(device, name, sizeof name);
    if (ct_device_kind(device) == CT_CPU)
        return ct__error(CT_EINVAL,
                         "trainer_create: config key \"devices_per_replica\" = %d needs "
                         "opts.device \"cuda\" or \"checkdev\" (not \"%s\")",
                         k, name);
    if (ct_device_index(device) + k > CT_MAX_DEVICE_INDEX)
        return ct__error(CT_EINVAL,
                         "trainer_create: config key \"devices_per_replica\" = %d from device "
                         "%s: past the last index, %d",
                         k, name, CT_MAX_DEVICE_INDEX - 1);
    if (ct_device_kind(device) != CT_CUDA)
        return 0;
    if (t->gpus < k)
        t->gpus = k;
    return ct__error(CT_ENOSYS,
                     "trainer_create: config key \"devices_per_replica\" = %d on CUDA: a "
                     "replica's model across GPUs is not trained by the trainer yet (NCCL "
                     "averages one GPU's gradients a communicator); \"checkdev\" trains one, "
                     "and the engine does (ct_module_to on children, ct_tensor_to in forward)",
                     k);
}

int trainer_create(const trainer_opts *o, trainer **out)
{
    trainer *t = NULL;
    trainer_ctx ctx;
    bool ctx_ok = false;
    int rc, nm = 1, no = 1, nl = 1;
    if (out)
        *out = NULL;
    if (!o || !out)
        return ct__error(CT_EINVAL, "trainer_create: %s is NULL", !o ? "opts" : "out");
    ct__trainer_register_replica_class();
    ct_device device = CT_CPU;
    if (o->device && ct_device_parse(o->device, &device) < 0)
        return ct__error(CT_EINVAL, "trainer_create: opts.%s", ct_last_error()); /* device "x": */
    if (o->use_gpu && o->device && ct_device_kind(device) != CT_CUDA)
        return ct__error(CT_EINVAL, "trainer_create: opts.use_gpu with opts.device \"%s\"",
                         o->device);
    if (o->use_gpu)
        device = CT_CUDA;
    /* the replicas run this program: it must have the device's backend (a GPU is the nodes') */
    if (device != CT_CPU && (rc = ct__backend_linked(device)) < 0)
        return ct__error(rc, "trainer_create: opts.%s: %s", o->use_gpu ? "use_gpu" : "device",
                         ct_last_error());
    if (o->gpus_per_replica < 0 || o->gpus_per_replica > 64)
        return ct__error(CT_EINVAL, "trainer_create: opts.gpus_per_replica %d not in [0, 64]",
                         o->gpus_per_replica);
    if (o->num_replicas < 0 || o->num_replicas > 1024 || o->min_replicas < 0 ||
        o->min_replicas > 1024 || o->max_replicas < 0 || o->max_replicas > 1024)
        return ct__error(CT_EINVAL, "trainer_create: opts.%s %d not in [0, 1024]",
                         o->num_replicas < 0 || o->num_replicas > 1024   ? "num_replicas"
                         : o->min_replicas < 0 || o->min_replicas > 1024 ? "min_replicas"
                                                                         : "max_replicas",
                         o->num_replicas < 0 || o->num_replicas > 1024   ? o->num_replicas
                         : o->min_replicas < 0 || o->min_replicas > 1024 ? o->min_replicas
                                                                         : o->max_replicas);
    int num = o->num_replicas ? o->num_replicas : 1;
    int min = o->min_replicas ? o->min_replicas : 1;
    int max = o->max_replicas ? o->max_replicas : num;
    if (min > num || num > max)
        return ct__error(CT_EINVAL,
                         "trainer_create: opts.min_replicas %d <= num_replicas %d <= "
                         "max_replicas %d does not hold",
                         min, num, max);
    if (o->batch_size < 0 || o->epochs < 0 || o->cpus_per_replica < 0 || o->bucket_mb < 0 ||
        o->comm_timeout_ms < 0 || o->accumulate < 0)
        return ct__error(CT_EINVAL, "trainer_create: opts.%s is negative",
                         o->batch_size < 0         ? "batch_size"
                         : o->epochs < 0           ? "epochs"
                         : o->cpus_per_replica < 0 ? "cpus_per_replica"
                         : o->bucket_mb < 0        ? "bucket_mb"
                         : o->accumulate < 0       ? "accumulate"
                                                   : "comm_timeout_ms");
    if (o->config && strlen(o->config) >= TR_CONFIG_MAX)
        return ct__error(CT_EINVAL, "trainer_create: opts.config longer than %d bytes",
                         TR_CONFIG_MAX - 1);
    if ((t = calloc(1, sizeof *t)))
        ct__report_init(&t->report);
    if (!t)
        return ct__error(CT_ENOMEM, "trainer_create: out of memory");
    tr_spec *s = &t->spec;
    if ((rc = copy_list(s->model, o->model, "model", TR_MODEL, &nm)) < 0 ||
        (rc = copy_name(s->data, o->data, "data", TR_DATA, true)) < 0 ||
        (rc = copy_list(s->optimizer, o->optimizer, "optimizer", TR_OPTIM, &no)) < 0 ||
        (rc = copy_list(s->loss, o->loss ? o->loss : "cross_entropy", "loss", TR_LOSS, &nl)) < 0 ||
        (rc = copy_name(s->scheduler, o->scheduler, "scheduler", TR_SCHED, false)) < 0 ||
        (rc = copy_name(s->hook, o->initialization_hook, "initialization_hook", TR_HOOK, false)) <
            0 ||
        (rc = copy_name(s->train_step, o->train_step, "train_step", TR_TRAIN_STEP, false)) < 0 ||
        (rc = copy_name(s->validate_step, o->validate_step, "validate_step", TR_VAL_STEP, false)) <
            0)
        goto fail;
    /* several models: 1 or n optimizers and losses, a custom step that reduces and steps each
     * (trainer_step_backward_model), no accumulation */
    const char *bad = no != 1 && no != nm   ? "optimizer"
                      : nl != 1 && nl != nm ? "loss"
                      : nm == 1             ? NULL
                      : !s->train_step[0]   ? "train_step"
                      : o->accumulate > 1   ? "accumulate"
                                            : NULL;
    if (bad) {
        rc = ct__error(CT_EINVAL, "trainer_create: opts.%s: %s with %d models", bad,
                       !strcmp(bad, "train_step")   ? "a custom train step is required"
                       : !strcmp(bad, "accumulate") ? "gradient accumulation is not supported"
                                                    : "give 1 name or one per model",
                       nm);
        goto fail;
    }
    /* the paths a built-in data creator opens, made absolute here: replicas run in their
     * node's working directory, not this one (a user's creator reads its own keys as given) */
    if ((rc = ct__trainer_absolute_paths(o->config,
                                         ct__trainer_lookup(TR_DATA, s->data) ==
                                                 ct__trainer_builtin(TR_DATA, s->data)
                                             ? ct__trainer_builtin_paths(TR_DATA, s->data)
                                             : "",
                                         s->config, sizeof s->config)) < 0)
        goto fail;
    s->seed = o->seed;
    s->batch = o->batch_size ? o->batch_size : 64;
    s->epochs = o->epochs ? o->epochs : 1;
    s->bucket_mb = o->bucket_mb; /* 0: replica.c chooses (25, or one bucket) */
    t->cpus = o->cpus_per_replica > 0 ? o->cpus_per_replica : 1;
    s->threads = (int)t->cpus > 0 ? (int)t->cpus : 1;
    s->device = device;
    /* CUDA replicas ask for GPUs; the checking device needs none */
    t->gpus =
        ct_device_kind(device) == CT_CUDA ? (o->gpus_per_replica > 0 ? o->gpus_per_replica : 1) : 0;
    s->comm_timeout_ms = o->comm_timeout_ms ? o->comm_timeout_ms : 60000;
    s->accumulate = o->accumulate > 1 ? o->accumulate : 1;
    s->bind_cpus = !o->no_cpu_binding;
    if (!o->scheduler_step || !strcmp(o->scheduler_step, "epoch")) {
        s->sched_every = TR_SCHED_EPOCH;
    } else if (!strcmp(o->scheduler_step, "batch")) {
        s->sched_every = TR_SCHED_BATCH;
    } else if (!strcmp(o->scheduler_step, "manual")) {
        s->sched_every = TR_SCHED_MANUAL;
    } else {
        rc = ct__error(CT_EINVAL,
                       "trainer_create: opts.scheduler_step \"%s\": not \"epoch\", \"batch\" "
                       "or \"manual\"",
                       o->scheduler_step);
        goto fail;
    }
    t->num_replicas = num;
    t->min_replicas = min;
    t->max_replicas = max;
    t->lr_scale = 1;
    t->placement = o->placement;
    /* the check-run: every creator once, here, before anything is started */
    if ((rc = ct__trainer_ctx_init(&ctx, s->config, 0, 1, s->seed, 0, s->epochs, true)) < 0)
        goto fail;
    ctx_ok = true;
    /* the ring communicator's layout across nodes: config key "comm_topology" */
    const char *topo = trainer_config_str(&ctx, "comm_topology", "auto");
    s->topology = !strcmp(topo, "auto")           ? CT_COMM_TOPO_AUTO
                  : !strcmp(topo, "flat")         ? CT_COMM_TOPO_FLAT
                  : !strcmp(topo, "hierarchical") ? CT_COMM_TOPO_HIER
                                                  : -1;
    if (s->topology < 0) {
        rc = ct__error(CT_EINVAL,
                       "trainer_create: config key \"comm_topology\" = \"%s\": not \"auto\", "
                       "\"flat\" or \"hierarchical\"",
                       topo);
        goto fail;
    }
    /* ZeRO: opts.zero_stage, else config key "zero" */
    s->zero = o->zero_stage ? o->zero_stage : (int)trainer_config_int(&ctx, "zero", 0);
    if (s->zero < 0 || s->zero > 1) {
        rc = ct__error(CT_EINVAL, "trainer_create: %s %d: ZeRO stage 0 or 1 is implemented",
                       o->zero_stage ? "opts.zero_stage" : "config key \"zero\" =", s->zero);
        goto fail;
    }
    if (s->zero && device != CT_CPU) {
        rc = ct__error(CT_ENOSYS,
                       "trainer_create: ZeRO stage %d: implemented for replicas on the CPU only "
                       "(opts.device)",
                       s->zero);
        goto fail;
    }
    /* recovery: opts.recovery, else config key "recovery"; live by default (where it applies:
     * below, once the data is known) */
    const char *recovery = o->recovery ? o->recovery : trainer_config_str(&ctx, "recovery", NULL);
    if (recovery && strcmp(recovery, "live") && strcmp(recovery, "restart")) {
        rc = ct__error(CT_EINVAL, "trainer_create: %s \"%s\": not \"live\" or \"restart\"",
                       o->recovery ? "opts.recovery" : "config key \"recovery\" =", recovery);
        goto fail;
    }
    bool asked_live = !recovery || !strcmp(recovery, "live"), default_live = !recovery;
    if (s->zero && ctx.precision == CT_F16) {
        rc = ct__error(CT_ENOSYS,
                       "trainer_create: ZeRO stage %d with config key \"precision\" = f16: the "
                       "loss scaler's inf/NaN check would see only this rank's shard averaged; "
                       "not implemented (use bf16, or zero 0)",
                       s->zero);
        goto fail;
    }
    /* a low precision on CPU replicas needs oneDNN kernels for it on this CPU (the nodes are
     * taken to have the driver's): without them the first step would fail on every retry */
    if (ctx.precision != CT_F32 && device == CT_CPU && (rc = lowp_cpu_check(ctx.precision)) < 0)
        goto fail;
    if ((rc = ct__trainer_state_build(s, &ctx, true, &t->local)) < 0)
        goto fail;
    if (ctx.ndevices > 1 && (rc = devices_check(device, ctx.ndevices, t)) < 0)
        goto fail;
    if ((rc = ct__trainer_pipeline_keys(&ctx, s, &t->local, &t->pipe)) < 0)
        goto fail;
    ct__trainer_ctx_use_step_keys(&ctx, s); /* steps run only in replicas */
    if ((rc = ct__trainer_ctx_check(&ctx, true)) < 0)
        goto fail;
    /* a custom step may feed the model otherwise than the built-in one */
    if (!s->train_step[0] && t->local.nmodels == 1 && (rc = check_shapes(s, &t->local)) < 0)
        goto fail;
    /* every rank's shard, as the replicas of the largest group would read them */
    if (t->local.data.sharded && max > 1 && (rc = check_shards(s, max, max > num)) < 0)
        goto fail;
    /* live recovery where it applies; else restart, and one line that says why */
    const char *not_live = ct_device_kind(device) == CT_CUDA
                               ? "CUDA replicas: NCCL would need an abort and a new communicator "
                                 "(live recovery runs on the CPU ring: the CPU and the checking "
                                 "device) (opts.device)"
                           : ctx.ndevices > 1
                               ? "a model across devices: a survivor's regroup drains one device "
                                 "(devices_per_replica)"
                           : s->zero ? "ZeRO-1: the dead replica's optimizer shard exists nowhere "
                                       "else (zero_stage)"
                           : t->local.data.sharded ? "sharded data: the dead replica's shard is "
                                                     "not on the survivors (trainer_data.sharded)"
                                                   : NULL;
    t->live = asked_live && !not_live;
    if (asked_live && not_live)
        CT_LOG(default_live ? CT_LOG_INFO : CT_LOG_WARN, "trainer",
               "recovery: \"restart\" (from the last checkpoint), not \"live\": %s", not_live);
    t->live_lr = 1;
    /* the driver keeps model, optimizer and scheduler, not the data */
    t->tokens = t->local.data.tokens;
    ct__trainer_data_free(&t->local.data);
    t->local.has_data = false;
    ct__trainer_ctx_free(&ctx);
    t->stats.replicas = 0;
    *out = t;
    return 0;
fail:
    if (ctx_ok)
        ct__trainer_ctx_free(&ctx);
    ct__trainer_state_free(&t->local);
    free(t);
    return rc;
}

/* ---- the group ---- */

/* Where in the epoch a group of n replicas starts from the checkpoint: its batch, or with
 * another group size the batch where as many samples of the epoch's order were seen (rounded
 * down, and to whole accumulation groups): a few samples seen twice, none skipped. A checkpoint
 * of an epoch a live recovery re-sharded (an offset) starts a group of another size exactly at
 * its samples seen (*offset; batch 0). */
static int64_t start_batch(const trainer *t, int n, int64_t *offset)
{
    int64_t b = t->local.batch;
    *offset = t->local.offset;
    if (t->local.offset > 0 && t->local.world > 0 && t->local.world != n) {
        *offset = t->local.offset + b * t->spec.batch * t->local.world;
        CT_LOG(CT_LOG_INFO, "trainer",
               "checkpoint at batch %lld after %lld samples of epoch %lld with %d replicas: %d "
               "start after %lld samples",
               (long long)b, (long long)t->local.offset, (long long)t->local.epoch, t->local.world,
               n, (long long)*offset);
        return 0;
    }
    if (b > 0 && t->local.world > 0 && t->local.world != n) {
        b = b * t->local.world / n;
        b -= b % t->spec.accumulate;
        CT_LOG(CT_LOG_INFO, "trainer",
               "checkpoint at batch %lld of epoch %lld with %d replicas: %d start at batch %lld",
               (long long)t->local.batch, (long long)t->local.epoch, t->local.world, n,
               (long long)b);
    }
    return b;
}

/* Where a group's start or run failed. */
typedef enum tr_stage {
    TR_STAGE_CREATE, /* creating the replica actors (ct_actor_create_many) */
    TR_STAGE_BUILD,  /* a replica's "build": config, creators, data, steps (replica.c) */
    TR_STAGE_SETUP,  /* a replica's "setup": communicator, CPU binding, checkpoint, broadcasts */
} tr_stage;

/* The one place that decides which failures end trainer_train at once instead of spending a
 * retry: those that do not depend on which node ran the replica, so that a retry would fail the
 * same way. A replica that died (a crash, a signal, its node lost) is always retried, whatever
 * code its peers saw. By stage and code:
 * - create: CT_ESTART only: the node quoted an exec or loader error of the program (the same
 *   binary everywhere). CT_ETIMEDOUT (no room in time), CT_EDEAD and the rest are the cluster's.
 * - build (the program, its config and its data, before any peer is involved):
 *   CT_EINVAL    a bad config value, a creator's refusal (trainer_ctx_fail), data too small for
 *                the shards: the same bytes give the same verdict on every node;
 *   CT_ENOENT    a file or directory a creator opens is missing (paths of the built-in data
 *                creators are absolute by then, so this is not the node's working directory);
 *   CT_ENOSYS    something not built into the program (the device's backend on CUDA replicas is
 *                reported as CT_ECUDA instead: a node whose GPU cannot be used is the node's);
 *   CT_ENOTREG   a creator or step the replica's program lacks (registered only in the driver);
 *   CT_ERANGE    shapes or values out of range in a creator.
 *   Not these: CT_ENOMEM / CT_ENOSPC (the node's memory and store), CT_EIO (a disk or a
 *   network file system that may answer next time), CT_EACCES (a file's permissions can differ
 *   between hosts), CT_ECUDA / CT_ENCCL / CT_EDNNL (a device or library of that node),
 *   CT_ETIMEDOUT, CT_ECONNRESET, CT_ECANCELED, CT_EPROTO, CT_EZMQ, CT_EDEAD (the cluster).
 * - setup and epochs: never: they involve peers, the network and the node's CPUs, and a peer's
 *   failure reaches the others under their own codes; a step's own error (the one-backward rule)
 *   is retried as documented in GUIDE.md section 4. */
static bool no_retry(tr_stage stage, int rc, bool died)
{
    if (died)
        return false;
    switch (stage) {
    case TR_STAGE_CREATE:
        return rc == CT_ESTART;
    case TR_STAGE_BUILD:
        return rc == CT_EINVAL || rc == CT_ENOENT || rc == CT_ENOSYS || rc == CT_ENOTREG ||
               rc == CT_ERANGE;
    case TR_STAGE_SETUP:
        return false;
    }
    return false;
}

/* Whether a replica of the running group is dead (a crash, a signal, its node lost). */
static bool any_dead(const trainer *t)
{
    for (int i = 0; i < t->world; i++)
        if (t->actors[i] && ct_actor_is_dead(t->actors[i]))
            return true;
    return false;
}

/* Starts n replicas from the newest checkpoint (or the creators' initial state) and waits for
 * the group to be set up. On failure the group is ended, why says what failed and *fatal
 * whether a retry would fail the same way (no_retry). */
static int start_group(trainer *t, int n, int timeout_ms, char *why, size_t cap, bool *fatal)
{
    int rc, failed = -1;
    tr_stage stage = TR_STAGE_CREATE;
    *fatal = false;
    char msg[600] = "";
    tr_setup_args *sa = NULL;
    t->stats.group_start_ns = ct__now_ns();
    t->stats.group_first_step_ns = 0;
    if (!(t->actors = calloc((size_t)n, sizeof *t->actors)))
        return ct__error(CT_ENOMEM, "trainer: out of memory");
    t->world = n;
    ct_resources res = {
        .cpu = t->cpus, .gpu = t->gpus, .strategy = t->placement, .timeout_ms = timeout_ms};
    int64_t t0 = ct__now_ns();
    rc = ct_actor_create_many(TR_REPLICA_CLASS, &res, &t->spec, sizeof t->spec, n, t->actors);
    int64_t t1 = ct__now_ns();
    if (rc < 0) {
        snprintf(msg, sizeof msg, "starting %d replicas: %s: %s", n, ct_strerror(rc),
                 ct_last_error());
        goto fail;
    }
    if (!(sa = calloc((size_t)n, sizeof *sa))) {
        rc = CT_ENOMEM;
        goto fail;
    }
    char group[64];
    snprintf(group, sizeof group, "g%d-%d-%lld", (int)getpid(), ++t->groups,
             (long long)(ct__now_ns() / 1000));
    for (int i = 0; i < n; i++) {
        sa[i].rank = i;
        sa[i].world = n;
        memcpy(sa[i].group, group, sizeof group);
        sa[i].start_epoch = t->local.epoch;
        sa[i].start_batch = start_batch(t, n, &sa[i].start_offset);
        sa[i].has_ckpt = t->has_ckpt;
        sa[i].ckpt = t->ckpt;
        sa[i].lr_scale = t->lr_scale;
        snprintf(sa[i].driver_node, sizeof sa[i].driver_node, "%s", ct_object_node());
    }
    stage = TR_STAGE_BUILD;
    if ((rc = ct__driver_call_all(t, "build", sa, sizeof *sa, sizeof *sa, NULL, &failed, msg,
                                  sizeof msg)) < 0)
        goto fail;
    stage = TR_STAGE_SETUP;
    if ((rc = ct__driver_call_all(t, "setup", NULL, 0, 0, NULL, &failed, msg, sizeof msg)) < 0)
        goto fail;
    t->local.batch = sa[0].start_batch;
    t->local.offset = sa[0].start_offset;
    t->local.world = n;
    free(sa);
    memcpy(t->group, group, sizeof group);
    t->group_fresh = true;
    t->stats.replicas = n;
    t->stats.group_start_step = t->local.step;
    CT_LOG(CT_LOG_INFO, "trainer",
           "group %s: %d replicas from epoch %lld batch %lld (%s): created in %.1f ms, set up "
           "in %.1f ms",
           group, n, (long long)t->local.epoch, (long long)t->local.batch,
           t->has_ckpt ? "checkpoint" : "initial state", (t1 - t0) / 1e6,
           (ct__now_ns() - t1) / 1e6);
    return 0;
fail:
    free(sa);
    *fatal = no_retry(stage, rc, t->actors && any_dead(t));
    if (t->actors) {
        ct__driver_end_group(t, why, cap, failed, rc, msg);
    }
    if (why && !why[0])
        snprintf(why, cap, "%s", msg);
    return rc < 0 ? rc : CT_EINVAL;
}

/* A checkpoint stored with `copies` of `asked` copies (TR_CKPT_COPIES, or one per live node
 * with a store when there are fewer): fewer than asked, or than an earlier checkpoint was
 * asked for (copies lost with a node), is counted in the stats and logged (a warning when it
 * starts, then at debug level). A cluster of one node asks for one copy: nothing to say. */
static void note_copies(trainer *t, const char *what, int copies, int asked)
{
    if (asked > t->copies_kept)
        t->copies_kept = asked;
    int want = t->copies_kept;
    if (copies >= want) {
        if (t->under_replicated)
            CT_LOG(CT_LOG_INFO, "trainer", "%s: %d copies again", what, copies);
        t->under_replicated = false;
        return;
    }
    t->stats.checkpoints_under_replicated++;
    char why[96];
    if (asked < want)
        snprintf(why, sizeof why, "nodes with a store were lost: %d live now", asked);
    else
        snprintf(why, sizeof why, "the store made %d of the %d asked in time", copies, asked);
    CT_LOG(t->under_replicated ? CT_LOG_DEBUG : CT_LOG_WARN, "trainer",
           "%s: stored with %d cop%s where checkpoints had %d (%s): it does not survive the loss "
           "of its node (%d checkpoint%s under-replicated so far)",
           what, copies, copies == 1 ? "y" : "ies", want, why,
           t->stats.checkpoints_under_replicated,
           t->stats.checkpoints_under_replicated == 1 ? "" : "s");
    t->under_replicated = true;
}

/* Frees the current checkpoint from the store, unless restore_best keeps it as the best. */
static void drop_ckpt(trainer *t)
{
    if (t->has_ckpt && !(t->has_best && !memcmp(&t->best, &t->ckpt, sizeof t->ckpt)))
        ct_free(&t->ckpt);
    t->has_ckpt = false;
}

/* Forgets the best checkpoint, freeing it unless it is the current one. */
static void drop_best(trainer *t)
{
    if (t->has_best && !(t->has_ckpt && !memcmp(&t->best, &t->ckpt, sizeof t->ckpt)))
        ct_free(&t->best);
    t->has_best = false;
}

/* Makes the newest checkpoint id the current one: pulls it to the driver's node, loads it into
 * the driver's state, then frees the previous one (never before the new one is complete). */
static int adopt_checkpoint(trainer *t, const ct_object_id *id, double write_s)
{
    ct_object_view v = {0};
    int rc = ct_get(id, 30000, &v);
    if (rc < 0)
        return ct__trainer_error_prefix(rc, "trainer: fetching the new checkpoint");
    rc = ct__ckpt_load(&t->local, &t->spec, v.data, v.size);
    ct_object_release(&v);
    if (rc < 0)
        return rc;
    drop_ckpt(t);
    t->ckpt = *id;
    t->has_ckpt = true;
    t->ckpt_unsaved = true;
    t->lr_scale = 1; /* the new checkpoint holds the rates its group trained with */
    ct__report_checkpoint(&t->report, t->local.step, write_s);
    return 0;
}

/* Restores the driver's state to the current checkpoint (after a group failed mid-epoch with
 * checkpoints off, or to undo nothing: the state is already the checkpoint's). */
static int rewind_to_checkpoint(trainer *t)
{
    if (!t->has_ckpt) { /* replicas start over from the creators' state, as the driver's own */
        t->local.epoch = 0;
        t->local.step = 0;
        t->local.batch = 0;
        t->local.offset = 0;
        t->local.skipped = 0;
        if (t->local.scaler) /* never changed without a checkpoint; fresh, to be sure */
            ct_grad_scaler_load(t->local.scaler, (float)t->local.scaler_opts.init_scale, 0);
        return 0;
    }
    ct_object_view v = {0};
    int rc = ct_get(&t->ckpt, 30000, &v);
    if (rc < 0)
        return rc;
    rc = ct__ckpt_load(&t->local, &t->spec, v.data, v.size);
    ct_object_release(&v);
    return rc;
}

static int run_validation(trainer *t, char *why, size_t cap)
{
    int failed, rc, world = t->world;
    void **res = calloc((size_t)world, sizeof *res);
    char msg[600] = "";
    if (!res)
        return CT_ENOMEM;
    rc = ct__driver_call_all(t, "validate", NULL, 0, 0, res, &failed, msg, sizeof msg);
    if (rc == 0) {
        double loss = 0;
        int64_t correct = 0, total = 0;
        tr_metrics m = {0};
        for (int i = 0; i < t->world; i++) {
            tr_val_report *r = res[i];
            loss += r->loss_sum;
            correct += r->correct;
            total += r->total;
            ct__trainer_metrics_add(&m, &r->metrics);
        }
        ct__driver_set_val_stats(t, &t->stats, loss, correct, total, &m);
        ct__report_val(&t->report, &t->stats);
        /* its place: mid-epoch the epoch it is in, else the last one done */
        ct__progress_val(t->progress, &t->stats,
                         t->local.batch > 0 ? t->local.epoch : t->local.epoch - 1, t->local.step);
    } else {
        ct__driver_end_group(t, why, cap, failed, rc, msg);
    }
    for (int i = 0; i < world; i++)
        free(res[i]);
    free(res);
    return rc;
}

static int drain_mid_epoch(trainer *t, void **res, int world, int d);

/* A segment of epoch `epoch` on the group: from the driver's position (t->local.batch) until
 * `steps` optimizer steps are done (0: the epoch's end); *done says whether the epoch ended.
 * On success the epoch's sums, the stats at an epoch's end and (if asked) the checkpoint are
 * updated, and t->vals holds the validations run during the segment (o's validate_every_*;
 * rank 0's copy: every rank has the same). */
static int run_segment(trainer *t, int64_t epoch, int64_t steps, bool checkpoint,
                       const trainer_train_opts *o, bool *done, char *why, size_t cap)
{
    tr_epoch_args *ea = calloc((size_t)t->world, sizeof *ea);
    void **res = calloc((size_t)t->world, sizeof *res);
    int failed = -1, rc, world = t->world;
    char msg[600] = "";
    *done = false;
    if (!ea || !res) {
        free(ea);
        free(res);
        return CT_ENOMEM;
    }
    if (t->local.batch == 0 && t->local.offset == 0) /* a new epoch (or one started over) */
        t->acc = (epoch_sums){.agree = true};
    /* a group that shrank live pauses after every step until it healed back: each is a step
     * boundary where a replacement may join (ct__heal_replacement) */
    int64_t pause = t->heal_to && t->world < t->heal_to ? HEAL_POLL_STEPS : 0;
    for (int i = 0; i < t->world; i++)
        ea[i] = (tr_epoch_args){.epoch = epoch,
                                .offset = t->local.offset,
                                .lr_scale = t->live_lr,
                                .start_batch = t->local.batch,
                                .steps = steps,
                                .checkpoint = checkpoint,
                                .validate_every = o->validate_every_steps,
                                .validate_end = o->validate_every_epoch,
                                .report_ms = ct__progress_report_ms(t->progress),
                                .pause_steps = pause,
                                .record_grads = t->heal_job.a && i == t->heal_job.peer,
                                .live = t->live};
    t->nvals = 0;
    ct__progress_segment_start(t->progress, t->group, t->world, epoch, t->local.batch);
    t->wait_all = t->live;
    rc = ct__driver_call_all(t, "train_epoch", ea, sizeof *ea, sizeof *ea, res, &failed, msg,
                             sizeof msg);
    t->wait_all = false;
    t->live_lr = 1;   /* the replicas applied it */
    int drained = -1; /* a replica whose node drains: the one with a checkpoint, if any */
    for (int i = 0; i < world; i++) {
        tr_report *r = res[i];
        if (r && r->drained &&
            (drained < 0 || (r->has_ckpt && !((tr_report *)res[drained])->has_ckpt)))
            drained = i;
    }
    if (rc < 0 && drained >= 0 && ((tr_report *)res[drained])->has_ckpt) {
        rc = drain_mid_epoch(t, res, world, drained);
        goto out;
    }
    if (rc < 0) {
        t->stats.failure_seen_ns = ct__now_ns();
        for (int i = 0; i < world; i++) { /* a checkpoint of a replica that ended: not adopted */
            tr_report *r = res[i];
            if (r && r->has_ckpt)
                ct_free(&r->ckpt);
        }
        int64_t d = 0;
        why[0] = 0;
        /* a survivor whose call returned had finished the segment as the peer died: the driver
         * would not count those steps (the reports are dropped with the failure), so the group
         * restarts from the checkpoint instead of going on live from a position the driver does
         * not know (cluster_ssh_netns beside load: the driver 50 steps behind its replicas) */
        int finished = -1;
        for (int i = 0; i < world && finished < 0; i++)
            if (res[i] && !ct_actor_is_dead(t->actors[i]))
                finished = i;
        if (t->live && finished >= 0)
            CT_LOG(CT_LOG_INFO, "trainer",
                   "recovery: replica %d had finished the segment when a peer died: restarting "
                   "from the last checkpoint, not live",
                   finished);
        if (t->live && finished < 0 &&
            ct__live_recover(t, o, steps, &d, why, cap) == 0) { /* the survivors go on */
            for (int i = 0; i < world; i++)
                free(res[i]);
            free(res);
            free(ea);
            return run_segment(t, epoch, steps > 0 ? steps - d : 0, checkpoint, o, done, why, cap);
        }
        if (why[0]) { /* the group is the survivors now: what died is said already */
            ct__driver_end_group(t, NULL, 0, -1, 0, NULL);
            t->fail_reason = "replica_died";
        } else {
            ct__driver_end_group(t, why, cap, failed, rc, msg);
        }
        goto out;
    }
    double slowest = 0;
    int64_t first_step = 0;
    tr_report *r0 = res[0];
    for (int i = 0; i < t->world; i++) {
        tr_report *r = res[i];
        ct__trainer_metrics_add(&t->acc.m, &r->metrics);
        t->acc.loss += r->loss_sum;
        t->acc.samples += r->samples;
        slowest = r->seconds > slowest ? r->seconds : slowest;
        first_step = r->first_step_ns > first_step ? r->first_step_ns : first_step;
        t->acc.agree &= r->weights_hash == r0->weights_hash;
        if (i == 0 || r->optim_state_bytes > t->stats.optim_state_bytes)
            t->stats.optim_state_bytes = r->optim_state_bytes;
    }
    t->acc.seconds += slowest;
    if (r0->nval > 0) {
        tr_val_result *v = realloc(t->vals, sizeof *v * (size_t)r0->nval);
        if (!v) {
            rc = CT_ENOMEM;
            goto out;
        }
        t->vals = v;
        memcpy(v, (char *)r0 + sizeof *r0, sizeof *v * (size_t)r0->nval);
        t->nvals = r0->nval;
    }
    if (t->group_fresh)
        t->stats.group_first_step_ns = first_step;
    if (t->live_fresh)
        t->stats.live_first_step_ns = first_step;
    t->live_fresh = false;
    t->group_fresh = false;
    *done = r0->epoch_done;
    /* rank 0's checkpoint; at an epoch's end a draining replica writes one when rank 0 does
     * not (checkpoints off) */
    tr_report *ck = r0->has_ckpt || drained < 0 ? r0 : res[drained];
    t->at_ckpt = ck->has_ckpt;
    if (ck->has_ckpt) {
        char what[64];
        snprintf(what, sizeof what, "checkpoint at step %lld",
                 (long long)t->local.step + ck->steps);
        note_copies(t, what, ck->copies, ck->copies_asked);
        if ((rc = adopt_checkpoint(t, &ck->ckpt, ck->ckpt_seconds)) < 0) {
            snprintf(why, cap, "adopting the checkpoint of epoch %lld: %s", (long long)epoch + 1,
                     ct_last_error());
            ct__driver_end_group(t, NULL, 0, -1, rc, NULL);
            goto out;
        }
    } else if (*done) {
        t->local.epoch = epoch + 1; /* the driver's model lags (no checkpoint) */
        t->local.step += r0->steps;
        t->local.batch = 0;
        t->local.offset = 0;
    } else { /* defensive: segments end in a checkpoint, or at the epoch's end */
        t->local.step += r0->steps;
        t->local.batch = r0->end_batch;
        t->local.offset = r0->end_offset;
    }
    if (*done) {
        ct__driver_epoch_stats(t, &t->stats);
        t->stats.epoch = epoch + 1;
        if (!t->acc.agree)
            CT_LOG(CT_LOG_WARN, "trainer", "replicas' weights differ after epoch %lld",
                   (long long)epoch + 1);
    }
    ct__driver_local_stats(t);
    t->stats.skipped_steps = r0->skipped_total; /* where the replicas are (no checkpoint too) */
    t->stats.loss_scale = r0->loss_scale;
    t->acc.skipped += r0->skipped;
    if (*done && t->acc.skipped > 0)
        CT_LOG(CT_LOG_INFO, "trainer",
               "epoch %lld: the loss scaler skipped %lld optimizer step%s (inf/NaN gradients); "
               "scale %g, %lld skipped so far",
               (long long)epoch + 1, (long long)t->acc.skipped, t->acc.skipped == 1 ? "" : "s",
               r0->loss_scale, (long long)r0->skipped_total);
    ct__driver_segment_records(t, *done);
    if (drained >= 0 && t->actors) { /* a drain heard at the segment's end: the group ends */
        tr_report *dr = res[drained];
        if (dr != ck && dr->has_ckpt) /* rank 0's was adopted: the same step */
            ct_free(&dr->ckpt);
        t->stats.drains++;
        t->stats.drain_step = t->local.step;
        snprintf(t->shrink_why, sizeof t->shrink_why, "node %s drained (told to stop)",
                 ct_actor_node(t->actors[drained]));
        ct__report_drain(&t->report, "segment_end");
        /* a warning: the user sees it in the driver's log, beside the smaller group's line */
        CT_LOG(CT_LOG_WARN, "trainer",
               "node %s is draining: the group ends at the checkpoint of epoch %lld's end (step "
               "%lld)",
               ct_actor_node(t->actors[drained]), (long long)epoch + 1, (long long)t->local.step);
        ct__driver_end_group(t, NULL, 0, -1, 0, NULL);
    }
out:
    for (int i = 0; i < world; i++)
        free(res[i]);
    free(res);
    free(ea);
    return rc;
}

/* A segment a drain ended mid-epoch: replica d (on a node told to stop) wrote a checkpoint at
 * the first step boundary after it heard it and left the group, so its peers' next step failed
 * (a step they did not complete, so none is lost and none trained twice). The driver adopts
 * that checkpoint and ends the group, spending no retry; the next group starts there on the
 * nodes that remain. 0, or the adoption's error. */
static int drain_mid_epoch(trainer *t, void **res, int world, int d)
{
    tr_report *r = res[d];
    char what[96];
    snprintf(what, sizeof what, "checkpoint at step %lld (node draining)",
             (long long)t->local.step + r->steps);
    note_copies(t, what, r->copies, r->copies_asked);
    const char *node = ct_actor_node(t->actors[d]);
    char node_id[32];
    snprintf(node_id, sizeof node_id, "%s", node ? node : "");
    int rc = adopt_checkpoint(t, &r->ckpt, r->ckpt_seconds);
    for (int i = 0; i < world; i++) { /* another replica of that node that wrote one too */
        tr_report *o = res[i];
        if (i != d && o && o->drained && o->has_ckpt && memcmp(&o->ckpt, &r->ckpt, sizeof r->ckpt))
            ct_free(&o->ckpt);
    }
    if (rc < 0) {
        ct__driver_end_group(t, NULL, 0, -1, 0, NULL);
        return rc;
    }
    /* the segment's sums, as far as the replica that finished it counted them */
    ct__trainer_metrics_add(&t->acc.m, &r->metrics);
    t->acc.loss += r->loss_sum;
    t->acc.samples += r->samples;
    t->acc.seconds += r->seconds;
    t->acc.skipped += r->skipped;
    t->at_ckpt = true;
    t->stats.drains++;
    t->stats.drain_step = t->local.step;
    ct__driver_local_stats(t);
    snprintf(t->shrink_why, sizeof t->shrink_why, "node %s drained (told to stop)", node_id);
    ct__report_drain(&t->report, "mid_epoch");
    CT_LOG(CT_LOG_WARN, "trainer",
           "node %s is draining: checkpoint at step %lld (epoch %lld batch %lld); the group "
           "ends and training goes on from there without that node",
           node_id, (long long)t->local.step, (long long)t->local.epoch, (long long)t->local.batch);
    ct__driver_end_group(t, NULL, 0, -1, 0, NULL);
    return 0;
}

/* restore_best: the newly adopted checkpoint (score) becomes the best when it beats the best
 * so far (ties: the newer); the one it replaces is freed from the store. */
static void note_best(trainer *t, double score, bool maximize)
{
    if (isnan(score) || (t->has_best && (maximize ? score < t->best_score : score > t->best_score)))
        return;
    drop_best(t);
    t->best = t->ckpt;
    t->has_best = true;
    t->best_score = score;
    t->best_step = t->local.step;
}

/* restore_best at the end: the best checkpoint (this call's in the store, or dir's best file
 * when it scores better: a resumed job's) becomes the driver's state and the next group's
 * start. CT_EINVAL when no checkpoint has a score. */
static int restore_best(trainer *t, tr_ckptdir *dir, const char *attr, bool maximize)
{
    char path[4400];
    double ds = NAN;
    bool file = dir && ct__ckptdir_best(dir, path, sizeof path, &ds) == 0 &&
                (!t->has_best || (maximize ? ds > t->best_score : ds < t->best_score));
    if (file) {
        int rc = trainer_restore(t, path);
        if (rc == 0)
            CT_LOG(CT_LOG_INFO, "trainer", "restore_best: %s (%s %g) restored", path, attr, ds);
        return rc;
    }
    if (!t->has_best)
        return ct__error(CT_EINVAL,
                         "trainer_train: restore_best: no checkpoint has a score \"%s\" (does "
                         "validation run during training?)",
                         attr);
    if (t->has_ckpt && !memcmp(&t->best, &t->ckpt, sizeof t->ckpt))
        return 0; /* the last one is the best */
    ct_object_view v = {0};
    int rc = ct_get(&t->best, 30000, &v);
    if (rc < 0)
        return ct__trainer_error_prefix(rc,
                                        "trainer_train: restore_best: fetching the best "
                                        "checkpoint (step %lld)",
                                        (long long)t->best_step);
    rc = ct__ckpt_load(&t->local, &t->spec, v.data, v.size);
    ct_object_release(&v);
    if (rc < 0)
        return ct__trainer_error_prefix(rc, "trainer_train: restore_best");
    ct__driver_end_group(t, NULL, 0, -1, 0, NULL); /* the replicas hold the last step's weights */
    ct_object_id last = t->ckpt;
    bool had = t->has_ckpt;
    t->ckpt = t->best;
    t->has_ckpt = true;
    if (had)
        ct_free(&last);
    t->ckpt_unsaved = false;
    t->lr_scale = 1;
    t->acc = (epoch_sums){.agree = true};
    ct__driver_local_stats(t);
    CT_LOG(CT_LOG_INFO, "trainer", "restore_best: the checkpoint of step %lld (%s %g) restored",
           (long long)t->best_step, attr, t->best_score);
    return 0;
}

/* Writes the newly adopted checkpoint to the checkpoint directory with its score. */
static int save_to_dir(trainer *t, tr_ckptdir *dir, double score, const trainer_stats *cst)
{
    if (!dir || !t->has_ckpt || !t->ckpt_unsaved)
        return 0;
    ct_object_view v = {0};
    char name[TR_CKPT_NAME_MAX];
    int rc = ct_get(&t->ckpt, 30000, &v);
    if (rc < 0)
        return ct__trainer_error_prefix(rc, "trainer: reading the checkpoint for checkpoint_dir");
    rc = ct__ckptdir_add(dir, v.data, v.size, t->local.epoch, t->local.batch, t->local.step, score,
                         cst, name, sizeof name);
    ct_object_release(&v);
    if (rc < 0)
        return rc;
    t->ckpt_unsaved = false;
    CT_LOG(CT_LOG_INFO, "trainer", "checkpoint %s written (epoch %lld batch %lld, score %g)", name,
           (long long)t->local.epoch, (long long)t->local.batch, score);
    return 0;
}

/* Sleep before the k-th consecutive attempt to start a group (k >= 1), at most limit_ms
 * (< 0: no limit). */
static void backoff(const trainer_train_opts *o, int k, int64_t limit_ms)
{
    double base = o->backoff_base_ms > 0 ? o->backoff_base_ms : 100;
    double factor = o->backoff_factor > 0 ? o->backoff_factor : 2;
    double cap = o->backoff_cap_ms > 0 ? o->backoff_cap_ms : 5000;
    double jitter = o->backoff_jitter == 0 && !signbit(o->backoff_jitter) ? 0.1 : o->backoff_jitter;
    double ms = base * pow(factor, k - 1);
    if (ms > cap)
        ms = cap;
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
        r = 0x80000000u;
    ms *= 1 + jitter * (2.0 * r / 4294967296.0 - 1);
    if (limit_ms >= 0 && ms > (double)limit_ms)
        ms = (double)limit_ms;
    if (ms > 0)
        usleep((useconds_t)(ms * 1000));
}

/* A failure: spends a retry. Returns 0 to go on, CT_ERETRY when they are spent. */
static int spend_retry(trainer *t, int max_retries, const char *why, const char *reason)
{
    snprintf(t->last_failure, sizeof t->last_failure, "%s", why);
    reason = t->fail_reason ? t->fail_reason : reason;
    t->fail_reason = NULL;
    if (t->stats.retries_used >= max_retries)
        return ct__error(CT_ERETRY, "trainer: failure with all %d retr%s used; it was: %s",
                         max_retries, max_retries == 1 ? "y" : "ies", why);
    t->stats.retries_used++;
    ct__report_retry(&t->report, reason);
    ct__report_send(&t->report, true);
    CT_LOG(CT_LOG_WARN, "trainer", "failure %d of %d allowed: %s", t->stats.retries_used,
           max_retries, why);
    return 0;
}

/* Starts a group of as many replicas as fit (up to max_replicas). Before this trainer's first
 * group, a request that no live node could meet even when empty fails at once (never_fits; once
 * a group ran, a lost node may come back or be replaced, so the driver waits). While fewer than
 * min_replicas fit it waits, backing off per round, spending no retry, for at most
 * wait_limit_ms (then CT_ETIMEDOUT); the log names what is short. Each failed start spends a
 * retry, but one that would fail the same way again (no_retry) ends it at once with its code. */
static int ensure_group(trainer *t, const trainer_train_opts *o, int max_retries, int wait_limit_ms)
{
    int attempt = 0, waits = 0, rc;
    int64_t wait_start = 0;
    char why[600], need[64];
    tr_ask ask = ct__driver_ask(t);
    ct__fit_replica_shape(&ask, need, sizeof need);
    while (!t->actors) {
        tr_fit f;
        why[0] = 0;
        if ((rc = ct__fit_count(&ask, &f)) < 0)
            return rc;
        if (t->groups == 0 && (rc = ct__fit_never(&ask, &f)) < 0)
            return rc;
        int n = f.now < t->max_replicas ? f.now : t->max_replicas;
        if (n < t->min_replicas) {
            int64_t now = ct__now_ms(), left = -1;
            if (!wait_start)
                wait_start = now;
            if (wait_limit_ms > 0) {
                left = wait_start + wait_limit_ms - now;
                if (left <= 0)
                    return ct__error(CT_ETIMEDOUT,
                                     "trainer: waited %lld ms (min_replicas_timeout_ms) for "
                                     "min_replicas %d (%s each), %d fit: no resources for them: "
                                     "too few %s (free: %g CPUs, %g GPUs; nodes: %s)",
                                     (long long)(now - wait_start), t->min_replicas, need, n,
                                     ct__fit_short(&ask, &f), f.cpu_free, f.gpu_free, f.desc);
            }
            /* the first round of a wait is a warning, the later ones are its repetitions */
            CT_LOG(waits ? CT_LOG_INFO : CT_LOG_WARN, "trainer",
                   "waiting for %d replicas, %d fit (%s each): too few %s (free: %g CPUs, %g "
                   "GPUs; nodes: %s)",
                   t->min_replicas, n, need, ct__fit_short(&ask, &f), f.cpu_free, f.gpu_free,
                   f.desc);
            backoff(o, ++waits, left);
            continue;
        }
        waits = 0;
        wait_start = 0;
        if ((rc = ct__driver_tell_world_size(t, o, n)) < 0)
            return rc;
        bool fatal = false;
        rc = start_group(t, n, o->create_timeout_ms > 0 ? o->create_timeout_ms : 30000, why,
                         sizeof why, &fatal);
        if (rc == 0) {
            ct__driver_note_group_size(t, n);
            ct__report_replicas(&t->report, n);
            ct__report_send(&t->report, true);
            return 0;
        }
        if (fatal) { /* a retry would fail the same way */
            snprintf(t->last_failure, sizeof t->last_failure, "%s", why);
            if (rc == CT_ESTART)
                return ct__error(rc, "trainer: replicas cannot start (not retried): %s", why);
            return ct__error(rc, "trainer: %s (not retried: it fails the same way on any node)",
                             why);
        }
        if ((rc = spend_retry(t, max_retries, why, "start_failed")) < 0)
            return rc;
        backoff(o, ++attempt, -1);
    }
    return 0;
}

/* After a checkpoint was adopted: when more replicas fit now (up to max_replicas), ends the
 * group so that a bigger one starts from that checkpoint. Not a group that shrank live: it
 * grows back by replacements healed from its replicas (ct__heal_replacement), with no restart. */
static void grow_at_checkpoint(trainer *t)
{
    int more = 0;
    if (!t->actors || t->group_fresh || !t->at_ckpt || t->world >= t->max_replicas || t->heal_to)
        return;
    if (ct__driver_replicas_that_fit(t, &more) < 0 || more < 1)
        return;
    t->stats.growths++;
    CT_LOG(CT_LOG_INFO, "trainer",
           "growing the group of %d: %d more fit (at most %d); restarting from the checkpoint "
           "at epoch %lld batch %lld (step %lld)",
           t->world, more, t->max_replicas, (long long)t->local.epoch, (long long)t->local.batch,
           (long long)t->local.step);
    ct__driver_end_group(t, NULL, 0, -1, 0, NULL);
}

/* The checkpoint file o->resume names: itself, or the latest one of a directory. 1 when there
 * is none to resume from, a missing path or a directory without checkpoints: the job starts
 * fresh (Ray's restore-if-exists), so a first run and a resumed one take one command line. A
 * missing *.safetensors file is an error (a file was meant). */
static int resume_path(const char *resume, char *path, size_t cap)
{
    struct stat sb;
    size_t n = strlen(resume);
    if (stat(resume, &sb) != 0) {
        if (errno == ENOENT && !(n >= 12 && !strcmp(resume + n - 12, ".safetensors")))
            return 1;
        return ct__error(CT_ENOENT, "trainer_train: resume: %s: %s", resume, strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(path, cap, "%s", resume);
        return 0;
    }
    int rc = ct__ckptdir_latest(resume, path, cap);
    return rc < 0 ? ct__trainer_error_prefix(rc, "trainer_train") : rc;
}

/* After a resume: a job whose checkpoint is at its last epoch's end has nothing to train. The
 * stats become the finished run's (kept in its checkpoint directory's index, when it is
 * there), and the log says so. */
static void resumed_complete(trainer *t, const char *resume, const char *path, int64_t epochs)
{
    trainer_stats *st = &t->stats;
    bool kept = ct__ckptdir_stats(path, st) == 0;
    st->epoch = t->local.epoch;
    ct__driver_local_stats(t);
    st->group_start_step = t->local.step;
    st->complete_at_resume = true;
    CT_LOG(CT_LOG_WARN, "trainer",
           "resume: the run in %s is complete already (epoch %lld of %lld, step %lld): nothing "
           "to train; %s",
           resume, (long long)t->local.epoch, (long long)epochs, (long long)t->local.step,
           kept ? "its final statistics are returned"
                : "its statistics were not kept (no checkpoint_dir index lists the checkpoint)");
}

static int check_train_opts(const trainer_train_opts *o)
{
    if (o->max_retries < 0)
        return ct__error(CT_EINVAL, "trainer_train: max_retries %d < 0", o->max_retries);
    if (o->checkpoint != TRAINER_CHECKPOINT_AUTO && o->checkpoint != TRAINER_CHECKPOINT_NONE)
        return ct__error(CT_EINVAL, "trainer_train: checkpoint %d is neither AUTO nor NONE",
                         o->checkpoint);
    if (o->validate_every_steps < 0)
        return ct__error(CT_EINVAL, "trainer_train: validate_every_steps %lld < 0",
                         (long long)o->validate_every_steps);
    if (o->checkpoint_every_steps < 0)
        return ct__error(CT_EINVAL, "trainer_train: checkpoint_every_steps is negative");
    if (o->checkpoint_num_to_keep < 0 && o->checkpoint_num_to_keep != TRAINER_KEEP_ALL)
        return ct__error(CT_EINVAL,
                         "trainer_train: checkpoint_num_to_keep %d: not a count, 0 (the default, "
                         "%d) or TRAINER_KEEP_ALL",
                         o->checkpoint_num_to_keep, TRAINER_KEEP_CHECKPOINTS);
    if (o->checkpoint_every_steps > 0 && o->checkpoint != TRAINER_CHECKPOINT_AUTO)
        return ct__error(CT_EINVAL, "trainer_train: checkpoint_every_steps needs checkpoint = "
                                    "TRAINER_CHECKPOINT_AUTO");
    if (o->checkpoint_score_order && strcmp(o->checkpoint_score_order, "min") &&
        strcmp(o->checkpoint_score_order, "max"))
        return ct__error(CT_EINVAL,
                         "trainer_train: checkpoint_score_order \"%s\": not \"min\" "
                         "or \"max\"",
                         o->checkpoint_score_order);
    if (o->progress < TRAINER_PROGRESS_AUTO || o->progress > TRAINER_PROGRESS_OFF)
        return ct__error(CT_EINVAL,
                         "trainer_train: progress %d is not TRAINER_PROGRESS_AUTO, _ON or _OFF",
                         o->progress);
    if (o->log_every_steps < 0 || o->report_ms < 0 || o->min_replicas_timeout_ms < 0)
        return ct__error(CT_EINVAL, "trainer_train: %s is negative",
                         o->log_every_steps < 0 ? "log_every_steps"
                         : o->report_ms < 0     ? "report_ms"
                                                : "min_replicas_timeout_ms");
    if (o->checkpoint_score_attribute &&
        (!*o->checkpoint_score_attribute || (!o->checkpoint_dir && !o->restore_best)))
        return ct__error(CT_EINVAL, "trainer_train: checkpoint_score_attribute %s",
                         *o->checkpoint_score_attribute ? "without checkpoint_dir or restore_best"
                                                        : "is empty");
    if (o->restore_best && !o->checkpoint_score_attribute && !o->validate_every_steps &&
        !o->validate_every_epoch)
        return ct__error(CT_EINVAL,
                         "trainer_train: restore_best needs a score: set validate_every_steps or "
                         "validate_every_epoch (the score is then val_loss), or "
                         "checkpoint_score_attribute");
    return 0;
}

int trainer_train_with(trainer *t, const trainer_train_opts *o)
{
    static const trainer_train_opts defaults;
    if (!t)
        return ct__error(CT_EINVAL, "trainer_train: t is NULL");
    if (!o)
        o = &defaults;
    int rc = check_train_opts(o);
    if (rc < 0)
        return rc;
    bool pipeline = t->pipe.stages > 1 || t->pipe.micro_batches > 1; /* pipeline_train.c */
    if (pipeline && (rc = ct__trainer_pipeline_check(t, o)) < 0)
        return rc;
    const char *pm = t->local.plateau_metric;
    if (!pipeline && pm[0] && strcmp(pm, "train_loss") && t->spec.sched_every != TR_SCHED_MANUAL &&
        !o->validate_every_epoch && !o->validate_every_steps)
        return ct__error(CT_EINVAL,
                         "trainer_train: the plateau scheduler monitors \"%s\" (config "
                         "plateau_metric): set validate_every_epoch or validate_every_steps",
                         pm);
    int64_t epochs = o->epochs > 0 ? o->epochs : t->spec.epochs;
    int max_retries = t->stats.retries_used + o->max_retries; /* per call */
    bool auto_ckpt = o->checkpoint == TRAINER_CHECKPOINT_AUTO;
    int64_t every = o->checkpoint_every_steps, vevery = o->validate_every_steps;
    /* the score of checkpoints: by default the validation's loss when one runs in training */
    bool validating = o->validate_every_steps > 0 || o->validate_every_epoch;
    const char *attr = o->checkpoint_score_attribute ? o->checkpoint_score_attribute
                       : validating                  ? "val_loss"
                                                     : NULL;
    bool maximize = o->checkpoint_score_order && !strcmp(o->checkpoint_score_order, "max");
    /* a validation someone acts on (on_validate's stop, the best checkpoint) ends a segment
     * with a checkpoint of its step: the stop is at that step on every replica, and the
     * checkpoint scored by it holds that step's weights */
    bool val_segments = vevery > 0 && (o->on_validate || o->restore_best || o->checkpoint_dir);
    tr_ckptdir *dir = NULL;
    bool hook_stop = false;  /* on_validate or on_epoch stopped training */
    char resumed[4600] = ""; /* the resume's line, for the run log */
    char why[600];
    t->stats.train_start_ns = ct__now_ns();
    t->stats.complete_at_resume = false;
    if (o->resume) {
        char path[4400];
        if ((rc = resume_path(o->resume, path, sizeof path)) < 0)
            return rc;
        if (rc == 1) {
            CT_LOG(CT_LOG_INFO, "trainer",
                   "resume: no checkpoint in %s: starting from the beginning", o->resume);
        } else {
            if ((rc = trainer_restore(t, path)) < 0)
                return rc;
            t->ckpt_unsaved = false; /* it is a file already */
            snprintf(resumed, sizeof resumed,
                     "resuming from checkpoint %s: training goes on at step %lld (epoch %lld, "
                     "batch %lld)",
                     path, (long long)t->local.step, (long long)t->local.epoch + 1,
                     (long long)t->local.batch);
            if (t->local.epoch >= epochs && t->local.batch == 0)
                resumed_complete(t, o->resume, path, epochs);
        }
        rc = 0;
    }
    drop_best(t); /* restore_best: this call's checkpoints */
    if (o->checkpoint_dir &&
        (rc = ct__ckptdir_open(
             o->checkpoint_dir,
             o->checkpoint_num_to_keep ? o->checkpoint_num_to_keep : TRAINER_KEEP_CHECKPOINTS,
             o->checkpoint_num_best ? o->checkpoint_num_best : 1, attr, maximize, &dir)) < 0)
        return rc;
    /* the run log (a resumed job's records start at the checkpoint's step) */
    if ((rc = ct__progress_start(&t->progress, o, epochs)) < 0) {
        ct__ckptdir_free(&dir);
        return rc;
    }
    ct__progress_set_report(t->progress, &t->report);
    t->report.done = false;
    t->report.epochs = epochs;
    /* where a resume starts: on the run log's lines when it prints some, else in the log */
    if (resumed[0] && !ct__progress_note(t->progress, "%s", resumed))
        CT_LOG(CT_LOG_INFO, "trainer", "%s", resumed);
    if (pipeline) /* stage actors: its own loop of segments, the same start and end */
        rc = ct__trainer_pipeline_train(t, o, dir, attr);
    while (!pipeline && t->local.epoch < epochs) {
        /* right after a checkpoint (within an epoch or at its end, after on_epoch): a bigger
         * group when more replicas fit now */
        if ((rc = ct__heal_replacement(t, o, why, sizeof why)) < 0) {
            if ((rc = spend_retry(t, max_retries, why, "other")) < 0 ||
                (rc = rewind_to_checkpoint(t)) < 0)
                break;
            continue;
        }
        grow_at_checkpoint(t);
        if (!t->actors && (rc = ensure_group(t, o, max_retries,
                                             o->min_replicas_timeout_ms > 0
                                                 ? o->min_replicas_timeout_ms
                                                 : TRAINER_MIN_REPLICAS_TIMEOUT_MS)) < 0)
            break;
        why[0] = 0;
        int64_t epoch = t->local.epoch;
        /* with checkpoints off, still one after the last epoch: the driver's model and
         * trainer_save then hold the trained weights */
        bool ckpt = auto_ckpt || epoch + 1 == epochs || val_segments, done = false;
        int64_t steps = auto_ckpt && every > 0 ? every - t->local.step % every : 0;
        int64_t vsteps = val_segments ? vevery - t->local.step % vevery : 0;
        if (vsteps > 0 && (steps == 0 || vsteps < steps))
            steps = vsteps;
        rc = run_segment(t, epoch, steps, ckpt, o, &done, why, sizeof why);
        if (rc < 0) {
            if ((rc = spend_retry(t, max_retries, why, "other")) < 0)
                break;
            if ((rc = rewind_to_checkpoint(t)) < 0)
                break;
            continue; /* at once: the resources are there unless a node went away */
        }
        /* the segment's validations (in-line, before its checkpoint was written) to the stats
         * and on_validate; then the checkpoint to the directory, scored with the last of them
         * (or an earlier one), even when on_validate stops training */
        int vrc = ct__driver_deliver_validations(t, o);
        bool fresh = t->has_ckpt && t->ckpt_unsaved; /* adopted in this segment */
        trainer_stats cst;
        double score = ct__driver_ckpt_stats(t, attr, done, &cst);
        if ((rc = save_to_dir(t, dir, score, &cst)) < 0)
            break;
        t->ckpt_unsaved = false;
        if (fresh && o->restore_best)
            note_best(t, score, maximize);
        if ((rc = vrc) < 0) {
            hook_stop = true;
            break;
        }
        if (!done) /* a checkpoint within the epoch */
            continue;
        if (o->on_epoch && (rc = o->on_epoch(t, &t->stats, o->user)) < 0) {
            hook_stop = true;
            rc = ct__error(rc, "trainer_train: on_epoch stopped training after epoch %lld",
                           (long long)t->stats.epoch);
            break;
        }
        rc = 0;
    }
    /* a replacement still copying (training stopped inside its overlap) does not get in */
    ct__driver_abort_heal(t, "training ended");
    /* stopped by a hook (a negative code of its own) or done: the best is restored; not
     * after a failure */
    if (o->restore_best && (rc == 0 || hook_stop)) {
        int brc = restore_best(t, dir, attr, maximize);
        rc = brc < 0 ? brc : rc;
    }
    ct__ckptdir_free(&dir);
    t->stats.epoch = t->local.epoch;
    ct__driver_local_stats(t);
    ct__progress_stop(t->progress);
    ct__report_done(&t->report);
    ct__report_send(&t->report, true);
    CT_LOG(CT_LOG_INFO, "trainer",
           "trained to epoch %lld, step %lld: optimizer state %lld bytes per replica (ZeRO stage "
           "%d)",
           (long long)t->stats.epoch, (long long)t->stats.steps,
           (long long)t->stats.optim_state_bytes, t->spec.zero);
    if (o->stats)
        *o->stats = t->stats;
    return rc;
}

int trainer_validate(trainer *t, trainer_stats *st)
{
    if (!t)
        return ct__error(CT_EINVAL, "trainer_validate: t is NULL");
    char why[600] = "";
    int rc;
    if (t->pipe.stages > 1 || t->pipe.micro_batches > 1) { /* on stage actors */
        double loss = 0;
        int64_t correct = 0, total = 0;
        if ((rc = ct__trainer_pipeline_validate(t, &loss, &correct, &total)) < 0)
            return ct__error(rc, "trainer_validate: %s", ct_last_error());
        tr_metrics m = {0};
        ct__driver_set_val_stats(t, &t->stats, loss, correct, total, &m);
        ct__report_val(&t->report, &t->stats);
        if (st)
            *st = t->stats;
        return 0;
    }
    if (!t->actors &&
        (rc = ensure_group(t, &(trainer_train_opts){0}, t->stats.retries_used, 30000)) < 0)
        return rc;
    if ((rc = run_validation(t, why, sizeof why)) < 0)
        return ct__error(rc, "trainer_validate: %s", why);
    if (st)
        *st = t->stats;
    return 0;
}

int trainer_save(trainer *t, const char *path)
{
    if (!t || !path)
        return ct__error(CT_EINVAL, "trainer_save: %s is NULL", !t ? "t" : "path");
    tr_ckpt_plan *p = NULL;
    char tmp[4200];
    void *buf = NULL;
    FILE *f = NULL;
    int rc = ct__ckpt_plan(&t->local, &t->spec, t->world ? t->world : t->num_replicas, NULL, &p);
    if (rc < 0)
        return rc;
    size_t size = ct__ckpt_size(p);
    if (!(buf = malloc(size))) {
        rc = ct__error(CT_ENOMEM, "trainer_save: out of memory");
        goto out;
    }
    ct__ckpt_write(p, buf);
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    if (!(f = fopen(tmp, "wb"))) {
        rc = ct__error(CT_EIO, "trainer_save: cannot open %s for writing", tmp);
        goto out;
    }
    if (fwrite(buf, 1, size, f) != size || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        rc = ct__error(CT_EIO, "trainer_save: writing %s failed", tmp);
        goto out;
    }
    fclose(f);
    f = NULL;
    if (rename(tmp, path) != 0)
        rc = ct__error(CT_EIO, "trainer_save: renaming %s to %s failed", tmp, path);
out:
    if (f)
        fclose(f);
    if (rc < 0)
        unlink(tmp);
    free(buf);
    ct__ckpt_plan_free(&p);
    return rc;
}

int trainer_restore(trainer *t, const char *path)
{
    if (!t || !path)
        return ct__error(CT_EINVAL, "trainer_restore: %s is NULL", !t ? "t" : "path");
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct__error(CT_ENOENT, "trainer_restore: cannot open %s", path);
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    int rc = 0;
    do {
        if (len == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *b = realloc(buf, cap);
            if (!b) {
                rc = ct__error(CT_ENOMEM, "trainer_restore: out of memory");
                goto out;
            }
            buf = b;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    if (ferror(f)) {
        rc = ct__error(CT_EIO, "trainer_restore: reading %s failed", path);
        goto out;
    }
    /* check it fully (into the driver's state) before it becomes the checkpoint */
    if ((rc = ct__ckpt_load(&t->local, &t->spec, buf, len)) < 0) {
        rc = ct__trainer_error_prefix(rc, "trainer_restore: %s", path);
        char msg[800];
        snprintf(msg, sizeof msg, "%s", ct_last_error());
        rewind_to_checkpoint(t); /* a load that failed half-way must not leave a mix */
        ct__error(rc, "%s", msg);
        goto out;
    }
    ct_object_id id;
    int live = ct_object_store_nodes();
    int asked = live > 0 && live < TR_CKPT_COPIES ? live : TR_CKPT_COPIES;
    if ((rc = ct_put(buf, len, &(ct_put_opts){.replicas = asked}, &id)) < 0) {
        rc = ct__trainer_error_prefix(rc, "trainer_restore: storing %s", path);
        goto out;
    }
    char nodes[8][32];
    int copies = 0;
    if (ct_object_nodes(&id, nodes, 8, &copies, NULL) < 0)
        copies = 0;
    note_copies(t, "restored checkpoint", copies, asked);
    ct__driver_end_group(t, NULL, 0, -1, 0, NULL); /* its state is not the restored one */
    drop_ckpt(t);
    t->ckpt = id;
    t->has_ckpt = true;
    t->ckpt_unsaved = false;
    t->lr_scale = 1;
    t->told_world = t->local.world; /* on_world_size's old size: the checkpoint's */
    t->acc = (epoch_sums){.agree = true};
    t->stats.epoch = t->local.epoch;
    ct__driver_local_stats(t);
out:
    free(buf);
    fclose(f);
    return rc;
}

int trainer_scale_lr(trainer *t, double factor)
{
    if (!t)
        return ct__error(CT_EINVAL, "trainer_scale_lr: t is NULL");
    if (!(factor > 0) || !isfinite(factor))
        return ct__error(CT_EINVAL, "trainer_scale_lr: factor %g is not a positive number", factor);
    t->lr_scale *= factor;
    return 0;
}

ct_module *trainer_get_model(trainer *t)
{
    return t ? t->local.models[0] : NULL;
}

int trainer_num_models(trainer *t)
{
    return t ? t->local.nmodels : 0;
}

ct_module *trainer_get_model_at(trainer *t, int i)
{
    return t && i >= 0 && i < t->local.nmodels ? t->local.models[i] : NULL;
}

int trainer_replica_info_get(trainer *t, int i, trainer_replica_info *info)
{
    if (!t || !info)
        return ct__error(CT_EINVAL, "trainer_replica_info_get: NULL argument");
    if (i < 0 || i >= t->world)
        return ct__error(CT_ERANGE, "trainer_replica_info_get: replica %d of %d", i, t->world);
    info->pid = ct_actor_pid(t->actors[i]);
    snprintf(info->node_id, sizeof info->node_id, "%s", ct_actor_node(t->actors[i]));
    snprintf(info->actor_id, sizeof info->actor_id, "%s", ct_actor_id(t->actors[i]));
    return 0;
}

int trainer_get_stats(trainer *t, trainer_stats *st)
{
    if (!t || !st)
        return ct__error(CT_EINVAL, "trainer_get_stats: NULL argument");
    *st = t->stats;
    return 0;
}

void trainer_shutdown(trainer **tp)
{
    if (!tp || !*tp)
        return;
    trainer *t = *tp;
    ct__driver_end_group(t, NULL, 0, -1, 0, NULL);
    ct__progress_free(&t->progress);
    drop_best(t);
    drop_ckpt(t);
    ct__trainer_state_free(&t->local);
    free(t->vals);
    free(t);
    *tp = NULL;
}
