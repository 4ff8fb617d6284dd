/* trainer/cudaemu/emu.cc — the CUDA emulator's engine: runs a kernel launch on the CPU, and the
 * runtime API stand-in (include/cuda_runtime_api.h).
 *
 * A launch runs its blocks one after another on the calling thread. A block's threads are
 * fibres, each with a stack of its own, switched by ct_emu_switch (x86-64: six callee-saved
 * registers and the stack pointer, no system call, so a launch of a million threads takes a
 * fraction of a second); a fibre runs until it reaches a barrier
 * (__syncthreads, or a warp operation: shuffle, vote, __syncwarp) or returns. When no fibre can
 * run, the scheduler releases each barrier that all the threads it names have reached: a warp
 * operation when every lane of its mask waits at one with the same mask and kind (a shuffle's
 * results are computed then, from the values all lanes gave), __syncthreads when every thread of
 * the block waits at it. A barrier that can never be released (a lane of the mask exited, or waits
 * elsewhere) fails the launch with a message that names the kernel, the block, the lanes and
 * the barrier, as a GPU would hang or give undefined results there.
 *
 * Not here: concurrency between blocks or streams (everything runs in queue order at the call),
 * the memory model, timing. */
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <new>
#include <vector>

#include "trainer/cudaemu/kernel.h"

#if !defined(__x86_64__)
#error "the CUDA emulator's fibres switch stacks in x86-64 assembly"
#endif

/* ct_emu_switch(&save, load): saves the callee-saved registers on the current stack and its
 * pointer in *save, then continues on the stack load (made by a switch, or by new_stack) */
extern "C" void ct_emu_switch(void **save, void *load);
asm(".text\n"
    ".globl ct_emu_switch\n"
    ".type ct_emu_switch,@function\n"
    "ct_emu_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size ct_emu_switch, .-ct_emu_switch\n");

namespace ct_emu
{

thread_local uint3 thread_idx, block_idx;
thread_local dim3 block_dim, grid_dim;

namespace
{

enum { STACK_BYTES = 256 * 1024, MAX_THREADS = 1024 };

enum state { READY, AT_WARP, AT_BLOCK, DONE };

struct fibre {
    void *sp = nullptr; /* its stack pointer while it is switched out */
    char *stack = nullptr;
    uint3 idx;
    state st = READY;
    /* a warp operation: what the lane gave and gets */
    warp_op op = WARP_SYNC;
    unsigned mask = 0;
    uint64_t value = 0, result = 0;
    int src = 0;
    /* WARP_FN's */
    warp_fn fn = nullptr;
    const void *in = nullptr;
    void *out = nullptr;
};

/* the block that runs on this thread */
struct block_run {
    std::vector<fibre> fibres;
    void *sched_sp = nullptr;
    fibre *cur = nullptr;
    kernel_job *job = nullptr;
    const char *name = nullptr;
    char error[512] = "";
};

thread_local block_run *run_now;
thread_local cudaError_t last_error = cudaSuccess;
thread_local char last_message[600];

void fail(block_run *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fail(block_run *b, const char *fmt, ...)
{
    if (b->error[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(b->error, sizeof b->error, "kernel %s, block (%u,%u,%u): ", b->name,
                     block_idx.x, block_idx.y, block_idx.z);
    vsnprintf(b->error + n, sizeof b->error - (size_t)n, fmt, ap);
    va_end(ap);
}

void set_error(cudaError_t e, const char *msg)
{
    if (last_error == cudaSuccess) {
        last_error = e;
        snprintf(last_message, sizeof last_message, "ct cuda emulator: %s", msg);
    }
}

/* back to the scheduler from the running fibre */
void yield(state st)
{
    block_run *b = run_now;
    fibre *f = b->cur;
    f->st = st;
    ct_emu_switch(&f->sp, b->sched_sp);
    /* resumed: this fibre's indices again */
    thread_idx = f->idx;
}

/* where a fibre starts (ct_emu_switch returns into it); it never returns */
void fibre_main(void)
{
    block_run *b = run_now;
    b->job->run();
    b->cur->st = DONE;
    ct_emu_switch(&b->cur->sp, b->sched_sp);
    __builtin_unreachable();
}

/* a fibre's first stack pointer: ct_emu_switch pops six zero registers, then returns into
 * fibre_main, whose frame then sits as a call's would (the stack 16-aligned before the call) */
void *new_stack(char *stack)
{
    uintptr_t top = ((uintptr_t)stack + STACK_BYTES) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr; /* fibre_main's return address: none */
    *--sp = (void *)fibre_main;
    for (int r = 0; r < 6; r++)
        *--sp = nullptr;
    return sp;
}

const char *op_name(warp_op op)
{
    return op == WARP_SHFL     ? "a shuffle"
           : op == WARP_BALLOT ? "a vote"
           : op == WARP_FN     ? "a warp-wide instruction"
                               : "__syncwarp";
}

/* Releases the warp operation of warp w if all lanes it names wait at it; fails the block if
 * they never can. True when released. */
bool release_warp(block_run *b, size_t w)
{
    size_t first = w * 32, n = b->fibres.size() - first < 32 ? b->fibres.size() - first : 32;
    fibre *lanes = &b->fibres[first];
    int leader = -1;
    for (size_t l = 0; l < n; l++)
        if (lanes[l].st == AT_WARP) {
            leader = (int)l;
            break;
        }
    if (leader < 0)
        return false;
    unsigned mask = lanes[leader].mask;
    warp_op op = lanes[leader].op;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u))
            continue;
        if ((size_t)l >= n) {
            fail(b, "warp %zu: %s names lane %d, which the block does not have (%zu threads)", w,
                 op_name(op), l, b->fibres.size());
            return false;
        }
        const fibre &f = lanes[l];
        if (f.st != AT_WARP) {
            fail(b, "warp %zu: lane %d waits at %s with mask 0x%08x, but lane %d %s", w, leader,
                 op_name(op), mask, l, f.st == DONE ? "has exited" : "waits at __syncthreads");
            return false;
        }
        if (f.mask != mask || f.op != op || f.fn != lanes[leader].fn) {
            fail(b,
                 "warp %zu: lane %d waits at %s with mask 0x%08x, lane %d at %s with mask 0x%08x",
                 w, leader, op_name(op), mask, l, op_name(f.op), f.mask);
            return false;
        }
    }
    if (op == WARP_FN) {
        void *ins[32], *outs[32];
        for (int l = 0; l < 32; l++) {
            bool in_mask = mask >> l & 1u;
            ins[l] = in_mask ? (void *)lanes[l].in : nullptr;
            outs[l] = in_mask ? lanes[l].out : nullptr;
        }
        lanes[leader].fn(ins, outs);
    }
    unsigned ballot = 0;
    for (int l = 0; l < 32; l++)
        if (mask >> l & 1u && lanes[l].value)
            ballot |= 1u << l;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u))
            continue;
        fibre &f = lanes[l];
        if (op == WARP_SHFL) {
            if (f.src < 0 || f.src > 31 || !(mask >> f.src & 1u)) {
                fail(b, "warp %zu: lane %d shuffles from lane %d, outside mask 0x%08x", w, l, f.src,
                     mask);
                return false;
            }
            f.result = lanes[f.src].value;
        } else {
            f.result = ballot;
        }
        f.st = READY;
    }
    return true;
}

