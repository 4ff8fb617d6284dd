/* common/auth.c — the cluster secret, its CURVE keys and ZAP handler, and the raw ports'
 * challenge-response (see auth.h for the protocol and who holds what).
 *
 * Not here: which sockets use it (head/, actor/, objectstore/, trainer/collective/) and where a
 * process finds its secret file (the mains, actor/api_init.c, cluster/). */
#define _GNU_SOURCE
#include "common/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/common.h"
#include "common/env.h"

static const uint8_t MAGIC[4] = {'C', 'T', 'A', '1'};

/* The secret and what is derived from it; set under mu, read after (set once at start-up). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    bool set;
    uint8_t secret[CT_SECRET_LEN];
    uint8_t server_pk[32], server_sk[32];
    uint8_t client_pk[32], client_sk[32];
    uint8_t hmac_key[32];
    uint8_t dash_token[32]; /* the dashboard's bearer token (ct__auth_dashboard_token) */
} K;

static int sodium_ready(void)
{
    if (sodium_init() < 0)
        return ct__error(CT_EIO, "auth: libsodium failed to initialize");
    return 0;
}

bool ct__auth_off(void)
{
    const char *v = ct__env(CT__ENV_AUTH);
    return v && !strcmp(v, "off");
}

/* One derived key: BLAKE2b-256 keyed with the secret, of a fixed label. */
static void derive(uint8_t out[32], const char *label)
{
    crypto_generichash(out, 32, (const uint8_t *)label, strlen(label), K.secret, CT_SECRET_LEN);
}

void ct__auth_set(const uint8_t s[CT_SECRET_LEN])
{
    if (sodium_ready())
        return;
    pthread_mutex_lock(&mu);
    memcpy(K.secret, s, CT_SECRET_LEN);
    derive(K.server_sk, "ct curve server v1");
    derive(K.client_sk, "ct curve client v1");
    derive(K.hmac_key, "ct raw port hmac v1");
    derive(K.dash_token, "ct dashboard token v1");
    crypto_scalarmult_base(K.server_pk, K.server_sk);
    crypto_scalarmult_base(K.client_pk, K.client_sk);
    __atomic_store_n(&K.set, true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mu);
}

bool ct__auth_has_secret(void)
{
    return __atomic_load_n(&K.set, __ATOMIC_ACQUIRE);
}

int ct__auth_dashboard_token(char out[CT_DASH_TOKEN_LEN + 1])
{
    if (!ct__auth_has_secret())
        return ct__error(CT_EACCES, "auth: no cluster secret: no dashboard token");
    sodium_bin2hex(out, CT_DASH_TOKEN_LEN + 1, K.dash_token, sizeof K.dash_token);
    return 0;
}

bool ct__auth_dashboard_token_ok(const char *tok, size_t len)
{
    char want[CT_DASH_TOKEN_LEN + 1];
    if (!tok || len != CT_DASH_TOKEN_LEN || ct__auth_dashboard_token(want))
        return false;
    bool ok = sodium_memcmp(want, tok, CT_DASH_TOKEN_LEN) == 0; /* constant time */
    sodium_memzero(want, sizeof want);
    return ok;
}

int ct__auth_ensure(void)
{
    int rc = sodium_ready();
    if (rc || ct__auth_has_secret())
        return rc;
    uint8_t s[CT_SECRET_LEN];
    randombytes_buf(s, sizeof s);
    ct__auth_set(s);
    sodium_memzero(s, sizeof s);
    return 0;
}

