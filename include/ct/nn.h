/* ct/nn.h — differentiable ops and PyTorch-style modules on the CPU.
 *
 * Ops (ct_nn_<op>) take contiguous f32 tensors in PyTorch layouts — activations (N,C,H,W) or
 * (N,F), conv weights (out,in,kh,kw), ConvTranspose weights (in,out,kh,kw), linear weights
 * (out,in) — and return a new tensor (caller owns it; NULL on error, see ct_last_error()).
 * When an input requires a gradient and grad mode is on, the op records itself on the tape
 * (ct/tensor.h) and ct_tensor_backward() accumulates into the inputs' gradients.
 *
 * Modules mirror torch.nn: parameters and buffers have PyTorch's dotted names ("0.weight",
 * "3.0.bn.running_mean") and default initialisations (kaiming_uniform(a=sqrt(5)) weights,
 * uniform(+-1/sqrt(fan_in)) biases, BatchNorm weight 1 / bias 0), drawn from a per-thread
 * generator seeded with ct_nn_manual_seed().
 *
 * Example:
 *     ct_nn_manual_seed(0);
 *     ct_module *net = CT_SEQUENTIAL(ct_nn_linear_new(784, 256, true), ct_nn_relu_new(),
 *                                    ct_nn_linear_new(256, 10, true));
 *     const ct_param_ref *ps; int np;
 *     ct_module_params(net, &ps, &np);              // flat value + grad buffers, for ct/optim.h
 *     ct_tensor *logits = ct_module_forward(net, x);  // x (N,784)
 *     ct_tensor *loss = ct_nn_cross_entropy(logits, labels, 0.0f);
 *     ct_tensor_backward(loss, NULL);
 *     ...; ct_module_destroy(&net);
 *
 * Ownership: constructors return an owned module; containers TAKE OWNERSHIP of their children
 * (also when they fail). Tensors and arrays returned by ct_module_* accessors are borrowed
 * until the module is destroyed. Threads: a module is used by one thread at a time. */
#ifndef CT_NN_H
#define CT_NN_H

#include <stdbool.h>
#include <stdint.h>

#include "ct/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Declared in ct/optim.h: { const char *name; float *value; float *grad; int64_t numel; }. */
typedef struct ct_param_ref ct_param_ref;

/* ---------------- ops ---------------- */

/* ---------------- precision ---------------- */

/* Mixed precision, as torch.autocast: inside a region opened with ct_autocast_push(CT_BF16) or
 * (CT_F16) on this thread, Linear, matmul, bmm and (transposed) convolution round their inputs
 * to that type (round-to-nearest-even), multiply with f32 accumulation and return f32; their
 * backward uses the same precision for both gradients (dgrad and wgrad), which arrive in f32.
 * Weights stay f32 (master weights); every other op (norms, softmax, losses, reductions,
 * optimizers, and the fused attention kernel) stays f32. Regions nest (16 deep); push(CT_F32)
 * turns autocast off inside. The CPU runs bf16 / f16 only where oneDNN has kernels for it
 * (AVX512_BF16 or AMX; AVX512_FP16 or AMX-FP16), else the op fails with CT_ENOSYS naming the
 * op, the device and the missing ISA. The checking device always can (its reference rounds
 * the operands, then runs the f32 kernel). f16 needs a loss scaler (ct_grad_scaler,
 * ct/optim.h). Returns 0, CT_EINVAL (another dtype; pop without push) or CT_ERANGE (depth). */
int ct_autocast_push(ct_dtype dt);
int ct_autocast_pop(void);
/* The innermost region's type on this thread; CT_F32 outside any region. */
ct_dtype ct_autocast_dtype(void);
/* "f32" / "bf16" / "f16" (also fp32, float32, bfloat16, fp16, float16) -> *dt; CT_EINVAL with
 * the bad string named otherwise. */
int ct_precision_parse(const char *s, ct_dtype *dt);
/* TF32 for f32 matmuls and convolutions on CUDA (cuBLASLt CUBLAS_COMPUTE_32F_FAST_TF32, cuDNN
 * tensor-op math): off by default, as torch.backends.cuda.matmul.allow_tf32. Process-wide. */
void ct_set_tf32(bool allow);

/* Convolution options; zero = PyTorch default (stride 1, padding 0, dilation 1, out pad 0). */
typedef struct ct_conv_opts {
    int stride[2], padding[2], dilation[2];
    int output_padding[2]; /* transposed convolution only */
} ct_conv_opts;

