/* tests/data/test_tokenizer.c — the BPE tokenizer and token files (trainer/data/tokenizer.c,
 * text.c): merges learned from a hand-computed example; merges and ids equal to a pure-Python
 * minbpe-style reference (run here with /usr/bin/python3) on a few KB; encode/decode round-trip
 * byte-identical on 300 kB of the King James Bible (a generated text without bible-kjv), also
 * after save and load; bad vocabulary files rejected with file:line messages; a token file's
 * windows equal to the encoded ids at the right offsets for both splits of 2 ranks. */
#define _DEFAULT_SOURCE
#include <stdlib.h>
#include <unistd.h>

#include "ct/data.h"
#include "tests/data/check.h"

/* minbpe's BasicTokenizer, ties broken by the smallest pair: prints the merges, then the ids */
static const char *reference_py =
    "import sys\n"
    "ids = list(open(sys.argv[1], 'rb').read())\n"
    "text = list(ids)\n"
    "merges = []\n"
    "def merge(ids, pair, idx):\n"
    "    out, i = [], 0\n"
    "    while i < len(ids):\n"
    "        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:\n"
    "            out.append(idx); i += 2\n"
    "        else:\n"
    "            out.append(ids[i]); i += 1\n"
    "    return out\n"
    "for k in range(int(sys.argv[2])):\n"
    "    stats = {}\n"
    "    for p in zip(ids, ids[1:]):\n"
    "        stats[p] = stats.get(p, 0) + 1\n"
    "    pair = min(stats, key=lambda p: (-stats[p], p))\n"
    "    merges.append(pair)\n"
    "    ids = merge(ids, pair, 256 + k)\n"
    "print(' '.join('%d,%d' % p for p in merges))\n"
    "enc = text\n" /* minbpe's encode: the lowest-ranked pair present, until none is */
    "rank = {p: i for i, p in enumerate(merges)}\n"
    "while len(enc) >= 2:\n"
    "    pair = min(set(zip(enc, enc[1:])), key=lambda p: rank.get(p, 1 << 30))\n"
    "    if pair not in rank: break\n"
    "    enc = merge(enc, pair, 256 + rank[pair])\n"
    "print(' '.join(map(str, enc)))\n";

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n);
    if (f)
        fclose(f);
}

/* "aaabdaaabac": aa (4, overlapping) -> 256; then (a,b) and (256,a) both 2: the smaller (a,b)
 * -> 257; (256,257) 2 -> 258; then all pairs once: the smallest, (a,c) -> 259. */
static void hand_example(void)
{
    const char *s = "aaabdaaabac";
    ct_tokenizer *tk = NULL;
    CHECK(ct_tokenizer_learn((const unsigned char *)s, 11, 4, &tk) == 0);
    static const int32_t want[4][2] = {{97, 97}, {97, 98}, {256, 257}, {97, 99}};
    for (int i = 0; i < 4 && tk; i++) {
        int32_t a = -1, b = -1;
        CHECK(ct_tokenizer_merge(tk, i, &a, &b) == 0);
        CHECK_EQ(a, want[i][0]);
        CHECK_EQ(b, want[i][1]);
    }
    int32_t ids[11];
    CHECK_EQ(ct_tokenizer_encode(tk, (const unsigned char *)s, 11, ids), 4);
    CHECK_EQ(ids[0], 258);
    CHECK_EQ(ids[1], 'd');
    CHECK_EQ(ids[2], 258);
    CHECK_EQ(ids[3], 259);
    CHECK_EQ(ct_tokenizer_token_bytes(tk, 258, NULL), 4); /* "aaab" */
    CHECK_EQ(ct_tokenizer_vocab_size(tk), 260);
    ct_tokenizer_destroy(&tk);
    CHECK(ct_tokenizer_learn((const unsigned char *)"ab", 2, 5, &tk) == 0); /* stops at one id */
    CHECK_EQ(ct_tokenizer_vocab_size(tk), 257);
    ct_tokenizer_destroy(&tk);
    CHECK(tk == NULL);
}

