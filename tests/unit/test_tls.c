/* net/tls.c and net/tls_ctx.c: the TLS transport and the listener's
 * contexts, driven over a socketpair against an in-process OpenSSL client.
 * Certificates (a CA, ECDSA P-256 and RSA leaves) are made at run time in
 * a temporary directory. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "loop/loop.h"
#include "worker.h"
#include "net/tls.h"

static char dir[64];
static EVP_PKEY *ca_key;
static X509 *ca_cert;
static char def_crt[128], def_key[128], api_crt[128], api_key[128], cn_crt[128], cn_key[128],
    def2_crt[128], tmpfile_path[128];

#define CLIENT_FAILED 1000
#define SERVER_EOF    1001
#define TIMED_OUT     1002

/* ---- certificates ------------------------------------------------------- */

static X509 *make_cert(EVP_PKEY *key, const char *cn, const char *san, bool ca)
{
    static long serial = 1;
    X509 *x = X509_new();
    assert_non_null(x);
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, key);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(x, ca ? name : X509_get_subject_name(ca_cert));
    X509V3_CTX v3;
    X509V3_set_ctx(&v3, ca ? x : ca_cert, x, NULL, NULL, 0);
    X509_EXTENSION *ext =
        X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, ca ? "critical,CA:TRUE" : "CA:FALSE");
    assert_non_null(ext);
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    if (san != NULL) {
        ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, san);
        assert_non_null(ext);
        X509_add_ext(x, ext, -1);
        X509_EXTENSION_free(ext);
    }
    assert_true(X509_sign(x, ca ? key : ca_key, EVP_sha256()) > 0);
    return x;
}

static void write_pem(const char *path, X509 *leaf, EVP_PKEY *key)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    if (leaf != NULL) {
        assert_true(PEM_write_X509(f, leaf));
        assert_true(PEM_write_X509(f, ca_cert)); /* the chain */
    } else {
        assert_true(PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL));
    }
    fclose(f);
}

static void make_leaf(char *crt, char *keyp, const char *base, EVP_PKEY *key, const char *cn,
                      const char *san)
{
    snprintf(crt, 128, "%s/%s.crt", dir, base);
    snprintf(keyp, 128, "%s/%s.key", dir, base);
    X509 *x = make_cert(key, cn, san, false);
    write_pem(crt, x, NULL);
    write_pem(keyp, NULL, key);
    X509_free(x);
}

static int setup_all(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    snprintf(dir, sizeof(dir), "/tmp/flare-tls-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    ca_key = EVP_EC_gen("P-256");
    ca_cert = make_cert(ca_key, "Flare Test CA", NULL, true);
    EVP_PKEY *def = EVP_EC_gen("P-256"), *api = EVP_EC_gen("P-256"), *rsa = EVP_RSA_gen(2048);
    if (def == NULL || api == NULL || rsa == NULL)
        return -1;
    make_leaf(def_crt, def_key, "def", def, "default.test", "DNS:default.test,DNS:localhost");
    make_leaf(api_crt, api_key, "api", api, "api.example.com",
              "DNS:api.example.com,DNS:*.example.org");
    make_leaf(cn_crt, cn_key, "cn", rsa, "cn-only.test", NULL);
    /* a second certificate for the default key, for reloads */
    char unused[128];
    make_leaf(def2_crt, unused, "def2", def, "default2.test", "DNS:default2.test");
    EVP_PKEY_free(def);
    EVP_PKEY_free(api);
    EVP_PKEY_free(rsa);
    snprintf(tmpfile_path, sizeof(tmpfile_path), "%s/file.bin", dir);
    return 0;
}

static int teardown_all(void **state)
{
    (void)state;
    const char *names[] = { "def.crt", "def.key",  "api.crt",  "api.key",  "cn.crt",
                            "cn.key",  "def2.crt", "def2.key", "file.bin", "moved.crt" };
    char p[160];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
    X509_free(ca_cert);
    EVP_PKEY_free(ca_key);
    return 0;
}

static void copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "r"), *b = fopen(to, "w");
    assert_non_null(a);
    assert_non_null(b);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), a)) > 0)
        assert_int_equal(fwrite(buf, 1, n, b), n);
    fclose(a);
    fclose(b);
}

/* ---- server and client -------------------------------------------------- */

static flare_tls_config_t base_cfg(void)
{
    static flare_tls_cert_t more[2];
    more[0] = (flare_tls_cert_t){ api_crt, api_key };
    more[1] = (flare_tls_cert_t){ cn_crt, cn_key };
    return (flare_tls_config_t){ .cert_file = def_crt,
                                 .key_file = def_key,
                                 .more_certs = more,
                                 .nmore_certs = 2,
                                 .alpn = "h2,http/1.1" };
}

static flare_tls_t *server(const flare_tls_config_t *cfg)
{
    flare_tls_t *t = NULL;
    int rc = flare__tls_new(&t, cfg);
    if (rc != 0)
        fprintf(stderr, "flare__tls_new: %s\n", flare_last_error());
    assert_int_equal(rc, 0);
    assert_non_null(t);
    return t;
}

static SSL_CTX *client_ctx(int minv, int maxv)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(ctx);
    if (minv != 0 && minv < TLS1_2_VERSION) {
        SSL_CTX_set_security_level(ctx, 0);
        assert_int_equal(SSL_CTX_set_cipher_list(ctx, "DEFAULT:@SECLEVEL=0"), 1);
    }
    if (minv != 0)
        SSL_CTX_set_min_proto_version(ctx, minv);
    if (maxv != 0)
        SSL_CTX_set_max_proto_version(ctx, maxv);
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca_cert);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    return ctx;
}

typedef struct conn {
    int sfd, cfd;
    flare_transport_t *tr;
    SSL *cl;
    int cwant; /* SSL_ERROR_WANT_* of the client's last call */
    bool cdone;
} conn_t;

static void conn_open(conn_t *c, flare_tls_t *t, flare_tls_counters_t *ctr, SSL_CTX *cctx,
                      const char *sni, const char *alpn, size_t alpn_len, SSL_SESSION *sess)
{
    memset(c, 0, sizeof(*c));
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    c->sfd = sv[0];
    c->cfd = sv[1];
    c->tr = flare__tls_accept(t, c->sfd, ctr);
    assert_non_null(c->tr);
    assert_int_equal(c->tr->fd, c->sfd);
    c->cl = SSL_new(cctx);
    assert_non_null(c->cl);
    SSL_set_fd(c->cl, c->cfd);
    SSL_set_connect_state(c->cl);
    if (sni != NULL) {
        SSL_set_tlsext_host_name(c->cl, sni);
        SSL_set1_host(c->cl, sni); /* and the client checks the certificate's names */
    }
    if (alpn != NULL)
        assert_int_equal(
            SSL_set_alpn_protos(c->cl, (const unsigned char *)alpn, (unsigned)alpn_len), 0);
    if (sess != NULL)
        assert_int_equal(SSL_set_session(c->cl, sess), 1);
}