/* y (N,out) = x (N,in) @ w (out,in)^T + b (out); b may be NULL. */
ct_tensor *ct_nn_linear(ct_tensor *x, ct_tensor *w, ct_tensor *b);
/* c (m,n) = a (m,k) @ b (k,n). */
ct_tensor *ct_nn_matmul(ct_tensor *a, ct_tensor *b);
/* x (N,C,H,W), w (O,C,kh,kw), b (O) or NULL -> (N,O,OH,OW). o may be NULL. */
ct_tensor *ct_nn_conv2d(ct_tensor *x, ct_tensor *w, ct_tensor *b, const ct_conv_opts *o);
/* x (N,C,H,W), w (C,O,kh,kw), b (O) or NULL -> (N,O,OH,OW),
 * OH = (H-1)*stride - 2*pad + dil*(kh-1) + output_padding + 1. */
ct_tensor *ct_nn_conv_transpose2d(ct_tensor *x, ct_tensor *w, ct_tensor *b, const ct_conv_opts *o);
/* Batch norm over (N,C) or (N,C,H,W). training: batch statistics, and running_mean/var (may be
 * NULL) are updated in place as PyTorch does (unbiased variance, momentum); else running stats
 * are used. weight/bias may be NULL (1 and 0). */
ct_tensor *ct_nn_batch_norm(ct_tensor *x, ct_tensor *weight, ct_tensor *bias,
                            ct_tensor *running_mean, ct_tensor *running_var, bool training,
                            float momentum, float eps);
/* relu(batch_norm(...)) in one oneDNN pass (Sequential fuses BatchNorm + ReLU modules). */
ct_tensor *ct_nn_batch_norm_relu(ct_tensor *x, ct_tensor *weight, ct_tensor *bias,
                                 ct_tensor *running_mean, ct_tensor *running_var, bool training,
                                 float momentum, float eps);
/* Pooling (N,C,H,W), square windows, floor mode. stride 0 = kernel. */
ct_tensor *ct_nn_max_pool2d(ct_tensor *x, int kernel, int stride, int padding);
ct_tensor *ct_nn_avg_pool2d(ct_tensor *x, int kernel, int stride, int padding,
                            bool count_include_pad);
ct_tensor *ct_nn_adaptive_avg_pool2d(ct_tensor *x, int out_h, int out_w);
/* Elementwise. */
ct_tensor *ct_nn_relu(ct_tensor *x);
ct_tensor *ct_nn_leaky_relu(ct_tensor *x, float negative_slope);
ct_tensor *ct_nn_elu(ct_tensor *x, float alpha);
ct_tensor *ct_nn_tanh(ct_tensor *x);
ct_tensor *ct_nn_sigmoid(ct_tensor *x);
/* Layer norm over the last dimension of x (..., D); weight, bias (D) may be NULL. */
ct_tensor *ct_nn_layer_norm(ct_tensor *x, ct_tensor *weight, ct_tensor *bias, float eps);
/* GELU: exact (x Phi(x)), or torch's approximate="tanh" form when tanh_approx. */
ct_tensor *ct_nn_gelu(ct_tensor *x, bool tanh_approx);
/* Elementwise product of two tensors of one shape. */
ct_tensor *ct_nn_mul(ct_tensor *a, ct_tensor *b);
/* Rows of weight (V, D) picked by idx (...) i64: (..., D). The row padding_idx (-1: none) gets
 * no gradient. CT_EINVAL naming an index outside [0, V). */
ct_tensor *ct_nn_embedding(ct_tensor *idx, ct_tensor *weight, int64_t padding_idx);
/* y = x with its dimensions reordered: y.shape[i] = x.shape[perm[i]] (a contiguous copy). */
ct_tensor *ct_nn_permute(ct_tensor *x, const int *perm);
/* x with dimensions d0 and d1 swapped (a contiguous copy). */
ct_tensor *ct_nn_transpose(ct_tensor *x, int d0, int d1);
/* x[..., start:start+len, ...] along dimension dim (a contiguous copy). */
ct_tensor *ct_nn_slice(ct_tensor *x, int dim, int64_t start, int64_t len);
/* Batched matmul (B, M, K) @ (B, K, N) -> (B, M, N); trans_a: a is stored (B, K, M), trans_b: b
 * is stored (B, N, K). */
