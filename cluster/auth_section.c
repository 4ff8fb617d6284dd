/* cluster/auth_section.c — the cluster file's `auth:` section (ssh_user, ssh_private_key,
 * ssh_known_hosts, ssh_port) into a ct__ssh_conf: the ssh provider needs it, the local provider
 * checks it (and keeps nothing), so it is neither's own. Errors name the key with its
 * file:line:col (ct__cfg_err). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "provider.h"

int ct__ssh_auth_parse(ct__cfg_parser *p, yaml_node_t *root, const char *type, bool required,
                       ct__ssh_conf *a)
{
    static const char *const auth_keys[] = {"ssh_user", "ssh_private_key", "ssh_known_hosts",
                                            "ssh_port", NULL};
    yaml_node_t *s = ct__cfg_get(p, root, "auth", NULL), *v;
    int rc = 0;
    a->port = 22;
    if (!s)
        return required
                   ? ct__cfg_err(p, root,
                                 "missing required key 'auth' (type %s needs auth.ssh_user)", type)
                   : 0;
    if ((rc = ct__cfg_keys(p, s, "auth", auth_keys)))
        return rc;
    if ((v = ct__cfg_get(p, s, "ssh_user", NULL)) &&
        (rc = ct__cfg_user(p, v, "auth.ssh_user", &a->user)))
        return rc;
    if ((v = ct__cfg_get(p, s, "ssh_private_key", NULL)) &&
        (rc = ct__cfg_path(p, v, "auth.ssh_private_key", true, &a->key)))
        return rc;
    if ((v = ct__cfg_get(p, s, "ssh_known_hosts", NULL)) &&
        (rc = ct__cfg_path(p, v, "auth.ssh_known_hosts", true, &a->known_hosts)))
        return rc;
    if ((v = ct__cfg_get(p, s, "ssh_port", NULL)) &&
        (rc = ct__cfg_int(p, v, "auth.ssh_port", 1, 65535, &a->port)))
        return rc;
    if (required && !a->user)
        return ct__cfg_err(p, s, "auth: missing required key 'ssh_user' (type %s)", type);
    return 0;
}

void ct__ssh_conf_free(ct__ssh_conf *a)
{
    if (!a)
        return;
    free(a->user);
    free(a->key);
    free(a->known_hosts);
    memset(a, 0, sizeof *a);
}