int ct__secret_file_create(const char *path)
{
    int rc = sodium_ready();
    if (rc)
        return rc;
    uint8_t s[CT_SECRET_LEN];
    char hex[2 * CT_SECRET_LEN + 2];
    randombytes_buf(s, sizeof s);
    sodium_bin2hex(hex, sizeof hex, s, sizeof s);
    sodium_memzero(s, sizeof s);
    size_t n = strlen(hex);
    hex[n++] = '\n';
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        rc = ct__error(errno == EEXIST ? CT_EEXIST : -errno, "secret file %s: %s", path,
                       strerror(errno));
        goto out;
    }
    if (write(fd, hex, n) != (ssize_t)n || fsync(fd)) {
        rc = ct__error(CT_EIO, "secret file %s: write: %s", path, strerror(errno));
        unlink(path);
    }
    close(fd);
out:
    sodium_memzero(hex, sizeof hex);
    return rc;
}

int ct__secret_file_read(const char *path, uint8_t out[CT_SECRET_LEN])
{
    int rc = sodium_ready();
    if (rc)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return ct__error(CT_EACCES, "secret file %s: %s", path, strerror(errno));
    struct stat st;
    char buf[2 * CT_SECRET_LEN + 4];
    ssize_t n = -1;
    if (fstat(fd, &st)) {
        rc = ct__error(CT_EIO, "secret file %s: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = ct__error(CT_EACCES, "secret file %s: not a regular file", path);
    } else if (st.st_uid != geteuid()) {
        rc = ct__error(CT_EACCES, "secret file %s: owned by uid %u, not by this user (uid %u)",
                       path, (unsigned)st.st_uid, (unsigned)geteuid());
    } else if (st.st_mode & 077) {
        rc = ct__error(CT_EACCES, "secret file %s: mode %03o lets group or others in; chmod 600 it",
                       path, (unsigned)(st.st_mode & 0777));
    } else if ((n = read(fd, buf, sizeof buf - 1)) < 0) {
        rc = ct__error(CT_EIO, "secret file %s: read: %s", path, strerror(errno));
    }
    close(fd);
    if (rc)
        return rc;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    buf[n] = 0;
    size_t got = 0;
    if (n != 2 * CT_SECRET_LEN ||
        sodium_hex2bin(out, CT_SECRET_LEN, buf, (size_t)n, NULL, &got, NULL) || got != 32)
        rc = ct__error(CT_EINVAL, "secret file %s: not %d hex digits (make one with `ctup secret`)",
                       path, 2 * CT_SECRET_LEN);
    sodium_memzero(buf, sizeof buf);
    return rc;
}

int ct__auth_load(const char *path)
{
    if (!path || !*path)
        path = ct__env(CT__ENV_SECRET_FILE);
    if (!path || !*path)
        return ct__error(CT_EACCES, "no cluster secret: give --secret-file FILE or set "
                                    "CT_SECRET_FILE (ctup up writes one; `ctup secret FILE` "
                                    "makes one)");
    uint8_t s[CT_SECRET_LEN];
    int rc = ct__secret_file_read(path, s);
    if (rc == 0)
        ct__auth_set(s);
    sodium_memzero(s, sizeof s);
    /* a path from the environment: name the variable too, which is what the user set */
    const char *env = ct__env(CT__ENV_SECRET_FILE);
    if (rc && env && !strcmp(env, path)) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", ct_last_error());
        rc = ct__error(rc,
                       "environment variable CT_SECRET_FILE=%s: %s (set CT_SECRET_FILE to the "
                       "cluster's secret file: `ctup up` writes one, `ctup secret FILE` makes "
                       "one)",
                       env, msg);
    }
    return rc;
}

int ct__auth_secret_pipe(void)
{
    int p[2];
    if (!ct__auth_has_secret())
        return ct__error(CT_EACCES, "auth: no cluster secret to pass on");
    if (pipe2(p, O_CLOEXEC))
        return ct__error(-errno, "auth: pipe: %s", strerror(errno));
    ssize_t w = write(p[1], K.secret, CT_SECRET_LEN); /* fits any pipe buffer */
    close(p[1]);
    if (w != CT_SECRET_LEN) {
        close(p[0]);
        return ct__error(CT_EIO, "auth: cannot write the secret pipe");
    }
    return p[0];
}