ct_tensor *ct_nn_bmm(ct_tensor *a, ct_tensor *b, bool trans_a, bool trans_b);
/* Softmax over the last dimension of x (..., T, T) where row i sees columns 0..i only. */
ct_tensor *ct_nn_softmax_causal(ct_tensor *x);
/* Fused attention softmax(q k^T / sqrt(hs), causal: row i sees keys 0..i) v over q, k, v of one
 * shape (..., T, hs); in training, dropout on the probabilities. Memory grows with T, not T^2. */
ct_tensor *ct_nn_attention(ct_tensor *q, ct_tensor *k, ct_tensor *v, bool causal, float dropout,
                           bool training);
/* The same attention on q, k and v packed in one (B, T, 3C) tensor, as a c_attn projection makes
 * them (q = [..., 0:C], k = [..., C:2C], v = [..., 2C:3C], each n_head heads of C / n_head
 * side by side), giving o (B, T, C) with the heads side by side again: the values (and the
 * dropout) of slicing, viewing as (B, T, H, hs), permuting to (B, H, T, hs), ct_nn_attention
 * and permuting back, without the copies. */
ct_tensor *ct_nn_attention_qkv(ct_tensor *qkv, int n_head, bool causal, float dropout,
                               bool training);
/* (Log-)softmax over the last dimension. */
ct_tensor *ct_nn_softmax(ct_tensor *x);
ct_tensor *ct_nn_log_softmax(ct_tensor *x);
/* a + b, same shape (residual connections). */
ct_tensor *ct_nn_add(ct_tensor *a, ct_tensor *b);
/* Sum of all elements -> shape (). */
ct_tensor *ct_nn_sum(ct_tensor *x);
/* Inverted dropout: zeroes with probability p, scales the rest by 1/(1-p); identity (a new
 * reference to x) when !training or p == 0. */
ct_tensor *ct_nn_dropout(ct_tensor *x, float p, bool training);
/* x in plain row-major layout (a new reference to x when it already is). Conv2d outputs with
 * out_channels % 16 == 0, and the batch norm / pooling / eltwise ops after them, keep oneDNN's
 * blocked layout (nChw16c) to avoid a reorder per op; every op accepts either layout, ops that
 * need plain data convert themselves. Call this before reading such a tensor's data. */
ct_tensor *ct_nn_to_plain(ct_tensor *x);
/* (N, ...) -> (N, prod(...)); reshape keeps the element count. Both share x's storage. */
ct_tensor *ct_nn_flatten(ct_tensor *x);
ct_tensor *ct_nn_reshape(ct_tensor *x, int ndim, const int64_t *shape);

/* Losses (kernels from ct/loss.h, wrapped for autograd; mean reduction) -> shape ().
 * target: i64 class indices (N) for cross entropy / NLL; f32 of input's shape for the rest. */
ct_tensor *ct_nn_cross_entropy(ct_tensor *logits, ct_tensor *target, float label_smoothing);
ct_tensor *ct_nn_nll_loss(ct_tensor *log_probs, ct_tensor *target);
ct_tensor *ct_nn_mse_loss(ct_tensor *input, ct_tensor *target);
ct_tensor *ct_nn_l1_loss(ct_tensor *input, ct_tensor *target);
ct_tensor *ct_nn_bce_loss(ct_tensor *probs, ct_tensor *target);
ct_tensor *ct_nn_bce_with_logits_loss(ct_tensor *logits, ct_tensor *target);

/* Seeds this thread's generator used by module initialisation and dropout. */
void ct_nn_manual_seed(uint64_t seed);
/* OpenMP threads for oneDNN and the C loops (<= 0: OMP_NUM_THREADS or all cores). OpenMP keeps
 * this per thread: call it from the thread that trains. Primitives smaller than about 1M
 * multiply-adds run on one thread whatever the setting (fork/join would cost more). For
 * throughput on a dedicated machine, OMP_WAIT_POLICY=active keeps the workers spinning between
 * primitives (an environment variable: libgomp reads it at start-up). */
void ct_nn_set_threads(int n);

/* ---------------- modules ---------------- */

typedef struct ct_module ct_module;

ct_module *ct_nn_linear_new(int64_t in, int64_t out, bool bias);
ct_module *ct_nn_conv2d_new(int64_t in, int64_t out, int kernel, const ct_conv_opts *o, bool bias);
ct_module *ct_nn_conv_transpose2d_new(int64_t in, int64_t out, int kernel, const ct_conv_opts *o,
                                      bool bias);