/* words drawn from a small list: repetitive, like text */
static size_t gen_text(unsigned char *buf, size_t n, uint64_t seed)
{
    static const char *words[] = {"the ",   "and ",  "of ", "LORD ", "unto ",   "said, ", "in ",
                                  "shall ", "that ", "he ", "his ",  "thee.\n", "was ",   "God "};
    size_t len = 0;
    while (len + 8 < n) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        const char *w = words[(seed >> 20) % (sizeof words / sizeof words[0])];
        memcpy(buf + len, w, strlen(w));
        len += strlen(w);
    }
    return len;
}

static void python_reference(const char *dir)
{
    enum { N = 4000, MERGES = 40 };
    unsigned char text[N];
    size_t n = gen_text(text, N, 99);
    for (size_t i = 0; i < n; i += 97) /* some bytes outside ASCII */
        text[i] = (unsigned char)(200 + i % 50);
    char tpath[300], ppath[300], cmd[1000];
    snprintf(tpath, sizeof tpath, "%s/ref.txt", dir);
    snprintf(ppath, sizeof ppath, "%s/ref.py", dir);
    write_file(tpath, text, n);
    write_file(ppath, reference_py, strlen(reference_py));
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s %d", ppath, tpath, MERGES);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    if (!p)
        return;
    ct_tokenizer *tk = NULL;
    CHECK(ct_tokenizer_learn(text, (int64_t)n, MERGES, &tk) == 0);
    int32_t *ids = malloc(sizeof(int32_t) * n);
    int64_t m = ct_tokenizer_encode(tk, text, (int64_t)n, ids);
    int k = 0, a, b;
    char c = 0;
    while (fscanf(p, "%d,%d%c", &a, &b, &c) == 3) {
        int32_t ca = -1, cb = -1;
        CHECK(ct_tokenizer_merge(tk, k, &ca, &cb) == 0);
        if (ca != a || cb != b)
            fprintf(stderr, "merge %d: C (%d,%d), Python (%d,%d)\n", k, ca, cb, a, b);
        CHECK(ca == a && cb == b);
        k++;
        if (c == '\n')
            break;
    }
    CHECK_EQ(k, MERGES);
    int64_t j = 0;
    int id;
    while (fscanf(p, "%d", &id) == 1) {
        CHECK(j < m && ids[j] == id);
        j++;
    }
    CHECK_EQ(j, m);
    CHECK(m < (int64_t)n / 2); /* the merges compress */
    CHECK_EQ(pclose(p), 0);
    free(ids);
    ct_tokenizer_destroy(&tk);
}

/* text: the Bible's first 300 kB, or a generated text */
static unsigned char *load_text(size_t *n)
{
    size_t cap = 300000;
    unsigned char *buf = malloc(cap);
    *n = 0;
    FILE *p = access("/usr/games/bible", X_OK) == 0 || access("/usr/bin/bible", X_OK) == 0
                  ? popen("COLUMNS=80 bible Genesis1:1-Revelation22:21 2>/dev/null", "r")
                  : NULL;
    if (p) {
        *n = fread(buf, 1, cap, p);
        pclose(p); /* bible may die of SIGPIPE: we have what we read */
    }
    if (*n < cap) {
        printf("no bible-kjv: a generated text\n");
        *n = gen_text(buf, cap, 7);
    }
    return buf;
}

