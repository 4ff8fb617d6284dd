/* tests/cuda/test_supports.c — the CUDA table's supports() (trainer/cuda/backend_cuda.c), which
 * needs no GPU: cross entropy without smoothing is supported; the other losses and smoothing
 * are refused with CT_ENOSYS naming the op, its shape and the device; autocast products are
 * supported, and every activation. And the CPU's: every loss and activation; f16 products refused
 * naming the op. */
#include <stdio.h>
#include <string.h>

#include "ct/error.h"
#include "trainer/backend/backend.h"

#include "check.h"

static int loss(const ct__backend *b, int kind, float smoothing)
{
    ct__loss_p p = {.kind = kind, .n = 24, .c = 10, .label_smoothing = smoothing};
    return ct__supports(b, &(ct__op_desc){.kind = CT__OP_LOSS, .name = "a loss", .loss = &p});
}

int main(void)
{
    const ct__backend *cu = &ct__backend_cuda, *cpu = &ct__backend_cpu;
    CHECK(loss(cu, CT__LOSS_CE, 0.0f) == 0);
    CHECK(loss(cu, CT__LOSS_CE, 0.1f) == CT_ENOSYS);
    CHECK(strstr(ct_last_error(), "label smoothing 0.1") && strstr(ct_last_error(), "cuda"));
    static const char *names[] = {"nll_loss", "mse_loss", "l1_loss", "bce_loss",
                                  "bce_with_logits_loss"};
    for (int k = CT__LOSS_NLL; k <= CT__LOSS_BCEL; k++) {
        CHECK(loss(cu, k, 0.0f) == CT_ENOSYS);
        CHECK(strstr(ct_last_error(), names[k - 1]) && strstr(ct_last_error(), "(24, 10)") &&
              strstr(ct_last_error(), "device cuda"));
        CHECK(loss(cpu, k, 0.0f) == 0);
    }
    for (int dt = CT_F16; dt <= CT_BF16; dt++)
        CHECK(ct__supports(cu, &(ct__op_desc){.kind = CT__OP_LOWP, .name = "linear", .dt = dt}) ==
              0);
    CHECK(ct__supports(cpu, &(ct__op_desc){.kind = CT__OP_LOWP, .name = "linear", .dt = CT_F16}) ==
          CT_ENOSYS);
    CHECK(strstr(ct_last_error(), "linear in f16") && strstr(ct_last_error(), "device cpu"));
    /* every activation on both (on cuda, all but ReLU are cuDNN's) */
    for (int alg = CT__ELT_RELU; alg <= CT__ELT_SIGMOID; alg++) {
        ct__op_desc act = {.kind = CT__OP_ACT, .name = "an activation", .alg = alg};
        CHECK(ct__supports(cu, &act) == 0 && ct__supports(cpu, &act) == 0);
    }
    printf("%s\n", failures ? "supports: failed" : "supports: cuda and cpu refuse what they lack");
    return failures ? 1 : 0;
}
