/* trainer/collective/rendezvous_kv.c — the cluster rendezvous: ranks meet through the head's
 * KV (ct_kv_put / ct_kv_get of include/ct/ct.h), so replicas on any node find each other with
 * no shared file system. Keys are namespaced under a prefix. Needs ct_init() in the process
 * (driver or actor). Not a store of its own: every call goes to the head. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/collective.h"
#include "ct/ct.h"

struct kv_rdv {
    ct_rendezvous r; /* first: the public struct handed out */
    char prefix[128];
};

static int kv_key(const struct kv_rdv *k, const char *key, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s%s", k->prefix, key);
    if (n < 0 || (size_t)n >= cap)
        return ct__error(CT_EINVAL, "rendezvous: key '%s%s' too long", k->prefix, key);
    return 0;
}

static int kv_put(void *ctx, const char *key, const void *value, size_t len)
{
    char full[512];
    int rc = kv_key(ctx, key, full, sizeof full);
    return rc < 0 ? rc : ct_kv_put(full, value, len);
}

static int kv_get(void *ctx, const char *key, void **value, size_t *len, int timeout_ms)
{
    char full[512];
    int rc = kv_key(ctx, key, full, sizeof full);
    return rc < 0 ? rc : ct_kv_get(full, value, len, timeout_ms);
}

ct_rendezvous *ct_rendezvous_kv_new(const char *prefix)
{
    struct kv_rdv *k = calloc(1, sizeof *k);
    if (!k) {
        ct__error(CT_ENOMEM, "rendezvous: out of memory");
        return NULL;
    }
    if (prefix && strlen(prefix) >= sizeof k->prefix) {
        free(k);
        ct__error(CT_EINVAL, "rendezvous: prefix longer than %zu bytes", sizeof k->prefix - 1);
        return NULL;
    }
    snprintf(k->prefix, sizeof k->prefix, "%s", prefix ? prefix : "");
    k->r.put = kv_put;
    k->r.get = kv_get;
    k->r.ctx = k;
    return &k->r;
}

void ct_rendezvous_kv_destroy(ct_rendezvous **rdv)
{
    if (!rdv || !*rdv)
        return;
    free((*rdv)->ctx);
    *rdv = NULL;
}