int ct__auth_load_fd(int fd)
{
    uint8_t s[CT_SECRET_LEN];
    size_t got = 0;
    while (got < sizeof s) {
        ssize_t r = read(fd, s + got, sizeof s - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (got != sizeof s)
        return ct__error(CT_EACCES, "auth: the secret pipe from the node was short");
    ct__auth_set(s);
    sodium_memzero(s, sizeof s);
    return 0;
}

/* ---- ZeroMQ CURVE ---- */

static int need_secret(const char *what)
{
    if (!ct__auth_has_secret())
        return ct__error(CT_EACCES, "%s: no cluster secret in this process", what);
    return 0;
}

int ct__auth_zmq_server(void *sock)
{
    if (ct__auth_off())
        return 0;
    int rc = need_secret("CURVE server"), one = 1;
    if (rc)
        return rc;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, K.server_sk, 32) ||
        zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "ct", 2))
        return ct__error(CT_EZMQ, "CURVE server: %s (is libzmq built with CURVE?)",
                         zmq_strerror(zmq_errno()));
    return 0;
}

int ct__auth_zmq_client(void *sock)
{
    if (ct__auth_off())
        return 0;
    int rc = need_secret("CURVE client");
    if (rc)
        return rc;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, K.server_pk, 32) ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, K.client_pk, 32) ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, K.client_sk, 32))
        return ct__error(CT_EZMQ, "CURVE client: %s", zmq_strerror(zmq_errno()));
    return 0;
}

/* ZAP (RFC 27): libzmq asks inproc://zeromq.zap.01 of the server socket's context about every
 * CURVE handshake; the answer "200" admits the peer. One handler thread per context. */
#define MAX_ZAP 8
static struct zap {
    void *ctx;
    int refs;
    pthread_t th;
    int stop[2];
    void *sock;
} zaps[MAX_ZAP];

static void *zap_main(void *arg)
{
    struct zap *z = arg;
    for (;;) {
        zmq_pollitem_t it[2] = {{z->sock, 0, ZMQ_POLLIN, 0}, {NULL, z->stop[0], ZMQ_POLLIN, 0}};
        if (zmq_poll(it, 2, -1) < 0) {
            if (zmq_errno() == EINTR)
                continue;
            break;
        }
        if (it[1].revents)
            break;
        if (!it[0].revents)
            continue;
        /* version, request id, domain, address, identity, mechanism, credentials... */
        zmq_msg_t f[8];
        int nf = 0, more = 1;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, z->sock, 0) < 0) {
                zmq_msg_close(&m);
                break;
            }
            more = zmq_msg_more(&m);
            if (nf < 8)
                f[nf++] = m;
            else
                zmq_msg_close(&m);
        }
        bool ok = nf >= 7 && zmq_msg_size(&f[5]) == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5) &&
                  zmq_msg_size(&f[6]) == 32 &&
                  sodium_memcmp(zmq_msg_data(&f[6]), K.client_pk, 32) == 0;
        const char *status = ok ? "200" : "400";
        const char *text = ok ? "OK" : "not this cluster's key";
        zmq_send(z->sock, "1.0", 3, ZMQ_SNDMORE);
        if (nf >= 2)
            zmq_send(z->sock, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
        else
            zmq_send(z->sock, "", 0, ZMQ_SNDMORE);
        zmq_send(z->sock, status, 3, ZMQ_SNDMORE);
        zmq_send(z->sock, text, strlen(text), ZMQ_SNDMORE);
        zmq_send(z->sock, "", 0, ZMQ_SNDMORE);
        zmq_send(z->sock, "", 0, 0);
        if (!ok) {
            char addr[64] = "?";
            if (nf >= 4)
                snprintf(addr, sizeof addr, "%.*s", (int)zmq_msg_size(&f[3]),
                         (const char *)zmq_msg_data(&f[3]));
            CT_LOG(CT_LOG_WARN, "auth", "refused a ZeroMQ peer from %s: not this cluster's key",
                   addr);
        }
        for (int i = 0; i < nf; i++)
            zmq_msg_close(&f[i]);
    }
    zmq_close(z->sock);
    return NULL;
}

