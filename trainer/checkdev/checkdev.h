/* trainer/checkdev/checkdev.h — what the checking device (checkdev.c, table ct__backend_checkdev
 * in trainer/backend/backend.h) offers beyond its table: the stream a host thread queues on.
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

#endif
