/* ct/data.h — datasets, readers, transforms and the batch loader of ct's trainer.
 *
 * Plain C with no dependency on the tensor library: a batch is a contiguous float array
 * (N, C, H, W) for images or (N, F) for tabular data, int64 labels (N) or, for a dataset with
 * f32 targets (regression, multi-label), float targets (N, T...), and the sample shape.
 *
 * A worked example (Fashion-MNIST, 2 replicas, this is rank 1):
 *
 *     ct_dataset *train = NULL;
 *     if (ct_dataset_open_mnist(NULL, true, &train) < 0)       // NULL: CT_FASHION_MNIST_DIR
 *         fprintf(stderr, "%s\n", ct_last_error());
 *     const float mean[] = {0.2860f}, stdv[] = {0.3530f};
 *     ct_loader *ld = NULL;
 *     ct_loader_new(train, &(ct_loader_opts){.batch_size = 64, .shuffle = true, .seed = 42,
 *                                           .rank = 1, .world_size = 2, .prefetch = 4,
 *                                           .transform = {.mean = mean, .std = stdv}}, &ld);
 *     for (int64_t epoch = 0; epoch < 10; epoch++) {
 *         ct_loader_set_epoch(ld, epoch);                   // like DistributedSampler.set_epoch
 *         ct_batch b;
 *         while (ct_loader_next(ld, &b) > 0)
 *             train_step(b.x, b.y, b.n);                    // b.x: (b.n, 1, 28, 28)
 *     }
 *     ct_loader_destroy(&ld);
 *     ct_dataset_destroy(&train);
 *
 * Errors: every int-returning function returns 0 (or a count) on success and a negative CT_E*
 * code on failure, with ct_last_error() naming the file, line, column or field. Malformed
 * content (wrong magic, bad counts, bad sizes, unparsable CSV) is CT_EINVAL; a file that ends
 * early or a corrupt gzip stream is CT_EIO; a missing file is CT_ENOENT.
 *
 * Threads: a ct_dataset's built-in readers are read-only after opening, so ct_dataset_get on
 * them is thread-safe. A ct_loader is used by one thread at a time; with prefetch > 0 it runs
 * its own background thread that calls ct_dataset_get (one call at a time). */
#ifndef CT_DATA_H
#define CT_DATA_H

#include <stdbool.h>
#include <stdint.h>
#include "ct/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CT_DATA_MAX_DIMS 4
#define CT_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* ---------------------------------------------------------------------------------------------
 * Datasets
 * ------------------------------------------------------------------------------------------ */

/* A dataset: a length, a sample shape (without the batch dimension) and a way to fetch sample
 * i as float32 values plus either an int64 label or (a "target dataset") a float32 target
 * tensor of a fixed target shape. Opaque; made by the readers below or from a vtable. */
typedef struct ct_dataset ct_dataset;

/* Write your own dataset in C: fill this table and call ct_dataset_new.
 *   get:     writes sample i (0 <= i < length) as sample_numel floats into x (C-contiguous in
 *            the sample shape) and its label into *label; returns 0 or a negative CT_E* code,
 *            which a loader hands to its consumer with the sample index and epoch. May be
 *            called from a loader's prefetch thread, never by two threads at once for one
 *            loader.
 *   destroy: optional; called once by ct_dataset_destroy with the self pointer.
 *   get_target: for target datasets (ct_dataset_new_targets), instead of get: writes sample
 *            i into x and its target_numel floats into y (C-contiguous in the target shape). */
typedef struct ct_dataset_ops {
    int (*get)(void *self, int64_t i, float *x, int64_t *label);
    void (*destroy)(void *self);
    int (*get_target)(void *self, int64_t i, float *x, float *y);
} ct_dataset_ops;

/* Makes a dataset of `length` samples of the given shape (ndim 1..CT_DATA_MAX_DIMS) served by
 * ops (copied) and self (owned from now on: passed to ops->destroy). On failure *out is NULL and
 * ops->destroy is NOT called: the caller still owns self. Caller owns *out. */
int ct_dataset_new(const ct_dataset_ops *ops, void *self, int64_t length, int ndim,
                   const int64_t *shape, ct_dataset **out);
/* The same for a target dataset: samples of shape (ndim, shape) with f32 targets of shape
 * (tndim 1..CT_DATA_MAX_DIMS, tshape), served by ops->get_target (ops->get is not used). */
int ct_dataset_new_targets(const ct_dataset_ops *ops, void *self, int64_t length, int ndim,
                           const int64_t *shape, int tndim, const int64_t *tshape,
                           ct_dataset **out);