int ct__auth_zap_start(void *zctx)
{
    if (ct__auth_off())
        return 0;
    int rc = 0;
    pthread_mutex_lock(&mu);
    struct zap *z = NULL, *free_slot = NULL;
    for (int i = 0; i < MAX_ZAP; i++) {
        if (zaps[i].ctx == zctx)
            z = &zaps[i];
        else if (!zaps[i].ctx && !free_slot)
            free_slot = &zaps[i];
    }
    if (z) {
        z->refs++;
        goto out;
    }
    if (!free_slot) {
        rc = ct__error(CT_ENOSPC, "auth: more than %d ZeroMQ contexts with a ZAP handler", MAX_ZAP);
        goto out;
    }
    z = free_slot;
    *z = (struct zap){.ctx = zctx, .refs = 1, .stop = {-1, -1}};
    int zero = 0;
    z->sock = zmq_socket(zctx, ZMQ_REP);
    if (!z->sock || zmq_setsockopt(z->sock, ZMQ_LINGER, &zero, sizeof zero) ||
        zmq_bind(z->sock, "inproc://zeromq.zap.01")) {
        rc = ct__error(CT_EZMQ, "auth: ZAP handler: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (pipe2(z->stop, O_CLOEXEC)) {
        rc = ct__error(-errno, "auth: pipe: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&z->th, NULL, zap_main, z)) {
        rc = ct__error(CT_ENOMEM, "auth: cannot start the ZAP thread");
        goto fail;
    }
    goto out;
fail:
    if (z->sock)
        zmq_close(z->sock);
    if (z->stop[0] >= 0) {
        close(z->stop[0]);
        close(z->stop[1]);
    }
    *z = (struct zap){0};
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

void ct__auth_zap_stop(void *zctx)
{
    if (ct__auth_off())
        return;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_ZAP; i++) {
        struct zap *z = &zaps[i];
        if (z->ctx != zctx || --z->refs > 0)
            continue;
        close(z->stop[1]);
        pthread_join(z->th, NULL);
        close(z->stop[0]);
        *z = (struct zap){0};
    }
    pthread_mutex_unlock(&mu);
}

/* ---- challenge-response ---- */

static void mac(uint8_t out[32], const char *label, const uint8_t nonce_c[32],
                const uint8_t nonce_s[32])
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, K.hmac_key, sizeof K.hmac_key);
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, strlen(label));
    crypto_auth_hmacsha256_update(&st, nonce_c, 32);
    crypto_auth_hmacsha256_update(&st, nonce_s, 32);
    crypto_auth_hmacsha256_final(&st, out);
}

static int ready(void)
{
    int rc = sodium_ready();
    return rc ? rc : need_secret("raw port");
}

int ct__auth_client_start(uint8_t c1[CT_AUTH_C1_LEN], uint8_t state[CT_AUTH_STATE_LEN])
{
    int rc = ready();
    if (rc)
        return rc;
    randombytes_buf(state, 32);
    memcpy(c1, MAGIC, 4);
    memcpy(c1 + 4, state, 32);
    return 0;
}

int ct__auth_client_finish(uint8_t state[CT_AUTH_STATE_LEN], const uint8_t s1[CT_AUTH_S1_LEN],
                           uint8_t c2[CT_AUTH_C2_LEN])
{
    uint8_t want[32];
    if (memcmp(s1, MAGIC, 4))
        return CT_EACCES;
    memcpy(state + 32, s1 + 4, 32);
    mac(want, "ct-srv", state, state + 32);
    if (crypto_verify_32(want, s1 + 36))
        return CT_EACCES;
    mac(c2, "ct-cli", state, state + 32);
    return 0;
}

