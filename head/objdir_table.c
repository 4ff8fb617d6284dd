/* head/objdir_table.c — the object directory's tables (objdir_internal.h): objects found by id
 * (head/index.h), their holders, each node's list of the objects it holds (dnode.held; each
 * holder entry knows its place there, dobj.hpos, so a node's death walks only what it held),
 * the count of objects that want several copies (a death checks those), and the owners loaded
 * from the state file across a head restart. Not in here: the messages, pulls and waits
 * (objdir.c). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "head/head_internal.h"
#include "head/objdir_internal.h"

int ct__od_find_node(objdir *D, const char *id)
{
    int i = id ? ct__index_get(D->nix, id, strlen(id)) : -1;
    return i >= 0 && !strcmp(D->n[i].id, id) ? i : -1;
}

int ct__od_find_obj(objdir *D, const uint8_t *id)
{
    int i = ct__index_get(D->oix, id, IDLEN);
    return i >= 0 && !memcmp(D->o[i].id, id, IDLEN) ? i : -1;
}

bool ct__od_holds(const dobj *o, int ni)
{
    for (int i = 0; i < o->nh; i++)
        if (o->h[i] == ni)
            return true;
    return false;
}

/* Object oi into node ni's held list; its place there, or -1 (out of memory). */
static int held_add(objdir *D, int ni, int oi)
{
    dnode *n = &D->n[ni];
    if (n->nheld == n->capheld) {
        int cap = n->capheld ? 2 * n->capheld : 8;
        int *nh = realloc(n->held, cap * sizeof *nh);
        if (!nh)
            return -1;
        n->held = nh;
        n->capheld = cap;
    }
    n->held[n->nheld] = oi;
    return n->nheld++;
}

/* Takes place p out of node ni's held list: its last entry moves there, and that object's
 * holder entry for ni follows (a node holds an object once). */
static void held_del(objdir *D, int ni, int p)
{
    dnode *n = &D->n[ni];
    int last = --n->nheld;
    if (p == last)
        return;
    int oj = n->held[last];
    n->held[p] = oj;
    dobj *o = &D->o[oj];
    for (int q = 0; q < o->nh; q++)
        if (o->h[q] == ni)
            o->hpos[q] = p;
}

/* Object oi's copies wanted (its owner's ObjPutDone.replicas), D->nwant kept. */
void ct__od_set_want(objdir *D, int oi, int want)
{
    D->nwant += (want > 1) - (D->o[oi].want > 1);
    D->o[oi].want = want;
}

/* Node ni holds one object of size bytes fewer. */
static void held_less(objdir *D, int ni, uint64_t size)
{
    if (ni < 0 || ni >= D->nn)
        return;
    D->n[ni].nobj--;
    D->n[ni].bytes -= size;
}

/* Forgets object oi (freed, or no holder left); an owned one leaves the state file too. */
void ct__od_drop_obj(head *h, int oi)
{
    objdir *D = h->od;
    if (D->o[oi].job[0])
        ct__head_state_obj_gone(h, D->o[oi].id, IDLEN);
    for (int i = 0; i < D->o[oi].nh; i++) { /* freed while held: its holders' counts, lists */
        held_less(D, D->o[oi].h[i], D->o[oi].size);
        held_del(D, D->o[oi].h[i], D->o[oi].hpos[i]);
    }
    ct__od_set_want(D, oi, 0);
    free(D->o[oi].h);
    free(D->o[oi].hpos);
    ct__index_del(D->oix, D->o[oi].id, IDLEN);
    D->o[oi] = D->o[--D->no];
    if (oi < D->no) { /* the last one moved into oi: its index entry (no allocation) and its
                         holders' held entries follow */
        ct__index_put(&D->oix, D->o[oi].id, IDLEN, oi);
        for (int i = 0; i < D->o[oi].nh; i++)
            D->n[D->o[oi].h[i]].held[D->o[oi].hpos[i]] = oi;
    }
}

