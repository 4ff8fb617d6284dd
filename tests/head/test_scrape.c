/* tests/head/test_scrape.c — the head's /metrics under what its peers send it, and the Grafana
 * dashboard against what /metrics exports. A real ct-head (--dashboard-port) and raw ZeroMQ
 * peers over CURVE (tests/security/sec.h) as nodes and a driver. One mode per run (argv[1]):
 *   bad_stats  two nodes report NodeStats with their heartbeats. Node A's malformed ones
 *              (a CPU fraction negative, above 1, +-Inf; a byte count over 2^60; available
 *              memory above the total; a GPU using more than it has, at 150 %, at -Inf %, an
 *              index repeated or past 15; 17 GPUs, 5000 GPUs; an over-long sender name) are each
 *              refused with an Error naming the field (heartbeat.stats.gpus[1].memory_used_bytes)
 *              and a log line of the head naming it too; node A keeps the stats it had and stays
 *              alive, a heartbeat naming a 100 kB node id is refused with a bounded message, and
 *              after each refusal node B's new stats show: the head goes on serving its nodes.
 *              NaN (not known) for the CPU and a GPU's utilisation is taken and shown as absent.
 *              A third node registers with a host that is not UTF-8: its label shows each bad
 *              byte as '?' (Prometheus refuses a page with one such label whole).
 *              Every /metrics page read is checked as Prometheus text format 0.0.4 (prom_check:
 *              names, labels, their escapes and UTF-8, values, one TYPE per family before its
 * samples, families not interleaved, no series twice, histograms' +Inf bucket equal to their
 *              count), and by Debian's promtool where it is installed.
 *   grafana PATH  cluster/grafana-dashboard.json parses as JSON, and every metric family of a
 *              live scrape (a node with 2 GPUs' stats, a training job's report with every field,
 *              its 4 histograms, retries and drains) is named by some panel's expression. The
 *              names come from the scrape's # TYPE lines, not from a list kept here. Also the
 *              reports' own checks: drains by reason summing to the drains, each reason once,
 *              and a label another running job's report holds refused (train_report.job).
 * No timing is asserted. */
#include "tests/security/sec.h"

#include <math.h>
#include <sys/stat.h>

#include "tests/head/endpoint.h"
#include "trainer/nn/safetensors.h"

/* ---- Prometheus text format 0.0.4 ---- */

static bool name_char(char c, bool first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!first && c >= '0' && c <= '9');
}

/* The length of the valid UTF-8 sequence at p (RFC 3629: no overlong forms, no surrogates,
 * nothing past U+10FFFF), 0 when none starts there. */
