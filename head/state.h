/* head/state.h — the write-ahead file's records, shared by the file that appends them (state.c)
 * and the one that reads them back at start and writes the state compact (restore.c). A record
 * is a header line "<tag> <nfields> <len> ...\n" and then the fields' bytes (state.c's header
 * lists the tags). */
#ifndef CT_HEAD_STATE_H
#define CT_HEAD_STATE_H

#include <stddef.h>
#include <string.h>
#include "head/head_internal.h"

#define MAX_FIELDS (4 + 2 * MAX_BUNDLES * (2 + 2 * MAX_RES)) /* in one record (a group's) */

/* One field of a record: n bytes at p (any bytes). */
typedef struct wal_field {
    const char *p;
    size_t n;
} wal_field;

static inline wal_field wal_s(const char *s)
{
    return (wal_field){s, strlen(s)};
}

/* Appends one record (tag, nf fields) to fd: one write. 0 or CT_EIO. */
int ct__head_state_put_rec(int fd, char tag, int nf, const wal_field *f);
/* The P record of g into fd (bundles: the node's id where reserved, or the node it waits for). */
int ct__head_state_put_pg(head *h, int fd, const pgroup *g);

#endif
