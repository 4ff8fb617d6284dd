/* tests/cudaemu/test_emulator.c — the CUDA emulator itself (trainer/cudaemu): a block reduction
 * through shared memory, __syncthreads, shuffles and a vote gives the sums and votes a GPU
 * gives; a warp-wide instruction (warp_compute, as mma.sync is emulated) sees every lane's
 * input at once; a shuffle an exited lane misses, __syncthreads an exited thread misses, a shuffle
 * from a lane outside its mask and a launch of no blocks each fail their launch with a message that
 * names the kernel and what went wrong (on a GPU they hang or give undefined values). */
#include <stdio.h>
#include <string.h>

#include "../cuda/check.h"

int emu_block_sum(const float *x, int blocks, float *out, unsigned *ballot);
int emu_exited_lane(float *x);
int emu_exited_thread(float *x);
int emu_outside_mask(float *x);
int emu_no_blocks(float *x);
int emu_warp_fn(float *x);
const char *emu_error_string(int e);

/* the launch failed with CUDA's error code want, and its message holds each of the words */
static void expect_failure(const char *what, int rc, int want, const char *word1, const char *word2)
{
    const char *msg = emu_error_string(rc);
    printf("%s: %d: %s\n", what, rc, msg);
    CHECK(rc == want);
    CHECK(strstr(msg, word1) != NULL);
    CHECK(strstr(msg, word2) != NULL);
}

int main(void)
{
    enum { BLOCKS = 3 };
    float x[BLOCKS * 128], out[BLOCKS];
    unsigned ballot[BLOCKS];
    for (int i = 0; i < BLOCKS * 128; i++)
        x[i] = (float)(i % 7) - 3.0f; /* small integers: every order of summation is exact */
    CHECK(emu_block_sum(x, BLOCKS, out, ballot) == 0);
    for (int b = 0; b < BLOCKS; b++) {
        float want = 0;
        unsigned vote = 0;
        for (int i = 0; i < 128; i++)
            want += x[b * 128 + i];
        for (int l = 0; l < 32; l++)
            vote |= (x[b * 128 + l] > 0.0f ? 1u : 0u) << l;
        printf("block %d: sum %g (want %g), vote 0x%08x (want 0x%08x)\n", b, out[b], want,
               ballot[b], vote);
        CHECK(out[b] == want);
        CHECK(ballot[b] == vote);
    }

    /* a warp-wide instruction sees every lane's input at once */
    float w[32];
    for (int l = 0; l < 32; l++)
        w[l] = (float)l;
    CHECK(emu_warp_fn(w) == 0);
    for (int l = 0; l < 32; l++)
        CHECK(w[l] == (float)(31 - l) + 496.0f);

    enum { LAUNCH_FAILURE = 719, INVALID_CONFIGURATION = 9 };
    float y[64] = {0};
    expect_failure("exited lane", emu_exited_lane(y), LAUNCH_FAILURE, "exited_lane_kernel",
                   "lane 31 has exited");
    expect_failure("exited thread", emu_exited_thread(y), LAUNCH_FAILURE, "exited_thread_kernel",
                   "thread 5 has exited");
    expect_failure("outside the mask", emu_outside_mask(y), LAUNCH_FAILURE, "outside_mask_kernel",
                   "outside mask 0x0000ffff");
    expect_failure("no blocks", emu_no_blocks(y), INVALID_CONFIGURATION, "exited_lane_kernel",
                   "(0,1,1) blocks");
    /* an error is reported once: the next launch that works reports success */
    CHECK(emu_block_sum(x, 1, out, ballot) == 0);
    if (failures)
        fprintf(stderr, "cudaemu_emulator: %d failures\n", failures);
    return failures ? 1 : 0;
}