static void conn_close(conn_t *c)
{
    if (c->tr != NULL)
        c->tr->ops->free(c->tr);
    if (c->cl != NULL) {
        /* OpenSSL marks a session not resumable when its connection goes
         * without close_notify sent: this client just hangs up */
        if (c->cdone)
            SSL_set_shutdown(c->cl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
        SSL_free(c->cl);
    }
    close(c->sfd);
    close(c->cfd);
    ERR_clear_error();
    memset(c, 0, sizeof(*c));
    c->sfd = c->cfd = -1;
}

/* Waits until a side can move; false after 2 s of nothing. */
static bool wait_either(conn_t *c, bool server, bool client)
{
    struct pollfd p[2];
    int n = 0;
    if (server) {
        short ev = 0;
        if (c->tr->want & FLARE_IO_READ)
            ev |= POLLIN;
        if (c->tr->want & FLARE_IO_WRITE)
            ev |= POLLOUT;
        p[n++] = (struct pollfd){ .fd = c->sfd, .events = ev };
    }
    if (client)
        p[n++] = (struct pollfd){ .fd = c->cfd,
                                  .events = c->cwant == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN };
    return poll(p, (nfds_t)n, 2000) > 0;
}

/* Both handshakes: 0, the server's error (< 0), CLIENT_FAILED, SERVER_EOF
 * or TIMED_OUT. */
static int handshake(conn_t *c)
{
    char buf[64];
    for (int it = 0; it < 10000; it++) {
        if (!c->cdone) {
            int r = SSL_do_handshake(c->cl);
            if (r == 1) {
                c->cdone = true;
            } else {
                c->cwant = SSL_get_error(c->cl, r);
                if (c->cwant != SSL_ERROR_WANT_READ && c->cwant != SSL_ERROR_WANT_WRITE) {
                    /* drain what the server says before giving the verdict */
                    ssize_t s = c->tr->ops->read(c->tr, buf, sizeof(buf));
                    (void)s;
                    ERR_clear_error();
                    return CLIENT_FAILED;
                }
            }
        }
        bool sdone = (c->tr->state & FLARE_TR_ESTABLISHED) != 0;
        if (!sdone) {
            ssize_t r = c->tr->ops->read(c->tr, buf, sizeof(buf));
            sdone = (c->tr->state & FLARE_TR_ESTABLISHED) != 0;
            if (!sdone && r != -EAGAIN)
                return r < 0 ? (int)r : SERVER_EOF;
            if (r > 0)
                fail_msg("application data during the handshake");
        }
        if (c->cdone && sdone)
            return 0;
        if (!wait_either(c, !sdone, !c->cdone))
            return TIMED_OUT;
    }
    return TIMED_OUT;
}

/* Server -> client: bytes through writev (pieces of the payload), checked
 * at the client. Returns how many writev calls said -EAGAIN. */
static int server_send(conn_t *c, const char *data, size_t len, const size_t *cuts, size_t ncuts)
{
    char *got = malloc(len + 1);
    assert_non_null(got);
    size_t sent = 0, recvd = 0;
    int again = 0;
    while (recvd < len) {
        bool swait = false;
        if (sent < len) {
            /* the vector: the payload cut at `cuts`, from `sent` on */
            struct iovec iov[16];
            int n = 0;
            size_t pos = sent;
            for (size_t i = 0; i <= ncuts && n < 16 && pos < len; i++) {
                size_t end = i < ncuts ? cuts[i] : len;
                if (end <= pos)
                    continue;
                iov[n++] = (struct iovec){ (void *)(data + pos), end - pos };
                pos = end;
            }
            ssize_t w = c->tr->ops->writev(c->tr, iov, n, false);
            if (w == -EAGAIN) {
                again++;
                swait = true;
            } else {
                assert_true(w > 0);
                assert_true((size_t)w <= len - sent);
                sent += (size_t)w;
            }
        }
        size_t got_now;
        int r = SSL_read_ex(c->cl, got + recvd, len - recvd, &got_now);
        if (r == 1) {
            recvd += got_now;
            continue;
        }
        c->cwant = SSL_get_error(c->cl, r);
        assert_int_equal(c->cwant, SSL_ERROR_WANT_READ);
        if (swait || sent == len)
            assert_true(wait_either(c, swait, true));
    }
    assert_memory_equal(got, data, len);
    free(got);
    return again;
}

/* Client -> server, read by the transport in chunks of `chunk`. */
static void client_send(conn_t *c, const char *data, size_t len, size_t chunk)
{
    size_t done;
    assert_int_equal(SSL_write_ex(c->cl, data, len, &done), 1);
    assert_int_equal(done, len);
    char *got = malloc(len);
    size_t recvd = 0;
    while (recvd < len) {
        ssize_t r = c->tr->ops->read(c->tr, got + recvd, chunk < len - recvd ? chunk : len - recvd);
        if (r == -EAGAIN) {
            assert_true(wait_either(c, true, false));
            continue;
        }
        assert_true(r > 0);
        recvd += (size_t)r;
    }
    assert_memory_equal(got, data, len);
    free(got);
}

/* A round trip, so a TLS 1.3 client has read the server's tickets; then
 * the session to resume with (caller frees). */
static SSL_SESSION *session_of(conn_t *c)
{
    static const size_t none[1];
    server_send(c, "x", 1, none, 0);
    SSL_SESSION *s = SSL_get1_session(c->cl);
    assert_non_null(s);
    assert_true(SSL_SESSION_is_resumable(s));
    return s;
}

static void peer_cn(conn_t *c, char *out, size_t n)
{
    X509 *x = SSL_get1_peer_certificate(c->cl);
    assert_non_null(x);
    assert_true(X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, out, (int)n) >
                0);
    X509_free(x);
}

static unsigned long long get(_Atomic unsigned long long *v)
{
    return atomic_load(v);
}

/* ---- tests -------------------------------------------------------------- */

