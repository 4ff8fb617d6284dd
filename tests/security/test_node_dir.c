/* tests/security/test_node_dir.c — a node trusts no directory it did not make or check, and
 * runs no executable whose SHA-1 is not its id. A real ct-head and ct-nodes:
 * 1. --spill-dir owned by another user (uid 65534, when the test runs as root), a spill dir
 *    writable by others (0777) and a symlink to a good one: the node refuses each, says why
 *    ("refused") and exits non-zero; a missing --spill-dir is made 0700 and the node runs.
 * 2. A node whose old default directory /tmp/ct-node.<its pid> was planted before it started
 *    (another user's, 0777, with an exe/ inside) does not use it: its own directory is a fresh
 *    /tmp/ct-node.<pid>.XXXXXX, 0700, this uid's, and the executable it caches for this driver's
 *    actor lies there. After the node is killed, the purge removes its own directory and leaves
 *    the planted one (not this uid's) alone.
 * 3. The cached executable replaced by a script (the attack of a user who could write there):
 *    the next actor creation fails naming the SHA-1, the script never runs (its marker file is
 *    absent) and the bad copy is removed. The replacement comes while a spare zygote, started
 *    with the first actor's, has not yet exec'd (the node's test hook holds it back 500 ms, as
 *    a busy machine may): it must run the file that was checked, not whatever the path names
 *    by then. */
#include "sec.h"
#include "../runtime/classes.h"
#include <dirent.h>
#include <glob.h>
#include <sys/stat.h>
#include "ct/ct.h"

#define OTHER_UID 65534

/* Starts ct-node --head addr [a1 a2] with stdout and stderr on *out_fd; before exec, when
 * plant is set, makes /tmp/ct-node.<the node's pid> as another user's 0777 dir with exe/. */
static pid_t start_node(const char *addr, const char *a1, const char *a2, int plant, int *out_fd)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC))
        return -1;
    char *argv[] = {(char *)h_bin("ct-node"),
                    "--head",
                    (char *)addr,
                    "--cpus",
                    "2",
                    (char *)a1,
                    (char *)a2,
                    NULL};
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me)
            _exit(1);
        if (plant) {
            char d[64];
            snprintf(d, sizeof d, "/tmp/ct-node.%d", (int)getpid());
            mkdir(d, 0777);
            chmod(d, 0777);
            if (chown(d, OTHER_UID, OTHER_UID))
                _exit(3);
            snprintf(d + strlen(d), sizeof d - strlen(d), "/exe");
            mkdir(d, 0777);
            if (chown(d, OTHER_UID, OTHER_UID))
                _exit(3);
        }
        dup2(p[1], 1);
        dup2(p[1], 2);
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    *out_fd = p[0];
    if (pid > 0 && h_nprocs < H_MAX_PROCS)
        h_procs[h_nprocs++] = pid;
    return pid;
}

/* All of fd's output until EOF or timeout_ms, into buf. */
static void read_all(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t n = 0;
    double until = h_now_ms() + timeout_ms;
    while (n + 1 < cap) {
        struct pollfd pf = {fd, POLLIN, 0};
        int left = (int)(until - h_now_ms());
        if (left <= 0 || poll(&pf, 1, left) <= 0)
            break;
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = 0;
}

/* A node with --spill-dir dir must exit non-zero within 5 s, saying "refused". */
static void expect_refused(const char *addr, const char *dir, const char *what)
{
    int fd = -1;
    char out[8192];
    pid_t pid = start_node(addr, "--spill-dir", dir, 0, &fd);
    CHECK(pid > 0);
    if (pid <= 0)
        return;
    read_all(fd, out, sizeof out, 5000);
    close(fd);
    int st = h_reap(pid, 0, 5000);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) == 0 || !strstr(out, "refused")) {
        fprintf(stderr, "%s: node with --spill-dir %s: status 0x%x, output:\n%s\n", what, dir, st,
                out);
        h_failures++;
    }
}

