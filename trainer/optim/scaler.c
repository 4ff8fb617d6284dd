/* trainer/optim/scaler.c — dynamic loss scaling for f16 training (ct/optim.h's
 * ct_grad_scaler): torch.cuda.amp.GradScaler's state machine over ct's optimizers. The
 * gradient pass (unscale and the inf/NaN check) is optim.c's ct__optim_unscale_grads. */
#include <math.h>
#include <stdlib.h>

#include "common/common.h"
#include "ct/optim.h"
#include "trainer/optim/optim_internal.h"

struct ct_grad_scaler {
    float scale;
    float growth, backoff;
    int interval;
    int tracker;    /* finite steps since the scale last changed */
    bool unscaled;  /* unscale ran in this step */
    bool found_inf; /* ... and found inf or NaN */
};

ct_grad_scaler *ct_grad_scaler_new(const ct_grad_scaler_opts *opts)
{
    ct_grad_scaler_opts o = opts ? *opts : (ct_grad_scaler_opts){0};
    double init = o.init_scale == 0.0 ? 65536.0 : o.init_scale;
    double growth = o.growth_factor == 0.0 ? 2.0 : o.growth_factor;
    double backoff = o.backoff_factor == 0.0 ? 0.5 : o.backoff_factor;
    int interval = o.growth_interval == 0 ? 2000 : o.growth_interval;
    if (!(init > 0.0) || !isfinite((float)init)) {
        ct__error(CT_EINVAL, "grad_scaler: init_scale = %g: must be > 0 and finite in f32", init);
        return NULL;
    }
    if (!(growth > 1.0) || !isfinite(growth)) {
        ct__error(CT_EINVAL, "grad_scaler: growth_factor = %g: must be > 1", growth);
        return NULL;
    }
    if (!(backoff > 0.0 && backoff < 1.0)) {
        ct__error(CT_EINVAL, "grad_scaler: backoff_factor = %g: must be in (0, 1)", backoff);
        return NULL;
    }
    if (interval < 1) {
        ct__error(CT_EINVAL, "grad_scaler: growth_interval = %d: must be >= 1", interval);
        return NULL;
    }
    ct_grad_scaler *s = calloc(1, sizeof *s);
    if (!s) {
        ct__error(CT_ENOMEM, "grad_scaler: out of memory");
        return NULL;
    }
    /* torch keeps the scale and the factors as f32 tensors / floats */
    s->scale = (float)init;
    s->growth = (float)growth;
    s->backoff = (float)backoff;
    s->interval = interval;
    return s;
}

void ct_grad_scaler_destroy(ct_grad_scaler **s)
{
    if (!s || !*s)
        return;
    free(*s);
    *s = NULL;
}

int ct_grad_scaler_backward(ct_grad_scaler *s, ct_tensor *loss)
{
    if (!s || !loss)
        return ct__error(CT_EINVAL, "grad_scaler_backward: %s is NULL", s ? "loss" : "scaler");
    return ct_tensor_backward_scaled(loss, s->scale);
}

int ct_grad_scaler_unscale(ct_grad_scaler *s, ct_optim *o)
{
    if (!s || !o)
        return ct__error(CT_EINVAL, "grad_scaler_unscale: %s is NULL", s ? "optimizer" : "scaler");
    if (s->unscaled)
        return ct__error(CT_EINVAL, "grad_scaler_unscale: already called since the last update "
                                    "(torch: unscale_() has already been called)");
    /* torch computes the reciprocal in double and rounds it to the f32 inv_scale tensor */
    float inv = (float)(1.0 / (double)s->scale);
    int rc = ct__optim_unscale_grads(o, inv, &s->found_inf);
    if (rc < 0)
        return rc;
    s->unscaled = true;
    return 0;
}

int ct_grad_scaler_step(ct_grad_scaler *s, ct_optim *o, bool *stepped)
{
    if (stepped)
        *stepped = false;
    if (!s || !o)
        return ct__error(CT_EINVAL, "grad_scaler_step: %s is NULL", s ? "optimizer" : "scaler");
    int rc;
    if (!s->unscaled && (rc = ct_grad_scaler_unscale(s, o)) < 0)
        return rc;
    if (s->found_inf)
        return 0; /* skipped: the parameters and the optimizer's state stay as they were */
    if ((rc = ct_optim_step(o)) < 0)
        return rc;
    if (stepped)
        *stepped = true;
    return 0;
}

int ct_grad_scaler_update(ct_grad_scaler *s)
{
    if (!s)
        return ct__error(CT_EINVAL, "grad_scaler_update: scaler is NULL");
    if (!s->unscaled)
        return ct__error(CT_EINVAL, "grad_scaler_update: no step or unscale since the last update "
                                    "(torch: no inf checks were recorded)");
    if (s->found_inf) {
        s->scale = s->scale * s->backoff;
        s->tracker = 0;
    } else if (++s->tracker == s->interval) {
        float grown = s->scale * s->growth;
        if (isfinite(grown))
            s->scale = grown;
        s->tracker = 0;
    }
    s->unscaled = false;
    s->found_inf = false;
    return 0;
}

float ct_grad_scaler_scale(const ct_grad_scaler *s)
{
    return s ? s->scale : 0.0f;
}

int ct_grad_scaler_growth_tracker(const ct_grad_scaler *s)
{
    return s ? s->tracker : 0;
}

bool ct_grad_scaler_found_inf(const ct_grad_scaler *s)
{
    return s && s->found_inf;
}

int ct_grad_scaler_load(ct_grad_scaler *s, float scale, int growth_tracker)
{
    if (!s)
        return ct__error(CT_EINVAL, "grad_scaler_load: scaler is NULL");
    if (!(scale > 0.0f) || !isfinite(scale))
        return ct__error(CT_EINVAL, "grad_scaler_load: scale = %g: must be > 0 and finite",
                         (double)scale);
    if (growth_tracker < 0 || growth_tracker >= s->interval)
        return ct__error(CT_EINVAL, "grad_scaler_load: growth_tracker = %d: must be in [0, %d)",
                         growth_tracker, s->interval);
    s->scale = scale;
    s->tracker = growth_tracker;
    s->unscaled = false;
    s->found_inf = false;
    return 0;
}
