/* tests/data/test_csv.c — the CSV reader: label column by name, by index and from the end;
 * header present, absent and auto-detected; CRLF, blanks and blank lines; errors that name the
 * file, line and column. */
#include <stdint.h>
#include <stdlib.h>
#include "ct/data.h"
#include "tests/data/check.h"

static char dir[256];

static const char *put(const char *name, const char *text)
{
    static char paths[16][512];
    static int k;
    char *p = paths[k++ % 16];
    snprintf(p, 512, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    fputs(text, f);
    fclose(f);
    return p;
}

/* Checks a 3-sample dataset with features {a, b, c} and labels {l}. */
static void expect(ct_dataset *ds, int64_t n, int64_t nf, const float *feat, const int64_t *lab)
{
    CHECK(ds != NULL);
    if (!ds)
        return;
    CHECK_EQ(ct_dataset_length(ds), n);
    int64_t shape[4];
    CHECK_EQ(ct_dataset_shape(ds, shape), 1);
    CHECK_EQ(shape[0], nf);
    float x[16];
    int64_t y;
    for (int64_t i = 0; i < n; i++) {
        CHECK_OK(ct_dataset_get(ds, i, x, &y));
        CHECK_EQ(y, lab[i]);
        for (int64_t k = 0; k < nf; k++)
            CHECK_NEAR(x[k], feat[i * nf + k], 1e-6);
    }
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/ct_test_csv_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    ct_dataset *ds = NULL;
    const float f1[] = {1.5f, -2, 3e-3f, 4, 5, 6, 0.25f, 1e3f, -7};
    const int64_t l1[] = {3, 0, 9};
    /* header by name, label in the middle; CRLF, blanks, a trailing blank line */
    const char *p = put("a.csv", "x1, label ,x2,x3\r\n1.5,3,-2,3e-3\r\n\r\n4, 0 ,5,6\r\n"
                                 "0.25,9,1000,-7\r\n\r\n");
    CHECK_OK(ct_dataset_open_csv(p, &(ct_csv_opts){.label_name = "label"}, &ds));
    expect(ds, 3, 3, f1, l1);
    ct_dataset_destroy(&ds);
    /* same by index (auto header) */
    CHECK_OK(ct_dataset_open_csv(p, &(ct_csv_opts){.label_column = 1}, &ds));
    expect(ds, 3, 3, f1, l1);
    ct_dataset_destroy(&ds);
    /* no header, label last, semicolons, no final newline */
    p = put("b.csv", "1.5;-2;3e-3;3\n4;5;6;0\n0.25;1000;-7;9");
    CHECK_OK(ct_dataset_open_csv(p, &(ct_csv_opts){.label_column = -1, .delimiter = ';'}, &ds));
    expect(ds, 3, 3, f1, l1);
    ct_dataset_destroy(&ds);
    /* header=-1 forces the first line to be data; default label column 0; "2.0" is a label */
    p = put("c.csv", "2.0,1,2\n7,3,4\n");
    const float f2[] = {1, 2, 3, 4};
    const int64_t l2[] = {2, 7};
    CHECK_OK(ct_dataset_open_csv(p, &(ct_csv_opts){.header = -1}, &ds));
    expect(ds, 2, 2, f2, l2);
    ct_dataset_destroy(&ds);
    CHECK_OK(ct_dataset_open_csv(p, NULL, &ds)); /* auto: all numeric, no header */
    expect(ds, 2, 2, f2, l2);
    ct_dataset_destroy(&ds);
    /* header=1 on a numeric first line: it is skipped */
    CHECK_OK(ct_dataset_open_csv(p, &(ct_csv_opts){.header = 1}, &ds));
    expect(ds, 1, 2, f2 + 2, l2 + 1);
    ct_dataset_destroy(&ds);

    /* Errors name file:line and the column */
    p = put("bad1.csv", "y,a,b\n1,2,3\n\n4,5,oops\n");
    CHECK_ERR(ct_dataset_open_csv(p, NULL, &ds), CT_EINVAL,
              "bad1.csv:4: column 3 (b): cannot parse 'oops' as a number");
    CHECK(ds == NULL);
    p = put("bad2.csv", "1,2,3\n4,5\n");
    CHECK_ERR(ct_dataset_open_csv(p, NULL, &ds), CT_EINVAL,
              "bad2.csv:2: expected 3 columns, got 2");
    p = put("bad3.csv", "1,2,3\n4.5,5,6\n");
    CHECK_ERR(ct_dataset_open_csv(p, NULL, &ds), CT_EINVAL,
              "bad3.csv:2: column 1 (label): '4.5' is not an integer");
    p = put("bad4.csv", "a,b\n1,2\n");
    CHECK_ERR(ct_dataset_open_csv(p, &(ct_csv_opts){.label_name = "y"}, &ds), CT_EINVAL,
              "bad4.csv:1: no column named 'y'");
    p = put("bad5.csv", "1,2\n3,\n");
    CHECK_ERR(ct_dataset_open_csv(p, NULL, &ds), CT_EINVAL,
              "bad5.csv:2: column 2: cannot parse ''");
    p = put("bad6.csv", "1,2\n");
    CHECK_ERR(ct_dataset_open_csv(p, &(ct_csv_opts){.label_column = 5}, &ds), CT_EINVAL,
              "label_column 5 out of range for 2 columns");
    p = put("bad7.csv", "\n\n");
    CHECK_ERR(ct_dataset_open_csv(p, NULL, &ds), CT_EINVAL, "no data lines");
    p = put("bad8.csv", "1\n2\n");
    CHECK_ERR(ct_dataset_open_csv(p, NULL, &ds), CT_EINVAL, "bad8.csv:1: 1 column(s)");
    p = put("bad9.csv", "1,2\n");
    CHECK_ERR(ct_dataset_open_csv(p, &(ct_csv_opts){.label_name = "y"}, &ds), CT_EINVAL,
              "no header line");
    char missing[600];
    snprintf(missing, sizeof missing, "%s/none.csv", dir);
    CHECK_ERR(ct_dataset_open_csv(missing, NULL, &ds), CT_ENOENT, "none.csv");

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    CHECK_DONE("data_csv");
}