/* The node pid's own directory (glob /tmp/ct-node.<pid>.*) into out; 0 when exactly one. It
 * waits up to 5 s: a node makes it after it registered (its id names the store), so a test that
 * saw the node registered may look before it exists. */
static int node_dir(pid_t pid, char *out, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "/tmp/ct-node.%d.*", (int)pid);
    int rc = -1;
    for (double until = h_now_ms() + 5000; rc && h_now_ms() < until; usleep(rc ? 20000 : 0)) {
        glob_t g;
        int grc = glob(pat, 0, NULL, &g);
        rc = grc == 0 && g.gl_pathc == 1 ? 0 : -1;
        if (!rc)
            snprintf(out, cap, "%s", g.gl_pathv[0]);
        if (grc == 0)
            globfree(&g);
    }
    return rc;
}

/* Waits up to 5 s for path to exist (a node makes its spill dir after it registered); 0 when
 * lstat found it, its result in sb. */
static int wait_path(const char *path, struct stat *sb)
{
    for (double until = h_now_ms() + 5000; h_now_ms() < until; usleep(20000))
        if (lstat(path, sb) == 0)
            return 0;
    return -1;
}

/* Waits (5 s) for node nid to be registered with the head: 0 when it is. */
static int wait_node_count(peer *p, int want)
{
    double until = h_now_ms() + 5000;
    while (h_now_ms() < until) {
        Ct__Envelope *r = status(p);
        int n = 0;
        for (size_t i = 0; r && i < r->status_reply->n_nodes; i++)
            n += r->status_reply->nodes[i]->alive;
        ct__msg_free(r);
        if (n == want)
            return 0;
        usleep(20000);
    }
    return -1;
}

