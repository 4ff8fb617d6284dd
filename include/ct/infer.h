/* ct/infer.h — using a trained model: build it from a trainer's checkpoint, predict on a batch,
 * generate text with a GPT.
 *
 * Example (the tokenizer from ct/data.h; docs/GUIDE.md, "Using a trained model"):
 *     ct_module *gpt = NULL;
 *     if (ct_module_from_checkpoint("ck", &gpt) < 0)      // a file, or a checkpoint_dir
 *         fprintf(stderr, "%s\n", ct_last_error());
 *     int32_t prompt[64], out[200];
 *     int64_t n = ct_tokenizer_encode(tk, (const unsigned char *)"And God said", 12, prompt);
 *     ct_gpt_generate(gpt, prompt, n, 200, 0.8f, 20, 1, out);   // 200 new token ids
 *     ct_module_destroy(&gpt);
 *
 * Inference mode. ct_module_predict and ct_gpt_generate run forward with autograd off (nothing
 * is recorded on the tape, no gradient is touched) and the model's tree in eval mode (dropout
 * off, batch norm on its running statistics); each module's train / eval flag is put back
 * when they return, as is autograd's setting.
 *
 * Threads (on the CPU). A forward of about W multiply-adds (parameters x rows of the input:
 * tokens, or elements over the last dimension) runs on 1 + W / 2^27 OpenMP threads, at most
 * the calling thread's setting (ct_nn_set_threads; else OMP_NUM_THREADS or all cores), which
 * is restored afterwards. So generating from a small GPT runs on one thread, and a big batch
 * or model on the caller's threads. Why: a small forward's OpenMP fork/join, and on a busy
 * machine a worker waiting for a descheduled peer, cost more than the work (a 0.84 M-parameter
 * GPT took 38 s for 200 tokens on the default threads beside other jobs, 0.42 s on one). Call
 * ct_nn_set_threads(1) first to keep any forward on one thread.
 *
 * Threads: a model is used by one thread at a time. Errors: 0 or a negative CT_E* code, with
 * ct_last_error(). ct_module_from_checkpoint is part of the trainer (libct.so has it; among
 * ct's static libraries, ct_trainer); the rest is the engine's (ct_nn). */
#ifndef CT_INFER_H
#define CT_INFER_H

#include <stdint.h>

#include "ct/nn.h"
#include "ct/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = m(x) in inference mode (above), x a batch: (N, ...) as ct_module_forward takes it, on
 * any device; it is copied to the model's device (ct_module_to's) when it is elsewhere. *y:
 * the output, on the model's device, plain row-major (caller owns it: ct_tensor_release).
 * Row i of a batch is what the batch of sample i alone gives (up to float rounding: kernels
 * may block a batch differently). CT_EINVAL with the op's message when forward fails. */
int ct_module_predict(ct_module *m, ct_tensor *x, ct_tensor **y);

/* n new tokens from a GPT (ct_nn_gpt_new's, or built by ct_module_from_checkpoint) after
 * prompt[0, n_prompt), n_prompt >= 1, ids in [0, vocab_size), into out[0, n) (caller's
 * buffer). As nanoGPT's generate: each step runs the model on the last block_size tokens
 * (prompt and tokens so far) and takes the last position's logits; temperature 0 takes the
 * argmax (the smallest id among equal maxima), else a draw from softmax(logits / temperature)
 * restricted to the top_k largest logits (exactly top_k ids, ties to the smaller id; 0: all),
 * so top_k 1 equals temperature 0. seed seeds the draw (a generator of this call's own, not
 * ct_nn_manual_seed's): the same model, prompt and arguments give the same tokens. The model
 * may be on any device. CT_EINVAL: not a GPT, a bad argument (named), a failed forward;
 * CT_ERANGE: logits that are not finite (named, with the step). */
int ct_gpt_generate(ct_module *gpt, const int32_t *prompt, int64_t n_prompt, int64_t n,
                    float temperature, int top_k, uint64_t seed, int32_t *out);

/* *m = the model a trainer's checkpoint holds, on the CPU: its creator named by the
 * checkpoint's metadata "model" (a built-in such as "gpt", or one this program registered
 * with trainer_register_model) is run with the metadata's "config", then the weights are
 * loaded strictly (ct_module_load). path: a checkpoint file (trainer_save's,
 * checkpoint_dir's ckpt-*.safetensors), or a checkpoint_dir (its latest). Caller owns *m
 * (ct_module_destroy); NULL on failure. CT_ENOTREG: the creator is not registered here
 * (the registered ones listed); CT_EINVAL: a file without the trainer's metadata (a
 * ct_module_save file: build the model and ct_module_load it), a checkpoint of several models,
 * a creator that fails, weights that do not fit (the first mismatch named); CT_ENOENT: no such
 * file, or a directory without checkpoints. Initialisation draws from this thread's generator
 * (ct_nn_manual_seed) as any construction does. */
int ct_module_from_checkpoint(const char *path, ct_module **m);

#ifdef __cplusplus
}
#endif
#endif
