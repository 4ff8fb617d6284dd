/* tests/embed/cuda_app.c — an application built against the installed libct.so that asks for
 * device "cuda" on a machine without a GPU (test_nocuda.sh). Usage: cuda_app WANT [trainer]
 * ct_tensor_to(CT_CUDA), twice, must fail with a message containing WANT; with "trainer",
 * trainer_create(use_gpu) must fail with CT_ENOSYS and WANT too. Prints each message; exit 0
 * when all hold, 1 with the reason on stderr otherwise. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include "ct/ct.h"
#include "ct/tensor.h"
#include "ct/trainer.h"

static int check_msg(const char *what, const char *want)
{
    const char *msg = ct_last_error();
    printf("%s: %s\n", what, msg);
    if (!strstr(msg, want)) {
        fprintf(stderr, "FAIL: %s: message \"%s\" lacks \"%s\"\n", what, msg, want);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s WANT [trainer]\n", argv[0]);
        return 2;
    }
    const char *want = argv[1];
    int bad = 0;
    int64_t shape[1] = {4};
    ct_tensor *t = ct_tensor_new(CT_F32, 1, shape);
    if (!t) {
        fprintf(stderr, "FAIL: ct_tensor_new: %s\n", ct_last_error());
        return 1;
    }
    /* twice: the second call gets the same answer (the loader runs once) */
    for (int i = 0; i < 2; i++) {
        ct_tensor *g = ct_tensor_to(t, CT_CUDA);
        if (g) {
            fprintf(stderr, "FAIL: ct_tensor_to(CT_CUDA) gave a tensor without a GPU\n");
            ct_tensor_release(&g);
            bad = 1;
        } else {
            bad |= check_msg("ct_tensor_to", want);
        }
    }
    if (argc > 2 && !strcmp(argv[2], "trainer")) {
        trainer *tr = NULL;
        int rc = trainer_create(&(trainer_opts){.model = "mlp", .use_gpu = true}, &tr);
        if (rc != CT_ENOSYS || tr) {
            fprintf(stderr, "FAIL: trainer_create(use_gpu) gave %d (%s), want CT_ENOSYS\n", rc,
                    ct_last_error());
            bad = 1;
        } else {
            bad |= check_msg("trainer_create", want);
        }
    }
    ct_tensor_release(&t);
    if (!bad)
        printf("cuda_app ok\n");
    return bad;
}
