/* trainer/metrics/tfevents.h — a TensorBoard event-file writer, scalars only: TFRecord framing
 * (TensorFlow's io/record_writer) of Event protobufs (proto/tb_event.proto, TensorFlow's field
 * numbers). The trainer's run log (trainer/train/progress.c) writes one per log directory.
 *
 * A record is: uint64 length, uint32 masked CRC-32C of those 8 bytes, the data, uint32 masked
 * CRC-32C of the data, all little-endian; the mask is TensorFlow's
 * ((crc >> 15) | (crc << 17)) + 0xa282ead8. The file's first event has file_version
 * "brain.Event:2"; then each event carries a Summary of (tag, simple_value) pairs at a step.
 *
 * Internal to ct, not a public header. A writer is used by one thread at a time. */
#ifndef CT_TRAINER_METRICS_TFEVENTS_H
#define CT_TRAINER_METRICS_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#define CT_TFEVENTS_OVERHEAD 16 /* framing bytes around each record's data */

typedef struct ct_tfevents ct_tfevents;

/* TensorFlow's masked CRC-32C of len bytes of buf. */
uint32_t ct__tfevents_masked_crc(const void *buf, size_t len);

/* Writes data (len bytes) framed as one record into out (len + CT_TFEVENTS_OVERHEAD bytes). */
void ct__tfevents_frame(const void *data, size_t len, uint8_t *out);

/* Opens (appending) dir/events.out.tfevents.<secs>.<host> for wall_time (seconds since the
 * epoch; its integer part is <secs>) and writes the file_version event. dir must exist.
 * *out is owned by the caller (ct__tfevents_close). CT_EIO naming the path on failure. */
int ct__tfevents_open(const char *dir, double wall_time, ct_tfevents **out);

/* The file's path. Borrowed while w lives. */
const char *ct__tfevents_path(const ct_tfevents *w);

/* One event at step with n scalars (tags[i] = values[i]; values are stored as float, which is
 * what TensorBoard's simple_value holds). CT_EINVAL for a NULL or empty tag, CT_EIO. */
int ct__tfevents_scalars(ct_tfevents *w, double wall_time, int64_t step, const char *const *tags,
                         const double *values, int n);

/* Pushes buffered events to the file (TensorBoard sees them then). CT_EIO. */
int ct__tfevents_flush(ct_tfevents *w);

/* Flushes and closes; accepts NULL, nulls *w. */
void ct__tfevents_close(ct_tfevents **w);

#endif