static void test_versions(void **state)
{
    (void)state;
    flare_tls_config_t cfg = base_cfg();
    flare_tls_t *t = server(&cfg);
    flare_tls_counters_t ctr = { 0 };
    assert_int_equal(flare__tls_handshake_timeout(t), 10000);

    SSL_CTX *c13 = client_ctx(0, 0), *c12 = client_ctx(0, TLS1_2_VERSION),
            *c11 = client_ctx(TLS1_VERSION, TLS1_1_VERSION);
    conn_t c;
    conn_open(&c, t, &ctr, c13, NULL, NULL, 0, NULL);
    assert_int_equal(c.tr->state, 0);
    assert_int_equal(c.tr->ops->pending(c.tr), 0);
    assert_int_equal(handshake(&c), 0);
    assert_int_equal(SSL_version(c.cl), TLS1_3_VERSION);
    assert_true(c.tr->state & FLARE_TR_ESTABLISHED);
    assert_false(c.tr->state & FLARE_TR_FAILED);
    conn_close(&c);

    conn_open(&c, t, &ctr, c12, NULL, NULL, 0, NULL);
    assert_int_equal(handshake(&c), 0);
    assert_int_equal(SSL_version(c.cl), TLS1_2_VERSION);
    const char *cipher = SSL_CIPHER_get_name(SSL_get_current_cipher(c.cl));
    assert_true(strncmp(cipher, "ECDHE-", 6) == 0);
    assert_true(strstr(cipher, "GCM") != NULL || strstr(cipher, "CHACHA20") != NULL);
    conn_close(&c);
    assert_int_equal(get(&ctr.handshakes), 2);
    assert_int_equal(get(&ctr.handshake_errors), 0);

    /* TLS 1.1: refused with a protocol_version alert */
    conn_open(&c, t, &ctr, c11, NULL, NULL, 0, NULL);
    int rc = handshake(&c);
    assert_true(rc == -EPROTO || rc == CLIENT_FAILED);
    assert_true(c.tr->state & FLARE_TR_FAILED);
    assert_false(c.tr->state & FLARE_TR_ESTABLISHED);
    assert_int_equal(c.tr->ops->read(c.tr, (char[8]){ 0 }, 8), -EPROTO);
    assert_int_equal(ERR_peek_error(), 0); /* nothing left in this thread's queue */
    conn_close(&c);
    assert_int_equal(get(&ctr.handshake_errors), 1);
    assert_int_equal(get(&ctr.handshakes), 2);
    flare__tls_free(t);

    /* tls13_only refuses TLS 1.2 */
    cfg.tls13_only = true;
    t = server(&cfg);
    conn_open(&c, t, &ctr, c12, NULL, NULL, 0, NULL);
    rc = handshake(&c);
    assert_true(rc == -EPROTO || rc == CLIENT_FAILED);
    assert_true(c.tr->state & FLARE_TR_FAILED);
    conn_close(&c);
    conn_open(&c, t, &ctr, c13, NULL, NULL, 0, NULL);
    assert_int_equal(handshake(&c), 0);
    conn_close(&c);
    flare__tls_free(t);
    SSL_CTX_free(c13);
    SSL_CTX_free(c12);
    SSL_CTX_free(c11);
}

static void test_alpn(void **state)
{
    (void)state;
    flare_tls_config_t cfg = base_cfg(); /* "h2,http/1.1" */
    flare_tls_t *t = server(&cfg);
    flare_tls_counters_t ctr = { 0 };
    SSL_CTX *cc = client_ctx(0, 0);
    conn_t c;

    /* the server's preference wins over the client's order */
    static const char both[] = "\x08http/1.1\x02h2";
    conn_open(&c, t, &ctr, cc, NULL, both, sizeof(both) - 1, NULL);
    assert_int_equal(flare__tls_alpn(c.tr).len, 0); /* "" before the handshake */
    assert_int_equal(handshake(&c), 0);
    flare_str_t a = flare__tls_alpn(c.tr);
    assert_int_equal(a.len, 2);
    assert_memory_equal(a.ptr, "h2", 2);
    const unsigned char *cp;
    unsigned cl;
    SSL_get0_alpn_selected(c.cl, &cp, &cl);
    assert_int_equal(cl, 2);
    conn_close(&c);

    static const char h1[] = "\x08http/1.1";
    conn_open(&c, t, &ctr, cc, NULL, h1, sizeof(h1) - 1, NULL);
    assert_int_equal(handshake(&c), 0);
    a = flare__tls_alpn(c.tr);
    assert_int_equal(a.len, 8);
    assert_memory_equal(a.ptr, "http/1.1", 8);
    conn_close(&c);

    /* without ALPN: accepted, nothing chosen */
    conn_open(&c, t, &ctr, cc, NULL, NULL, 0, NULL);
    assert_int_equal(handshake(&c), 0);
    assert_int_equal(flare__tls_alpn(c.tr).len, 0);
    assert_non_null(flare__tls_alpn(c.tr).ptr);
    conn_close(&c);

    /* ALPN offered, none of ours: no_application_protocol */
    static const char other[] = "\x06spdy/3\x08http/1.0";
    conn_open(&c, t, &ctr, cc, NULL, other, sizeof(other) - 1, NULL);
    int rc = handshake(&c);
    assert_true(rc == -EPROTO || rc == CLIENT_FAILED);
    assert_true(c.tr->state & FLARE_TR_FAILED);
    conn_close(&c);
    { /* the client is told why */
        conn_open(&c, t, &ctr, cc, NULL, other, sizeof(other) - 1, NULL);
        int r;
        while ((r = SSL_do_handshake(c.cl)) != 1) {
            int e = SSL_get_error(c.cl, r);
            if (e != SSL_ERROR_WANT_READ)
                break;
            c.tr->ops->read(c.tr, (char[8]){ 0 }, 8);
        }
        assert_int_equal(ERR_GET_REASON(ERR_peek_error()),
                         SSL_R_TLSV1_ALERT_NO_APPLICATION_PROTOCOL);
        ERR_clear_error();
        conn_close(&c);
    }
    assert_int_equal(get(&ctr.handshakes), 3);
    assert_int_equal(get(&ctr.handshake_errors), 2);
    SSL_CTX_free(cc);
    flare__tls_free(t);

    /* a bad list is refused at load */
    flare_tls_t *bad = NULL;
    cfg.alpn = "h2,,http/1.1";
    assert_int_equal(flare__tls_new(&bad, &cfg), FLARE_EINVAL);
    assert_null(bad);
    assert_non_null(strstr(flare_last_error(), "alpn"));
}

static void expect_cn(flare_tls_t *t, SSL_CTX *cc, const char *sni, const char *cn)
{
    flare_tls_counters_t ctr = { 0 };
    conn_t c;
    conn_open(&c, t, &ctr, cc, sni, NULL, 0, NULL);
    if (sni == NULL || strcmp(cn, "default.test") == 0)
        SSL_set_verify(c.cl, SSL_VERIFY_NONE, NULL); /* the default cert does not carry sni */
    int rc = handshake(&c);
    if (rc != 0)
        fail_msg("sni %s: handshake %d (verify %ld)", sni ? sni : "(none)", rc,
                 SSL_get_verify_result(c.cl));
    char got[128];
    peer_cn(&c, got, sizeof(got));
    if (strcmp(got, cn) != 0)
        fail_msg("sni %s: got %s, want %s", sni ? sni : "(none)", got, cn);
    flare_str_t s = flare__tls_sni(c.tr);
    if (sni == NULL)
        assert_int_equal(s.len, 0);
    else
        assert_true(s.len == strlen(sni) && memcmp(s.ptr, sni, s.len) == 0);
    conn_close(&c);
}

