/* trainer/cudaemu/backend_cudaemu.h — the CUDA backend's table over the emulator
 * (backend_cudaemu.c): ct__backend_cuda without the entries that need cuBLASLt or cuDNN, for the
 * op test of programs that link ct_cudaemu_backend. */
#ifndef CT_BACKEND_CUDAEMU_H
#define CT_BACKEND_CUDAEMU_H

struct ct__backend;
/* the table (made at the first call; thread-safe) */
const struct ct__backend *ct__cudaemu_backend(void);

#endif