/* In-memory datasets; both copy their inputs (the caller keeps x and labels).
 * x is (length, *shape); u8 values are divided by `div` on get (255: pixels in [0,1] exactly as
 * torchvision's ToTensor, x / 255.0f; 0 or 1: the raw values). */
int ct_dataset_from_f32(const float *x, const int64_t *labels, int64_t length, int ndim,
                        const int64_t *shape, ct_dataset **out);
int ct_dataset_from_u8(const uint8_t *x, const int64_t *labels, int64_t length, int ndim,
                       const int64_t *shape, float div, ct_dataset **out);
/* An in-memory target dataset: x (length, *shape), y (length, *tshape) f32; both copied. */
int ct_dataset_from_f32_targets(const float *x, const float *y, int64_t length, int ndim,
                                const int64_t *shape, int tndim, const int64_t *tshape,
                                ct_dataset **out);

/* A view of samples [start, start + count) of base (borrowed: base must outlive the view), e.g.
 * a train/validation split or a short run. Same shape; get is as thread-safe as base's. */
int ct_dataset_subset(ct_dataset *base, int64_t start, int64_t count, ct_dataset **out);

/* Frees the dataset (and its vtable self) and sets *ds to NULL; accepts NULL and *ds == NULL.
 * Destroy every loader of a dataset before the dataset. */
void ct_dataset_destroy(ct_dataset **ds);

int64_t ct_dataset_length(const ct_dataset *ds);
/* Writes the sample shape into shape[CT_DATA_MAX_DIMS] (may be NULL) and returns ndim. */
int ct_dataset_shape(const ct_dataset *ds, int64_t *shape);
/* Number of floats per sample (product of the shape). */
int64_t ct_dataset_sample_numel(const ct_dataset *ds);
/* Fetches sample i into x (sample_numel floats) and *label. CT_ERANGE if i is out of range;
 * CT_EINVAL on a target dataset (use ct_dataset_get_target). */
int ct_dataset_get(ct_dataset *ds, int64_t i, float *x, int64_t *label);
/* Target datasets: the target shape into shape[CT_DATA_MAX_DIMS] (may be NULL), returning its
 * ndim; 0 for a dataset of int64 labels. target_numel: floats per target (0 for labels). */
int ct_dataset_target_shape(const ct_dataset *ds, int64_t *shape);
int64_t ct_dataset_target_numel(const ct_dataset *ds);
/* Fetches sample i into x and its target into y (target_numel floats). CT_ERANGE if i is out
 * of range; CT_EINVAL on a dataset of labels. */
int ct_dataset_get_target(ct_dataset *ds, int64_t i, float *x, float *y);

/* ---------------------------------------------------------------------------------------------
 * Readers. Each reads its files fully into memory once (gzip is inflated in one pass) and keeps
 * the pixels as u8, turned into [0,1] floats on get (x / 255.0f, as ToTensor). Caller owns *out; on
 * failure *out is NULL.
 * ------------------------------------------------------------------------------------------ */

/* IDX (MNIST, Fashion-MNIST), gzip or raw (detected by the 1f 8b magic). Images: magic
 * 0x00000803, dims N, H, W (u32 big-endian), N*H*W u8 pixels; sample shape (1, H, W).
 * Labels: magic 0x00000801, dim N, N u8 labels. The two counts must match. */
int ct_dataset_open_idx(const char *images_path, const char *labels_path, ct_dataset **out);

/* {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] in dir (NULL: CT_FASHION_MNIST_DIR);
 * train selects the 60000-sample training split, else the 10000-sample test split. */
int ct_dataset_open_mnist(const char *dir, bool train, ct_dataset **out);

/* CIFAR-10 binary: records of 1 label byte (0..9) + 3072 bytes (R, G, B planes of 32x32),
 * the files concatenated in the order given (e.g. data_batch_1.bin .. data_batch_5.bin).
 * Sample shape (3, 32, 32). A file whose size is not a multiple of 3073 is rejected. */
int ct_dataset_open_cifar10(const char *const *paths, int n_paths, ct_dataset **out);
/* data_batch_1..5.bin (train) or test_batch.bin in dir. */
int ct_dataset_open_cifar10_dir(const char *dir, bool train, ct_dataset **out);

/* CSV: one sample a line; one column is the integer label, all others float features; sample
 * shape (F). Fields are separated by `delimiter` (0: ','), surrounding blanks are ignored, blank
 * lines are skipped, quoting is not supported. With targets = T > 0 the file has f32 targets
 * instead of a label: the T columns starting at the label column (label_name / label_column)
 * are the target, shape (T), e.g. label_column -2, targets 2: the last two columns. */
