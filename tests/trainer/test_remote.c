/* tests/trainer/test_remote.c — a driver on a host with no ct-node (a "remote driver", as a Ray
 * Client): a real ct-head and two real ct-nodes, and the driver in a child process with a mount
 * namespace of its own and a private tmpfs on /dev/shm, so it cannot map any node's shard and
 * its host id (actor/objnode.c ct__host_id) differs from the nodes'. No CT_REMOTE_DRIVER: the
 * driver must find out by itself. Checks:
 *   - with the head up and no node at all, ct_put fails with CT_ENOENT naming what is missing;
 *   - a 64 MiB ct_put / ct_get round trip gives identical bytes (uploaded to a node's data port,
 *     fetched back from it), the next put goes to the node with more room, replicas = 2 gives
 *     two holders, and an upload whose chunk arrives with a bad checksum is sent again
 *     (the test fault xfer_corrupt_put);
 *   - an actor of the driver's program starts on a node from the node's cached copy of the
 *     executable the driver shipped through the data port;
 *   - the trainer trains 1 epoch with 2 replicas (the Fashion-MNIST object the driver puts, the
 *     checkpoint it pulls), and trainer_save writes a checkpoint that, restored into a second
 *     trainer, gives tensors equal to the driver's model;
 *   - a driver on the nodes' host (no namespace) maps a node's shard, and is remote with
 *     CT_REMOTE_DRIVER=1; both round-trip 1 MiB.
 * With ip(8) the driver also runs in a network namespace of its own, reaching the head and
 * nodes (bound to 10.77.0.1 in the test's own namespace) over a veth pair, as another host
 * would; without it, in the test's namespace (noted on stderr).
 * Needs root (unshare, mount): exits 77 saying why otherwise. Every process started is killed
 * and reaped by pid (harness.h), also on failure. */
#include "tt.h"
#include "tests/runtime/classes.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#define DATA_CFG "limit=2048,val_limit=512,lr=2e-3"

/* This process gets a /dev/shm of its own: no node's shard is reachable from it. 0 or -errno. */
static int private_shm(void)
{
    if (unshare(CLONE_NEWNS))
        return -errno;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
        return -errno;
    if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=256m"))
        return -errno;
    return 0;
}

static trainer *make(void)
{
    trainer *t = NULL;
    if (trainer_create(&(trainer_opts){.model = "mlp",
                                       .data = "fashion_mnist",
                                       .optimizer = "adam",
                                       .config = DATA_CFG,
                                       .num_replicas = 2,
                                       .batch_size = 64,
                                       .epochs = 1,
                                       .seed = 3},
                       &t))
        fprintf(stderr, "trainer_create: %s\n", ct_last_error());
    return t;
}

static void compare_modules(ct_module *a, ct_module *b)
{
    const ct_named_tensor *sa, *sb;
    int na = 0, nb = 0;
    CHECK_OK(ct_module_state_dict(a, &sa, &na));
    CHECK_OK(ct_module_state_dict(b, &sb, &nb));
    CHECK_EQ_INT(na, nb);
    CHECK(na == 4);
    for (int i = 0; i < na && i < nb; i++) {
        CHECK_STR(sa[i].name, sb[i].name);
        size_t bytes =
            (size_t)ct_tensor_numel(sa[i].tensor) * ct_dtype_size(ct_tensor_dtype(sa[i].tensor));
        if (memcmp(ct_tensor_data(sa[i].tensor), ct_tensor_data(sb[i].tensor), bytes)) {
            fprintf(stderr, "checkpoint tensor %s differs from the driver's model\n", sa[i].name);
            h_failures++;
        }
    }
}

/* The driver with no node anywhere: the error must say what is missing. */
static int driver_no_node(void)
{
    CHECK_OK(ct_init(NULL));
    ct_object_id id;
    int rc = ct_put("x", 1, NULL, &id);
    CHECK_EQ_INT(rc, CT_ENOENT);
    CHECK(strstr(ct_last_error(), "lists no ct-node with an object store") != NULL);
    fprintf(stderr, "no node: %s\n", ct_last_error());
    ct_shutdown();
    return h_failures ? 1 : 0;
}

