/* cluster/state.c — the state file of a started cluster: which config, which provider, the
 * head's address, and every process ctup started (role, host, pid, start time). One text file
 * per cluster name under $CT_STATE_DIR or ~/.ct/clusters, written atomically (temp + rename),
 * e.g.
 *
 *   # ctup state (do not edit)
 *   cluster_name demo
 *   config /home/u/demo.yaml
 *   provider local
 *   address 127.0.0.1:40211
 *   proc head 127.0.0.1 4242 123456
 *   proc node-1 127.0.0.1 4250 123460
 *
 * A slurm cluster has no proc lines but `job 1234` and, once it runs, `job_host node17` (the
 * node of its head).
 * Not in here: starting or stopping anything (provider*.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cluster/cluster.h"
#include "common/common.h"
#include "common/env.h"

int ct__cluster_mkdir_p(const char *path)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
        return ct__error(CT_ERANGE, "%s: path too long", path);
    for (char *c = tmp + 1;; c++) {
        if (*c == '/' || !*c) {
            char save = *c;
            *c = 0;
            if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
                return ct__error(-errno, "cannot create %s: %s", tmp, strerror(errno));
            if (!(*c = save))
                break;
        }
    }
    return 0;
}

int ct_cluster_state_dir(char *out, size_t cap)
{
    const char *d = ct__env(CT__ENV_STATE_DIR);
    int n;
    if (d && *d) {
        n = snprintf(out, cap, "%s", d);
    } else {
        const char *home = ct__env(CT__ENV_HOME);
        if (!home || !*home)
            return ct__error(CT_EINVAL, "neither CT_STATE_DIR nor HOME is set: no place for the "
                                        "cluster state");
        n = snprintf(out, cap, "%s/.ct/clusters", home);
    }
    if (n < 0 || (size_t)n >= cap)
        return ct__error(CT_ERANGE, "state directory path too long");
    return ct__cluster_mkdir_p(out);
}

/* <state dir>/<cluster_name>.<ext> */
static int state_file(const char *cluster_name, const char *ext, char *out, size_t cap)
{
    char dir[3800];
    int rc = ct_cluster_state_dir(dir, sizeof dir);
    if (rc)
        return rc;
    int n = snprintf(out, cap, "%s/%s.%s", dir, cluster_name, ext);
    return n < 0 || (size_t)n >= cap ? ct__error(CT_ERANGE, "%s file path too long", ext) : 0;
}

int ct_cluster_state_path(const char *cluster_name, char *out, size_t cap)
{
    return state_file(cluster_name, "state", out, cap);
}

int ct_cluster_secret_path(const char *cluster_name, char *out, size_t cap)
{
    return state_file(cluster_name, "secret", out, cap);
}

int ct_cluster_log_dir(const char *cluster_name, char *out, size_t cap)
{
    char dir[3800];
    int rc = ct_cluster_state_dir(dir, sizeof dir);
    if (rc)
        return rc;
    int n = snprintf(out, cap, "%s/%s", dir, cluster_name);
    if (n < 0 || (size_t)n >= cap)
        return ct__error(CT_ERANGE, "log directory path too long");
    return ct__cluster_mkdir_p(out);
}

int ct_cluster_state_read(const char *cluster_name, ct_cluster_state *st)
{
    char path[4096], line[5000];
    int rc = ct_cluster_state_path(cluster_name, path, sizeof path);
    if (rc)
        return rc;
    memset(st, 0, sizeof *st);
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT)
            return ct__error(CT_ENOENT, "%s: no state (cluster '%s' is not up)", path,
                             cluster_name);
        return ct__error(-errno, "%s: %s", path, strerror(errno));
    }
    int ln = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        line[strcspn(line, "\n")] = 0;
        char *sp = strchr(line, ' ');
        if (line[0] == '#' || !line[0])
            continue;
        if (!sp)
            goto bad;
        *sp = 0;
        const char *v = sp + 1;
        if (!strcmp(line, "cluster_name"))
            snprintf(st->cluster_name, sizeof st->cluster_name, "%s", v);
        else if (!strcmp(line, "config"))
            snprintf(st->config_path, sizeof st->config_path, "%s", v);
        else if (!strcmp(line, "provider"))
            snprintf(st->provider, sizeof st->provider, "%s", v);
        else if (!strcmp(line, "address"))
            snprintf(st->address, sizeof st->address, "%s", v);
        else if (!strcmp(line, "job"))
            snprintf(st->job, sizeof st->job, "%s", v);
        else if (!strcmp(line, "job_host"))
            snprintf(st->job_host, sizeof st->job_host, "%s", v);
        else if (!strcmp(line, "proc")) {
            if (st->n_procs == CT_CLUSTER_MAX_PROCS)
                goto bad;
            ct_cluster_proc *p = &st->procs[st->n_procs];
            int pid;
            if (sscanf(v, "%31s %255s %d %llu", p->role, p->host, &pid, &p->start_time) != 4 ||
                pid <= 0)
                goto bad;
            p->pid = pid;
            st->n_procs++;
        } else
            goto bad;
    }
    fclose(f);
    return 0;