/* eps 1e-5, momentum 0.1; buffers running_mean, running_var, num_batches_tracked (i64). */
ct_module *ct_nn_batchnorm1d_new(int64_t features);
ct_module *ct_nn_batchnorm2d_new(int64_t channels);
ct_module *ct_nn_relu_new(void);
ct_module *ct_nn_leaky_relu_new(float negative_slope);
ct_module *ct_nn_elu_new(float alpha);
ct_module *ct_nn_tanh_new(void);
ct_module *ct_nn_sigmoid_new(void);
ct_module *ct_nn_maxpool2d_new(int kernel, int stride, int padding);
ct_module *ct_nn_avgpool2d_new(int kernel, int stride, int padding);
ct_module *ct_nn_adaptive_avgpool2d_new(int out_h, int out_w);
ct_module *ct_nn_dropout_new(float p);
ct_module *ct_nn_flatten_new(void);
/* x moved to device (ct_tensor_to, differentiable): the seam of a model across devices, as
 * PyTorch's x.to('cuda:1') in forward. No parameters; ct_module_to leaves its device as is.
 * NULL (CT_EINVAL) for a device that does not parse as one (ct_device_check). */
ct_module *ct_nn_to_device_new(ct_device device);
/* Containers; take ownership of children (all of them, also on failure; NULL children make
 * the constructor fail). Residual: y = x + sequential(children)(x). */
/* Transformer modules (PyTorch's / nanoGPT's names and initialisation). Embedding: weight
 * (num, dim) N(0, 1), row padding_idx (-1: none) zero and without gradient. LayerNorm over the
 * last dimension d. GELU exact, or the tanh form. */
ct_module *ct_nn_embedding_new(int64_t num, int64_t dim, int64_t padding_idx);
ct_module *ct_nn_layernorm_new(int64_t d, float eps);
ct_module *ct_nn_gelu_new(bool tanh_approx);
/* Causal multi-head self-attention on (B, T, n_embd): c_attn (n_embd -> 3 n_embd), fused
 * attention over n_head heads, c_proj, dropout (also on the probabilities) in training. */
ct_module *ct_nn_causal_self_attention_new(int64_t n_embd, int n_head, float dropout);
/* A pre-LN GPT block: x + attn(ln_1(x)), then + mlp(ln_2(.)), mlp = c_fc (4x), GELU, c_proj. */
ct_module *ct_nn_gpt_block_new(int64_t n_embd, int n_head, float dropout);
/* A GPT (nanoGPT's): token ids (B, T) i64, T <= block_size -> logits (B*T, vocab_size). The
 * output layer is the token embedding's weight (tied: one parameter, held once in a
 * checkpoint). Parameters as nanoGPT names them: transformer.wte.weight,
 * transformer.h.0.ln_1.weight, ... */
typedef struct ct_gpt_config {
    int n_layer, n_head;
    int64_t n_embd, block_size, vocab_size;
    float dropout;
} ct_gpt_config;
ct_module *ct_nn_gpt_new(const ct_gpt_config *cfg);
/* The config of a GPT made by ct_nn_gpt_new (or a checkpoint's, ct/infer.h) into *cfg;
 * CT_EINVAL when m is not a GPT. */
int ct_nn_gpt_config(const ct_module *m, ct_gpt_config *cfg);
ct_module *ct_nn_sequential_new(int n, ct_module *const *children);
ct_module *ct_nn_residual_new(int n, ct_module *const *children);
#define CT_SEQUENTIAL(...)                                                                         \
    ct_nn_sequential_new((int)(sizeof((ct_module *[]){__VA_ARGS__}) / sizeof(ct_module *)),        \
                         (ct_module *[]){__VA_ARGS__})
#define CT_RESIDUAL(...)                                                                           \
    ct_nn_residual_new((int)(sizeof((ct_module *[]){__VA_ARGS__}) / sizeof(ct_module *)),          \
                       (ct_module *[]){__VA_ARGS__})

void ct_module_destroy(ct_module **m);
/* Name of m inside its parent ("bn"); default is its index. Returns m (for chaining). */
ct_module *ct_module_set_name(ct_module *m, const char *name);
/* Forward pass; returns a new tensor or NULL. */
ct_tensor *ct_module_forward(ct_module *m, ct_tensor *x);
/* Train (default) / eval mode, recursively. */
void ct_module_train(ct_module *m, bool training);
bool ct_module_is_training(const ct_module *m);