static void objects(void)
{
    size_t len = 64u << 20;
    unsigned char *buf = malloc(len);
    CHECK(buf);
    if (!buf)
        return;
    uint64_t s = 12345;
    for (size_t i = 0; i < len; i += 8) {
        uint64_t r = tt_rng(&s);
        memcpy(buf + i, &r, 8);
    }
    ct_object_id id;
    CHECK_OK(ct_put(buf, len, NULL, &id));
    CHECK_STR(ct_object_node(), ""); /* no shard of its own */
    ct_object_view v = {0};
    CHECK_OK(ct_get(&id, 10000, &v));
    CHECK_EQ_INT(v.size, len);
    CHECK(v.data && v.size == len && memcmp(v.data, buf, len) == 0);
    ct_object_release(&v);
    char nodes[8][32];
    int n = 0;
    CHECK_OK(ct_object_nodes(&id, nodes, 8, &n, NULL));
    CHECK_EQ_INT(n, 1);
    /* the next put goes to the node with more room: the other one (both shards 256 MiB) */
    ct_object_id small;
    char snodes[8][32];
    int sn = 0;
    CHECK_OK(ct_put(buf, 4096, NULL, &small));
    CHECK_OK(ct_object_nodes(&small, snodes, 8, &sn, NULL));
    CHECK(n == 1 && sn == 1 && strcmp(nodes[0], snodes[0]) != 0);
    CHECK_OK(ct_free(&small));
    CHECK_OK(ct_free(&id));

    /* two copies; one chunk's checksum sent wrong: the node refuses it, the driver sends again */
    setenv("CT_TEST_FAULTS", "xfer_corrupt_put=3", 1);
    CHECK_OK(ct_put(buf, 16u << 20, &(ct_put_opts){.replicas = 2}, &id));
    unsetenv("CT_TEST_FAULTS");
    CHECK_OK(ct_object_nodes(&id, nodes, 8, &n, NULL));
    CHECK_EQ_INT(n, 2);
    CHECK_OK(ct_get(&id, 10000, &v));
    CHECK(v.data && v.size == (16u << 20) && memcmp(v.data, buf, 16u << 20) == 0);
    ct_object_release(&v);
    CHECK_OK(ct_free(&id));

    /* zero-copy create + seal, then get */
    void *dst = NULL;
    CHECK_OK(ct_object_create(1000, &id, &dst));
    if (dst) {
        memcpy(dst, buf, 1000);
        CHECK_OK(ct_object_seal(&id, NULL));
        CHECK_OK(ct_get(&id, 10000, &v));
        CHECK(v.data && v.size == 1000 && memcmp(v.data, buf, 1000) == 0);
        ct_object_release(&v);
        CHECK_OK(ct_free(&id));
    }
    /* an empty object */
    CHECK_OK(ct_put(NULL, 0, NULL, &id));
    CHECK_OK(ct_get(&id, 10000, &v));
    CHECK_EQ_INT(v.size, 0);
    ct_object_release(&v);
    CHECK_OK(ct_free(&id));
    /* an unknown id: CT_ENOENT at once */
    memset(&id, 0x5a, sizeof id);
    CHECK_EQ_INT(ct_get(&id, 0, &v), CT_ENOENT);
    free(buf);
}

static void actors(void)
{
    ct_actor *a = NULL;
    ct_resources r = {.cpu = 1, .bundle = -1, .timeout_ms = 20000};
    CHECK_OK(ct_actor_create("Counter", &r, NULL, 0, &a));
    if (!a)
        return;
    long d = 41, *res = NULL;
    size_t rlen = 0;
    CHECK_OK(ct_actor_call(a, "add", &d, sizeof d, (void **)&res, &rlen, 10000));
    CHECK(res && rlen == sizeof(long) && *res == 41);
    free(res);
    /* it runs a node's cached copy of the shipped executable */
    char path[64], exe[PATH_MAX];
    snprintf(path, sizeof path, "/proc/%d/exe", ct_actor_pid(a));
    ssize_t k = readlink(path, exe, sizeof exe - 1);
    exe[k > 0 ? k : 0] = 0;
    /* a node directory, /tmp/ct-node.<pid>.XXXXXX/exe/<sha1>; in a chroot (fresh-check) the
     * kernel names it from the real root: this process's own root, in its private mount
     * namespace, is not an ancestor of the node's file */
    if (!strstr(exe, "/tmp/ct-node.") || !strstr(exe, "/exe/")) {
        fprintf(stderr, "the actor runs '%s', not a node's cached copy\n", exe);
        h_failures++;
    }
    CHECK_OK(ct_actor_kill(a));
    ct_actor_release(&a);
}

