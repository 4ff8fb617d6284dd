/* tests/runtime/test_clean_leave.c — a driver that ends well leaves its cluster without a
 * warning (issue 39 item 8). Each run is this program again as a driver (argv[1] "driver") on
 * an embedded cluster, with CT_LOG_LEVEL=info and its stderr (the embedded head's too) in a
 * file: it makes a Counter actor, calls it, and calls ct_shutdown. Nothing may be logged at WARN
 * or ERROR (the head logs the job's end as a leave, "driver ... gone (left (ct_shutdown))",
 * unless it exits with its parent before it reads the close): the
 * death watch's close is announced (CT__WATCH_LEAVING) before it happens, so the head never
 * takes it for a crash, whichever of the close and the last heartbeat it sees first. Five
 * runs, each of which could lose that race. */
#include "harness.h"
#include "classes.h"

#include <fcntl.h>
#include <sys/wait.h>

#include "ct/ct.h"

static int driver(void)
{
    if (ct_init(NULL) < 0) {
        fprintf(stderr, "driver: ct_init: %s\n", ct_last_error());
        return 1;
    }
    ct_actor *a = NULL;
    int64_t two = 2, *v = NULL;
    size_t n = 0;
    int rc = ct_actor_create("Counter", &(ct_resources){.bundle = -1}, NULL, 0, &a);
    if (rc == 0)
        rc = ct_actor_call(a, "add", &two, sizeof two, (void **)&v, &n, 10000);
    free(v);
    if (rc < 0)
        fprintf(stderr, "driver: %s\n", ct_last_error());
    ct_actor_release(&a);
    ct_shutdown();
    return rc < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    register_test_classes();
    ct_serve_if_worker();
    if (argc == 2 && !strcmp(argv[1], "driver"))
        return driver();
    h_init();
    char dir[] = "/tmp/ct-clean-leave.XXXXXX", log[200], cmd[300];
    CHECK(mkdtemp(dir) != NULL);
    int clean = 0;
    for (int run = 0; run < 5; run++) {
        snprintf(log, sizeof log, "%s/driver%d.err", dir, run);
        pid_t pid = fork();
        if (pid == 0) {
            int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            dup2(fd, 2);
            setenv("CT_LOG_LEVEL", "info", 1);
            unsetenv("CT_ADDRESS");
            execl("/proc/self/exe", argv[0], "driver", (char *)NULL);
            _exit(127);
        }
        int st = 0;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        char *text = NULL;
        size_t len = 0;
        FILE *f = fopen(log, "r");
        if (f) {
            text = calloc(1, 1 << 20);
            len = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
            fclose(f);
        }
        (void)len;
        bool left = text && strstr(text, "gone (left (ct_shutdown)): killing its job's actors");
        bool warned = text && (strstr(text, " WARN ") || strstr(text, " ERROR "));
        CHECK(!warned);
        if (warned)
            fprintf(stderr, "run %d: the driver's log:\n%s\n", run, text ? text : "(none)");
        clean += !warned;
        printf("run %d: %s\n", run,
               warned ? "warned"
               : left ? "the head logged a leave"
                      : "the head exited first");
        free(text);
    }
    printf("%d of 5 runs left without a warning\n", clean);
    CHECK_EQ_INT(clean, 5);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    if (h_failures) {
        fprintf(stderr, "test_clean_leave: %d failure(s)\n", h_failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