typedef struct ct_csv_opts {
    int header;             /* 0: auto (first line has a non-numeric field), 1: yes, -1: no */
    const char *label_name; /* label column by header name (needs a header); overrides index */
    int label_column;       /* label column by index; negative counts from the end (-1: last) */
    char delimiter;         /* 0: ',' */
    int targets;            /* > 0: that many f32 target columns instead of an integer label */
} ct_csv_opts;
int ct_dataset_open_csv(const char *path, const ct_csv_opts *opts, ct_dataset **out);

/* One shard of a CSV file, read without reading the rest: shard `rank` of `world` is the
 * lines that start in the file's byte range [size * rank / world, size * (rank + 1) / world)
 * (a line crossing the end of the range belongs to the shard it starts in, as Hadoop's text
 * splits). The rank reads its byte range (from one byte before it, to see whether it starts
 * on a line boundary), the rest of its last line, and the file's first line (for the header
 * and column count); *bytes_read (may be NULL) gets the count of bytes read from the file.
 * Shards differ in length by about a line's share; every line is in exactly one shard. Error
 * messages name the line by its byte offset. Gzip'd files are not supported here. */
int ct_dataset_open_csv_shard(const char *path, const ct_csv_opts *opts, int rank, int world,
                              ct_dataset **out, int64_t *bytes_read);

/* Text as next-token windows, byte-level (vocabulary 256). The file's first 1 - val_fraction
 * of bytes is the training split (val: the rest); the split is cut into world_size byte
 * ranges, and rank's range into windows of block_size + 1 bytes at a stride of block_size:
 * a target dataset of samples (block_size) token ids as floats, targets the next tokens. Read
 * per sample with pread: a rank reads only its shard. CT_EINVAL when a shard is shorter than a
 * window. */
typedef struct ct_text_opts {
    int64_t block_size;
    int rank, world_size; /* world_size >= 1 */
    double val_fraction;  /* 0 <= f < 1 */
    bool val;             /* the validation split */
} ct_text_opts;
int ct_dataset_open_text(const char *path, const ct_text_opts *opts, ct_dataset **out);

/* ---------------------------------------------------------------------------------------------
 * Tokenizer: byte-level BPE (minbpe's BasicTokenizer). Ids 0..255 are the bytes; id 256 + i is
 * merge i, the pair (a, b) of earlier ids. With no merges it is the byte-level tokenizer
 * (vocabulary 256). Read-only after making: encode/decode are thread-safe.
 * Vocabulary file (text): a header line `ct-bpe 1 <n_merges>`, then n_merges lines `a b` (ids,
 * decimal, one blank between); a bad file is CT_EINVAL naming file:line and what is wrong.
 * ------------------------------------------------------------------------------------------ */
typedef struct ct_tokenizer ct_tokenizer;

/* The byte-level tokenizer (no merges). Caller owns *out. */
int ct_tokenizer_new_bytes(ct_tokenizer **out);
/* Loads a vocabulary file. Caller owns *out; NULL on failure (CT_ENOENT, CT_EINVAL file:line). */
int ct_tokenizer_load(const char *path, ct_tokenizer **out);
/* Learns n_merges (<= 7936) merges from text: each merges the most frequent adjacent pair of
 * ids (counted overlapping; ties: the smallest (a, b)), left to right. Stops early when the
 * text is down to one id. O(n) per merge. Caller owns *out. */
int ct_tokenizer_learn(const unsigned char *text, int64_t n, int n_merges, ct_tokenizer **out);
/* Writes the vocabulary file (through path.tmp, renamed). */
int ct_tokenizer_save(const ct_tokenizer *tk, const char *path);
void ct_tokenizer_destroy(ct_tokenizer **tk);

int ct_tokenizer_vocab_size(const ct_tokenizer *tk); /* 256 + merges */
/* Merge i's pair into *a, *b; CT_ERANGE for no such merge. */
int ct_tokenizer_merge(const ct_tokenizer *tk, int i, int32_t *a, int32_t *b);
/* Token id's length in bytes, its bytes into *bytes (borrowed; may be NULL); CT_ERANGE. */
int64_t ct_tokenizer_token_bytes(const ct_tokenizer *tk, int32_t id, const unsigned char **bytes);
/* Encodes text (n bytes) into ids (room for n); returns the count of ids. */
int64_t ct_tokenizer_encode(const ct_tokenizer *tk, const unsigned char *text, int64_t n,
                            int32_t *ids);
/* Decodes ids into out (at most cap bytes written); returns the full length in bytes (more than
 * cap: out holds a prefix) or CT_ERANGE for an id outside the vocabulary. */
