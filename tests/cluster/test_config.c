/* tests/cluster/test_config.c — the cluster YAML reader (cluster/yaml_config.c): every kind of
 * mistake gives its exact "file:line:col: message", and good files give the nodes, resources
 * and defaults they describe (including the committed example files in cluster/examples). No
 * processes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cluster/cluster.h"
#include "cluster/provider.h"
#include "common/common.h"

static int failures;
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);                  \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)
#define CHECK_EQ_NUM(a, b)                                                                         \
    do {                                                                                           \
        double _a = (a), _b = (b);                                                                 \
        if (_a != _b) {                                                                            \
            fprintf(stderr, "%s:%d: %s == %s failed: %g vs %g\n", __FILE__, __LINE__, #a, #b, _a,  \
                    _b);                                                                           \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)
#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *_a = (a), *_b = (b);                                                           \
        if (strcmp(_a ? _a : "(null)", _b ? _b : "(null)")) {                                      \
            fprintf(stderr, "%s:%d: %s == %s failed: '%s' vs '%s'\n", __FILE__, __LINE__, #a, #b,  \
                    _a, _b);                                                                       \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* The file must fail with exactly msg (prefix match when msg ends with '*'). */
static void bad(const char *yaml, const char *msg)
{
    ct_cluster_config *c = (ct_cluster_config *)1;
    int rc = ct_cluster_config_parse("cluster.yaml", yaml, strlen(yaml), &c);
    const char *got = ct_last_error();
    size_t n = strlen(msg);
    bool prefix = n && msg[n - 1] == '*';
    bool same = prefix ? !strncmp(got, msg, n - 1) : !strcmp(got, msg);
    if (rc != CT_EINVAL || c != NULL || !same) {
        fprintf(stderr, "---- for:\n%s---- want rc %d and '%s'\n     got  rc %d and '%s'\n", yaml,
                CT_EINVAL, msg, rc, got);
        failures++;
    }
    ct_cluster_config_destroy(&c);
}

static ct_cluster_config *good(const char *yaml)
{
    ct_cluster_config *c = NULL;
    if (ct_cluster_config_parse("cluster.yaml", yaml, strlen(yaml), &c)) {
        fprintf(stderr, "---- for:\n%s---- unexpected error: %s\n", yaml, ct_last_error());
        failures++;
    }
    return c;
}

#define LOCAL2 "provider:\n  type: local\n  worker_ips: [127.0.0.1, 127.0.0.1]\n"
#define SSH1                                                                                       \
    "cluster_name: a\nprovider:\n  type: ssh\n  head_ip: 10.0.0.1\n  worker_ips: [10.0.0.2]\n"

