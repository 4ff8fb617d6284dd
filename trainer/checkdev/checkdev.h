/* trainer/checkdev/checkdev.h — what the checking device (checkdev.c, table ct__backend_checkdev
 * in trainer/backend/table.h) offers beyond its table: the stream a host thread queues on.
 *
 * The table's kernel entries and copy take no stream; on checkdev they go to the calling
 * thread's current stream, which is the compute stream unless the thread set another (as a
 * bucketer thread queues on its own stream, torch.cuda.stream() style). upload, free and
 * download always use the compute stream, as the table's contract says. */
#ifndef CT_CHECKDEV_H
#define CT_CHECKDEV_H

/* Makes the calling thread's later kernel entries and copies queue on stream (from the table's
 * stream_new; NULL: the compute stream). Returns the stream they went to before. */
void *ct__checkdev_set_stream(void *stream);

/* The table of checkdev:index (0 .. CT_MAX_DEVICE_INDEX - 1; index 0: ct__backend_checkdev),
 * NULL for another index. Each index is a memory space of its own (its pointers carry it) with
 * its own compute stream: a kernel given memory of another index is refused, and a peer_copy
 * that reads another index's memory before an event wait ordered it after the writes fails. */
struct ct__backend;
const struct ct__backend *ct__checkdev_table(int index);

#endif