int64_t ct_tokenizer_decode(const ct_tokenizer *tk, const int32_t *ids, int64_t n,
                            unsigned char *out, int64_t cap);

/* Token files: a text encoded once for training. 32-byte header: "ct-tok1\n", u32 vocab_size,
 * u32 0, u64 n_tokens, u64 n_bytes (of the text), all little-endian; then n_tokens u16 ids. */
typedef struct ct_tokens_info {
    int vocab_size;
    int64_t n_tokens, n_bytes;
} ct_tokens_info;
/* Encodes the text file at text_path with tk into a token file at token_path (written through
 * token_path.tmp, renamed); info (may be NULL) gets its header. */
int ct_tokens_write_file(const ct_tokenizer *tk, const char *text_path, const char *token_path,
                         ct_tokens_info *info);
/* Reads a token file's header; CT_EINVAL naming the file when it is not one (or is cut short). */
int ct_tokens_read_info(const char *path, ct_tokens_info *info);
/* A token file as next-token windows, exactly as ct_dataset_open_text with tokens for bytes:
 * the first 1 - val_fraction of the tokens is the training split, cut into world_size token
 * ranges, each into windows of block_size + 1 tokens at a stride of block_size, read per
 * sample with pread. */
int ct_dataset_open_tokens(const char *path, const ct_text_opts *opts, ct_dataset **out);

/* ---------------------------------------------------------------------------------------------
 * Distributed sampler: torch.utils.data.DistributedSampler's semantics exactly.
 *   num_samples = drop_last && n % world ? ceil((n - world) / world) : ceil(n / world)
 *   total = num_samples * world
 *   indices = shuffle ? permutation(seed + epoch) : 0..n-1   (same on every rank)
 *   not drop_last: pad to total by repeating from the start; drop_last: truncate to total
 *   shard = indices[rank : total : world]
 * The permutation comes from ct's own RNG (not torch's randperm), deterministic in seed + epoch.
 * ------------------------------------------------------------------------------------------ */
typedef struct ct_sampler_opts {
    int rank;       /* 0 <= rank < world_size */
    int world_size; /* 0: 1 */
    bool shuffle;
    bool drop_last; /* drop the tail so that n divides evenly, instead of padding */
    uint64_t seed;
    int64_t epoch;
} ct_sampler_opts;

/* Samples per rank for a dataset of n (same on every rank); negative CT_E* on bad options. */
int64_t ct_sampler_num_samples(int64_t n, const ct_sampler_opts *opts);
/* Writes this rank's ct_sampler_num_samples indices into out; scratch holds at least
 * max(n, 1) int64 (the full permutation). Returns the count written or a negative CT_E*. */
int64_t ct_sampler_indices(int64_t n, const ct_sampler_opts *opts, int64_t *out, int64_t *scratch);
/* A random permutation of 0..n-1 from seed (Fisher-Yates, splitmix64). */
void ct_sampler_permutation(int64_t n, uint64_t seed, int64_t *out);

/* ---------------------------------------------------------------------------------------------
 * Transforms, applied per sample in this order (as torchvision's RandomCrop, RandomHorizontal-
 * Flip, then Normalize on a ToTensor image): crop with zero padding, horizontal flip,
 * normalise. Random choices depend only on (seed, epoch, dataset index), so batches reproduce
 * across runs, ranks, prefetch on or off.
 * ------------------------------------------------------------------------------------------ */
typedef struct ct_transform_opts {
    const float *mean;  /* per channel (shape[0] of a (C,H,W) sample) or one value for all; */
    const float *std;   /*   NULL: no normalisation. Both are copied by ct_loader_new. */
    int n_mean;         /* length of mean/std; 0: the channel count C (1 for (F) samples) */
    float hflip_p;      /* probability of a horizontal flip (0: never; needs (C,H,W)) */
    int crop_h, crop_w; /* random crop to crop_h x crop_w (0: no crop; needs (C,H,W)) */
    int crop_pad;       /* zero padding on each side before cropping (RandomCrop's padding) */
} ct_transform_opts;

/* The random choices for one sample: crop offsets into the padded image and the flip. */
typedef struct ct_transform_draw {
    int top, left;
    bool flip;
} ct_transform_draw;
ct_transform_draw ct_transform_draw_for(const ct_transform_opts *t, int in_h, int in_w,
                                        uint64_t seed, int64_t epoch, int64_t index);

/* out (C, oh, ow) = crop of in (C, h, w) zero-padded by pad, window at (top, left) of the
 * padded image, mirrored left-right if flip. oh = h, ow = w when crop is off. */