int main(void)
{
#ifndef CT_FAULTS
    return 77; /* it arms test faults (common/fault.h): a build with CT_FAULTS runs it */
#endif
    register_test_classes();
    ct_serve_if_worker();
    h_init();
    bool root = geteuid() == 0;
    char addr[128], tmp[] = "/tmp/ct-sectest.XXXXXX", path[600], planted[64] = "";
    char marker[700] = "";
    pid_t head = h_start_head(addr, sizeof addr, "100", "1000");
    if (head < 0)
        return 1;
    peer obs;
    CHECK_OK(peer_open(&obs, addr, "observer", NULL));
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 1;
    }

    /* 1. spill dirs */
    if (root) {
        snprintf(path, sizeof path, "%s/other", tmp);
        CHECK_OK(mkdir(path, 0700));
        CHECK_OK(chown(path, OTHER_UID, OTHER_UID));
        expect_refused(addr, path, "another user's spill dir");
    }
    snprintf(path, sizeof path, "%s/open", tmp);
    CHECK_OK(mkdir(path, 0700));
    CHECK_OK(chmod(path, 0777));
    expect_refused(addr, path, "a world-writable spill dir");
    char good[600], link[600];
    snprintf(good, sizeof good, "%s/good", tmp);
    snprintf(link, sizeof link, "%s/link", tmp);
    CHECK_OK(mkdir(good, 0700));
    CHECK_OK(symlink(good, link));
    expect_refused(addr, link, "a symlinked spill dir");
    snprintf(path, sizeof path, "%s/made", tmp);
    int fd = -1;
    pid_t made = start_node(addr, "--spill-dir", path, 0, &fd);
    CHECK_OK(wait_node_count(&obs, 1));
    struct stat sb;
    CHECK(wait_path(path, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 0777) == 0700 &&
          sb.st_uid == geteuid());
    kill(made, SIGTERM);
    int st = h_reap(made, 0, 5000);
    CHECK_EQ_INT(st, 0);
    if (st) { /* what the node said */
        static char said[16384];
        read_all(fd, said, sizeof said, 1000);
        fprintf(stderr, "the node with --spill-dir %s exited with status %#x:\n%s\n", path, st,
                said);
    }
    close(fd);
    CHECK_OK(wait_node_count(&obs, 0));

    /* 2. a planted /tmp/ct-node.<pid> is not used */
    setenv("CT_TEST_FAULTS", "node_spare_exec_delay_ms=500", 1);
    pid_t node = start_node(addr, NULL, NULL, root, &fd);
    unsetenv("CT_TEST_FAULTS");
    CHECK_OK(wait_node_count(&obs, 1));
    if (root)
        snprintf(planted, sizeof planted, "/tmp/ct-node.%d", (int)node);
    char own[300] = "";
    CHECK_OK(node_dir(node, own, sizeof own));
    CHECK(lstat(own, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 0777) == 0700 &&
          sb.st_uid == geteuid());
    ct_init_opts io = {.address = addr};
    ct_actor *a = NULL, *b = NULL;
    CHECK_OK(ct_init(&io));
    CHECK_OK(ct_actor_create("Counter", &(ct_resources){.cpu = 1, .bundle = -1}, NULL, 0, &a));
    /* the cached executable: the SHA-1 of this test's binary, in the node's own dir */
    char self[PATH_MAX], exe[800] = "";
    ssize_t sn = readlink("/proc/self/exe", self, sizeof self - 1);
    self[sn > 0 ? sn : 0] = 0;
    glob_t g;
    char pat[400];
    snprintf(pat, sizeof pat, "%s/exe/*", own);
    int grc = glob(pat, 0, NULL, &g);
    if (grc == 0 && g.gl_pathc == 1)
        snprintf(exe, sizeof exe, "%s", g.gl_pathv[0]);
    else
        fprintf(stderr, "no single cached executable in %s/exe\n", own);
    if (grc == 0)
        globfree(&g);
    CHECK(exe[0]);
    if (root) {
        char pexe[128];
        snprintf(pexe, sizeof pexe, "%s/exe", planted);
        DIR *d = opendir(pexe);
        int n = 0;
        struct dirent *de;
        while (d && (de = readdir(d)))
            n += de->d_name[0] != '.';
        if (d)
            closedir(d);
        CHECK(d != NULL);
        CHECK_EQ_INT(n, 0); /* nothing of the node's went into the planted dir */
    }

    /* 3. the cached executable replaced by a script: refused, not run, removed */
    if (exe[0]) {
        char evil[900];
        snprintf(marker, sizeof marker, "%s/ran", tmp);
        snprintf(evil, sizeof evil, "%s.evil", exe);
        FILE *f = fopen(evil, "w");
        CHECK(f != NULL);
        if (f) {
            fprintf(f, "#!/bin/sh\ntouch %s\nsleep 30\n", marker);
            fclose(f);
        }
        CHECK_OK(chmod(evil, 0700));
        CHECK_OK(rename(evil, exe)); /* a new inode: the running zygote keeps the old one */
        usleep(800 * 1000);          /* the spare zygote execs meanwhile */
        int rc = ct_actor_create("Counter", &(ct_resources){.cpu = 1, .bundle = -1}, NULL, 0, &b);
        CHECK(rc != 0);
        if (rc && !strstr(ct_last_error(), "SHA-1")) {
            fprintf(stderr, "creation failed without naming the SHA-1: %s\n", ct_last_error());
            h_failures++;
        }
        usleep(300 * 1000);
        CHECK(access(marker, F_OK) != 0);
        CHECK(access(exe, F_OK) != 0);
    }
    ct_actor_release(&a);
    ct_actor_release(&b);
    ct_shutdown();

    /* the purge after a SIGKILL: the node's own dir goes, another user's planted one stays */
    kill(node, SIGKILL);
    h_reap(node, 0, 5000);
    close(fd);
    ct__objnode_purge_leftovers();
    CHECK(access(own, F_OK) != 0);
    if (root) {
        CHECK(lstat(planted, &sb) == 0 && sb.st_uid == OTHER_UID);
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf %s", planted);
        CHECK_OK(system(cmd));
    }
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    CHECK_OK(system(cmd));
    peer_close(&obs);
    return sec_finish("security_node_dir", head);
}
