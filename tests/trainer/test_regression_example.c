/* tests/trainer/test_regression_example.c — runs examples/regression_csv (its path is argv[1])
 * on a CSV of y = 3 x1 - 2 x2 + 0.5 + noise (uniform in [-0.01, 0.01]) written here, and checks
 * the weights it prints against the coefficients. */
#include "tt.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH/TO/regression_csv\n", argv[0]);
        return 2;
    }
    h_init();
    char path[128], cmd[700];
    snprintf(path, sizeof path, "/tmp/ct_regression_example_%d.csv", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    fprintf(f, "x1,x2,y\n");
    uint64_t s = 3;
    for (int i = 0; i < 1000; i++) {
        double x1 = (double)(tt_rng(&s) % 2000001) / 1e6 - 1,
               x2 = (double)(tt_rng(&s) % 2000001) / 1e6 - 1;
        double noise = (double)(tt_rng(&s) % 20001) / 1e6 - 0.01;
        fprintf(f, "%.6f,%.6f,%.6f\n", x1, x2, 3 * x1 - 2 * x2 + 0.5 + noise);
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' '%s'", argv[1], path);
    char *out = h_capture(cmd);
    unlink(path);
    double w1 = NAN, w2 = NAN, b = NAN;
    const char *w = out ? strstr(out, "w = ") : NULL, *bb = out ? strstr(out, "b = ") : NULL;
    if (w)
        sscanf(w, "w = %lf %lf", &w1, &w2);
    if (bb)
        sscanf(bb, "b = %lf", &b);
    printf("%s", out ? out : "(no output)\n");
    CHECK(fabs(w1 - 3) < 0.02);
    CHECK(fabs(w2 + 2) < 0.02);
    CHECK(fabs(b - 0.5) < 0.02);
    free(out);
    if (h_failures)
        fprintf(stderr, "test_regression_example: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