bad:
    fclose(f);
    return ct__error(CT_EINVAL,
                     "%s:%d: not a ctup state line (remove the file if no process of "
                     "the cluster runs)",
                     path, ln);
}

int ct_cluster_state_write(const ct_cluster_state *st)
{
    char path[4096], tmp[4200];
    int rc = ct_cluster_state_path(st->cluster_name, path, sizeof path);
    if (rc)
        return rc;
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return ct__error(-errno, "%s: %s", tmp, strerror(errno));
    fprintf(f, "# ctup state (do not edit)\ncluster_name %s\nconfig %s\nprovider %s\n",
            st->cluster_name, st->config_path, st->provider);
    if (st->address[0])
        fprintf(f, "address %s\n", st->address);
    if (st->job[0])
        fprintf(f, "job %s\n", st->job);
    if (st->job_host[0])
        fprintf(f, "job_host %s\n", st->job_host);
    for (int i = 0; i < st->n_procs; i++)
        fprintf(f, "proc %s %s %d %llu\n", st->procs[i].role, st->procs[i].host,
                (int)st->procs[i].pid, st->procs[i].start_time);
    if (fflush(f) || fsync(fileno(f))) {
        rc = ct__error(-errno, "%s: %s", tmp, strerror(errno));
        fclose(f);
        unlink(tmp);
        return rc;
    }
    fclose(f);
    if (rename(tmp, path)) {
        rc = ct__error(-errno, "rename %s: %s", path, strerror(errno));
        unlink(tmp);
    }
    return rc;
}

int ct_cluster_state_remove(const char *cluster_name)
{
    char path[4096];
    int rc = ct_cluster_state_path(cluster_name, path, sizeof path);
    if (rc)
        return rc;
    if (unlink(path) && errno != ENOENT)
        return ct__error(-errno, "cannot remove %s: %s", path, strerror(errno));
    return 0;
}

int ct_cluster_lock(const char *cluster_name, int *fd)
{
    char path[4096];
    *fd = -1;
    int rc = state_file(cluster_name, "lock", path, sizeof path);
    if (rc)
        return rc;
    /* the holder removes the file as it lets go (ct_cluster_unlock): a lock taken on a file
     * that is no longer the one at path is no lock, so take the one there now */
    for (int tries = 0; tries < 100; tries++) {
        int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (f < 0)
            return ct__error(-errno, "%s: %s", path, strerror(errno));
        if (flock(f, LOCK_EX | LOCK_NB) != 0) {
            rc = errno == EWOULDBLOCK
                     ? ct__error(CT_EBUSY, "another ctup is starting or stopping cluster '%s' (%s)",
                                 cluster_name, path)
                     : ct__error(-errno, "flock %s: %s", path, strerror(errno));
            close(f);
            return rc;
        }
        struct stat held, now;
        if (fstat(f, &held) == 0 && stat(path, &now) == 0 && held.st_dev == now.st_dev &&
            held.st_ino == now.st_ino) {
            *fd = f;
            return 0;
        }
        close(f);
    }
    return ct__error(CT_EBUSY, "cannot lock %s: it keeps being replaced", path);
}

void ct_cluster_unlock(const char *cluster_name, int *fd)
{
    char path[4096];
    if (*fd < 0)
        return;
    /* removed while still held, so that no other ctup can lock it between (see above) */
    if (!state_file(cluster_name, "lock", path, sizeof path))
        unlink(path);
    close(*fd);
    *fd = -1;
}