static void training(void)
{
    char dir[] = "/tmp/ct-remote-ckpt-XXXXXX", file[200];
    if (!mkdtemp(dir)) {
        h_failures++;
        return;
    }
    snprintf(file, sizeof file, "%s/ckpt.safetensors", dir);
    trainer *t1 = make(), *t2 = make();
    CHECK(t1 && t2);
    if (t1 && t2) {
        trainer_stats st = {0};
        CHECK_OK(trainer_train(t1, .stats = &st));
        CHECK_EQ_INT(st.epoch, 1);
        CHECK_EQ_INT(st.steps, 16); /* 2048 / 2 replicas / 64 */
        CHECK_EQ_INT(st.replicas, 2);
        CHECK(st.weights_agree);
        CHECK(st.train_loss > 0 && st.train_loss < 2.3);
        CHECK_OK(trainer_save(t1, file));
        CHECK_OK(trainer_restore(t2, file));
        compare_modules(trainer_get_model(t1), trainer_get_model(t2));
    }
    trainer_shutdown(&t1);
    trainer_shutdown(&t2);
    unlink(file);
    rmdir(dir);
}

static int driver(void)
{
    CHECK_OK(ct_init(NULL));
    double total = 0, free_cpu = 0, until = h_now_ms() + 10000;
    while (h_now_ms() < until && (ct_cluster_resources("CPU", &total, &free_cpu) || total < 2))
        usleep(50000);
    CHECK(total >= 2);
    objects();
    actors();
    training();
    ct_shutdown();
    return h_failures ? 1 : 0;
}

/* On the nodes' host (no namespace): local by host id, remote with CT_REMOTE_DRIVER=1. */
static int driver_same_host(void)
{
    bool forced = getenv("CT_REMOTE_DRIVER") != NULL;
    CHECK_OK(ct_init(NULL));
    size_t len = 1u << 20;
    unsigned char *buf = malloc(len);
    for (size_t i = 0; buf && i < len; i++)
        buf[i] = (unsigned char)(i * 7 + 1);
    ct_object_id id;
    ct_object_view v = {0};
    CHECK_OK(ct_put(buf, len, NULL, &id));
    if (forced)
        CHECK_STR(ct_object_node(), "");
    else
        CHECK(ct_object_node()[0] != 0); /* a node's shard, mapped */
    CHECK_OK(ct_get(&id, 10000, &v));
    CHECK(buf && v.data && v.size == len && memcmp(v.data, buf, len) == 0);
    ct_object_release(&v);
    CHECK_OK(ct_free(&id));
    free(buf);
    ct_shutdown();
    return h_failures ? 1 : 0;
}

/* The driver's network namespace: held by a child that sleeps in it, joined to this process's
 * own (new) namespace by a veth pair, CLUSTER_IP here (head and nodes bind it), DRIVER_IP there.
 * Killing the holder (h_kill_all) removes the namespace and both ends of the pair. */
#define CLUSTER_IP "10.77.0.1"
#define DRIVER_IP "10.77.0.2"
static pid_t ns_holder;

/* 0, or -1 (why on stderr) when it cannot be made (no ip(8), no permission): the driver then
 * runs in this network namespace with a private /dev/shm only. */
