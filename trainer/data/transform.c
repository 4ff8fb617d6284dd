/* trainer/data/transform.c — per-sample transforms: random crop with zero padding, random
 * horizontal flip, per-channel normalisation.
 *
 * Randomness is a pure function of (seed, epoch, dataset index): no RNG state is carried from
 * sample to sample, so a sample is transformed the same way whichever rank, thread or batch
 * builds it. Shapes: in (C, H, W), out (C, OH, OW). Not here: the order of application and
 * buffers (loader.c). */
#include <string.h>
#include "common/common.h"
#include "trainer/data/data_internal.h"

ct_transform_draw ct_transform_draw_for(const ct_transform_opts *t, int in_h, int in_w,
                                        uint64_t seed, int64_t epoch, int64_t index)
{
    ct_transform_draw d = {0, 0, false};
    if (!t)
        return d;
    /* Three rounds of splitmix64 mix the key into one stream state. */
    uint64_t st = seed ^ 0x243f6a8885a308d3ULL;
    st = ct__splitmix64(&st) ^ (uint64_t)epoch;
    st = ct__splitmix64(&st) ^ (uint64_t)index;
    st = ct__splitmix64(&st);
    if (t->crop_h > 0 && t->crop_w > 0) {
        int ph = in_h + 2 * t->crop_pad, pw = in_w + 2 * t->crop_pad;
        /* torchvision: i = randint(0, h - th + 1), j = randint(0, w - tw + 1) */
        d.top = ph > t->crop_h ? (int)ct__rand_below(&st, (uint64_t)(ph - t->crop_h + 1)) : 0;
        d.left = pw > t->crop_w ? (int)ct__rand_below(&st, (uint64_t)(pw - t->crop_w + 1)) : 0;
    }
    if (t->hflip_p > 0) {
        double u = (double)(ct__splitmix64(&st) >> 11) * 0x1.0p-53;
        d.flip = u < (double)t->hflip_p;
    }
    return d;
}

void ct_transform_crop_flip(const float *in, int c, int h, int w, int pad, int top, int left,
                            bool flip, float *out, int oh, int ow)
{
    for (int ch = 0; ch < c; ch++) {
        const float *src = in + (size_t)ch * h * w;
        float *dst = out + (size_t)ch * oh * ow;
        for (int y = 0; y < oh; y++) {
            int sy = y + top - pad;
            float *drow = dst + (size_t)y * ow;
            if (sy < 0 || sy >= h) {
                memset(drow, 0, (size_t)ow * sizeof *drow);
                continue;
            }
            const float *srow = src + (size_t)sy * w;
            for (int x = 0; x < ow; x++) {
                int sx = (flip ? ow - 1 - x : x) + left - pad;
                drow[x] = (sx >= 0 && sx < w) ? srow[sx] : 0.0f;
            }
        }
    }
}

void ct_transform_normalize(float *x, int64_t numel, const float *mean, const float *std, int n)
{
    if (n <= 0 || !mean || !std)
        return;
    int64_t per = numel / n;
    for (int ch = 0; ch < n; ch++) {
        const float m = mean[ch], s = std[ch];
        float *p = x + (int64_t)ch * per;
        /* (x - m) / s, as torchvision's Normalize (sub_ then div_), bit for bit */
        for (int64_t i = 0; i < per; i++)
            p[i] = (p[i] - m) / s;
    }
}