/* 0, CT_ENOSPC (max_objects listed) or CT_ENOMEM. */
int ct__od_add_holder(objdir *D, const uint8_t *id, uint64_t size, int ni)
{
    int oi = ct__od_find_obj(D, id);
    if (oi < 0) {
        if (D->no == D->max_objects)
            return CT_ENOSPC;
        if (D->no == D->capo) {
            int cap = D->capo ? 2 * D->capo : 64;
            dobj *no = realloc(D->o, cap * sizeof *no);
            if (!no)
                return CT_ENOMEM;
            D->o = no;
            D->capo = cap;
        }
        if (ct__index_put(&D->oix, id, IDLEN, D->no))
            return CT_ENOMEM;
        oi = D->no++;
        memset(&D->o[oi], 0, sizeof D->o[oi]);
        memcpy(D->o[oi].id, id, IDLEN);
        D->o[oi].size = size;
        for (int i = 0; i < D->nlo; i++) /* a restarted head: its owner from the state file */
            if (!memcmp(D->lo[i].id, id, IDLEN)) {
                ct__od_set_want(D, oi, D->lo[i].want);
                memcpy(D->o[oi].job, D->lo[i].job, sizeof D->o[oi].job);
                D->lo[i] = D->lo[--D->nlo];
                break;
            }
    }
    dobj *o = &D->o[oi];
    if (ct__od_holds(o, ni))
        return 0;
    if (o->nh == o->caph) {
        int cap = o->caph ? 2 * o->caph : 4;
        int *nh = realloc(o->h, cap * sizeof *nh);
        if (nh)
            o->h = nh;
        int *np = nh ? realloc(o->hpos, cap * sizeof *np) : NULL;
        if (!np)
            return CT_ENOMEM;
        o->hpos = np;
        o->caph = cap;
    }
    int p = held_add(D, ni, oi);
    if (p < 0)
        return CT_ENOMEM;
    o->h[o->nh] = ni;
    o->hpos[o->nh++] = p;
    D->n[ni].nobj++;
    D->n[ni].bytes += o->size;
    return 0;
}

void ct__od_remove_holder(head *h, int oi, int ni)
{
    dobj *o = &h->od->o[oi];
    for (int i = 0; i < o->nh; i++)
        if (o->h[i] == ni) {
            held_less(h->od, ni, o->size);
            held_del(h->od, ni, o->hpos[i]);
            o->nh--;
            o->h[i] = o->h[o->nh];
            o->hpos[i--] = o->hpos[o->nh];
        }
    if (!o->nh)
        ct__od_drop_obj(h, oi);
}

/* ---- owners across a head restart (state.c) ---- */

void ct__objdir_owner_loaded(head *h, const uint8_t *id, size_t len, const char *job, int want)
{
    objdir *D = h->od;
    if (len != IDLEN)
        return;
    int i = 0;
    while (i < D->nlo && memcmp(D->lo[i].id, id, IDLEN))
        i++;
    if (i == D->nlo) {
        if (D->nlo == D->max_objects)
            return;
        if (D->nlo == D->caplo) {
            int cap = D->caplo ? 2 * D->caplo : 64;
            downer *nl = realloc(D->lo, cap * sizeof *nl);
            if (!nl)
                return;
            D->lo = nl;
            D->caplo = cap;
        }
        D->nlo++;
    }
    memcpy(D->lo[i].id, id, IDLEN);
    D->lo[i].want = want;
    snprintf(D->lo[i].job, sizeof D->lo[i].job, "%s", job);
}

void ct__objdir_owner_forget(head *h, const uint8_t *id, size_t len)
{
    objdir *D = h->od;
    for (int i = 0; len == IDLEN && i < D->nlo; i++)
        if (!memcmp(D->lo[i].id, id, IDLEN)) {
            D->lo[i] = D->lo[--D->nlo];
            return;
        }
}

int ct__objdir_each_owner(head *h, int (*fn)(void *, const uint8_t *, size_t, const char *, int),
                          void *ctx)
{
    objdir *D = h->od;
    int rc = 0;
    for (int i = 0; i < D->no && !rc; i++)
        if (D->o[i].job[0])
            rc = fn(ctx, D->o[i].id, IDLEN, D->o[i].job, D->o[i].want);
    for (int i = 0; i < D->nlo && !rc; i++)
        rc = fn(ctx, D->lo[i].id, IDLEN, D->lo[i].job, D->lo[i].want);
    return rc;
}

void ct__objdir_owners_give_up(head *h)
{
    objdir *D = h->od;
    if (D->nlo)
        CT_LOG(CT_LOG_INFO, "objdir",
               "%d objects of the state file came back on no node: forgotten", D->nlo);
    for (int i = 0; i < D->nlo; i++)
        ct__head_state_obj_gone(h, D->lo[i].id, IDLEN);
    D->nlo = 0;
}

objdir *ct__objdir_new(int max_objects)
{
    objdir *D = calloc(1, sizeof(objdir));
    if (D)
        D->max_objects = max_objects;
    return D;
}

void ct__objdir_free(objdir **pd)
{
    objdir *D = pd ? *pd : NULL;
    if (!D)
        return;
    for (int i = 0; i < D->no; i++) {
        free(D->o[i].h);
        free(D->o[i].hpos);
    }
    for (int i = 0; i < D->nn; i++)
        free(D->n[i].held);
    free(D->n);
    free(D->o);
    free(D->p);
    free(D->w);
    free(D->lo);
    free(D->pk);
    ct__index_free(&D->nix);
    ct__index_free(&D->oix);
    free(D);
    *pd = NULL;
}