static int utf8_seq(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    if (u[0] < 0x80)
        return 1;
    uint32_t c = 0;
    int n = (u[0] & 0xe0) == 0xc0 ? 2 : (u[0] & 0xf0) == 0xe0 ? 3 : (u[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (!n)
        return 0;
    c = u[0] & (0x7f >> n);
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (u[i] & 0x3f);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    return c >= least[n] && c <= 0x10ffff && !(c >= 0xd800 && c <= 0xdfff) ? n : 0;
}

/* The length of a metric name at p (0: none). */
static size_t name_len(const char *p)
{
    size_t n = 0;
    while (name_char(p[n], n == 0))
        n++;
    return n;
}

/* A sample's family: its name, less _bucket, _sum or _count when that is a histogram's. */
static void family_of(const char *name, size_t n, char types[][2][96], int ntypes, char *fam,
                      size_t cap)
{
    snprintf(fam, cap, "%.*s", (int)n, name);
    static const char *suffix[] = {"_bucket", "_sum", "_count"};
    for (int s = 0; s < 3; s++) {
        size_t k = strlen(suffix[s]);
        if (n <= k || strncmp(name + n - k, suffix[s], k))
            continue;
        for (int t = 0; t < ntypes; t++)
            if (strlen(types[t][0]) == n - k && !strncmp(types[t][0], name, n - k) &&
                !strcmp(types[t][1], "histogram"))
                snprintf(fam, cap, "%s", types[t][0]);
    }
}

/* 0 when page is valid Prometheus text; else -1 with the line and what is wrong in err. */
static int prom_check(const char *page, char *err, size_t cap)
{
    enum { MAX_FAM = 256, MAX_SERIES = 4096 };
    static char types[MAX_FAM][2][96]; /* family, type */
    static char done[MAX_FAM][96];     /* families whose samples ended */
    static char *series[MAX_SERIES];
    int ntypes = 0, ndone = 0, nseries = 0, line = 0, rc = -1;
    char cur[96] = "", fam[96];
    err[0] = 0;
    for (const char *p = page; *p;) {
        const char *end = strchr(p, '\n');
        line++;
        if (!end) {
            snprintf(err, cap, "line %d: no newline at its end", line);
            goto out;
        }
        size_t len = (size_t)(end - p);
        if (len == 0 || !strncmp(p, "# HELP ", 7) || (p[0] == '#' && strncmp(p, "# TYPE ", 7))) {
            p = end + 1; /* HELP text and comments: anything */
            continue;
        }
        if (!strncmp(p, "# TYPE ", 7)) {
            size_t n = name_len(p + 7);
            const char *t = p + 7 + n;
            if (!n || n >= sizeof fam || *t != ' ') {
                snprintf(err, cap, "line %d: a TYPE line without a metric name", line);
                goto out;
            }
            snprintf(fam, sizeof fam, "%.*s", (int)n, p + 7);
            size_t tl = (size_t)(end - t - 1);
            static const char *kinds[] = {"counter", "gauge", "histogram", "summary", "untyped"};
            bool known = false;
            for (int k = 0; k < 5; k++)
                known |= tl == strlen(kinds[k]) && !strncmp(t + 1, kinds[k], tl);
            for (int k = 0; k < ntypes; k++)
                if (!strcmp(types[k][0], fam)) {
                    snprintf(err, cap, "line %d: a second TYPE for %s", line, fam);
                    goto out;
                }
            if (!known || ntypes == MAX_FAM) {
                snprintf(err, cap, "line %d: type '%.*s' of %s", line, (int)tl, t + 1, fam);
                goto out;
            }
            snprintf(types[ntypes][0], 96, "%s", fam);
            snprintf(types[ntypes++][1], 96, "%.*s", (int)tl, t + 1);
            if (cur[0] && strcmp(cur, fam))
                snprintf(done[ndone++], 96, "%s", cur);
            snprintf(cur, sizeof cur, "%s", fam);
            p = end + 1;
            continue;
        }
        /* a sample: name{label="value",...} value */
        size_t n = name_len(p);
        if (!n || n >= sizeof fam) {
            snprintf(err, cap, "line %d: no metric name: %.60s", line, p);
            goto out;
        }
        family_of(p, n, types, ntypes, fam, sizeof fam);
        for (int k = 0; k < ndone; k++)
            if (!strcmp(done[k], fam)) {
                snprintf(err, cap, "line %d: %s's samples are not in one group", line, fam);
                goto out;
            }
        if (strcmp(cur, fam)) {
            bool typed = false;
            for (int k = 0; k < ntypes; k++)
                typed |= !strcmp(types[k][0], fam);
            if (typed) { /* its TYPE came, then another family's samples */
                snprintf(err, cap, "line %d: %s's samples are apart from its TYPE", line, fam);
                goto out;
            }
            if (cur[0])
                snprintf(done[ndone++], 96, "%s", cur);
            snprintf(cur, sizeof cur, "%s", fam);
        }
        const char *q = p + n;
        char labels[8][64];
        int nl = 0;
        if (*q == '{') {
            q++;
            while (*q != '}') {
                size_t ln = name_len(q);
                if (!ln || ln >= sizeof labels[0] || q[ln] != '=' || q[ln + 1] != '"' ||
                    memchr(q, ':', ln) || !strncmp(q, "__", 2)) {
                    snprintf(err, cap, "line %d: a bad label name at '%.20s'", line, q);
                    goto out;
                }
                snprintf(labels[nl < 8 ? nl : 7], sizeof labels[0], "%.*s", (int)ln, q);
                for (int k = 0; k < nl && k < 7; k++)
                    if (!strcmp(labels[k], labels[nl < 8 ? nl : 7])) {
                        snprintf(err, cap, "line %d: label %.64s twice", line, labels[k]);
                        goto out;
                    }
                nl++;
                q += ln + 2;
                while (*q != '"') {
                    if (q >= end) {
                        snprintf(err, cap, "line %d: a label value does not end", line);
                        goto out;
                    }
                    if (!utf8_seq(q)) {
                        snprintf(err, cap, "line %d: a label value not UTF-8 at byte %ld", line,
                                 (long)(q - p));
                        goto out;
                    }
                    if (*q == '\\' && q[1] != '\\' && q[1] != '"' && q[1] != 'n') {
                        snprintf(err, cap, "line %d: escape \\%c in a label value", line, q[1]);
                        goto out;
                    }
                    q += *q == '\\' ? 2 : utf8_seq(q);
                }
                q++;
                if (*q == ',')
                    q++;
                else if (*q != '}') {
                    snprintf(err, cap, "line %d: '%c' after a label value", line, *q);
                    goto out;
                }
            }
            q++;
        }
        if (*q != ' ') {
            snprintf(err, cap, "line %d: no space before the value", line);
            goto out;
        }
        size_t vl = (size_t)(end - q - 1);
        char v[64];
        snprintf(v, sizeof v, "%.*s", (int)(vl < 63 ? vl : 63), q + 1);
        char *ve = NULL;
        double d = strtod(v, &ve);
        bool named = !strcmp(v, "NaN") || !strcmp(v, "+Inf") || !strcmp(v, "-Inf");
        if (!named && (!vl || vl > 40 || *ve || isnan(d) || isinf(d) || strchr(v, ' '))) {
            snprintf(err, cap, "line %d: value '%.*s'", line, (int)vl, q + 1);
            goto out;
        }
        char *id = strndup(p, (size_t)(q - p));
        for (int k = 0; k < nseries && id; k++)
            if (!strcmp(series[k], id)) {
                snprintf(err, cap, "line %d: series %s twice", line, id);
                free(id);
                goto out;
            }
        if (id && nseries < MAX_SERIES)
            series[nseries++] = id;
        else
            free(id);
        p = end + 1;
    }
    /* histograms: each series' +Inf bucket equals its _count */
    for (int k = 0; k < nseries; k++) {
        const char *inf = strstr(series[k], "le=\"+Inf\"");
        const char *b = strstr(series[k], "_bucket{");
        if (!inf || !b)
            continue;
        const char *le = strstr(b, ",le=");
        char want[512];
        if (le) /* its other labels */
            snprintf(want, sizeof want, "%.*s_count%.*s}", (int)(b - series[k]), series[k],
                     (int)(le - b - 7), b + 7);
        else
            snprintf(want, sizeof want, "%.*s_count", (int)(b - series[k]), series[k]);
        double vi = metric(page, series[k]), vc = metric(page, want);
        if (!(vi == vc)) {
            snprintf(err, cap, "%.120s is %g, its count %.120s %g", series[k], vi, want, vc);
            goto out;
        }
    }
    rc = 0;
out:
    for (int k = 0; k < nseries; k++)
        free(series[k]);
    return rc;
}

/* promtool's verdict on page, when Debian's promtool is there: 0 valid and nothing to say (its
 * lint too: a gauge named _total, a counter without it), -1 anything said, 1 no promtool. */
static int promtool_check(const char *page, const char *dir)
{
    const char *bin = "/usr/bin/promtool";
    if (access(bin, X_OK))
        return 1;
    char path[128], cmd[512];
    snprintf(path, sizeof path, "%s/metrics.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(page, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s check metrics < %s 2>&1", bin, path);
    char *out = h_capture(cmd);
    printf("promtool check metrics: %s\n", out && *out ? out : "(nothing to say)");
    int rc = !out || *out ? -1 : 0;
    free(out);
    return rc;
}

/* ---- the head and its peers ---- */

static char tmp_dir[64];
static char log_path[128];

/* What a node reports: up to 8 GPUs written here, more (a huge list) in extra. */
typedef struct stats_msg {
    Ct__NodeStats s;
    Ct__GpuStats g[8], *gp[8];
    Ct__GpuStats *extra;
    Ct__GpuStats **extra_p;
} stats_msg;

/* CPU 0.25, 8 GiB of which 6 available, 1 MiB of the shard used, 2 MiB spilled in 3 objects,
 * ngpu GPUs (index i, i+1 GiB used of 16 GiB, 10 * i % busy). */
static void good_stats(stats_msg *m, int ngpu)
{
    memset(m, 0, sizeof *m);
    ct__node_stats__init(&m->s);
    m->s.cpu_utilization = 0.25;
    m->s.memory_total_bytes = 8ull << 30;
    m->s.memory_available_bytes = 6ull << 30;
    m->s.store_used_bytes = 1 << 20;
    m->s.store_spilled_bytes = 2 << 20;
    m->s.store_spilled_objects = 3;
    for (int i = 0; i < ngpu && i < 8; i++) {
        ct__gpu_stats__init(&m->g[i]);
        m->g[i].index = (uint32_t)i;
        m->g[i].memory_used_bytes = (uint64_t)(i + 1) << 30;
        m->g[i].memory_total_bytes = 16ull << 30;
        m->g[i].utilization_percent = 10.0 * i;
        m->gp[i] = &m->g[i];
    }
    m->s.n_gpus = (size_t)ngpu;
    m->s.gpus = m->gp;
}

/* n GPUs, each valid on its own but for their number (index i % 16). */
static void many_gpus(stats_msg *m, size_t n)
{
    good_stats(m, 0);
    m->extra = calloc(n, sizeof *m->extra);
    m->extra_p = calloc(n, sizeof *m->extra_p);
    for (size_t i = 0; m->extra && m->extra_p && i < n; i++) {
        ct__gpu_stats__init(&m->extra[i]);
        m->extra[i].index = (uint32_t)(i % 16);
        m->extra[i].memory_total_bytes = 1 << 30;
        m->extra_p[i] = &m->extra[i];
    }
    m->s.n_gpus = m->extra && m->extra_p ? n : 0;
    m->s.gpus = m->extra_p;
}

static void stats_free(stats_msg *m)
{
    free(m->extra);
    free(m->extra_p);
    m->extra = NULL;
    m->extra_p = NULL;
}

static char page[1 << 20];

/* The whole of file path, NUL-terminated (caller frees); NULL when unread. */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        char *nb = n + 1 == cap ? realloc(b, cap *= 2) : b;
        if (!nb)
            free(b);
        b = nb;
    }
    fclose(f);
    if (b)
        b[n] = 0;
    return b;
}