static int make_netns(void)
{
    int go[2], ready[2];
    char b = 0, cmd[300];
    if (system("command -v ip >/dev/null 2>&1") != 0) {
        fprintf(stderr, "note: no ip(8): the driver gets a private /dev/shm only\n");
        return -1;
    }
    if (unshare(CLONE_NEWNET) || system("ip link set lo up") != 0) {
        fprintf(stderr, "note: no network namespace (%s): a private /dev/shm only\n",
                strerror(errno));
        return -1;
    }
    if (pipe(go) || pipe(ready))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (unshare(CLONE_NEWNET) || write(ready[1], "u", 1) != 1 || read(go[0], &b, 1) != 1)
            _exit(1);
        int rc = system("ip link set lo up && ip addr add " DRIVER_IP "/24 dev vB && "
                        "ip link set vB up");
        if (write(ready[1], rc ? "n" : "y", 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    if (pid > 0 && h_nprocs < H_MAX_PROCS)
        h_procs[h_nprocs++] = pid;
    int rc = -1;
    if (pid > 0 && read(ready[0], &b, 1) == 1 && b == 'u') {
        snprintf(cmd, sizeof cmd,
                 "ip link add vA type veth peer name vB netns %d && ip addr add " CLUSTER_IP
                 "/24 dev vA && ip link set vA up",
                 (int)pid);
        rc = system(cmd);
        if (write(go[1], "g", 1) != 1 || read(ready[0], &b, 1) != 1 || b != 'y')
            rc = -1;
    }
    close(go[0]);
    close(go[1]);
    close(ready[0]);
    close(ready[1]);
    if (rc) {
        fprintf(stderr, "note: no veth pair into a second namespace: a private /dev/shm only\n");
        return -1;
    }
    ns_holder = pid;
    return 0;
}

/* Runs fn in a child (in the driver's network namespace, when there is one, and with a
 * private /dev/shm when shm_ns); its exit status (77: no namespace). remote_env: the value of
 * CT_REMOTE_DRIVER there (NULL: unset). */
static int in_child(int (*fn)(void), const char *addr, bool shm_ns, const char *remote_env)
{
    pid_t pid = fork();
    if (pid == 0) {
        h_failures = 0; /* the child's own count, not the parent's so far */
        if (shm_ns && ns_holder > 0) {
            char path[64];
            snprintf(path, sizeof path, "/proc/%d/ns/net", (int)ns_holder);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0 || setns(fd, CLONE_NEWNET)) {
                fprintf(stderr, "setns %s: %s\n", path, strerror(errno));
                _exit(1);
            }
            close(fd);
        }
        int rc = shm_ns ? private_shm() : 0;
        if (rc) {
            fprintf(stderr,
                    "SKIP: cannot make a private /dev/shm (unshare/mount: %s); needs "
                    "root\n",
                    strerror(-rc));
            _exit(77);
        }
        setenv("CT_ADDRESS", addr, 1);
        if (remote_env)
            setenv("CT_REMOTE_DRIVER", remote_env, 1);
        else
            unsetenv("CT_REMOTE_DRIVER"); /* the driver must find out by itself */
        fflush(stderr);
        _exit(fn());
    }
    if (pid < 0)
        return -1;
    if (h_nprocs < H_MAX_PROCS)
        h_procs[h_nprocs++] = pid; /* killed by h_kill_all if the test dies */
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    for (int i = 0; i < h_nprocs; i++)
        if (h_procs[i] == pid)
            h_procs[i] = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(void)
{
#ifndef CT_FAULTS
    return 77; /* it arms test faults (common/fault.h): a build with CT_FAULTS runs it */
#endif
    tt_register();
    register_test_classes();
    ct_serve_if_worker();
    h_init();
    if (geteuid() != 0) {
        printf("SKIP: needs root (a mount namespace with a private /dev/shm for the driver)\n");
        return 77;
    }
    const char *host = make_netns() == 0 ? CLUSTER_IP : "127.0.0.1";
    char addr[200], line[200];
    char *hargv[] = {
        (char *)h_bin("ct-head"), "--port", "0", "--host", (char *)host, "--heartbeat-ms", "100",
        "--dead-after-ms",        "10000",  NULL};
    int hfd = -1;
    pid_t head = h_spawn(hargv, &hfd);
    if (head <= 0 || h_read_line(hfd, line, sizeof line, 5000) ||
        strncmp(line, "listening on ", 13)) {
        fprintf(stderr, "ct-head did not start\n");
        return 1;
    }
    close(hfd);
    snprintf(addr, sizeof addr, "%s", line + 13);
    fprintf(stderr, "head at %s; the driver %s\n", addr,
            ns_holder > 0 ? "in another network namespace (" DRIVER_IP ")"
                          : "in this network namespace");
    int rc = in_child(driver_no_node, addr, true, NULL);
    if (rc == 77)
        return 77;
    CHECK_EQ_INT(rc, 0);
    pid_t n1 = h_start_node(addr, "--cpus", "1", "--store-memory", "256M", "--host", host);
    pid_t n2 = h_start_node(addr, "--cpus", "1", "--store-memory", "256M", "--host", host);
    CHECK(n1 > 0 && n2 > 0);
    CHECK_EQ_INT(in_child(driver, addr, true, NULL), 0);
    CHECK_EQ_INT(in_child(driver_same_host, addr, false, NULL), 0);
    CHECK_EQ_INT(in_child(driver_same_host, addr, false, "1"), 0);
    CHECK_EQ_INT(h_reap(n1, SIGTERM, 5000), 0);
    CHECK_EQ_INT(h_reap(n2, SIGTERM, 5000), 0);
    CHECK_EQ_INT(h_reap(head, SIGTERM, 5000), 0);
    CHECK(!h_node_dir_exists(n1) && !h_node_dir_exists(n2));
    if (h_failures)
        fprintf(stderr, "%d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