/* Runs one block to its end, or to its first error. */
void run_block(block_run *b)
{
    size_t nt = b->fibres.size();
    for (size_t t = 0; t < nt; t++) {
        b->fibres[t].st = READY;
        b->fibres[t].sp = new_stack(b->fibres[t].stack);
    }
    for (;;) {
        for (size_t t = 0; t < nt; t++) {
            fibre &f = b->fibres[t];
            if (f.st != READY)
                continue;
            b->cur = &f;
            thread_idx = f.idx;
            ct_emu_switch(&b->sched_sp, f.sp);
        }
        if (b->error[0])
            return;
        size_t done = 0, at_block = 0;
        bool released = false;
        for (size_t t = 0; t < nt; t++) {
            done += b->fibres[t].st == DONE;
            at_block += b->fibres[t].st == AT_BLOCK;
        }
        if (done == nt)
            return;
        for (size_t w = 0; w * 32 < nt && !b->error[0]; w++)
            released |= release_warp(b, w);
        if (b->error[0])
            return;
        if (released)
            continue;
        if (at_block == nt - done && done == 0) {
            for (size_t t = 0; t < nt; t++)
                b->fibres[t].st = READY;
            continue;
        }
        size_t t = 0;
        while (b->fibres[t].st != DONE)
            t++;
        fail(b, "%zu of %zu threads wait at __syncthreads, but thread %zu has exited", at_block, nt,
             t);
        return;
    }
}

} // namespace

uint64_t warp_collective(warp_op op, unsigned mask, uint64_t value, int src)
{
    block_run *b = run_now;
    fibre *f = b->cur;
    f->op = op;
    if (op != WARP_FN)
        f->fn = nullptr;
    f->mask = mask;
    f->value = value;
    f->src = src;
    if (!(mask >> lane_id() & 1u))
        fail(b, "lane %d calls %s with mask 0x%08x, which leaves it out", lane_id(), op_name(op),
             mask);
    yield(AT_WARP);
    return f->result;
}

void warp_compute(unsigned mask, const void *in, void *out, warp_fn fn)
{
    fibre *f = run_now->cur;
    f->fn = fn;
    f->in = in;
    f->out = out;
    warp_collective(WARP_FN, mask, 0, 0);
}

void block_barrier(void)
{
    yield(AT_BLOCK);
}