/* Reads /metrics into page until sample `name` is want (20 s at most); checks every page read
 * as Prometheus text. Whether it came. */
static bool metrics_until(int dport, const char *name, double want)
{
    char err[300];
    for (double until = h_now_ms() + 20000; h_now_ms() < until; usleep(100000)) {
        if (http_get("127.0.0.1", dport, "/metrics", NULL, page, sizeof page) != 200)
            continue;
        if (prom_check(page, err, sizeof err)) {
            fprintf(stderr, "/metrics is not valid Prometheus text: %s\n", err);
            h_failures++;
            return false;
        }
        if (metric(page, name) == want)
            return true;
    }
    fprintf(stderr, "/metrics: %s never became %g (last %g)\n", name, want, metric(page, name));
    return false;
}

/* name{node="id",host="127.0.0.1"...} into out. */
static const char *node_series(char *out, size_t cap, const char *name, const char *id,
                               const char *more)
{
    snprintf(out, cap, "%s{node=\"%s\",host=\"127.0.0.1\"%s}", name, id, more ? more : "");
    return out;
}

/* ---- bad_stats ---- */

typedef struct bad_case {
    const char *what, *field;
    void (*make)(stats_msg *m);
} bad_case;

static void cpu_neg(stats_msg *m)
{
    m->s.cpu_utilization = -0.5;
}
static void cpu_over(stats_msg *m)
{
    m->s.cpu_utilization = 1.5;
}
static void cpu_inf(stats_msg *m)
{
    m->s.cpu_utilization = INFINITY;
}
static void cpu_ninf(stats_msg *m)
{
    m->s.cpu_utilization = -INFINITY;
}
static void mem_huge(stats_msg *m)
{
    m->s.memory_total_bytes = UINT64_MAX;
}
static void avail_over(stats_msg *m)
{
    m->s.memory_available_bytes = 9ull << 30;
}
static void spilled_huge(stats_msg *m)
{
    m->s.store_spilled_objects = 1ull << 62;
}
static void gpu_used_over(stats_msg *m)
{
    m->g[1].memory_used_bytes = 17ull << 30;
}
static void gpu_util_over(stats_msg *m)
{
    m->g[0].utilization_percent = 150;
}
static void gpu_util_ninf(stats_msg *m)
{
    m->g[1].utilization_percent = -INFINITY;
}
static void gpu_index_twice(stats_msg *m)
{
    m->g[1].index = 0;
}
static void gpu_index_past(stats_msg *m)
{
    m->g[0].index = 99;
}
static void gpus_17(stats_msg *m)
{
    many_gpus(m, 17);
}
static void gpus_5000(stats_msg *m)
{
    many_gpus(m, 5000);
}

