/* head/resources.c — the head's resource vectors (name -> amount: a node's total and free, an
 * actor's or a bundle's need): checked when a peer sends one, compared, added, printed, and
 * turned back into protobuf. Not in here: who gets what (actors.c schedules). */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "head/head_internal.h"
#include "proto/msg.h"

/* Checks a resource list from a peer, named list in messages: at most MAX_RES entries, names
 * of 1..31 bytes, each once, amounts finite and in [0, MAX_AMOUNT] (NaN passes every `< 0`
 * test and stays in the tables for good; a negative amount adds free capacity). Returns 0, or
 * CT_EINVAL with the offending field in field[] and why in msg[]. */
int ct__rv_check(Ct__Resource **r, size_t n, const char *list, char *field, size_t fcap, char *msg,
                 size_t mcap)
{
    if (n > MAX_RES) {
        snprintf(field, fcap, "%s", list);
        snprintf(msg, mcap, "%s: %zu entries, at most %d", list, n, MAX_RES);
        return CT_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        const char *name = r[i]->name ? r[i]->name : "";
        double v = r[i]->amount;
        size_t len = strlen(name);
        if (!len || len >= sizeof((res *)0)->name[0]) {
            snprintf(field, fcap, "%s[%zu].name", list, i);
            snprintf(msg, mcap, "%s: empty or longer than %zu bytes", field,
                     sizeof((res *)0)->name[0] - 1);
            return CT_EINVAL;
        }
        for (size_t j = 0; j < i; j++)
            if (!strcmp(name, r[j]->name)) {
                snprintf(field, fcap, "%s[%zu].name", list, i);
                snprintf(msg, mcap, "%s: %s is listed twice", field, name);
                return CT_EINVAL;
            }
        if (!isfinite(v) || v < 0 || v > MAX_AMOUNT) {
            snprintf(field, fcap, "%s[%zu].amount", list, i);
            snprintf(msg, mcap, "%s (%s): %g is not a finite number in [0, %g]", field, name, v,
                     MAX_AMOUNT);
            return CT_EINVAL;
        }
    }
    return 0;
}

/* r must have passed res_check. */
void ct__rv_from_pb(res *r, Ct__Resource **pb, size_t n)
{
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < n && r->n < MAX_RES; i++) {
        if (!pb[i]->name || !*pb[i]->name || pb[i]->amount == 0)
            continue;
        snprintf(r->name[r->n], sizeof r->name[0], "%s", pb[i]->name);
        r->amt[r->n++] = pb[i]->amount;
    }
}

double ct__rv_get(const res *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->name[i], name))
            return r->amt[i];
    return 0;
}

bool ct__rv_fits(const res *have, const res *need)
{
    for (int i = 0; i < need->n; i++)
        if (ct__rv_get(have, need->name[i]) + 1e-9 < need->amt[i])
            return false;
    return true;
}

/* have -= need (sign 1) or have += need (sign -1); names absent from have are ignored. */
void ct__rv_sub(res *have, const res *need, double sign)
{
    for (int i = 0; i < need->n; i++)
        for (int j = 0; j < have->n; j++)
            if (!strcmp(have->name[j], need->name[i]))
                have->amt[j] -= sign * need->amt[i];
}

double ct__rv_sum(const res *r)
{
    double s = 0;
    for (int i = 0; i < r->n; i++)
        s += r->amt[i];
    return s;
}

void ct__rv_fmt(const res *r, char *buf, size_t cap)
{
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < r->n && off < cap; i++)
        off += snprintf(buf + off, cap - off, "%s%s=%g", i ? "," : "", r->name[i], r->amt[i]);
    if (!r->n)
        snprintf(buf, cap, "(none)");
}

void ct__rv_to_pb(res *r, res_pb *o)
{
    for (int i = 0; i < r->n; i++) {
        ct__resource__init(&o->r[i]);
        o->r[i].name = r->name[i];
        o->r[i].amount = r->amt[i];
        o->p[i] = &o->r[i];
    }
}