uint64_t globaltimer_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void launch(const char *name, dim3 grid, dim3 block, size_t shared, cudaStream_t s, kernel_job *job)
{
    (void)shared;
    (void)s;
    /* CT_EMU_LAUNCH names the kernel "(k)": without the parentheses */
    char bare[128];
    size_t len = strlen(name);
    if (len >= 2 && name[0] == '(' && name[len - 1] == ')' && len - 2 < sizeof bare) {
        memcpy(bare, name + 1, len - 2);
        bare[len - 2] = '\0';
        name = bare;
    }
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    char msg[256];
    if (threads == 0 || threads > MAX_THREADS || block.z > 64 || grid.x == 0 || grid.y == 0 ||
        grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
        snprintf(msg, sizeof msg, "kernel %s: launch of (%u,%u,%u) blocks of (%u,%u,%u) threads",
                 name, grid.x, grid.y, grid.z, block.x, block.y, block.z);
        set_error(cudaErrorInvalidConfiguration, msg);
        return;
    }
    /* the fibres' stacks, kept for the thread's later launches (freed when it exits) */
    static thread_local std::vector<std::unique_ptr<char[]>> stacks;
    while (stacks.size() < threads) {
        char *st = new (std::nothrow) char[STACK_BYTES];
        if (!st) {
            set_error(cudaErrorMemoryAllocation, "no memory for the fibres' stacks");
            return;
        }
        stacks.emplace_back(st);
    }
    block_run b;
    b.fibres.resize(threads);
    b.job = job;
    b.name = name;
    for (unsigned z = 0, t = 0; z < block.z; z++)
        for (unsigned y = 0; y < block.y; y++)
            for (unsigned x = 0; x < block.x; x++, t++) {
                b.fibres[t].idx = uint3{x, y, z};
                b.fibres[t].stack = stacks[t].get();
            }
    block_run *outer = run_now;
    run_now = &b;
    dim3 saved_grid = grid_dim, saved_block = block_dim;
    uint3 saved_bidx = block_idx, saved_tidx = thread_idx;
    grid_dim = grid;
    block_dim = block;
    for (unsigned z = 0; z < grid.z && !b.error[0]; z++)
        for (unsigned y = 0; y < grid.y && !b.error[0]; y++)
            for (unsigned x = 0; x < grid.x && !b.error[0]; x++) {
                block_idx = uint3{x, y, z};
                run_block(&b);
            }
    grid_dim = saved_grid;
    block_dim = saved_block;
    block_idx = saved_bidx;
    thread_idx = saved_tidx;
    run_now = outer;
    if (b.error[0]) {
        fprintf(stderr, "ct cuda emulator: %s\n", b.error);
        set_error(cudaErrorLaunchFailure, b.error);
    }
}

} // namespace ct_emu

/* ---- the runtime API ---- */

struct ct_emu_stream {
    unsigned long long id;
};
struct ct_emu_event {
    int unused;
};

using ct_emu::last_error;

extern "C" {

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    case cudaErrorNotReady:
        return "device not ready";
    default:
        return ct_emu::last_message[0] ? ct_emu::last_message : "ct cuda emulator: an error";
    }
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}

/* an execution error of a kernel is reported by the next synchronizing call too, as CUDA's are */
static cudaError_t pending(void)
{
    cudaError_t e = last_error;
    if (e == cudaErrorLaunchFailure)
        last_error = cudaSuccess;
    return e == cudaErrorLaunchFailure ? e : cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    return pending();
}

cudaError_t cudaGetDevice(int *dev)
{
    *dev = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev)
{
    return dev == 0 ? cudaSuccess : (last_error = cudaErrorInvalidValue);
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int dev)
{
    if (dev != 0)
        return last_error = cudaErrorInvalidValue;
    switch (attr) {
    case cudaDevAttrClockRate:
        *value = 1980000; /* kHz */
        return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
        *value = 132;
        return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
        *value = 9;
        return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
        *value = 0;
        return cudaSuccess;
    }
    return last_error = cudaErrorInvalidValue;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    size_t rounded = (bytes + 255) / 256 * 256;
    *p = rounded >= bytes ? aligned_alloc(256, rounded ? rounded : 256) : nullptr;
    if (!*p) {
        last_error = cudaErrorMemoryAllocation;
        return cudaErrorMemoryAllocation;
    }
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
    (void)flags;
    return cudaMalloc(p, bytes);
}

cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s)
{
    (void)kind;
    (void)s;
    if (bytes)
        memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    (void)s;
    memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes,
                                cudaStream_t s)
{
    if (dst_dev != 0 || src_dev != 0)
        return last_error = cudaErrorInvalidValue;
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    *a = cudaPointerAttributes{2 /* device memory */, 0, const_cast<void *>(p), nullptr};
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    static unsigned long long next_id = 1; /* 0: the legacy default stream */
    (void)flags;
    *s = new ct_emu_stream{__atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED)};
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamGetId(cudaStream_t s, unsigned long long *id)
{
    *id = s ? s->id : 0;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    return pending();
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)s;
    (void)e;
    (void)flags;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = new ct_emu_event{0};
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    (void)e;
    (void)s;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    (void)e;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    (void)e;
    return pending();
}

/* the emulator's streams have run everything queued when a call returns: fn runs now */
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *userData)
{
    (void)s;
    fn(userData);
    return cudaSuccess;
}

} /* extern "C" */
