/* tests/trainer/test_tfevents.c — the TensorBoard event-file writer (trainer/metrics/tfevents.h):
 * masked CRC-32C and the whole file (the file_version event, then one event of two scalars)
 * byte for byte against a reference computed independently by tfevents_reference.py (bitwise
 * CRC-32C, protobuf encoded by hand); the file name; a corrupted byte changes the CRC; bad
 * arguments are refused. No processes, no Python at test time. */
#include "tests/runtime/harness.h"

#include <dirent.h>

#include "ct/error.h"
#include "trainer/metrics/tfevents.h"

/* Output of tests/trainer/tfevents_reference.py: */
/* masked CRC-32C of "123456789" and of "" */
#define REF_MASKED_123456789 0xC78AB0E5u
#define REF_MASKED_EMPTY 0xA282EAD8u
/* the two records, 99 bytes */
static const char *ref_hex =
    "1800000000000000a37f4b220900002040fc54d9411a0d627261696e2e4576656e743a322b3531102b000000"
    "00000000861bc34b0900005040fc54d94110072a1e0a110a0a747261696e2f6c6f7373150000003f0a090a02"
    "6c72156f12833a4be58b28";

int main(void)
{
    CHECK_EQ_INT(ct__tfevents_masked_crc("123456789", 9), REF_MASKED_123456789);
    CHECK_EQ_INT(ct__tfevents_masked_crc("", 0), REF_MASKED_EMPTY);

    size_t nref = strlen(ref_hex) / 2;
    unsigned char *ref = malloc(nref);
    for (size_t i = 0; i < nref; i++)
        sscanf(ref_hex + 2 * i, "%2hhx", &ref[i]);

    char dir[] = "/tmp/ct-tfevents.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    ct_tfevents *w = NULL;
    CHECK_OK(ct__tfevents_open(dir, 1700000000.5, &w));
    const char *tags[] = {"train/loss", "lr"};
    double vals[] = {0.5, 1e-3};
    CHECK_OK(ct__tfevents_scalars(w, 1700000001.25, 7, tags, vals, 2));
    char host[256] = "localhost", want[600];
    gethostname(host, sizeof host - 1);
    snprintf(want, sizeof want, "%s/events.out.tfevents.1700000000.%s", dir, host);
    CHECK_STR(ct__tfevents_path(w), want);
    const char *bad[] = {"ok", ""};
    CHECK_EQ_INT(ct__tfevents_scalars(w, 0, 0, bad, vals, 2), CT_EINVAL);
    ct__tfevents_close(&w);
    CHECK(w == NULL);
    ct__tfevents_close(&w); /* NULL is fine */

    /* the file, byte for byte */
    unsigned char got[512];
    FILE *f = fopen(want, "rb");
    CHECK(f != NULL);
    size_t n = f ? fread(got, 1, sizeof got, f) : 0;
    if (f)
        fclose(f);
    CHECK_EQ_INT(n, nref);
    for (size_t i = 0; i < n && i < nref; i++)
        if (got[i] != ref[i]) {
            fprintf(stderr, "byte %zu: 0x%02x, reference 0x%02x\n", i, got[i], ref[i]);
            h_failures++;
            break;
        }

    /* the framing alone: one flipped data bit changes the data CRC, not the length's */
    unsigned char rec[64], rec2[64];
    ct__tfevents_frame("hello", 5, rec);
    ct__tfevents_frame("hellp", 5, rec2);
    CHECK(!memcmp(rec, rec2, 12 + 4));
    CHECK(memcmp(rec + 17, rec2 + 17, 4) != 0);
    CHECK_EQ_INT(rec[0], 5);

    unlink(want);
    rmdir(dir);
    free(ref);
    if (h_failures)
        return 1;
    printf("ok\n");
    return 0;
}
