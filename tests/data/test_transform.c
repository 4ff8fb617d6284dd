/* tests/data/test_transform.c — crop (zero padding), horizontal flip and normalisation against
 * PyTorch ops (transform_ref.txt from gen_ref.py: F.pad, slicing, torch.flip, (x - m) / s) and
 * on a tiny image by hand; the random draws' determinism in (seed, epoch, index), ranges and
 * rates. */
#include <stdint.h>
#include <stdlib.h>
#include "ct/data.h"
#include "tests/data/check.h"

static int read_floats(char **p, float *out, int max)
{
    int n = 0;
    char *e;
    for (;;) {
        float v = strtof(*p, &e);
        if (e == *p || n == max)
            break;
        out[n++] = v;
        *p = e;
    }
    return n;
}

static void torch_ref(const char *path)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f)
        return;
    char line[8192];
    float in[24], mean[2], stdv[2], ref[256], refn[256], out[256];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        char *p = strchr(line, ':');
        if (!p)
            continue;
        p++;
        if (strncmp(line, "in ", 3) == 0) {
            CHECK_EQ(read_floats(&p, in, 24), 24);
        } else if (strncmp(line, "mean ", 5) == 0) {
            CHECK_EQ(read_floats(&p, mean, 2), 2);
        } else if (strncmp(line, "std ", 4) == 0) {
            CHECK_EQ(read_floats(&p, stdv, 2), 2);
        } else {
            int pad, top, left, oh, ow, flip;
            CHECK_EQ(sscanf(line, "%d %d %d %d %d %d", &pad, &top, &left, &oh, &ow, &flip), 6);
            int n = read_floats(&p, ref, 256);
            CHECK_EQ(n, 2 * oh * ow);
            char *bar = strchr(p, '|');
            CHECK(bar != NULL);
            if (!bar)
                continue;
            p = bar + 1;
            CHECK_EQ(read_floats(&p, refn, 256), n);
            ct_transform_crop_flip(in, 2, 3, 4, pad, top, left, flip != 0, out, oh, ow);
            for (int i = 0; i < n; i++)
                if (out[i] != ref[i]) {
                    fprintf(stderr,
                            "case pad %d top %d left %d %dx%d flip %d: [%d] ct %.9g torch "
                            "%.9g\n",
                            pad, top, left, oh, ow, flip, i, out[i], ref[i]);
                    check_failures++;
                }
            ct_transform_normalize(out, n, mean, stdv, 2);
            for (int i = 0; i < n; i++)
                CHECK_NEAR(out[i], refn[i], 1e-6 * (1 + fabs(refn[i])));
            cases++;
        }
    }
    fclose(f);
    CHECK_EQ(cases, 7);
}

static void by_hand(void)
{
    /* (1, 2, 3): 1 2 3 / 4 5 6 */
    const float img[6] = {1, 2, 3, 4, 5, 6};
    float o[16];
    ct_transform_crop_flip(img, 1, 2, 3, 1, 0, 0, false, o, 2, 2); /* padded top-left corner */
    const float e1[4] = {0, 0, 0, 1};
    for (int i = 0; i < 4; i++)
        CHECK_EQ(o[i], e1[i]);
    ct_transform_crop_flip(img, 1, 2, 3, 1, 0, 0, true, o, 2, 2);
    const float e2[4] = {0, 0, 1, 0};
    for (int i = 0; i < 4; i++)
        CHECK_EQ(o[i], e2[i]);
    ct_transform_crop_flip(img, 1, 2, 3, 1, 2, 2, false, o, 2, 3); /* bottom-right */
    const float e3[6] = {5, 6, 0, 0, 0, 0};
    for (int i = 0; i < 6; i++)
        CHECK_EQ(o[i], e3[i]);
    ct_transform_crop_flip(img, 1, 2, 3, 0, 0, 0, true, o, 2, 3); /* plain flip */
    const float e4[6] = {3, 2, 1, 6, 5, 4};
    for (int i = 0; i < 6; i++)
        CHECK_EQ(o[i], e4[i]);
    /* normalise: per channel and one value for all */
    float x[4] = {0.5f, 1.0f, 0.0f, 0.25f};
    const float m[2] = {0.5f, 0.25f}, s[2] = {0.25f, 0.5f};
    ct_transform_normalize(x, 4, m, s, 2);
    CHECK_NEAR(x[0], 0.0, 0);
    CHECK_NEAR(x[1], 2.0, 0);
    CHECK_NEAR(x[2], -0.5, 0);
    CHECK_NEAR(x[3], 0.0, 0);
    float z[3] = {0.2860f, 1.0f, 0.0f};
    const float fm = 0.2860f, fs = 0.3530f;
    ct_transform_normalize(z, 3, &fm, &fs, 1);
    CHECK_NEAR(z[0], 0.0, 0);
    CHECK_NEAR(z[1], (1.0f - 0.2860f) / 0.3530f, 0);
    CHECK_NEAR(z[2], -0.2860f / 0.3530f, 0);
}

static void draws(void)
{
    ct_transform_opts t = {.crop_h = 32, .crop_w = 32, .crop_pad = 4, .hflip_p = 0.5f};
    int tops[9] = {0}, lefts[9] = {0}, flips = 0, diff_epoch = 0, diff_seed = 0;
    const int N = 20000;
    for (int i = 0; i < N; i++) {
        ct_transform_draw a = ct_transform_draw_for(&t, 32, 32, 42, 3, i);
        ct_transform_draw b = ct_transform_draw_for(&t, 32, 32, 42, 3, i);
        CHECK(a.top == b.top && a.left == b.left && a.flip == b.flip);
        CHECK(a.top >= 0 && a.top <= 8 && a.left >= 0 && a.left <= 8);
        if (a.top < 0 || a.top > 8 || a.left < 0 || a.left > 8)
            break;
        tops[a.top]++;
        lefts[a.left]++;
        flips += a.flip;
        ct_transform_draw c = ct_transform_draw_for(&t, 32, 32, 42, 4, i);
        diff_epoch += c.top != a.top || c.left != a.left || c.flip != a.flip;
        ct_transform_draw d = ct_transform_draw_for(&t, 32, 32, 43, 3, i);
        diff_seed += d.top != a.top || d.left != a.left || d.flip != a.flip;
    }
    for (int k = 0; k < 9; k++) { /* each offset ~N/9 = 2222 */
        CHECK(tops[k] > 1900 && tops[k] < 2550);
        CHECK(lefts[k] > 1900 && lefts[k] < 2550);
    }
    CHECK(flips > N / 2 - 400 && flips < N / 2 + 400);
    CHECK(diff_epoch > N * 9 / 10);
    CHECK(diff_seed > N * 9 / 10);
    /* p = 0 never flips, p = 1 always; no crop: offsets 0 */
    ct_transform_opts never = {.hflip_p = 0}, always = {.hflip_p = 1};
    for (int i = 0; i < 1000; i++) {
        ct_transform_draw a = ct_transform_draw_for(&never, 28, 28, 1, 0, i);
        ct_transform_draw b = ct_transform_draw_for(&always, 28, 28, 1, 0, i);
        CHECK(!a.flip && b.flip && a.top == 0 && a.left == 0);
    }
}

int main(int argc, char **argv)
{
    torch_ref(argc > 1 ? argv[1] : "tests/data/transform_ref.txt");
    by_hand();
    draws();
    CHECK_DONE("data_transform");
}