/* Parameters in PyTorch's named_parameters() order, as refs for ct/optim.h. The first call
 * packs every parameter of the tree into one flat value buffer and one flat gradient buffer
 * per device the parameters are on (module order, 64-byte aligned offsets) so they can be
 * all-reduced as byte ranges; each ref names its device. Place the tree (ct_module_to on it or
 * on its children) first: after a child moved, the next call packs the tree again (new refs
 * and buffers; refs taken before, and optimizers built on them, are stale). */
int ct_module_params(ct_module *m, const ct_param_ref **refs, int *n);
/* The flat buffers (after packing): numel floats each, including alignment gaps (kept 0).
 * CT_EINVAL when the parameters are on more than one device. */
int ct_module_flat(ct_module *m, float **values, float **grads, int64_t *numel);
/* Moves every parameter and buffer of m (children too) to device (CT_CPU, CT_CUDA,
 * CT_CHECKDEV, ct_device_make(CT_CHECKDEV, 1)), as PyTorch's module.to(device); on a child it
 * places that child (model parallelism): the tensors stay the same objects, their data
 * moves; gradients are dropped. The parameter references and flat buffers of
 * ct_module_params / ct_module_flat are made again on the device at their next call, so get
 * them (and build optimizers) after the move. Nothing moves when it fails. */
int ct_module_to(ct_module *m, ct_device device);
int64_t ct_module_num_params(ct_module *m);
/* Gradient-ready hook on every parameter of m's tree (the DDP reducer's entry point):
 * fn(i, user) runs on the thread in ct_tensor_backward() as soon as parameter i (index in
 * ct_module_params() order) has its final gradient for that pass; the gradient is then plain,
 * contiguous f32 in its slice of the flat gradient buffer and backward does not write it
 * again. For a Sequential model the indices come in exactly decreasing order (PyTorch DDP's
 * reverse parameter order); in general, see ct_tensor_on_grad_ready() in ct/tensor.h for the
 * ordering and once-per-pass guarantees. Parameters the pass does not use do not fire. Packs
 * the parameters (as ct_module_params) when not done yet. Replaces any hook set on these
 * parameters before (also by ct_module_on_grad_ready on a child); fn NULL removes them.
 * user is borrowed until the hooks are removed or m is destroyed. */
typedef int (*ct_param_ready_fn)(int param_index, void *user);
int ct_module_on_grad_ready(ct_module *m, ct_param_ready_fn fn, void *user);
/* Zeroes every parameter gradient and marks it empty, so the next backward's kernels write the
 * gradients directly instead of accumulating through a scratch buffer: prefer it to
 * ct_optim_zero_grad, which only zeroes the arrays. */
void ct_module_zero_grad(ct_module *m);

/* State dict: parameters and buffers by dotted name, PyTorch's state_dict() order. */
typedef struct ct_named_tensor {
    const char *name;
    ct_tensor *tensor;
} ct_named_tensor;
int ct_module_state_dict(ct_module *m, const ct_named_tensor **entries, int *n);
/* Copies values in. strict (PyTorch's strict=True): every entry's name must be a key of the
 * model and every key of the model must be given; not strict: only the names both have are
 * copied. Dtypes and shapes of those must match. CT_EINVAL names the first mismatch, in the
 * entries' order, then the model's: "NAME: in the state dict but not in the model", "NAME:
 * shape (384, 128) in the state dict, (384, 64) in the model", "NAME: in the model but not in
 * the state dict". A failed load changes nothing. */
int ct_module_load_state_dict(ct_module *m, const ct_named_tensor *entries, int n, bool strict);
/* safetensors file of the state dict (readable by Python's safetensors). */
int ct_module_save(ct_module *m, const char *path);
/* Loads a safetensors file strictly (ct_module_load_file(m, path, true)): a file of another
 * model (another depth, width, names) fails with CT_EINVAL naming the first mismatch ("NAME: in
 * the file but not in the model", "NAME: shape (a, b) in the file, (c, d) in the model"). The
 * file may be the trainer's checkpoint of one model (trainer_save, checkpoint_dir): its
 * optimizer entries ("optim.*") are skipped. To build the model from such a checkpoint's
 * metadata, see ct_module_from_checkpoint (ct/infer.h). */
int ct_module_load(ct_module *m, const char *path);
/* The same with strict false: the names both have are loaded (shapes must match), the others
 * left as they are (a backbone's weights into a model with a new head). */
int ct_module_load_file(ct_module *m, const char *path, bool strict);

#ifdef __cplusplus
}
#endif
#endif
