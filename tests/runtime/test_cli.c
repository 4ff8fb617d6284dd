/* tests/runtime/test_cli.c — the command-line contract of ct-head, ct-node and ctup: --help,
 * clear errors (exit 2) for bad flags naming the flag, "listening on H:P" on the head's
 * stdout, and ctup status against a live head and against nothing. */
#include "harness.h"

/* Runs cmd (stderr folded into stdout); returns its exit status, output in *out. */
static int run(const char *cmd, char **out)
{
    char full[1024];
    snprintf(full, sizeof full, "%s 2>&1; echo \"rc=$?\"", cmd);
    *out = h_capture(full);
    const char *rc = *out ? strstr(*out, "rc=") : NULL;
    return rc ? atoi(rc + 3) : -1;
}

static void expect(const char *cmd, int rc, const char *needle)
{
    char *out = NULL;
    int got = run(cmd, &out);
    if (got != rc || !out || !strstr(out, needle)) {
        fprintf(stderr, "'%s': exit %d (want %d), output lacks '%s':\n%s\n", cmd, got, rc, needle,
                out ? out : "");
        h_failures++;
    }
    free(out);
}

int main(void)
{
    h_init();
    char cmd[1024];
    const char *head = h_bin("ct-head"), *node = h_bin("ct-node"), *ctup = h_bin("ctup");
    snprintf(cmd, sizeof cmd, "%s --help", head);
    expect(cmd, 0, "usage: ct-head --port P");
    snprintf(cmd, sizeof cmd, "%s", head);
    expect(cmd, 2, "--port is required");
    snprintf(cmd, sizeof cmd, "%s --port 70000", head);
    expect(cmd, 2, "--port: '70000' is not an integer");
    snprintf(cmd, sizeof cmd, "%s --port 0 --heartbeat-ms abc", head);
    expect(cmd, 2, "--heartbeat-ms: 'abc'");
    snprintf(cmd, sizeof cmd, "%s --port 0 --frobnicate", head);
    expect(cmd, 2, "unknown argument '--frobnicate'");
    snprintf(cmd, sizeof cmd, "%s --port 0 --host 999.1.1.1", head);
    expect(cmd, 1, "cannot listen on 999.1.1.1");
    snprintf(cmd, sizeof cmd, "%s --help", node);
    expect(cmd, 0, "usage: ct-node --head H:P");
    snprintf(cmd, sizeof cmd, "%s", node);
    expect(cmd, 2, "--head H:P is required");
    snprintf(cmd, sizeof cmd, "%s --head nowhere", node);
    expect(cmd, 2, "'nowhere' is not host:port");
    snprintf(cmd, sizeof cmd, "%s --head 127.0.0.1:1 --cpus -3", node);
    expect(cmd, 2, "--cpus: '-3' is not a number");
    snprintf(cmd, sizeof cmd, "%s --head 127.0.0.1:1 --resources disk", node);
    expect(cmd, 2, "'disk' is not name=number");
    snprintf(cmd, sizeof cmd, "%s --help", ctup);
    expect(cmd, 0, "usage: ctup status");
    snprintf(cmd, sizeof cmd, "%s launch", ctup);
    expect(cmd, 2, "unknown command 'launch'");
    snprintf(cmd, sizeof cmd, "CT_ADDRESS= %s status", ctup);
    expect(cmd, 2, "--address H:P is required");
    snprintf(cmd, sizeof cmd, "%s status --address 127.0.0.1:1 --timeout-ms 200", ctup);
    expect(cmd, 1, "no answer from a head at 127.0.0.1:1");

    /* a live head prints exactly one line, then ctup sees it with no nodes */
    char addr[128];
    pid_t h = h_start_head(addr, sizeof addr, "100", "1000");
    CHECK(h > 0);
    CHECK(strncmp(addr, "127.0.0.1:", 10) == 0 && atoi(addr + 10) > 0);
    snprintf(cmd, sizeof cmd, "%s status --address %s", ctup, addr);
    char needle[200];
    snprintf(needle, sizeof needle, "head %s: 0 nodes (0 alive), 0 actors", addr);
    expect(cmd, 0, needle);
    h_kill_all();
    CHECK(h_gone(h));
    if (h_failures)
        fprintf(stderr, "test_cli: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