static const bad_case bad_cases[] = {
    {"CPU fraction -0.5", "heartbeat.stats.cpu_utilization", cpu_neg},
    {"CPU fraction 1.5", "heartbeat.stats.cpu_utilization", cpu_over},
    {"CPU fraction +Inf", "heartbeat.stats.cpu_utilization", cpu_inf},
    {"CPU fraction -Inf", "heartbeat.stats.cpu_utilization", cpu_ninf},
    {"memory 2^64-1 bytes", "heartbeat.stats.memory_total_bytes", mem_huge},
    {"available memory above the total", "heartbeat.stats.memory_available_bytes", avail_over},
    {"2^62 spilled objects", "heartbeat.stats.store_spilled_objects", spilled_huge},
    {"a GPU using more than it has", "heartbeat.stats.gpus[1].memory_used_bytes", gpu_used_over},
    {"a GPU 150 % busy", "heartbeat.stats.gpus[0].utilization_percent", gpu_util_over},
    {"a GPU -Inf % busy", "heartbeat.stats.gpus[1].utilization_percent", gpu_util_ninf},
    {"a GPU index twice", "heartbeat.stats.gpus[1].index", gpu_index_twice},
    {"GPU index 99", "heartbeat.stats.gpus[0].index", gpu_index_past},
    {"17 GPUs", "heartbeat.stats.gpus", gpus_17},
    {"5000 GPUs", "heartbeat.stats.gpus", gpus_5000},
};

