/* trainer/backend/precision.c — the engine's precision settings (ct/nn.h): the autocast stack,
 * one per thread as torch.autocast's state, and the process-wide TF32 switch. Ops read the
 * stack when they run forward and keep the precision in their tape node, so backward uses the
 * forward's precision whatever thread runs it. */
#include <stdatomic.h>
#include <string.h>

#include "common/common.h"
#include "ct/nn.h"
#include "trainer/backend/table.h"

#define AUTOCAST_DEPTH 16

static _Thread_local ct_dtype stack[AUTOCAST_DEPTH];
static _Thread_local int depth;
static atomic_bool tf32;

int ct_autocast_push(ct_dtype dt)
{
    if (dt != CT_F32 && dt != CT_BF16 && dt != CT_F16)
        return ct__error(CT_EINVAL, "autocast_push: dtype %s: expected F32, BF16 or F16",
                         ct_dtype_name(dt));
    if (depth == AUTOCAST_DEPTH)
        return ct__error(CT_ERANGE, "autocast_push: more than %d nested regions", AUTOCAST_DEPTH);
    stack[depth++] = dt;
    return 0;
}

int ct_autocast_pop(void)
{
    if (depth == 0)
        return ct__error(CT_EINVAL, "autocast_pop: no autocast region is open on this thread");
    depth--;
    return 0;
}

ct_dtype ct_autocast_dtype(void)
{
    return depth ? stack[depth - 1] : CT_F32;
}

int ct_precision_parse(const char *s, ct_dtype *dt)
{
    static const struct {
        const char *name;
        ct_dtype dt;
    } names[] = {{"f32", CT_F32},       {"fp32", CT_F32}, {"float32", CT_F32}, {"bf16", CT_BF16},
                 {"bfloat16", CT_BF16}, {"f16", CT_F16},  {"fp16", CT_F16},    {"float16", CT_F16}};
    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) {
            *dt = names[i].dt;
            return 0;
        }
    return ct__error(CT_EINVAL, "precision \"%s\": expected \"f32\", \"bf16\" or \"f16\"",
                     s ? s : "(null)");
}

void ct_set_tf32(bool allow)
{
    atomic_store(&tf32, allow);
}

bool ct__tf32_allowed(void)
{
    return atomic_load(&tf32);
}