int ct__auth_server_answer(const uint8_t c1[CT_AUTH_C1_LEN], uint8_t s1[CT_AUTH_S1_LEN],
                           uint8_t state[CT_AUTH_STATE_LEN])
{
    int rc = ready();
    if (rc)
        return rc;
    if (memcmp(c1, MAGIC, 4))
        return CT_EACCES;
    memcpy(state, c1 + 4, 32);
    randombytes_buf(state + 32, 32);
    memcpy(s1, MAGIC, 4);
    memcpy(s1 + 4, state + 32, 32);
    mac(s1 + 36, "ct-srv", state, state + 32);
    return 0;
}

int ct__auth_server_check(const uint8_t state[CT_AUTH_STATE_LEN], const uint8_t c2[CT_AUTH_C2_LEN])
{
    uint8_t want[32];
    mac(want, "ct-cli", state, state + 32);
    return crypto_verify_32(want, c2) ? CT_EACCES : 0;
}

/* Exact sends and receives before a deadline (ct__now_ms clock). */
static int io_exact(int fd, void *buf, size_t n, bool out, int64_t deadline)
{
    uint8_t *p = buf;
    while (n) {
        int left = (int)(deadline - ct__now_ms());
        struct pollfd pf = {fd, out ? POLLOUT : POLLIN, 0};
        if (left <= 0)
            return CT_ETIMEDOUT;
        int r = poll(&pf, 1, left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r == 0 ? CT_ETIMEDOUT : CT_ECONNRESET;
        ssize_t k =
            out ? send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p, n, MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            return CT_ECONNRESET;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int ct__auth_accept(int fd, int timeout_ms)
{
    if (ct__auth_off())
        return 0;
    int64_t deadline = ct__now_ms() + timeout_ms;
    uint8_t c1[CT_AUTH_C1_LEN], s1[CT_AUTH_S1_LEN], c2[CT_AUTH_C2_LEN], st[CT_AUTH_STATE_LEN];
    int rc = io_exact(fd, c1, sizeof c1, false, deadline);
    if (rc)
        return ct__error(rc, "auth: no greeting from the peer: %s", ct_strerror(rc));
    if ((rc = ct__auth_server_answer(c1, s1, st)))
        return rc == CT_EACCES ? ct__error(rc, "auth: the peer does not speak ct's handshake") : rc;
    if ((rc = io_exact(fd, s1, sizeof s1, true, deadline)) ||
        (rc = io_exact(fd, c2, sizeof c2, false, deadline)))
        return ct__error(rc, "auth: the peer left during the handshake: %s", ct_strerror(rc));
    if (ct__auth_server_check(st, c2))
        return ct__error(CT_EACCES, "auth: a peer without this cluster's secret was refused");
    return 0;
}

int ct__auth_connect(int fd, int timeout_ms)
{
    if (ct__auth_off())
        return 0;
    int64_t deadline = ct__now_ms() + timeout_ms;
    uint8_t c1[CT_AUTH_C1_LEN], s1[CT_AUTH_S1_LEN], c2[CT_AUTH_C2_LEN], st[CT_AUTH_STATE_LEN];
    int rc = ct__auth_client_start(c1, st);
    if (rc)
        return rc;
    if ((rc = io_exact(fd, c1, sizeof c1, true, deadline)) ||
        (rc = io_exact(fd, s1, sizeof s1, false, deadline)))
        return ct__error(rc == CT_ECONNRESET ? CT_EACCES : rc,
                         "auth: the server did not answer the handshake (%s): not a ct server, "
                         "or it refused this process's secret",
                         ct_strerror(rc));
    if (ct__auth_client_finish(st, s1, c2))
        return ct__error(CT_EACCES, "auth: the server does not hold this cluster's secret");
    if ((rc = io_exact(fd, c2, sizeof c2, true, deadline)))
        return ct__error(rc, "auth: the server left during the handshake: %s", ct_strerror(rc));
    return 0;
}