/* Node A's stats as good_stats(2) made them, in page. */
static void check_a_kept(const char *a)
{
    char s[256];
    CHECK(metric(page, node_series(s, sizeof s, "ct_node_cpu_utilization", a, NULL)) == 0.25);
    CHECK(metric(page, node_series(s, sizeof s, "ct_node_memory_total_bytes", a, NULL)) ==
          (double)(8ull << 30));
    CHECK(metric(page, node_series(s, sizeof s, "ct_node_memory_used_bytes", a, NULL)) ==
          (double)(2ull << 30));
    CHECK(metric(page, node_series(s, sizeof s, "ct_node_object_store_spilled_objects", a, NULL)) ==
          3);
    CHECK(metric(page, node_series(s, sizeof s, "ct_node_gpu_memory_used_bytes", a,
                                   ",gpu=\"1\"")) == (double)(2ull << 30));
    CHECK(metric(page, node_series(s, sizeof s, "ct_node_gpu_utilization_percent", a,
                                   ",gpu=\"1\"")) == 10);
    CHECK(isnan(
        metric(page, node_series(s, sizeof s, "ct_node_gpu_memory_used_bytes", a, ",gpu=\"2\""))));
    CHECK(strstr(page, "gpu=\"99\"") == NULL);
}

/* prom_check itself: each of these pages is refused, and a good one taken. */
static void check_the_checker(void)
{
    static const char *bad[] = {
        "a 1\na 2\n",                            /* a series twice */
        "# TYPE a gauge\n# TYPE a gauge\na 1\n", /* two TYPEs */
        "a 1\nb 1\na{x=\"1\"} 2\n",              /* a's samples apart */
        "a{x=\"1\\q\"} 1\n",                     /* a bad escape */
        "a{x=\"1\",x=\"2\"} 1\n",                /* a label twice */
        "a{__x=\"1\"} 1\n",                      /* a reserved label name */
        "a{x:y=\"1\"} 1\n",                      /* ':' in a label name */
        "a NaNx\n",                              /* not a number */
        "a 1",                                   /* no newline */
        "1a 1\n",                                /* a name starting with a digit */
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 1\n", /* +Inf bucket != count */
    };
    char err[300];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (!prom_check(bad[i], err, sizeof err)) {
            fprintf(stderr, "prom_check took bad page %zu: %s\n", i, bad[i]);
            h_failures++;
        }
    CHECK(!prom_check("# HELP a x \\ y\n# TYPE a gauge\na{x=\"q\\\"\\n\"} -Inf\nb NaN\n"
                      "# TYPE h histogram\nh_bucket{j=\"1\",le=\"0.1\"} 1\n"
                      "h_bucket{j=\"1\",le=\"+Inf\"} 2\nh_sum{j=\"1\"} 0.3\nh_count{j=\"1\"} 2\n",
                      err, sizeof err));
}