static void round_trip(const char *dir, const unsigned char *text, size_t n, ct_tokenizer *tk)
{
    int32_t *ids = malloc(sizeof(int32_t) * n), *ids2 = malloc(sizeof(int32_t) * n);
    unsigned char *back = malloc(n);
    int64_t m = ct_tokenizer_encode(tk, text, (int64_t)n, ids);
    CHECK(m > 0 && m < (int64_t)n * 2 / 3); /* 256 merges on English: well under 2/3 */
    CHECK_EQ(ct_tokenizer_decode(tk, ids, m, back, (int64_t)n), (int64_t)n);
    CHECK(memcmp(back, text, n) == 0);
    CHECK_EQ(ct_tokenizer_decode(tk, ids, m, back, 10), (int64_t)n); /* a prefix fits */
    int32_t bad = 99999;
    CHECK_EQ(ct_tokenizer_decode(tk, &bad, 1, back, 10), CT_ERANGE);
    /* save, load: the same merges, the same ids */
    char vpath[300];
    snprintf(vpath, sizeof vpath, "%s/v.bpe", dir);
    CHECK(ct_tokenizer_save(tk, vpath) == 0);
    ct_tokenizer *tk2 = NULL;
    CHECK(ct_tokenizer_load(vpath, &tk2) == 0);
    CHECK_EQ(ct_tokenizer_vocab_size(tk2), ct_tokenizer_vocab_size(tk));
    CHECK_EQ(ct_tokenizer_encode(tk2, text, (int64_t)n, ids2), m);
    CHECK(memcmp(ids, ids2, sizeof(int32_t) * (size_t)m) == 0);
    ct_tokenizer_destroy(&tk2);
    /* byte-level: ids are the bytes */
    ct_tokenizer *bytes = NULL;
    CHECK(ct_tokenizer_new_bytes(&bytes) == 0);
    CHECK_EQ(ct_tokenizer_vocab_size(bytes), 256);
    CHECK_EQ(ct_tokenizer_encode(bytes, text, (int64_t)n, ids2), (int64_t)n);
    CHECK(ids2[5] == text[5] && ids2[n - 1] == text[n - 1]);
    ct_tokenizer_destroy(&bytes);
    free(ids);
    free(ids2);
    free(back);
}

static void bad_file(const char *dir, const char *content, int code, const char *msg)
{
    char path[300], want[400];
    snprintf(path, sizeof path, "%s/bad.bpe", dir);
    write_file(path, content, strlen(content));
    ct_tokenizer *tk = (ct_tokenizer *)1;
    CHECK_EQ(ct_tokenizer_load(path, &tk), code);
    CHECK(tk == NULL);
    snprintf(want, sizeof want, "%s%s", path, msg);
    if (!strstr(ct_last_error(), want))
        fprintf(stderr, "want \"%s\" in \"%s\"\n", want, ct_last_error());
    CHECK(strstr(ct_last_error(), want) != NULL);
}

static void bad_files(const char *dir)
{
    bad_file(dir, "ct-bpe 2 1\n97 97\n", CT_EINVAL, ":1: not a ct BPE vocabulary");
    bad_file(dir, "ct-bpe 1 x\n", CT_EINVAL, ":1: not a ct BPE vocabulary");
    bad_file(dir, "ct-bpe 1 2\n97 97\n97 x\n", CT_EINVAL,
             ":3: a merge must be two ids `a b`, not \"97 x\"");
    bad_file(dir, "ct-bpe 1 2\n97 97\n256 257\n", CT_EINVAL,
             ":3: merge 1 (id 257) names id 257, not below 257");
    bad_file(dir, "ct-bpe 1 3\n97 97\n98 98\n", CT_EINVAL,
             ":4: the file ends after 2 merges of the 3 its header says");
    bad_file(dir, "ct-bpe 1 1\n97 97\n98 98\n", CT_EINVAL,
             ":3: more lines than the 1 merges the header says");
    ct_tokenizer *tk = NULL;
    CHECK_EQ(ct_tokenizer_load("/nonexistent/v.bpe", &tk), CT_ENOENT);
    /* a good file without a final newline loads */
    char path[300];
    snprintf(path, sizeof path, "%s/ok.bpe", dir);
    write_file(path, "ct-bpe 1 2\n97 97\n256 98", 23);
    CHECK(ct_tokenizer_load(path, &tk) == 0);
    CHECK_EQ(ct_tokenizer_vocab_size(tk), 258);
    ct_tokenizer_destroy(&tk);
}