void ct_transform_crop_flip(const float *in, int c, int h, int w, int pad, int top, int left,
                            bool flip, float *out, int oh, int ow);
/* x (numel) = (x - mean[ch]) / std[ch] with ch = i / (numel / n) (n = 1: one value for all). */
void ct_transform_normalize(float *x, int64_t numel, const float *mean, const float *std, int n);

/* ---------------------------------------------------------------------------------------------
 * Loader
 * ------------------------------------------------------------------------------------------ */
typedef struct ct_loader ct_loader;

typedef struct ct_loader_opts {
    int64_t batch_size;     /* 0: 1 */
    bool shuffle;           /* shuffle each epoch (permutation from seed + epoch) */
    bool drop_last;         /* drop this rank's last incomplete batch */
    int rank, world_size;   /* distributed sampler (world_size 0: 1, no sharding) */
    bool sampler_drop_last; /* DistributedSampler's drop_last: truncate instead of pad */
    uint64_t seed;          /* shuffling and random transforms */
    int prefetch;           /* batches built ahead by a background thread; 0: no thread */
    ct_transform_opts transform;
    /* > 0: pad each epoch's sample list (after sharding) to pad_to samples by repeating it from
     * its start, as DistributedSampler pads: gives every rank the same count when each rank's
     * dataset is its own shard of a different length. Must be >= the count without padding. */
    int64_t pad_to;
} ct_loader_opts;

/* A batch, borrowed from the loader until the next ct_loader_next / set_epoch / destroy. */
typedef struct ct_batch {
    const float *x;      /* (n, shape...) contiguous */
    const int64_t *y;    /* (n); NULL for a target dataset */
    const float *target; /* (n, tshape...) for a target dataset, else NULL */
    int tndim;           /* target dims (0: labels) */
    int64_t tshape[CT_DATA_MAX_DIMS];
    const int64_t *index; /* (n) dataset index of each sample */
    int64_t n;            /* samples in this batch (<= batch_size) */
    int ndim;             /* sample dims (shape excludes n) */
    int64_t shape[CT_DATA_MAX_DIMS];
    int64_t batch; /* batch number within the epoch */
} ct_batch;

/* Makes a loader over ds (borrowed: ds must outlive the loader). All buffers (prefetch ring,
 * indices) are allocated here: no allocation per batch. The epoch starts at 0. */
int ct_loader_new(ct_dataset *ds, const ct_loader_opts *opts, ct_loader **out);
/* Stops the prefetch thread (safe while it is mid-batch), frees everything, sets *ld NULL. */
void ct_loader_destroy(ct_loader **ld);

/* Starts (or restarts) iterating over epoch `epoch` from its first batch; with prefetch the
 * background thread begins building batches at once. Returns 0 or a negative CT_E*. */
int ct_loader_set_epoch(ct_loader *ld, int64_t epoch);
/* The same, starting at batch `batch` (0 .. ct_loader_num_batches; the number of batches makes
 * the epoch empty): the batches then returned are exactly those a full pass returns from
 * there on (to resume an epoch part way through). CT_EINVAL out of range. */
int ct_loader_seek(ct_loader *ld, int64_t epoch, int64_t batch);
/* Re-sharding mid-epoch (a group that changed size, the trainer's live recovery): epoch
 * `epoch` with the first `offset` positions of its whole order (the permutation from seed +
 * epoch, before sharding) already seen; the rest is dealt over this loader's world from there
 * (position offset + rank + i * world_size; past the end it wraps to the order's start, as the
 * sampler pads), batches numbered from 0, then starts at batch `batch`. ct_loader_num_batches
 * and _num_samples then count this epoch's; the next set_epoch / seek is a whole epoch again.
 * offset 0 is ct_loader_seek. CT_EINVAL for an offset outside [0, dataset length] or with
 * pad_to / sampler_drop_last, or a batch out of range. */
int ct_loader_seek_offset(ct_loader *ld, int64_t epoch, int64_t offset, int64_t batch);
/* Next batch of the current epoch: returns 1 and fills *b, 0 at the end of the epoch (call
 * ct_loader_set_epoch to go on), or a negative CT_E* (e.g. a dataset get failed). */
int ct_loader_next(ct_loader *ld, ct_batch *b);

int64_t ct_loader_num_batches(const ct_loader *ld); /* the current epoch's, on this rank */
int64_t ct_loader_num_samples(const ct_loader *ld); /* the current epoch's, on this rank */
/* Batch sample shape (after the crop) into shape[CT_DATA_MAX_DIMS]; returns ndim. */
int ct_loader_shape(const ct_loader *ld, int64_t *shape);

#ifdef __cplusplus
}
#endif
#endif