static int run_bad_stats(void)
{
    check_the_checker();
    char addr[128], a[32] = "", b[32] = "", s[256];
    int dport = free_port();
    pid_t head = start_dash_head(
        (dash_head){.port = dport, .dead_ms = "60000", .log_path = log_path}, addr, sizeof addr);
    if (head < 0)
        return 1;
    peer na, nb, drv;
    CHECK_OK(peer_open(&na, addr, "node-a", NULL));
    CHECK_OK(peer_open(&nb, addr, "node-b", NULL));
    CHECK_OK(peer_open(&drv, addr, "drv", "job"));
    if (fake_node(&na, 4, a, sizeof a) || fake_node(&nb, 4, b, sizeof b)) {
        h_failures++;
        goto out;
    }
    stats_msg ma, mb;
    good_stats(&ma, 2);
    send_heartbeat(&na, a, 0, &ma.s);
    good_stats(&mb, 0);
    mb.s.cpu_utilization = 0.5;
    send_heartbeat(&nb, b, 0, &mb.s);
    CHECK(metrics_until(dport, node_series(s, sizeof s, "ct_node_cpu_utilization", b, NULL), 0.5));
    CHECK(metrics_until(dport, node_series(s, sizeof s, "ct_node_cpu_utilization", a, NULL), 0.25));
    check_a_kept(a);
    int ncases = (int)(sizeof bad_cases / sizeof bad_cases[0]);
    for (int i = 0; i < ncases; i++) {
        const bad_case *c = &bad_cases[i];
        stats_msg m;
        good_stats(&m, 2);
        c->make(&m);
        uint64_t req = send_heartbeat(&na, a, 0, &m.s);
        Ct__Envelope *r = peer_wait(&na, req, 0, 5000);
        printf("%s: %s\n", c->what,
               r && r->body_case == CT__ENVELOPE__BODY_ERROR ? r->error->message : "(no error)");
        CHECK_ERR(r, CT_EINVAL, c->field, c->field);
        stats_free(&m);
        /* the head goes on: node B's next stats show, and A's are the good ones it had */
        mb.s.cpu_utilization = 0.01 * (i + 1);
        send_heartbeat(&nb, b, 0, &mb.s);
        CHECK(metrics_until(dport, node_series(s, sizeof s, "ct_node_cpu_utilization", b, NULL),
                            0.01 * (i + 1)));
        check_a_kept(a);
        CHECK(metric(page, "ct_cluster_nodes{state=\"alive\"}") == 2);
    }
    /* an over-long sender name with bad stats: refused, the log line bounded */
    char *long_name = malloc(100001);
    if (long_name) {
        memset(long_name, 'n', 100000);
        long_name[100000] = 0;
        stats_msg m;
        good_stats(&m, 2);
        cpu_neg(&m);
        Ct__Envelope e;
        Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
        ct__envelope__init(&e);
        hb.node_id = a;
        hb.stats = &m.s;
        e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
        e.heartbeat = &hb;
        e.major = CT_PROTO_MAJOR;
        e.minor = CT_PROTO_MINOR;
        e.req_id = ++na.req;
        e.sender = long_name;
        e.token = na.token;
        CHECK_OK(ct__msg_send(na.s, NULL, &e, 0));
        CHECK_ERR(peer_wait(&na, e.req_id, 0, 5000), CT_EINVAL, "heartbeat.stats.cpu_utilization",
                  NULL);
        /* a heartbeat naming a 100 kB node id: no such node, said in a bounded message */
        uint64_t req = send_heartbeat(&na, long_name, 0, &m.s);
        Ct__Envelope *r = peer_wait(&na, req, 0, 5000);
        CHECK(r && r->body_case == CT__ENVELOPE__BODY_ERROR &&
              !strcmp(r->error->field, "heartbeat.node_id") && strlen(r->error->message) < 1100);
        ct__msg_free(r);
        free(long_name);
    }
    /* a node whose host is not UTF-8 (a byte 0xff, a lead byte without its continuation; a
     * valid euro sign after): the page stays valid, each bad byte shown as '?' */
    peer nc;
    CHECK_OK(peer_open(&nc, addr, "node-c", NULL));
    Ct__Envelope *rr = register_node_on(&nc, "bad\xff\xc3(host\xe2\x82\xac", "CPU", 1);
    CHECK(rr && rr->body_case == CT__ENVELOPE__BODY_REGISTER_NODE_REPLY);
    ct__msg_free(rr);
    CHECK(metrics_until(dport, "ct_cluster_nodes{state=\"alive\"}", 3));
    CHECK(strstr(page, "host=\"bad?"
                       "?(host\xe2\x82\xac\"") != NULL);
    peer_close(&nc);
    /* NaN is "not known": taken, and shown as absent rather than as NaN */
    stats_msg m;
    good_stats(&m, 2);
    m.s.cpu_utilization = NAN;
    m.g[1].utilization_percent = NAN;
    m.s.memory_total_bytes = 9ull << 30;
    m.s.memory_available_bytes = 9ull << 30;
    send_heartbeat(&na, a, 0, &m.s);
    CHECK(metrics_until(dport, node_series(s, sizeof s, "ct_node_memory_total_bytes", a, NULL),
                        (double)(9ull << 30)));
    CHECK(isnan(metric(page, node_series(s, sizeof s, "ct_node_cpu_utilization", a, NULL))));
    CHECK(strstr(page, "ct_node_cpu_utilization{node=\"") && strstr(page, " NaN\n") == NULL);
    CHECK(isnan(metric(
        page, node_series(s, sizeof s, "ct_node_gpu_utilization_percent", a, ",gpu=\"1\""))));
    CHECK(metric(page, node_series(s, sizeof s, "ct_node_gpu_utilization_percent", a,
                                   ",gpu=\"0\"")) == 0);
    CHECK(promtool_check(page, tmp_dir) >= 0);
    /* still serving: a ping, and node A's CPUs as it registered them */
    CHECK_OK(ping(&drv));
    CHECK(node_amount(&drv, a, "CPU", 1) == 4);
    /* the head's log names each refused field */
    char *log = read_text(log_path);
    for (int i = 0; i < ncases; i++) {
        char want[200];
        snprintf(want, sizeof want, "refused heartbeat from node-a: %s:", bad_cases[i].field);
        if (!log || !strstr(log, want)) {
            fprintf(stderr, "the head's log lacks '%s'\n", want);
            h_failures++;
        }
    }
    CHECK(log && strstr(log, "from nnnnnnnn") &&
          !strstr(log, "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"
                       "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"
                       "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"));
    free(log);
out:
    peer_close(&na);
    peer_close(&nb);
    peer_close(&drv);
    return sec_finish("head_bad_stats", head);
}