/* every window of both splits of 2 ranks: the encoded ids at the right offsets */
static void token_windows(const char *dir, const unsigned char *text, size_t n, ct_tokenizer *tk)
{
    enum { T = 24 };
    char tpath[300], kpath[300];
    snprintf(tpath, sizeof tpath, "%s/t.txt", dir);
    snprintf(kpath, sizeof kpath, "%s/t.tok", dir);
    n = n < 60000 ? n : 60000;
    write_file(tpath, text, n);
    ct_tokens_info info = {0}, info2 = {0};
    CHECK(ct_tokens_write_file(tk, tpath, kpath, &info) == 0);
    CHECK(ct_tokens_read_info(kpath, &info2) == 0);
    int32_t *ids = malloc(sizeof(int32_t) * n);
    int64_t m = ct_tokenizer_encode(tk, text, (int64_t)n, ids);
    CHECK_EQ(info.n_tokens, m);
    CHECK_EQ(info2.n_tokens, m);
    CHECK_EQ(info2.n_bytes, (int64_t)n);
    CHECK_EQ(info2.vocab_size, ct_tokenizer_vocab_size(tk));
    int64_t split = (int64_t)((double)m * 0.9), windows = 0;
    for (int val = 0; val < 2; val++)
        for (int r = 0; r < 2; r++) {
            ct_text_opts o = {
                .block_size = T, .rank = r, .world_size = 2, .val_fraction = 0.1, .val = val};
            ct_dataset *ds = NULL;
            CHECK(ct_dataset_open_tokens(kpath, &o, &ds) == 0);
            if (!ds)
                continue;
            int64_t lo = val ? split : 0, len = val ? m - split : split;
            int64_t s0 = lo + len * r / 2, s1 = lo + len * (r + 1) / 2;
            CHECK_EQ(ct_dataset_length(ds), (s1 - s0 - 1) / T);
            float x[T], y[T];
            for (int64_t i = 0; i < ct_dataset_length(ds); i++, windows++) {
                CHECK(ct_dataset_get_target(ds, i, x, y) == 0);
                int64_t s = s0 + i * T;
                for (int t = 0; t < T; t++) {
                    if ((int64_t)x[t] != ids[s + t] || (int64_t)y[t] != ids[s + t + 1]) {
                        fprintf(stderr, "val %d rank %d window %lld t %d: (%g, %g) vs (%d, %d)\n",
                                val, r, (long long)i, t, x[t], y[t], ids[s + t], ids[s + t + 1]);
                        check_failures++;
                        t = T, i = ct_dataset_length(ds);
                    }
                }
            }
            ct_dataset_destroy(&ds);
        }
    CHECK(windows > (m - 4 * T) / T - 4);
    ct_dataset *ds = NULL;
    ct_text_opts o = {.block_size = T, .world_size = 1};
    CHECK_ERR(ct_dataset_open_tokens(tpath, &o, &ds), CT_EINVAL, "is not a token file");
    o.block_size = m;
    CHECK_ERR(ct_dataset_open_tokens(kpath, &o, &ds), CT_EINVAL, "tokens, fewer than a window");
    free(ids);
}

int main(void)
{
    char dir[] = "/tmp/ct-tok-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    hand_example();
    python_reference(dir);
    size_t n = 0;
    unsigned char *text = load_text(&n);
    ct_tokenizer *tk = NULL;
    CHECK(ct_tokenizer_learn(text, (int64_t)n, 256, &tk) == 0);
    CHECK_EQ(ct_tokenizer_vocab_size(tk), 512);
    if (tk) {
        round_trip(dir, text, n, tk);
        token_windows(dir, text, n, tk);
    }
    bad_files(dir);
    ct_tokenizer_destroy(&tk);
    free(text);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    if (check_failures)
        fprintf(stderr, "%d failure(s)\n", check_failures);
    else
        printf("tokenizer: ok\n");
    return check_failures != 0;
}