static void test_sni(void **state)
{
    (void)state;
    flare_tls_config_t cfg = base_cfg();
    flare_tls_t *t = server(&cfg);
    SSL_CTX *cc = client_ctx(0, 0), *c12 = client_ctx(0, TLS1_2_VERSION);
    for (int v = 0; v < 2; v++) {
        SSL_CTX *x = v == 0 ? cc : c12;
        expect_cn(t, x, NULL, "default.test");
        expect_cn(t, x, "default.test", "default.test");
        expect_cn(t, x, "api.example.com", "api.example.com");
        expect_cn(t, x, "API.Example.COM", "api.example.com");
        expect_cn(t, x, "www.example.org", "api.example.com"); /* *.example.org */
        expect_cn(t, x, "a.b.example.org", "default.test");    /* one label only */
        expect_cn(t, x, "example.org", "default.test");
        expect_cn(t, x, "cn-only.test", "cn-only.test"); /* no SAN: the CN, RSA key */
        expect_cn(t, x, "unknown.test", "default.test");
    }
    SSL_CTX_free(cc);
    SSL_CTX_free(c12);
    flare__tls_free(t);
}

static void test_io(void **state)
{
    (void)state;
    flare_tls_config_t cfg = base_cfg();
    flare_tls_t *t = server(&cfg);
    flare_tls_counters_t ctr = { 0 };
    SSL_CTX *cc = client_ctx(0, 0), *c12 = client_ctx(0, TLS1_2_VERSION);
    size_t len = 100 * 1024;
    char *data = malloc(len);
    assert_int_equal(RAND_bytes((unsigned char *)data, (int)len), 1);
    for (int v = 0; v < 2; v++) {
        conn_t c;
        conn_open(&c, t, &ctr, v == 0 ? cc : c12, NULL, NULL, 0, NULL);
        int small = 4096;
        assert_int_equal(setsockopt(c.sfd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
        assert_int_equal(handshake(&c), 0);

        /* several small pieces: coalesced into one record */
        static const size_t few[] = { 1, 7, 300 };
        assert_int_equal(server_send(&c, data, 1000, few, 3), 0);
        /* 100 KiB in odd pieces across a small socket buffer: partial
         * writes, retried with the same leading bytes and more */
        static const size_t cuts[] = { 10, 310, 5310, 25310, 25311, 60000, 99000 };
        int again = server_send(&c, data, len, cuts, 7);
        assert_true(again > 0);
        /* one large piece: written straight from it */
        assert_true(server_send(&c, data, len, NULL, 0) > 0);

        /* client -> server, one byte at a time, then in big reads */
        client_send(&c, data, 3000, 1);
        client_send(&c, data, 50000, 65536);
        conn_close(&c);
    }
    free(data);
    SSL_CTX_free(cc);
    SSL_CTX_free(c12);
    flare__tls_free(t);
}

static void test_sendfile(void **state)
{
    (void)state;
    flare_tls_config_t cfg = base_cfg();
    flare_tls_t *t = server(&cfg);
    flare_tls_counters_t ctr = { 0 };
    SSL_CTX *cc = client_ctx(0, 0);
    size_t len = 1 << 20;
    char *data = malloc(len), *got = malloc(len);
    assert_int_equal(RAND_bytes((unsigned char *)data, (int)len), 1);
    int fd = open(tmpfile_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);

    conn_t c;
    conn_open(&c, t, &ctr, cc, NULL, NULL, 0, NULL);
    int small = 8192;
    assert_int_equal(setsockopt(c.sfd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
    assert_int_equal(handshake(&c), 0);
    size_t off = 0, recvd = 0;
    int again = 0;
    while (recvd < len) {
        bool swait = false;
        if (off < len) {
            ssize_t w = c.tr->ops->sendfile(c.tr, fd, off, len - off);
            if (w == -EAGAIN) {
                again++;
                swait = true;
            } else {
                assert_true(w > 0);
                off += (size_t)w;
            }
        }
        size_t n;
        if (SSL_read_ex(c.cl, got + recvd, len - recvd, &n) == 1) {
            recvd += n;
            continue;
        }
        c.cwant = SSL_get_error(c.cl, 0);
        assert_int_equal(c.cwant, SSL_ERROR_WANT_READ);
        assert_true(wait_either(&c, swait, true));
    }
    assert_true(again > 0);
    assert_memory_equal(got, data, len);
    /* a file shorter than promised */
    assert_int_equal(c.tr->ops->sendfile(c.tr, fd, len - 10, 100), -EIO);
    assert_int_equal(c.tr->ops->sendfile(c.tr, fd, 0, 0), 0);
    conn_close(&c);
    close(fd);
    free(data);
    free(got);
    SSL_CTX_free(cc);
    flare__tls_free(t);
}

static void test_pending(void **state)
{
    (void)state;
    flare_tls_config_t cfg = base_cfg();
    flare_tls_t *t = server(&cfg);
    flare_tls_counters_t ctr = { 0 };
    SSL_CTX *cc = client_ctx(0, 0);
    conn_t c;
    conn_open(&c, t, &ctr, cc, NULL, NULL, 0, NULL);
    assert_int_equal(handshake(&c), 0);
    assert_int_equal(c.tr->ops->pending(c.tr), 0);
    char msg[3000], buf[4000];
    memset(msg, 'a', sizeof(msg));
    size_t n;
    assert_int_equal(SSL_write_ex(c.cl, msg, sizeof(msg), &n), 1);
    struct pollfd p = { .fd = c.sfd, .events = POLLIN };
    assert_int_equal(poll(&p, 1, 1000), 1);
    assert_int_equal(c.tr->ops->read(c.tr, buf, 100), 100);
    assert_int_equal(c.tr->ops->pending(c.tr), 2900);
    assert_int_equal(c.tr->ops->read(c.tr, buf, sizeof(buf)), 2900);
    assert_int_equal(c.tr->ops->pending(c.tr), 0);
    assert_int_equal(c.tr->ops->read(c.tr, buf, sizeof(buf)), -EAGAIN);
    assert_int_equal(c.tr->want, FLARE_IO_READ);

    /* two records in the socket: the first read takes both from the kernel
     * (read-ahead); pending() must say the second is there, since epoll
     * will not */
    assert_int_equal(SSL_write_ex(c.cl, msg, 500, &n), 1);
    assert_int_equal(SSL_write_ex(c.cl, "b", 1, &n), 1);
    assert_int_equal(c.tr->ops->read(c.tr, buf, sizeof(buf)), 500);
    p.revents = 0;
    if (poll(&p, 1, 0) == 0) /* the socket is drained */
        assert_true(c.tr->ops->pending(c.tr) > 0);
    assert_int_equal(c.tr->ops->read(c.tr, buf, sizeof(buf)), 1);
    assert_int_equal(buf[0], 'b');
    assert_int_equal(c.tr->ops->pending(c.tr), 0);
    conn_close(&c);
    SSL_CTX_free(cc);
    flare__tls_free(t);
}

static void test_shutdown_and_eof(void **state)
{
    (void)state;
    flare_tls_config_t cfg = base_cfg();
    flare_tls_t *t = server(&cfg);
    flare_tls_counters_t ctr = { 0 };
    SSL_CTX *cc = client_ctx(0, 0), *c12 = client_ctx(0, TLS1_2_VERSION);
    char buf[64];
    for (int v = 0; v < 2; v++) {
        conn_t c;
        conn_open(&c, t, &ctr, v == 0 ? cc : c12, NULL, NULL, 0, NULL);
        assert_int_equal(c.tr->ops->shutdown(c.tr), 0); /* before the handshake: nothing */
        assert_int_equal(handshake(&c), 0);
        assert_int_equal(c.tr->ops->shutdown(c.tr), 0);
        assert_int_equal(c.tr->ops->shutdown(c.tr), 0); /* once */
        int r = SSL_read(c.cl, buf, sizeof(buf));
        assert_int_equal(r, 0);
        assert_int_equal(SSL_get_error(c.cl, r), SSL_ERROR_ZERO_RETURN);
        /* writing after close_notify is refused */
        struct iovec iov = { "x", 1 };
        assert_int_equal(c.tr->ops->writev(c.tr, &iov, 1, false), -EPIPE);
        conn_close(&c);

        /* the client's close_notify: read returns 0 */
        conn_open(&c, t, &ctr, v == 0 ? cc : c12, NULL, NULL, 0, NULL);
        assert_int_equal(handshake(&c), 0);
        assert_true(SSL_shutdown(c.cl) >= 0);
        assert_int_equal(c.tr->ops->read(c.tr, buf, sizeof(buf)), 0);
        assert_false(c.tr->state & FLARE_TR_FAILED);
        conn_close(&c);

        /* EOF without close_notify: also 0 (see tls.c) */
        conn_open(&c, t, &ctr, v == 0 ? cc : c12, NULL, NULL, 0, NULL);
        assert_int_equal(handshake(&c), 0);
        shutdown(c.cfd, SHUT_WR);
        assert_int_equal(c.tr->ops->read(c.tr, buf, sizeof(buf)), 0);
        assert_int_equal(ERR_peek_error(), 0);
        conn_close(&c);
    }
    /* closed before sending anything: 0, not counted as a failure */
    conn_t c;
    conn_open(&c, t, &ctr, cc, NULL, NULL, 0, NULL);
    shutdown(c.cfd, SHUT_WR);
    assert_int_equal(c.tr->ops->read(c.tr, buf, sizeof(buf)), 0);
    conn_close(&c);
    assert_int_equal(get(&ctr.handshakes), 6);
    assert_int_equal(get(&ctr.handshake_errors), 0);
    SSL_CTX_free(cc);
    SSL_CTX_free(c12);
    flare__tls_free(t);
}

static void resume_case(flare_tls_t *t, SSL_CTX *cc, flare_tls_counters_t *ctr, bool expect_ticket)
{
    conn_t c;
    conn_open(&c, t, ctr, cc, NULL, NULL, 0, NULL);
    assert_int_equal(handshake(&c), 0);
    assert_false(SSL_session_reused(c.cl));
    SSL_SESSION *s = session_of(&c);
    assert_int_equal(SSL_SESSION_has_ticket(s), expect_ticket);
    conn_close(&c);
    unsigned long long before = get(&ctr->resumed);
    conn_open(&c, t, ctr, cc, NULL, NULL, 0, s);
    assert_int_equal(handshake(&c), 0);
    assert_true(SSL_session_reused(c.cl));
    assert_int_equal(get(&ctr->resumed), before + 1);
    conn_close(&c);
    SSL_SESSION_free(s);
}

static void test_resumption(void **state)
{
    (void)state;
    flare_tls_config_t cfg = base_cfg();
    flare_tls_t *t = server(&cfg);
    flare_tls_counters_t ctr = { 0 };
    SSL_CTX *c13 = client_ctx(0, 0), *c12 = client_ctx(0, TLS1_2_VERSION),
            *c12nt = client_ctx(0, TLS1_2_VERSION);
    SSL_CTX_set_options(c12nt, SSL_OP_NO_TICKET);
    resume_case(t, c13, &ctr, true);    /* TLS 1.3 ticket */
    resume_case(t, c12, &ctr, true);    /* TLS 1.2 ticket */
    resume_case(t, c12nt, &ctr, false); /* TLS 1.2 session cache */
    assert_int_equal(get(&ctr.resumed), 3);
    assert_int_equal(get(&ctr.handshakes), 6);

    /* a session made on one transport resumes on another worker's: the
     * counters differ, the listener is shared */
    flare_tls_counters_t other = { 0 };
    conn_t c;
    conn_open(&c, t, &ctr, c13, "api.example.com", NULL, 0, NULL);
    assert_int_equal(handshake(&c), 0);
    SSL_SESSION *s = session_of(&c);
    conn_close(&c);
    conn_open(&c, t, &other, c13, "api.example.com", NULL, 0, s);
    assert_int_equal(handshake(&c), 0);
    assert_true(SSL_session_reused(c.cl)); /* also through an SNI certificate */
    assert_int_equal(get(&other.resumed), 1);
    conn_close(&c);
    SSL_SESSION_free(s);

    /* after a reload: tickets and the cache both survive */
    conn_open(&c, t, &ctr, c13, NULL, NULL, 0, NULL);
    assert_int_equal(handshake(&c), 0);
    SSL_SESSION *s13 = session_of(&c);
    conn_close(&c);
    conn_open(&c, t, &ctr, c12nt, NULL, NULL, 0, NULL);
    assert_int_equal(handshake(&c), 0);
    SSL_SESSION *scache = session_of(&c);
    conn_close(&c);
    assert_int_equal(flare__tls_reload(t), 0);
    conn_open(&c, t, &ctr, c13, NULL, NULL, 0, s13);
    assert_int_equal(handshake(&c), 0);
    assert_true(SSL_session_reused(c.cl));
    conn_close(&c);
    conn_open(&c, t, &ctr, c12nt, NULL, NULL, 0, scache);
    assert_int_equal(handshake(&c), 0);
    assert_true(SSL_session_reused(c.cl));
    conn_close(&c);
    SSL_SESSION_free(s13);
    SSL_SESSION_free(scache);
    flare__tls_free(t);

    /* no_tickets: TLS 1.3 resumes through the cache */
    cfg.no_tickets = true;
    t = server(&cfg);
    resume_case(t, c13, &ctr, true); /* a stateful ticket: a session id in the cache */
    resume_case(t, c12, &ctr, false);
    flare__tls_free(t);
    SSL_CTX_free(c13);
    SSL_CTX_free(c12);
    SSL_CTX_free(c12nt);
}

static bool resumes(flare_tls_t *t, SSL_CTX *cc, SSL_SESSION *s, SSL_SESSION **renewed)
{
    flare_tls_counters_t ctr = { 0 };
    conn_t c;
    conn_open(&c, t, &ctr, cc, NULL, NULL, 0, s);
    assert_int_equal(handshake(&c), 0);
    bool r = SSL_session_reused(c.cl);
    if (renewed != NULL)
        *renewed = session_of(&c);
    conn_close(&c);
    return r;
}

static SSL_SESSION *fresh_session(flare_tls_t *t, SSL_CTX *cc)
{
    flare_tls_counters_t ctr = { 0 };
    conn_t c;
    conn_open(&c, t, &ctr, cc, NULL, NULL, 0, NULL);
    assert_int_equal(handshake(&c), 0);
    SSL_SESSION *s = session_of(&c);
    conn_close(&c);
    return s;
}

static void test_ticket_rotation(void **state)
{
    (void)state;
    flare_tls_config_t cfg = base_cfg();
    cfg.no_tickets = false;
    flare_tls_t *t = server(&cfg);
    SSL_CTX *c13 = client_ctx(0, 0), *c12 = client_ctx(0, TLS1_2_VERSION);
    SSL_CTX_set_session_cache_mode(c12, SSL_SESS_CACHE_OFF);
    for (int v = 0; v < 2; v++) {
        SSL_CTX *cc = v == 0 ? c13 : c12;
        SSL_SESSION *s = fresh_session(t, cc);
        /* sealed with the previous key: still opens, and a new ticket
         * (sealed with the current key) comes back */
        flare__tls_rotate_ticket_keys(t);
        SSL_SESSION *renewed = NULL;
        assert_true(resumes(t, cc, s, &renewed));
        const unsigned char *t1, *t2;
        size_t l1, l2;
        SSL_SESSION_get0_ticket(s, &t1, &l1);
        SSL_SESSION_get0_ticket(renewed, &t2, &l2);
        assert_true(l1 > 16 && l2 > 16);
        assert_memory_not_equal(t1, t2, 16); /* another key name */
        /* two rotations later the old one is gone: a full handshake */
        flare__tls_rotate_ticket_keys(t);
        assert_false(resumes(t, cc, s, NULL));
        assert_true(resumes(t, cc, renewed, NULL)); /* previous key now */
        SSL_SESSION_free(s);
        SSL_SESSION_free(renewed);
    }
    flare__tls_free(t);

    /* the same by the clock: ticket_rotate_s = 1 */
    cfg.ticket_rotate_s = 1;
    t = server(&cfg);
    SSL_SESSION *s = fresh_session(t, c12);
    usleep(1100 * 1000);
    assert_true(resumes(t, c12, s, NULL)); /* rotated once: the previous key */
    usleep(1100 * 1000);
    assert_false(resumes(t, c12, s, NULL)); /* twice */
    SSL_SESSION_free(s);
    flare__tls_free(t);
    SSL_CTX_free(c13);
    SSL_CTX_free(c12);
}

static void test_plaintext_and_garbage(void **state)
{
    (void)state;
    flare_tls_config_t cfg = base_cfg();
    flare_tls_t *t = server(&cfg);
    flare_tls_counters_t ctr = { 0 };
    SSL_CTX *cc = client_ctx(0, 0);
    char buf[512];
    conn_t c;

    conn_open(&c, t, &ctr, cc, NULL, NULL, 0, NULL);
    assert_int_equal(c.tr->ops->read(c.tr, buf, sizeof(buf)), -EAGAIN); /* nothing yet */
    assert_int_equal(c.tr->want, FLARE_IO_READ);
    static const char get_req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(write(c.cfd, get_req, sizeof(get_req) - 1), sizeof(get_req) - 1);
    assert_int_equal(c.tr->ops->read(c.tr, buf, sizeof(buf)), -EPROTO);
    assert_true(c.tr->state & FLARE_TR_FAILED);
    ssize_t n = read(c.cfd, buf, sizeof(buf) - 1);
    assert_true(n > 0);
    buf[n] = '\0';
    static const char want[] = "HTTP/1.1 400 Bad Request\r\n"
                               "Content-Type: text/plain\r\n"
                               "Content-Length: 50\r\n"
                               "Connection: close\r\n"
                               "\r\n"
                               "The plain HTTP request was sent to the HTTPS port\n";
    assert_string_equal(buf, want);
    /* the request was consumed: nothing left for a reset on close */
    assert_int_equal(recv(c.sfd, buf, sizeof(buf), MSG_DONTWAIT), -1);
    assert_int_equal(c.tr->ops->read(c.tr, buf, sizeof(buf)), -EPROTO);
    conn_close(&c);
    assert_int_equal(get(&ctr.plaintext_http), 1);
    assert_int_equal(get(&ctr.handshake_errors), 0);

    /* HEAD: the same head, no body */
    conn_open(&c, t, &ctr, cc, NULL, NULL, 0, NULL);
    static const char head_req[] = "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(write(c.cfd, head_req, sizeof(head_req) - 1), sizeof(head_req) - 1);
    assert_int_equal(c.tr->ops->read(c.tr, buf, sizeof(buf)), -EPROTO);
    n = read(c.cfd, buf, sizeof(buf) - 1);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_int_equal((size_t)n, sizeof(want) - 1 - 50);
    assert_memory_equal(buf, want, (size_t)n);
    conn_close(&c);
    assert_int_equal(get(&ctr.plaintext_http), 2);

    /* garbage */
    conn_open(&c, t, &ctr, cc, NULL, NULL, 0, NULL);
    assert_int_equal(write(c.cfd, "\x00\x01\x02\x03garbage", 11), 11);
    assert_int_equal(c.tr->ops->read(c.tr, buf, sizeof(buf)), -EPROTO);
    assert_true(c.tr->state & FLARE_TR_FAILED);
    assert_int_equal(read(c.cfd, buf, sizeof(buf)), -1); /* no answer */
    conn_close(&c);
    assert_int_equal(get(&ctr.handshake_errors), 1);

    /* a handshake record with nonsense inside: OpenSSL's error, and its
     * queue left empty */
    conn_open(&c, t, &ctr, cc, NULL, NULL, 0, NULL);
    static const char bad[] = "\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00";
    assert_int_equal(write(c.cfd, bad, sizeof(bad) - 1), sizeof(bad) - 1);
    assert_int_equal(c.tr->ops->read(c.tr, buf, sizeof(buf)), -EPROTO);
    assert_int_equal(ERR_peek_error(), 0);
    struct iovec iov = { "x", 1 };
    assert_int_equal(c.tr->ops->writev(c.tr, &iov, 1, false), -EPROTO);
    assert_int_equal(c.tr->ops->shutdown(c.tr), -EPIPE);
    assert_int_equal(c.tr->ops->pending(c.tr), 0);
    conn_close(&c);
    assert_int_equal(get(&ctr.handshake_errors), 2);
    assert_int_equal(get(&ctr.handshakes), 0);

    /* a stale error in the thread's queue does not turn WANT_READ into a
     * failure */
    conn_open(&c, t, &ctr, cc, NULL, NULL, 0, NULL);
    assert_int_equal(handshake(&c), 0);
    ERR_raise(ERR_LIB_SSL, SSL_R_BAD_LENGTH);
    assert_int_equal(c.tr->ops->read(c.tr, buf, sizeof(buf)), -EAGAIN);
    assert_false(c.tr->state & FLARE_TR_FAILED);
    conn_close(&c);
    SSL_CTX_free(cc);
    flare__tls_free(t);
}

static void test_renegotiation_refused(void **state)
{
    (void)state;
    flare_tls_config_t cfg = base_cfg();
    flare_tls_t *t = server(&cfg);
    flare_tls_counters_t ctr = { 0 };
    SSL_CTX *c12 = client_ctx(0, TLS1_2_VERSION);
    conn_t c;
    conn_open(&c, t, &ctr, c12, NULL, NULL, 0, NULL);
    assert_int_equal(handshake(&c), 0);
    assert_int_equal(SSL_renegotiate(c.cl), 1);
    char buf[64];
    int cres = 0;
    ssize_t sres = -EAGAIN;
    for (int i = 0; i < 100 && (cres == 0 || sres == -EAGAIN); i++) {
        if (cres == 0) {
            int r = SSL_do_handshake(c.cl);
            int e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(c.cl, r);
            if (r == 1)
                cres = 1;
            else if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
                cres = -1;
            ERR_clear_error();
        }
        if (sres == -EAGAIN)
            sres = c.tr->ops->read(c.tr, buf, sizeof(buf));
        if (cres == 0 && sres == -EAGAIN) {
            struct pollfd p[2] = { { .fd = c.sfd, .events = POLLIN },
                                   { .fd = c.cfd, .events = POLLIN } };
            poll(p, 2, 500);
        }
    }
    /* the server answered no_renegotiation: the client gave up, and its
     * fatal alert ends the connection at the server */
    assert_int_equal(cres, -1);
    assert_int_equal(sres, -EPROTO);
    assert_true(c.tr->state & FLARE_TR_FAILED);
    assert_int_equal(ERR_peek_error(), 0);
    conn_close(&c);
    SSL_CTX_free(c12);
    flare__tls_free(t);
}

static void test_reload(void **state)
{
    (void)state;
    char crt[160], key[160], moved[160];
    snprintf(crt, sizeof(crt), "%s/reload.crt", dir);
    snprintf(key, sizeof(key), "%s/reload.key", dir);
    snprintf(moved, sizeof(moved), "%s/moved.crt", dir);
    copy_file(def_crt, crt);
    copy_file(def_key, key);
    flare_tls_config_t cfg = { .cert_file = crt, .key_file = key };
    flare_tls_t *t = server(&cfg);
    flare_tls_counters_t ctr = { 0 };
    SSL_CTX *cc = client_ctx(0, 0);
    SSL_CTX_set_verify(cc, SSL_VERIFY_NONE, NULL);
    char cn[128];
    conn_t c;

    /* a missing file: FLARE_ETLS naming it, the old certificate still
     * served */
    assert_int_equal(rename(crt, moved), 0);
    assert_int_equal(flare__tls_reload(t), FLARE_ETLS);
    assert_non_null(strstr(flare_last_error(), crt));
    assert_int_equal(ERR_peek_error(), 0);
    conn_open(&c, t, &ctr, cc, NULL, NULL, 0, NULL);
    assert_int_equal(handshake(&c), 0);
    peer_cn(&c, cn, sizeof(cn));
    assert_string_equal(cn, "default.test");
    conn_close(&c);
    assert_int_equal(rename(moved, crt), 0);

    /* a new certificate: new handshakes get it; a connection accepted
     * before the reload keeps the old one, even if it handshakes after */
    conn_t early;
    conn_open(&early, t, &ctr, cc, NULL, NULL, 0, NULL);
    copy_file(def2_crt, crt);
    assert_int_equal(flare__tls_reload(t), 0);
    conn_open(&c, t, &ctr, cc, NULL, NULL, 0, NULL);
    assert_int_equal(handshake(&c), 0);
    peer_cn(&c, cn, sizeof(cn));
    assert_string_equal(cn, "default2.test");
    conn_close(&c);
    assert_int_equal(handshake(&early), 0);
    peer_cn(&early, cn, sizeof(cn));
    assert_string_equal(cn, "default.test");
    conn_close(&early); /* the old contexts go with it (leak-checked) */

    /* a key that does not match any more: refused, the current kept */
    copy_file(api_crt, crt);
    assert_int_equal(flare__tls_reload(t), FLARE_ETLS);
    assert_non_null(strstr(flare_last_error(), key));
    conn_open(&c, t, &ctr, cc, NULL, NULL, 0, NULL);
    assert_int_equal(handshake(&c), 0);
    peer_cn(&c, cn, sizeof(cn));
    assert_string_equal(cn, "default2.test");
    conn_close(&c);
    flare__tls_free(t);
    SSL_CTX_free(cc);
    unlink(crt);
    unlink(key);
}

static void test_new_errors(void **state)
{
    (void)state;
    flare_tls_t *t = (flare_tls_t *)1;
    flare_tls_config_t cfg = { .cert_file = "/nonexistent/flare.crt", .key_file = def_key };
    assert_int_equal(flare__tls_new(&t, &cfg), FLARE_ETLS);
    assert_null(t);
    assert_non_null(strstr(flare_last_error(), "/nonexistent/flare.crt"));
    assert_non_null(strstr(flare_last_error(), "No such file"));
    assert_int_equal(ERR_peek_error(), 0);

    cfg = (flare_tls_config_t){ .cert_file = def_crt, .key_file = "/nonexistent/flare.key" };
    assert_int_equal(flare__tls_new(&t, &cfg), FLARE_ETLS);
    assert_non_null(strstr(flare_last_error(), "/nonexistent/flare.key"));

    /* a key of the same type that is not the certificate's */
    cfg = (flare_tls_config_t){ .cert_file = def_crt, .key_file = api_key };
    assert_int_equal(flare__tls_new(&t, &cfg), FLARE_ETLS);
    assert_non_null(strstr(flare_last_error(), api_key));
    assert_non_null(strstr(flare_last_error(), "mismatch"));
    /* of another type (RSA key, ECDSA certificate) */
    cfg = (flare_tls_config_t){ .cert_file = def_crt, .key_file = cn_key };
    assert_int_equal(flare__tls_new(&t, &cfg), FLARE_ETLS);
    assert_non_null(strstr(flare_last_error(), cn_key));
    assert_non_null(strstr(flare_last_error(), "does not match"));
    /* in more_certs */
    flare_tls_cert_t more = { api_crt, def_key };
    cfg = (flare_tls_config_t){
        .cert_file = def_crt, .key_file = def_key, .more_certs = &more, .nmore_certs = 1
    };
    assert_int_equal(flare__tls_new(&t, &cfg), FLARE_ETLS);
    assert_non_null(strstr(flare_last_error(), api_crt));

    cfg = (flare_tls_config_t){ .cert_file = def_crt, .key_file = def_key, .ciphers = "NOPE" };
    assert_int_equal(flare__tls_new(&t, &cfg), FLARE_ETLS);
    assert_non_null(strstr(flare_last_error(), "ciphers \"NOPE\""));
    assert_non_null(strstr(flare_last_error(), "no cipher match"));
    cfg = (flare_tls_config_t){ .cert_file = def_crt, .key_file = def_key, .ciphersuites = "NOPE" };
    assert_int_equal(flare__tls_new(&t, &cfg), FLARE_ETLS);
    assert_non_null(strstr(flare_last_error(), "ciphersuites \"NOPE\""));

    cfg = (flare_tls_config_t){ .key_file = def_key };
    assert_int_equal(flare__tls_new(&t, &cfg), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "cert_file"));
    assert_int_equal(flare__tls_new(&t, NULL), FLARE_EINVAL);
    assert_int_equal(ERR_peek_error(), 0);

    /* the defaults, and the fields taken as given */
    cfg = (flare_tls_config_t){ .cert_file = def_crt,
                                .key_file = def_key,
                                .handshake_timeout_ms = 2500 };
    assert_int_equal(flare__tls_new(&t, &cfg), 0);
    assert_int_equal(flare__tls_handshake_timeout(t), 2500);
    flare__tls_free(t);
}

/* Bytes the server keeps per idle connection (after a handshake and a
 * round trip), measured with glibc's allocator statistics. */
static void test_idle_memory(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    skip();
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    skip();
#endif
#endif
    flare_tls_config_t cfg = base_cfg();
    flare_tls_t *t = server(&cfg);
    flare_tls_counters_t ctr = { 0 };
    SSL_CTX *cc = client_ctx(0, 0);
    enum { N = 64 };
    static conn_t c[N];
    /* warm up: the first connection allocates per-thread and cached state */
    conn_open(&c[0], t, &ctr, cc, NULL, NULL, 0, NULL);
    assert_int_equal(handshake(&c[0]), 0);
    SSL_SESSION_free(session_of(&c[0]));
    conn_close(&c[0]);
    struct mallinfo2 m0 = mallinfo2();
    for (int i = 0; i < N; i++) {
        conn_open(&c[i], t, &ctr, cc, NULL, NULL, 0, NULL);
        assert_int_equal(handshake(&c[i]), 0);
        SSL_SESSION_free(session_of(&c[i]));
        client_send(&c[i], "GET / HTTP/1.1\r\n\r\n", 18, 4096);
    }
    /* drop the client side, keep the server side */
    for (int i = 0; i < N; i++) {
        SSL_free(c[i].cl);
        c[i].cl = NULL;
    }
    struct mallinfo2 m1 = mallinfo2();
    size_t per = ((m1.uordblks + m1.hblkhd) - (m0.uordblks + m0.hblkhd)) / N;
    print_message("idle TLS 1.3 connection (server side): %zu bytes\n", per);
    /* 14.6 KB measured; 48 KB without SSL_MODE_RELEASE_BUFFERS */
    assert_true(per < 24576);
    for (int i = 0; i < N; i++)
        conn_close(&c[i]);
    SSL_CTX_free(cc);
    flare__tls_free(t);
}

/* Workers handshaking and resuming on one listener while keys rotate and
 * certificates reload from other threads (run under ThreadSanitizer). */
typedef struct worker_arg {
    flare_tls_t *t;
    SSL_CTX *cc;
    flare_tls_counters_t ctr;
    int rounds;
} worker_arg_t;

static _Atomic int workers_left, churn_failed;

static void *worker_main(void *p)
{
    worker_arg_t *w = p;
    for (int i = 0; i < w->rounds; i++) {
        conn_t c;
        conn_open(&c, w->t, &w->ctr, w->cc, i % 2 ? "api.example.com" : NULL, NULL, 0, NULL);
        if (handshake(&c) != 0)
            break;
        SSL_SESSION *s = session_of(&c);
        conn_close(&c);
        conn_open(&c, w->t, &w->ctr, w->cc, i % 2 ? "api.example.com" : NULL, NULL, 0, s);
        int rc = handshake(&c);
        conn_close(&c);
        SSL_SESSION_free(s);
        if (rc != 0)
            break;
    }
    atomic_fetch_sub(&workers_left, 1);
    return NULL;
}

static void *churn_main(void *p)
{
    flare_tls_t *t = p;
    while (atomic_load(&workers_left) > 0) {
        flare__tls_rotate_ticket_keys(t);
        if (flare__tls_reload(t) != 0)
            atomic_store(&churn_failed, 1); /* no cmocka assert off the main thread */
        usleep(30000);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    flare_tls_config_t cfg = base_cfg();
    flare_tls_t *t = server(&cfg);
    enum { W = 3, ROUNDS = 15 };
    worker_arg_t w[W];
    pthread_t th[W], churn;
    atomic_store(&workers_left, W);
    for (int i = 0; i < W; i++) {
        w[i] = (worker_arg_t){ .t = t,
                               .cc = client_ctx(0, i == 2 ? TLS1_2_VERSION : 0),
                               .rounds = ROUNDS };
        SSL_CTX_set_verify(w[i].cc, SSL_VERIFY_NONE, NULL);
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    assert_int_equal(pthread_create(&churn, NULL, churn_main, t), 0);
    unsigned long long hs = 0, resumed = 0, errors = 0;
    for (int i = 0; i < W; i++) {
        pthread_join(th[i], NULL);
        hs += get(&w[i].ctr.handshakes);
        resumed += get(&w[i].ctr.resumed);
        errors += get(&w[i].ctr.handshake_errors);
        SSL_CTX_free(w[i].cc);
    }
    pthread_join(churn, NULL);
    print_message("threads: %llu handshakes, %llu resumed\n", hs, resumed);
    assert_int_equal(atomic_load(&churn_failed), 0);
    assert_int_equal(errors, 0);
    assert_int_equal(hs, 2 * W * ROUNDS);
    /* a ticket fails only if two rotations (30 ms apart) fall between
     * its issue and its use, a few ms later */
    assert_true(resumed >= (unsigned long long)W * ROUNDS / 2);
    flare__tls_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_errors),
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_alpn),
        cmocka_unit_test(test_sni),
        cmocka_unit_test(test_io),
        cmocka_unit_test(test_sendfile),
        cmocka_unit_test(test_pending),
        cmocka_unit_test(test_shutdown_and_eof),
        cmocka_unit_test(test_resumption),
        cmocka_unit_test(test_ticket_rotation),
        cmocka_unit_test(test_plaintext_and_garbage),
        cmocka_unit_test(test_renegotiation_refused),
        cmocka_unit_test(test_reload),
        cmocka_unit_test(test_idle_memory),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