/* ---- grafana ---- */

/* A TrainReport of job "g" with every field: 4 histograms, a retry, a drain by reason
 * (drains_by: its count, may disagree with drains), a live recovery, a heal. */
typedef struct report_msg {
    Ct__Envelope e;
    Ct__TrainReport r;
    Ct__TrainRetries retry, drain, *retry_p, *drain_p[2];
    Ct__TrainHistogram h[4], *hp[4];
    Ct__TrainPoint pt, *ptp;
} report_msg;
static const double rep_bounds[2] = {0.1, 1};
static const uint64_t rep_counts[2] = {1, 0};

static Ct__Envelope *full_report(report_msg *m, uint64_t drains)
{
    static const char *hist[4] = {"step", "allreduce", "data_wait", "checkpoint"};
    memset(m, 0, sizeof *m);
    ct__envelope__init(&m->e);
    ct__train_report__init(&m->r);
    m->r.job = "g";
    m->r.step = 10;
    m->r.epoch = 1;
    m->r.loss = 0.5;
    m->r.samples_per_second = 100;
    m->r.mfu_percent = 12.5;
    m->r.replicas_alive = 2;
    ct__train_retries__init(&m->retry);
    m->retry.reason = "node_lost";
    m->retry.count = 1;
    m->retry_p = &m->retry;
    m->r.n_retries = 1;
    m->r.retries = &m->retry_p;
    ct__train_point__init(&m->pt);
    m->pt.step = 10;
    m->pt.loss = 0.5;
    m->pt.samples_per_second = 100;
    m->ptp = &m->pt;
    m->r.n_points = 1;
    m->r.points = &m->ptp;
    m->r.val_loss = 0.4;
    m->r.checkpoints = 1;
    m->r.checkpoint_step = 8;
    for (int i = 0; i < 4; i++) {
        ct__train_histogram__init(&m->h[i]);
        m->h[i].name = (char *)hist[i];
        m->h[i].n_bounds = m->h[i].n_counts = 2;
        m->h[i].bounds = (double *)rep_bounds;
        m->h[i].counts = (uint64_t *)rep_counts;
        m->h[i].count = 1;
        m->h[i].sum = 0.05;
        m->hp[i] = &m->h[i];
    }
    m->r.n_histograms = 4;
    m->r.histograms = m->hp;
    m->r.eta_seconds = 5;
    m->r.epochs = 3;
    m->r.drains = drains;
    ct__train_retries__init(&m->drain);
    m->drain.reason = "mid_epoch";
    m->drain.count = 1;
    m->drain_p[0] = m->drain_p[1] = &m->drain;
    m->r.n_drains_by_reason = 1;
    m->r.drains_by_reason = m->drain_p;
    m->r.live_recoveries = 1;
    m->r.heals = 1;
    m->r.live_recovery_what = "replica 1 died";
    m->r.heal_what = "a replacement healed";
    m->e.body_case = CT__ENVELOPE__BODY_TRAIN_REPORT;
    m->e.train_report = &m->r;
    return &m->e;
}

/* Every string under key "expr" in v, joined by newlines into b. */
static void exprs(const ct__jval *v, ct__sbuf *b)
{
    for (int i = 0; (v->type == CT__J_ARR || v->type == CT__J_OBJ) && i < v->n; i++) {
        const ct__jval *x = &v->items[i];
        if (v->type == CT__J_OBJ && !strcmp(v->keys[i], "expr") && x->type == CT__J_STR)
            ct__sb_printf(b, "%s\n", x->str);
        else
            exprs(x, b);
    }
}

/* Whether text names metric name as a whole word (or, for a histogram, name_bucket, _sum or
 * _count). */
static bool names(const char *text, const char *name, bool histogram)
{
    size_t n = strlen(name);
    for (const char *p = strstr(text, name); p; p = strstr(p + 1, name)) {
        if (p > text && name_char(p[-1], false))
            continue;
        const char *q = p + n;
        if (histogram && (!strncmp(q, "_bucket", 7) || !strncmp(q, "_count", 6)))
            q += q[1] == 'b' ? 7 : 6;
        else if (histogram && !strncmp(q, "_sum", 4))
            q += 4;
        if (!name_char(*q, false))
            return true;
    }
    return false;
}