int main(int argc, char **argv)
{
    /* the slurm batch script names the cluster's log directory, made under CT_STATE_DIR */
    char state[] = "/tmp/ct_config_XXXXXX", rm[64];
    if (!mkdtemp(state)) {
        perror("mkdtemp");
        return 1;
    }
    setenv("CT_STATE_DIR", state, 1);
    /* ---- mistakes, each at its place ---- */
    bad("cluster_name: a\nprovdier:\n  type: local\n",
        "cluster.yaml:2:1: unknown key 'provdier' (did you mean 'provider'?)");
    bad("cluster_name: a\nprovider:\n  type: local\n  tpye: x\n",
        "cluster.yaml:4:3: unknown key 'tpye' in provider (did you mean 'type'?)");
    bad("cluster_name: a\n" LOCAL2 "frobnicate: 1\n", "cluster.yaml:5:1: unknown key 'frobnicate'");
    bad("cluster_name: a\n" LOCAL2 "ct:\n  store_mem: 1G\n",
        "cluster.yaml:6:3: unknown key 'store_mem' in ct (did you mean 'store_memory'?)");
    /* a key of another section at the top level: where it goes, not a near name */
    bad("cluster_name: a\nnum_workers: 2\n" LOCAL2,
        "cluster.yaml:2:1: key 'num_workers' belongs in the provider: section, not at the top "
        "level");
    bad("cluster_name: a\n" LOCAL2 "head_port: 7000\n",
        "cluster.yaml:5:1: key 'head_port' belongs in the ct: section, not at the top level");
    bad("cluster_name: a\n" LOCAL2 "docker:\n  image: x\n",
        "cluster.yaml:5:1: key 'docker' (Ray) is not supported by ctup");
    bad("cluster_name: a\nmax_workers: two\n" LOCAL2,
        "cluster.yaml:2:14: max_workers must be an integer in [0, 256], got 'two'");
    bad("cluster_name: a\nmax_workers: [1]\n" LOCAL2,
        "cluster.yaml:2:14: max_workers must be an integer in [0, 256], not a list");
    bad(LOCAL2, "cluster.yaml:1:1: missing required key 'cluster_name'");
    bad("cluster_name: a\n", "cluster.yaml:1:1: missing required key 'provider'");
    bad("cluster_name: a\nprovider:\n  head_ip: 127.0.0.1\n",
        "cluster.yaml:3:3: provider: missing required key 'type' (local, ssh or slurm)");
    bad("cluster_name: a\nprovider: local\n",
        "cluster.yaml:2:11: provider must be a mapping, not a scalar");
    bad("cluster_name: a\nprovider:\n  type: kubernetes\n",
        "cluster.yaml:3:9: provider.type must be local, ssh or slurm, got 'kubernetes'");
    bad("cluster_name: a\nprovider:\n  type: local\n  worker_ips: [10.0.0.1, 10.0.0.300]\n",
        "cluster.yaml:4:26: provider.worker_ips[1]: '10.0.0.300' is not an IP address or host "
        "name");
    bad("cluster_name: a\nprovider:\n  type: local\n  head_ip: 'my host'\n  num_workers: 1\n",
        "cluster.yaml:4:12: provider.head_ip: 'my host' is not an IP address or host name");
    bad("cluster_name: a\nprovider:\n  type: local\n  worker_ips: 127.0.0.1\n",
        "cluster.yaml:4:15: provider.worker_ips must be a list of strings, not a scalar");
    bad("cluster_name: a\n" LOCAL2 "cluster_name: b\n",
        "cluster.yaml:5:1: duplicate key 'cluster_name' (first at line 1)");
    bad("cluster_name: a\nprovider:\n  type: local\n  type: ssh\n",
        "cluster.yaml:4:3: duplicate key 'type' (first at line 3)");
    bad("cluster_name: a\nprovider:\n  type: ssh\n  worker_ips: [10.0.0.2]\nauth: {ssh_user: u}\n",
        "cluster.yaml:3:3: provider: missing required key 'head_ip' (type ssh)");
    bad("cluster_name: a\nprovider:\n  type: ssh\n  head_ip: 10.0.0.1\n  worker_ips: [10.0.0.2]\n"
        "auth:\n  ssh_private_key: ~/.ssh/id\n",
        "cluster.yaml:7:3: auth: missing required key 'ssh_user' (type ssh)");
    bad("cluster_name: a\nprovider:\n  type: ssh\n  head_ip: 10.0.0.1\n  worker_ips: [10.0.0.2]\n",
        "cluster.yaml:1:1: missing required key 'auth' (type ssh needs auth.ssh_user)");
    bad("cluster_name: a\nprovider:\n  type: ssh\n  head_ip: 10.0.0.1\n  num_workers: 2\n"
        "auth: {ssh_user: u}\n",
        "cluster.yaml:5:3: provider.num_workers is for type local; list the hosts in worker_ips");
    bad("cluster_name: a\nmax_workers: 1\n" LOCAL2,
        "cluster.yaml:2:14: max_workers is 1 but the provider gives 2 workers");
    bad("cluster_name: a\n" LOCAL2 "available_node_types:\n  w:\n    resources: {CPU: many}\n",
        "cluster.yaml:7:22: available_node_types.w.resources.CPU must be a number >= 0, got "
        "'many'");
    bad("cluster_name: a\n" LOCAL2 "available_node_types:\n  w:\n    min_workers: 3\n",
        "cluster.yaml:4:15: the node types ask for 3 workers (min_workers), the provider gives 2");
    bad("cluster_name: a\n" LOCAL2 "head_node_type: hd\navailable_node_types:\n  w: {}\n",
        "cluster.yaml:5:17: head_node_type: 'hd' is not in available_node_types");
    bad("cluster_name: a\n" LOCAL2 "ct:\n  max_nodes: 0\n",
        "cluster.yaml:6:14: ct.max_nodes must be an integer in [1, 16777216], got '0'");
    bad("cluster_name: a\n" LOCAL2 "ct:\n  heartbeat_rate: 0\n",
        "cluster.yaml:6:19: ct.heartbeat_rate must be an integer in [1, 10000000], got '0'");
    bad("cluster_name: a\n" LOCAL2 "ct:\n  heartbeat_rate: 2x\n",
        "cluster.yaml:6:19: ct.heartbeat_rate must be an integer in [1, 10000000], got '2x'");
    bad("cluster_name: a\n" LOCAL2 "ct:\n  max_node: 5\n",
        "cluster.yaml:6:3: unknown key 'max_node' in ct (did you mean 'max_nodes'?)");
    bad("cluster_name: a\n" LOCAL2 "ct:\n  store_memory: 10K\n",
        "cluster.yaml:6:17: ct.store_memory must be a size of at least 1M (e.g. 512M), got '10K'");
    bad("cluster_name: a\n" LOCAL2 "ct:\n  head_runs_node: maybe\n",
        "cluster.yaml:6:19: ct.head_runs_node must be true or false, got 'maybe'");
    bad("cluster_name: a\n" LOCAL2 "setup_commands: echo hi\n",
        "cluster.yaml:5:17: setup_commands must be a list of strings, not a scalar");
    bad("cluster_name: a\n" LOCAL2 "head_start_ray_commands: [x]\nhead_start_commands: [y]\n",
        "cluster.yaml:6:1: head_start_commands: the start commands are already given (ray and ct "
        "names are the same key)");
    bad("cluster_name: a/b\n" LOCAL2,
        "cluster.yaml:1:15: cluster_name: 'a/b' must be 1-100 of [A-Za-z0-9_.-], not starting "
        "with '.' or '-'");
    bad("cluster_name: -rf\n" LOCAL2,
        "cluster.yaml:1:15: cluster_name: '-rf' must be 1-100 of [A-Za-z0-9_.-], not starting "
        "with '.' or '-'");
    bad("cluster_name: a\nprovider:\n  type: local\n",
        "cluster.yaml:3:3: no nodes to start: give provider.worker_ips, provider.num_workers, "
        "min_workers, or ct.head_runs_node: true");
    bad("cluster_name: [a\n", "cluster.yaml:2:1: YAML syntax error: did not find expected*");
    bad("", "cluster.yaml:1:1: empty file (expected a mapping with cluster_name and provider)");
    bad("- a\n- b\n", "cluster.yaml:1:1: the file must be a mapping (cluster_name, provider, ...), "
                      "not a list");

    /* ---- values that reach a shell or an argv are data: strict patterns at parse time ---- */
    bad(SSH1 "auth:\n  ssh_user: '-oProxyCommand=touch /tmp/pwned-1'\n",
        "cluster.yaml:7:13: auth.ssh_user: '-oProxyCommand=touch /tmp/pwned-1' is not a user name "
        "([a-z_][a-z0-9_-]*, at most 32 characters)");
    bad(SSH1 "auth: {ssh_user: 'u@evil'}\n",
        "cluster.yaml:6:18: auth.ssh_user: 'u@evil' is not a*");
    bad(SSH1 "auth: {ssh_user: Ubuntu}\n", "cluster.yaml:6:18: auth.ssh_user: 'Ubuntu' is not a*");
    bad(SSH1 "auth: {ssh_user: u, ssh_private_key: '-oProxyCommand=x'}\n",
        "cluster.yaml:6:38: auth.ssh_private_key: '-oProxyCommand=x' must be an absolute path (or "
        "~/path) of letters, digits and _ . , / + : @ = - (at most 1024)");
    bad(SSH1 "auth: {ssh_user: u, ssh_private_key: id_rsa}\n",
        "cluster.yaml:6:38: auth.ssh_private_key: 'id_rsa' must be an absolute path*");
    bad(SSH1 "auth: {ssh_user: u, ssh_private_key: '~/.ssh/my key'}\n",
        "cluster.yaml:6:38: auth.ssh_private_key: '~/.ssh/my key' must be an absolute path*");
    bad("cluster_name: a\n" LOCAL2 "ct:\n  spill_dir: '/tmp/x; touch /tmp/pwned-2'\n",
        "cluster.yaml:6:14: ct.spill_dir: '/tmp/x; touch /tmp/pwned-2' must be an absolute path of "
        "letters, digits and _ . , / + : @ = - (at most 1024)");
    bad("cluster_name: a\n" LOCAL2 "ct: {spill_dir: '/tmp/x&>/tmp/pwned-3&#'}\n",
        "cluster.yaml:5:17: ct.spill_dir: '/tmp/x&>/tmp/pwned-3&#' must be an absolute path of*");
    bad("cluster_name: a\n" LOCAL2 "ct: {spill_dir: \"/tmp/x\\n/tmp/y\"}\n",
        "cluster.yaml:5:17: ct.spill_dir: '/tmp/x\n/tmp/y' must be an absolute path of*");
    bad("cluster_name: a\n" LOCAL2 "ct: {spill_dir: spill}\n",
        "cluster.yaml:5:17: ct.spill_dir: 'spill' must be an absolute path of*");
    bad("cluster_name: a\n" LOCAL2 "ct: {spill_dir: ~/spill}\n",
        "cluster.yaml:5:17: ct.spill_dir: '~/spill' must be an absolute path of*");
    bad("cluster_name: a\n" LOCAL2 "available_node_types:\n  w: {spill_dir: '/tmp/$(id)'}\n",
        "cluster.yaml:6:18: available_node_types.w.spill_dir: '/tmp/$(id)' must be an absolute "
        "path of*");
    bad("cluster_name: a\n" LOCAL2 "ct: {bin_dir: '-oProxyCommand=x'}\n",
        "cluster.yaml:5:15: ct.bin_dir: '-oProxyCommand=x' must be an absolute path (or ~/path)*");
    bad("cluster_name: a\n" LOCAL2 "ct: {remote_dir: '~/.ct; rm -rf ~'}\n",
        "cluster.yaml:5:18: ct.remote_dir: '~/.ct; rm -rf ~' must be an absolute path (or "
        "~/path)*");
    bad("cluster_name: a\n" LOCAL2 "ct: {remote_dir: '~root/.ct'}\n",
        "cluster.yaml:5:18: ct.remote_dir: '~root/.ct' must be an absolute path (or ~/path)*");
    bad("cluster_name: a\n" LOCAL2 "available_node_types:\n  w: {resources: {-x: 1}}\n",
        "cluster.yaml:6:19: available_node_types.w.resources: resource names are [A-Za-z0-9_.:-], "
        "not starting with '-', got -x");
    bad("cluster_name: a\nprovider:\n  type: local\n  worker_ips: ['-oProxyCommand=x']\n",
        "cluster.yaml:4:16: provider.worker_ips[0]: '-oProxyCommand=x' is not an IP address or "
        "host name");
    bad("cluster_name: a\nprovider: {type: local, head_ip: '127.0.0.1;id', num_workers: 1}\n",
        "cluster.yaml:2:34: provider.head_ip: '127.0.0.1;id' is not an IP address or host name");
    bad("cluster_name: a\n" LOCAL2 "ct: {head_bind: '-0'}\n",
        "cluster.yaml:5:17: ct.head_bind: '-0' is not an IP address or host name");

    /* the one quoting function, and the unquoted-word check behind the node arguments */
    char q[128] = "x=";
    CHECK(ct__shell_quote(q, sizeof q, "it's $(id) `id` \"a b\"") == 0);
    CHECK_STR(q, "x='it'\\''s $(id) `id` \"a b\"'");
    q[0] = 0;
    CHECK(ct__shell_quote(q, sizeof q, "") == 0);
    CHECK_STR(q, "''");
    q[0] = 0;
    CHECK(ct__shell_quote(q, 6, "abcdef") == CT_ERANGE);
    CHECK(ct__shell_safe_word("/tmp/ct-spill/demo-1"));
    CHECK(ct__shell_safe_word("fe80::1"));
    CHECK(!ct__shell_safe_word("-oProxyCommand=x"));
    CHECK(!ct__shell_safe_word("/tmp/x;id"));
    CHECK(!ct__shell_safe_word("/tmp/a b"));
    CHECK(!ct__shell_safe_word("/tmp/*"));
    CHECK(!ct__shell_safe_word(""));

    /* ---- good files ---- */
    ct_cluster_config *c = good("cluster_name: t\n" LOCAL2);
    if (c) {
        CHECK_STR(c->provider->name, "local");
        CHECK_EQ_NUM(c->n_nodes, 2);
        CHECK_EQ_NUM(c->nodes[0].cpus, -1); /* detected by ct-node */
        CHECK_STR(c->head_ip, "127.0.0.1");
        CHECK_STR(c->head_bind, "127.0.0.1");
        CHECK_EQ_NUM(c->head_port, 0);
        CHECK_EQ_NUM(c->dead_after_ms, 10000);
        CHECK(!c->head_start && !c->worker_start);
    }
    ct_cluster_config_destroy(&c);
    CHECK(c == NULL);
    /* the head's table limits (ct-head --max-*): 0, the head's default, unless given */
    c = good("cluster_name: t\n" LOCAL2 "ct:\n  max_nodes: 20000\n  max_actors: 200000\n"
             "  max_placement_groups: 30000\n  max_objects: 5000000\n  max_kv_keys: 7\n"
             "  max_subscribers: 9\n");
    if (c) {
        CHECK_EQ_NUM(c->max_nodes, 20000);
        CHECK_EQ_NUM(c->max_actors, 200000);
        CHECK_EQ_NUM(c->max_placement_groups, 30000);
        CHECK_EQ_NUM(c->max_objects, 5000000);
        CHECK_EQ_NUM(c->max_kv_keys, 7);
        CHECK_EQ_NUM(c->max_subscribers, 9);
    }
    ct_cluster_config_destroy(&c);
    c = good("cluster_name: t\n" LOCAL2);
    if (c)
        CHECK_EQ_NUM(c->max_nodes, 0);
    ct_cluster_config_destroy(&c);
    /* types: min_workers first, the rest fill types in order up to their max_workers */
    c = good("cluster_name: t\nprovider: {type: local, num_workers: 4}\n"
             "head_node_type: hd\n"
             "available_node_types:\n"
             "  hd: {resources: {CPU: 1}}\n"
             "  big: {resources: {CPU: 8, GPU: 1, disk: 2}, min_workers: 1, max_workers: 2}\n"
             "  small: {resources: {cpus: 1}, store_memory: 64M}\n"
             "ct: {spill_dir: /tmp/sp, head_runs_node: yes}\n"
             "worker_start_ray_commands:\n  - echo start\n  - $CT_BIN_DIR/ct-node --head "
             "$CT_HEAD_ADDRESS $CT_NODE_ARGS\n");
    if (c) {
        CHECK_EQ_NUM(c->n_nodes, 5);
        for (int i = 0; i < 2; i++) {
            CHECK_STR(c->nodes[i].type_name, "big");
            CHECK_EQ_NUM(c->nodes[i].cpus, 8);
            CHECK_EQ_NUM(c->nodes[i].gpus, 1);
            CHECK_EQ_NUM(c->nodes[i].n_custom, 1);
            CHECK_STR(c->nodes[i].custom_name[0], "disk");
            CHECK_EQ_NUM(c->nodes[i].custom_amount[0], 2);
        }
        CHECK_STR(c->nodes[2].type_name, "small");
        CHECK_EQ_NUM(c->nodes[3].cpus, 1);
        CHECK_STR(c->nodes[3].store_memory, "67108864");
        CHECK_STR(c->nodes[3].spill_dir, "/tmp/sp/t-4");
        CHECK_STR(c->nodes[4].type_name, "hd"); /* the head's own node */
        CHECK_EQ_NUM(c->n_warnings, 0);         /* CPU, GPU, cpus, disk: nothing to warn about */
        CHECK_EQ_NUM(c->n_worker_start, 2);
        CHECK_STR(c->worker_start[0], "echo start");
    }
    ct_cluster_config_destroy(&c);
    /* resource names one edit (case included) from CPU, GPU or memory: custom resources, with
     * a warning each that names the file position and the name meant ("memory" itself and
     * "disk" are fine) */
    c = good("cluster_name: t\nprovider: {type: local, num_workers: 1}\n"
             "available_node_types:\n"
             "  w:\n"
             "    resources: {CPUs: 1, Gpu: 1, Memroy: 4, memory: 2, disk: 1}\n");
    if (c) {
        CHECK_EQ_NUM(c->nodes[0].n_custom, 5);
        CHECK_STR(c->nodes[0].custom_name[0], "CPUs");
        CHECK_EQ_NUM(c->nodes[0].cpus, -1); /* still detected: CPUs is not CPU */
        CHECK_EQ_NUM(c->n_warnings, 3);
        if (c->n_warnings == 3) {
            CHECK_STR(c->warnings[0], "cluster.yaml:5:17: available_node_types.w.resources: "
                                      "resource 'CPUs' becomes a custom resource of that name "
                                      "(did you mean 'CPU'?)");
            CHECK(strstr(c->warnings[1], ":5:26: ") && strstr(c->warnings[1], "'GPU'?"));
            CHECK(strstr(c->warnings[2], ":5:34: ") && strstr(c->warnings[2], "'memory'?"));
        }
    }
    ct_cluster_config_destroy(&c);
    c = good("cluster_name: s\nprovider:\n  type: ssh\n  head_ip: 10.0.0.1\n"
             "  worker_ips: [10.0.0.2, node-3.example.com, 'fe80::1']\n"
             "auth: {ssh_user: ubuntu, ssh_private_key: ~/.ssh/k, ssh_port: 2222}\n");
    if (c) {
        CHECK_STR(c->provider->name, "ssh");
        CHECK_EQ_NUM(c->n_nodes, 3);
        CHECK_STR(c->nodes[1].host, "node-3.example.com");
        CHECK_STR(c->head_bind, "0.0.0.0");
        CHECK_EQ_NUM(c->head_port, 6380);
        const ct__ssh_conf *a = c->provider_conf;
        CHECK_EQ_NUM(a->port, 2222);
        CHECK_STR(a->user, "ubuntu");
        CHECK_STR(c->remote_dir, "~/.ct");
    }
    ct_cluster_config_destroy(&c);
    c = good("cluster_name: s\nprovider:\n  type: ssh\n  head_ip: 10.0.0.1\n  worker_ips: [h-2]\n"
             "auth: {ssh_user: _svc-ct2, ssh_private_key: /home/u/.ssh/id_ed25519}\n"
             "available_node_types:\n  w: {spill_dir: /data/ct_spill.v2, min_workers: 1}\n"
             "ct: {bin_dir: ~/ct/bin, remote_dir: /opt/ct, copy_binaries: false}\n");
    if (c) {
        const ct__ssh_conf *a = c->provider_conf;
        CHECK_STR(a->user, "_svc-ct2");
        CHECK_STR(a->key, "/home/u/.ssh/id_ed25519");
        CHECK_STR(c->nodes[0].spill_dir, "/data/ct_spill.v2/s-1");
        CHECK_STR(c->bin_dir, "~/ct/bin");
        CHECK_STR(c->remote_dir, "/opt/ct");
    }
    ct_cluster_config_destroy(&c);

    /* ---- the slurm provider's section ---- */
#define SLURM "cluster_name: a\nprovider:\n  type: slurm\n"
    c = good(SLURM "  nodes: 4\n  partition: gpu-a100\n  time: 1-12:00:00\n  account: proj_7\n"
                   "  cpus_per_node: 32\n  gpus_per_node: 8\n"
                   "  sbatch_args: [--qos=high, --exclusive, --mem=0]\n"
                   "ct: {store_memory: 8G, spill_dir: /scratch/ct}\n");
    if (c) {
        CHECK_STR(c->provider->name, "slurm");
        CHECK_EQ_NUM(c->n_nodes, 4);
        const ct__slurm_conf *sc = c->provider_conf;
        CHECK_EQ_NUM(sc->nodes, 4);
        CHECK_STR(sc->partition, "gpu-a100");
        CHECK_STR(sc->time, "1-12:00:00");
        CHECK_STR(sc->account, "proj_7");
        CHECK_EQ_NUM(sc->cpus_per_node, 32);
        CHECK_EQ_NUM(sc->gpus_per_node, 8);
        CHECK_EQ_NUM(sc->n_sbatch_args, 3);
        CHECK_STR(sc->sbatch_args[2], "--mem=0");
        CHECK(c->head_ip == NULL);
        CHECK_STR(c->head_bind, "0.0.0.0");
        CHECK_EQ_NUM(c->head_port, 0);
        CHECK_STR(c->nodes[3].spill_dir, "/scratch/ct/a-4");
    }
    ct_cluster_config_destroy(&c);
    /* every provider starts its head with the YAML's ct flags (ct__cluster_head_flags: local
     * and ssh through ct__hosts_start, slurm in its batch script, which passed no ct.max_*
     * before) */
    c = good(SLURM "  nodes: 2\nct: {heartbeat_ms: 200, heartbeat_rate: 777, max_nodes: 64,\n"
                   "     max_actors: 500, max_subscribers: 9}\n");
    if (c) {
        char flags[512] = "", line[700];
        CHECK_EQ_NUM(ct__cluster_head_flags(c, flags, sizeof flags), 0);
        CHECK_STR(flags, " --port 0 --heartbeat-ms 200 --dead-after-ms 10000 --heartbeat-rate 777 "
                         "--max-nodes 64 --max-actors 500 --max-subscribers 9");
        static char script[65536];
        CHECK_EQ_NUM(ct__slurm_batch_script(c, script, sizeof script), 0);
        snprintf(line, sizeof line, "\"$bin/ct-head\" --host \"$bind\"%s >", flags);
        if (!strstr(script, line))
            fprintf(stderr, "no line '%s' in the batch script:\n%s\n", line, script);
        CHECK(strstr(script, line) != NULL);
    }
    ct_cluster_config_destroy(&c);
    bad(SLURM "  partition: gpu\n",
        "cluster.yaml:3:3: provider: missing required key 'nodes' (type slurm)");
    bad(SLURM "  nodes: 0\n",
        "cluster.yaml:4:10: provider.nodes must be an integer in [1, 255], got '0'");
    bad(SLURM "  nodes: 2\n  partiton: gpu\n",
        "cluster.yaml:5:3: unknown key 'partiton' in provider (did you mean 'partition'?)");
    bad(SLURM "  nodes: 2\n  partition: 'gpu; rm -rf ~'\n",
        "cluster.yaml:5:14: provider.partition: 'gpu; rm -rf ~' is not a name of letters, "
        "digits and _ . -");
    bad(SLURM "  nodes: 2\n  time: 2h\n",
        "cluster.yaml:5:9: provider.time: '2h' is not a Slurm time limit (MIN, H:M:S, D-H:M:S, "
        "... or infinite)");
    bad(SLURM "  nodes: 2\n  time: '1:2:3:4'\n", "cluster.yaml:5:9: provider.time: '1:2:3:4'*");
    bad(SLURM "  nodes: 2\n  account: --all\n", "cluster.yaml:5:12: provider.account: '--all'*");
    bad(SLURM "  nodes: 2\n  cpus_per_node: many\n",
        "cluster.yaml:5:18: provider.cpus_per_node must be an integer in [1, 100000], got "
        "'many'");
    bad(SLURM "  nodes: 2\n  sbatch_args: [--qos=x, job.sh]\n",
        "cluster.yaml:5:26: provider.sbatch_args[1]: 'job.sh' is not an option (the batch "
        "script is ctup's)");
    bad(SLURM "  nodes: 2\n  sbatch_args: [-N3]\n",
        "cluster.yaml:5:17: provider.sbatch_args[0]: '-N3': ctup sets -N itself*");
    bad(SLURM "  nodes: 2\n  sbatch_args: [--output=/tmp/x]\n",
        "cluster.yaml:5:17: provider.sbatch_args[0]: '--output=/tmp/x': ctup sets --output*");
    bad(SLURM "  nodes: 2\n  worker_ips: [10.0.0.2]\n",
        "cluster.yaml:5:3: unknown key 'worker_ips' in provider");
    bad(SLURM "  nodes: 2\nauth: {ssh_user: u}\n",
        "cluster.yaml:5:1: auth: type slurm does not log in anywhere (no auth)");
    bad(SLURM "  nodes: 2\navailable_node_types:\n  w: {min_workers: 2}\n",
        "cluster.yaml:5:1: available_node_types: not for type slurm*");
    bad(SLURM "  nodes: 2\nct: {head_runs_node: true}\n",
        "cluster.yaml:5:6: ct.head_runs_node: type slurm runs a node on every node of the "
        "allocation, the head's included");
#undef SLURM

    /* the committed examples (argv: their paths) */
    for (int i = 1; i < argc; i++) {
        if (ct_cluster_config_load(argv[i], &c)) {
            fprintf(stderr, "%s: %s\n", argv[i], ct_last_error());
            failures++;
            continue;
        }
        CHECK(c->n_nodes >= 2);
        ct_cluster_config_destroy(&c);
    }
    CHECK(ct_cluster_config_load("/nonexistent/c.yaml", &c) == CT_ENOENT && c == NULL);
    CHECK_STR(ct_last_error(), "/nonexistent/c.yaml: cannot open: No such file or directory");
    snprintf(rm, sizeof rm, "rm -rf '%s'", state);
    if (system(rm))
        fprintf(stderr, "cannot remove %s\n", state);
    if (failures)
        fprintf(stderr, "test_config: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