static int run_grafana(const char *json_path)
{
    char addr[128], a[32] = "", s[256];
    int dport = free_port();
    pid_t head = start_dash_head(
        (dash_head){.port = dport, .dead_ms = "60000", .log_path = log_path}, addr, sizeof addr);
    if (head < 0)
        return 1;
    peer na, drv;
    ct__jval dash = {0};
    ct__sbuf all = {0};
    CHECK_OK(peer_open(&na, addr, "node-a", NULL));
    CHECK_OK(peer_open(&drv, addr, "drv", "job"));
    if (fake_node(&na, 4, a, sizeof a)) {
        h_failures++;
        goto out;
    }
    stats_msg ma;
    good_stats(&ma, 2);
    send_heartbeat(&na, a, 0, &ma.s);
    /* drains by reason: their counts must sum to drains, each reason once */
    report_msg m;
    CHECK_ERR(peer_call(&drv, full_report(&m, 2), 5000), CT_EINVAL, "train_report.drains_by_reason",
              NULL);
    full_report(&m, 2);
    m.r.n_drains_by_reason = 2;
    CHECK_ERR(peer_call(&drv, &m.e, 5000), CT_EINVAL, "train_report.drains_by_reason.reason", NULL);
    peer_send(&drv, full_report(&m, 1));
    CHECK(metrics_until(dport, "ct_train_step{ct_job=\"g\"}", 10));
    /* another job's report under the same label: refused (two series of one name and labels
     * would make the page invalid), and the page still shows the first job's */
    peer drv2;
    CHECK_OK(peer_open(&drv2, addr, "drv2", "job"));
    full_report(&m, 1);
    m.r.step = 99;
    CHECK_ERR(peer_call(&drv2, &m.e, 5000), CT_EEXIST, "train_report.job", "another running job");
    peer_close(&drv2);
    CHECK(metrics_until(dport, node_series(s, sizeof s, "ct_node_cpu_utilization", a, NULL), 0.25));
    CHECK(metric(page, "ct_train_step{ct_job=\"g\"}") == 10); /* not drv2's 99 */
    CHECK(metric(page, "ct_train_drains_total{ct_job=\"g\",reason=\"mid_epoch\"}") == 1);
    CHECK(metric(page, "ct_train_retries_total{ct_job=\"g\",reason=\"node_lost\"}") == 1);
    CHECK(metric(page, "ct_train_step_seconds_bucket{ct_job=\"g\",le=\"+Inf\"}") == 1);
    CHECK(strstr(page, "ct_train_drains_total{ct_job=\"g\"}") == NULL);
    CHECK(promtool_check(page, tmp_dir) >= 0);
    /* the dashboard: JSON, and each exported family in some panel's expression */
    char *text = read_text(json_path), err[200];
    if (!text || ct__json_parse(text, strlen(text), &dash, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", json_path, text ? err : "unreadable");
        h_failures++;
        free(text);
        goto out;
    }
    free(text);
    const ct__jval *panels = ct__json_get(&dash, "panels");
    CHECK(panels && panels->type == CT__J_ARR && panels->n > 0);
    if (panels)
        exprs(panels, &all);
    int nfam = 0;
    for (const char *p = strstr(page, "# TYPE "); p; p = strstr(p + 1, "\n# TYPE ")) {
        p += p[0] == '\n';
        char name[96], type[16];
        if (sscanf(p, "# TYPE %95s %15s", name, type) != 2)
            continue;
        nfam++;
        if (!all.s || !names(all.s, name, !strcmp(type, "histogram"))) {
            fprintf(stderr, "%s: no panel's expression names %s (%s)\n", json_path, name, type);
            h_failures++;
        }
    }
    printf("%d metric families exported; %s checked against them\n", nfam, json_path);
    CHECK(nfam >= 40); /* 47 when written: every family, the 4 histograms among them */
out:
    ct__json_free(&dash);
    free(all.s);
    peer_close(&na);
    peer_close(&drv);
    return sec_finish("head_grafana_names", head);
}

static void remove_tmp(void)
{
    char p[200];
    snprintf(p, sizeof p, "%s/metrics.txt", tmp_dir);
    unlink(p);
    unlink(log_path);
    rmdir(tmp_dir);
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "bad_stats") && (strcmp(argv[1], "grafana") || argc < 3))) {
        fprintf(stderr, "usage: %s bad_stats | grafana DASHBOARD.json\n", argv[0]);
        return 2;
    }
    h_init();
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/ct-test-scrape.XXXXXX");
    if (!mkdtemp(tmp_dir))
        return 1;
    atexit(remove_tmp);
    snprintf(log_path, sizeof log_path, "%s/head.log", tmp_dir);
    int rc = !strcmp(argv[1], "bad_stats") ? run_bad_stats() : run_grafana(argv[2]);
    char *log = h_failures ? read_text(log_path) : NULL;
    if (log) /* the head's log, for the failure's reader */
        fprintf(stderr, "---- the head's log ----\n%s", log);
    free(log);
    return rc;
}
