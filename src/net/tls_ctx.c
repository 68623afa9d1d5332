/* TLS listeners (OpenSSL 3): contexts and certificates. One flare_tls_t per
 * TLS listener, shared by every worker: its contexts, the certificates and
 * the names they serve (SNI), the ALPN choice, the session cache and the
 * ticket keys. The transport each accepted connection gets is tls.c's.
 *
 * Contexts. A listener has one long-lived "base" SSL_CTX that every
 * connection is created from (SSL_new): OpenSSL keeps it as the connection's
 * session context, so the session cache and the ticket key callback live
 * there and survive certificate reloads. The certificates live in a "set":
 * one SSL_CTX per certificate, all configured like the base. At accept the
 * connection switches to the set's default certificate (SSL_set_SSL_CTX
 * moves only the certificate, the session id context and the callbacks'
 * context); the SNI callback switches to another certificate of the same
 * set. A reload builds a new set and publishes it for new accepts; each
 * connection holds a reference to the set it started with, so the old one
 * goes when its last connection does.
 *
 * Tickets. The keys (current + previous) are shared by every worker through
 * a seqlock: a handshake copies them with plain atomic loads, no lock, no
 * read-modify-write; the first thread to notice the rotation is due rotates
 * under a mutex it only try-locks. A ticket sealed with the previous key
 * still opens and is re-issued with the current one.
 *
 * Every context sets SSL_OP_IGNORE_UNEXPECTED_EOF: tls.c says why. As in
 * tls.c, OpenSSL's per-thread error queue is left empty (tls_fail empties
 * it with the reason it reports). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "core/clock.h"
#include "core/core.h"
#include "net/tls_int.h"

#define DEFAULT_CIPHERS                                                                 \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-" \
    "SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-"       \
    "CHACHA20-POLY1305"

static const unsigned char session_id_context[] = "flare-tls";

/* flare__fail with OpenSSL's first queued reason; empties the queue. */
__attribute__((format(printf, 1, 2))) static int tls_fail(const char *fmt, ...)
{
    char what[512], reason[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    unsigned long e = ERR_get_error();
    if (e != 0)
        ERR_error_string_n(e, reason, sizeof(reason));
    else
        snprintf(reason, sizeof(reason), "no reason given by OpenSSL");
    ERR_clear_error();
    return flare__fail(FLARE_ETLS, 0, "%s: %s", what, reason);
}

/* ---- ticket keys -------------------------------------------------------- */

static int key_make(ticket_key_t *k)
{
    if (RAND_bytes((unsigned char *)k, sizeof(*k)) != 1) {
        ERR_clear_error();
        return -1;
    }
    return 0;
}

static void ring_read(ticket_ring_t *r, ticket_key_t out[2])
{
    uint64_t w[RING_WORDS];
    for (unsigned spins = 0;; spins++) {
        uint64_t s1 = atomic_load_explicit(&r->seq, memory_order_acquire);
        if (!(s1 & 1)) {
            for (size_t i = 0; i < RING_WORDS; i++)
                w[i] = atomic_load_explicit(&r->words[i], memory_order_relaxed);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&r->seq, memory_order_relaxed) == s1)
                break;
        }
        if (spins > 64)
            sched_yield(); /* the writer was preempted mid-rotation */
    }
    memcpy(out, w, sizeof(w));
    OPENSSL_cleanse(w, sizeof(w));
}

/* Caller holds r->lock. */
static void ring_write(ticket_ring_t *r, const ticket_key_t keys[2])
{
    uint64_t w[RING_WORDS];
    memcpy(w, keys, sizeof(w));
    uint64_t s = atomic_load_explicit(&r->seq, memory_order_relaxed);
    atomic_store_explicit(&r->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (size_t i = 0; i < RING_WORDS; i++)
        atomic_store_explicit(&r->words[i], w[i], memory_order_relaxed);
    atomic_store_explicit(&r->seq, s + 2, memory_order_release);
    OPENSSL_cleanse(w, sizeof(w));
}

/* Caller holds r->lock: the current key becomes the previous one. */
static void ring_rotate_locked(ticket_ring_t *r, uint64_t now)
{
    ticket_key_t k[2];
    ring_read(r, k);
    k[1] = k[0];
    if (key_make(&k[0]) == 0) {
        ring_write(r, k);
        atomic_store_explicit(&r->rotate_at_ms, now + r->period_ms, memory_order_relaxed);
    } else {
        /* no randomness now: keep the keys, try again in a second */
        atomic_store_explicit(&r->rotate_at_ms, now + 1000, memory_order_relaxed);
    }
    OPENSSL_cleanse(k, sizeof(k));
}

static void ring_maybe_rotate(ticket_ring_t *r)
{
    uint64_t now = flare__now_ms();
    if (flare__likely(now < atomic_load_explicit(&r->rotate_at_ms, memory_order_relaxed)))
        return;
    /* whoever gets the lock rotates; the others go on with the keys they
     * have (still valid: the previous key keeps decrypting) */
    if (pthread_mutex_trylock(&r->lock) != 0)
        return;
    if (now >= atomic_load_explicit(&r->rotate_at_ms, memory_order_relaxed))
        ring_rotate_locked(r, now);
    pthread_mutex_unlock(&r->lock);
}

void flare__tls_rotate_ticket_keys(flare_tls_t *t)
{
    pthread_mutex_lock(&t->ring.lock);
    ring_rotate_locked(&t->ring, flare__now_ms());
    pthread_mutex_unlock(&t->ring.lock);
}

static int ring_init(ticket_ring_t *r, unsigned period_s)
{
    ticket_key_t k[2];
    if (key_make(&k[0]) != 0 || key_make(&k[1]) != 0)
        return flare__fail(FLARE_ETLS, 0, "TLS session ticket keys: no random bytes");
    if (pthread_mutex_init(&r->lock, NULL) != 0)
        return flare__fail(FLARE_ENOMEM, 0, "TLS session ticket keys: mutex");
    r->period_ms = (uint64_t)period_s * 1000u;
    atomic_init(&r->seq, 0);
    for (size_t i = 0; i < RING_WORDS; i++)
        atomic_init(&r->words[i], 0);
    pthread_mutex_lock(&r->lock);
    ring_write(r, k);
    pthread_mutex_unlock(&r->lock);
    atomic_init(&r->rotate_at_ms, flare__now_ms() + r->period_ms);
    OPENSSL_cleanse(k, sizeof(k));
    return 0;
}

static int ticket_hmac_key(EVP_MAC_CTX *hctx, unsigned char *key)
{
    static char digest[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, key, 32),
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };
    return EVP_MAC_CTX_set_params(hctx, params);
}

/* OpenSSL's ticket callback, on the session context (the base ctx). enc:
 * pick the current key, 1. Else find key_name: 0 unknown (full handshake),
 * 1 current, 2 previous (decrypt, then issue a fresh ticket). */
static int ticket_cb(SSL *s, unsigned char *key_name, unsigned char *iv, EVP_CIPHER_CTX *cctx,
                     EVP_MAC_CTX *hctx, int enc)
{
    ctx_set_t *set = SSL_CTX_get_app_data(SSL_get_SSL_CTX(s));
    if (set == NULL)
        return 0;
    flare_tls_t *t = set->tls;
    ring_maybe_rotate(&t->ring);
    ticket_key_t k[2];
    ring_read(&t->ring, k);
    int ret;
    if (enc) {
        if (RAND_bytes(iv, EVP_CIPHER_get_iv_length(t->ticket_cipher)) != 1) {
            ERR_clear_error();
            ret = 0; /* no ticket this time; the handshake goes on */
            goto out;
        }
        memcpy(key_name, k[0].name, sizeof(k[0].name));
        ret = EVP_EncryptInit_ex(cctx, t->ticket_cipher, NULL, k[0].aes, iv) == 1 &&
                      ticket_hmac_key(hctx, k[0].hmac) == 1
                  ? 1
                  : -1;
        goto out;
    }
    int i = memcmp(key_name, k[0].name, sizeof(k[0].name)) == 0   ? 0
            : memcmp(key_name, k[1].name, sizeof(k[1].name)) == 0 ? 1
                                                                  : -1;
    if (i < 0) {
        ret = 0;
        goto out;
    }
    ret = EVP_DecryptInit_ex(cctx, t->ticket_cipher, NULL, k[i].aes, iv) == 1 &&
                  ticket_hmac_key(hctx, k[i].hmac) == 1
              ? (i == 0 ? 1 : 2)
              : -1;
out:
    OPENSSL_cleanse(k, sizeof(k));
    return ret;
}

/* ---- ALPN and SNI ------------------------------------------------------- */

/* Our preference order wins; a client offering ALPN without any of ours is
 * refused with no_application_protocol (RFC 7301 section 3.2). */
static int alpn_cb(SSL *s, const unsigned char **out, unsigned char *outlen,
                   const unsigned char *in, unsigned int inlen, void *arg)
{
    (void)s;
    const flare_tls_t *t = arg;
    for (size_t i = 0; i < t->alpn_len; i += 1u + t->alpn[i]) {
        const unsigned char *ours = t->alpn + i + 1;
        unsigned ol = t->alpn[i];
        for (unsigned j = 0; j < inlen;) {
            unsigned cl = in[j];
            if (cl == 0 || j + 1u + cl > inlen)
                break;
            if (cl == ol && memcmp(in + j + 1, ours, ol) == 0) {
                *out = ours;
                *outlen = (unsigned char)ol;
                return SSL_TLSEXT_ERR_OK;
            }
            j += 1u + cl;
        }
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

static bool host_eq(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (flare__lower((unsigned char)a[i]) != (unsigned char)b[i])
            return false;
    }
    return true;
}

/* pattern: lower case; "*.example.com" matches exactly one more label. */
static bool name_match(const char *pattern, const char *host, size_t hl, bool wild)
{
    size_t pl = strlen(pattern);
    if (!wild)
        return pattern[0] != '*' && pl == hl && host_eq(host, pattern, hl);
    if (pl < 3 || pattern[0] != '*' || pattern[1] != '.')
        return false;
    const char *dot = memchr(host, '.', hl);
    if (dot == NULL || dot == host)
        return false;
    size_t rest = hl - (size_t)(dot - host);
    return rest == pl - 1 && host_eq(dot, pattern + 1, rest);
}

static size_t pick_cert(const ctx_set_t *set, const char *host)
{
    size_t hl = strlen(host);
    if (hl > 0 && host[hl - 1] == '.')
        hl--; /* absolute form */
    for (int wild = 0; wild < 2; wild++) {
        for (size_t i = 0; i < set->n; i++) {
            for (const char *p = set->cert[i].names; *p != '\0'; p += strlen(p) + 1) {
                if (name_match(p, host, hl, wild))
                    return i;
            }
        }
    }
    return 0;
}

static int sni_cb(SSL *s, int *al, void *arg)
{
    (void)arg;
    const char *host = SSL_get_servername(s, TLSEXT_NAMETYPE_host_name);
    if (host == NULL)
        return SSL_TLSEXT_ERR_NOACK;
    ctx_set_t *set = SSL_CTX_get_app_data(SSL_get_SSL_CTX(s));
    if (set == NULL || set->n < 2)
        return SSL_TLSEXT_ERR_OK;
    SSL_CTX *want = set->cert[pick_cert(set, host)].ctx;
    if (want != SSL_get_SSL_CTX(s) && SSL_set_SSL_CTX(s, want) == NULL) {
        *al = SSL_AD_INTERNAL_ERROR;
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    }
    return SSL_TLSEXT_ERR_OK;
}

/* Appends name n bytes, lower-cased, to the "a\0b\0\0" list at *out. */
static bool names_add(char **out, size_t *len, size_t *cap, const unsigned char *p, size_t n)
{
    if (n == 0 || memchr(p, '\0', n) != NULL)
        return true; /* not a usable name */
    if (*len + n + 2 > *cap) {
        size_t c = *cap;
        while (*len + n + 2 > c)
            c *= 2;
        char *grown = realloc(*out, c);
        if (grown == NULL)
            return false;
        *out = grown;
        *cap = c;
    }
    for (size_t k = 0; k < n; k++)
        (*out)[*len + k] = (char)flare__lower(p[k]);
    (*out)[*len + n] = '\0';
    *len += n + 1;
    return true;
}

/* The certificate's subjectAltName DNS names, else its CN (RFC 6125). */
static char *cert_names(X509 *x)
{
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    if (out == NULL)
        return NULL;
    bool ok = true;
    GENERAL_NAMES *sans = x != NULL ? X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL) : NULL;
    for (int i = 0; ok && sans != NULL && i < sk_GENERAL_NAME_num(sans); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
        if (g->type == GEN_DNS)
            ok = names_add(&out, &len, &cap, ASN1_STRING_get0_data(g->d.dNSName),
                           (size_t)ASN1_STRING_length(g->d.dNSName));
    }
    GENERAL_NAMES_free(sans);
    X509_NAME *subj = x != NULL ? X509_get_subject_name(x) : NULL;
    char cn[256];
    int got;
    if (ok && len == 0 && subj != NULL &&
        (got = X509_NAME_get_text_by_NID(subj, NID_commonName, cn, sizeof(cn))) > 0)
        ok = names_add(&out, &len, &cap, (const unsigned char *)cn, (size_t)got);
    if (!ok) {
        free(out);
        return NULL;
    }
    out[len] = '\0';
    return out;
}

/* ---- contexts ----------------------------------------------------------- */

/* Whether the kernel has the TLS ULP, asked once per process. Without it
 * SSL_OP_ENABLE_KTLS costs every handshake two failing setsockopt(2) calls
 * (TCP_ULP, then SOL_TLS). On an unconnected socket the kernel still looks
 * the ULP up (loading the module if it can) before refusing: ENOENT means
 * there is none. */
static bool ktls_yes;
static pthread_once_t ktls_once = PTHREAD_ONCE_INIT;

static void ktls_probe(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        ktls_yes = true; /* cannot tell: let OpenSSL try */
        return;
    }
    ktls_yes = setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof("tls")) == 0 || errno != ENOENT;
    close(fd);
}

bool flare__tls_ktls_available(void)
{
    pthread_once(&ktls_once, ktls_probe);
    return ktls_yes;
}

/* Every context of a listener gets the same settings: OpenSSL reads some
 * from the connection's first context (options, versions), some from its
 * current one (ciphers, ALPN and SNI callbacks), some from the session
 * context (cache, tickets). */
static int ctx_configure(flare_tls_t *t, SSL_CTX *ctx)
{
    uint64_t opts = SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                    SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_IGNORE_UNEXPECTED_EOF;
    if (flare__tls_ktls_available())
        opts |= SSL_OP_ENABLE_KTLS;
    if (t->no_tickets)
        opts |= SSL_OP_NO_TICKET;
    SSL_CTX_set_options(ctx, opts);
    if (SSL_CTX_set_min_proto_version(ctx, t->tls13_only ? TLS1_3_VERSION : TLS1_2_VERSION) != 1 ||
        SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) != 1)
        return tls_fail("TLS protocol versions");
    /* RELEASE_BUFFERS: an idle connection holds no 16 KiB record buffers.
     * Measured (test_tls's idle test, callgrind on a 100 B request / 1 KiB
     * response loop): 14.6 KB per idle connection instead of 48 KB, for
     * ~1,800 more instructions per request (malloc/free of the buffers,
     * +9% of the ~20,000 OpenSSL spends on read + write). */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    /* read-ahead: one read(2) per record instead of header + body (strace:
     * 2 reads per small request, the last one -EAGAIN, instead of 3) */
    SSL_CTX_set_read_ahead(ctx, 1);
    if (SSL_CTX_set_cipher_list(ctx, t->ciphers) != 1)
        return tls_fail("TLS ciphers \"%s\": no usable cipher", t->ciphers);
    if (t->ciphersuites != NULL && SSL_CTX_set_ciphersuites(ctx, t->ciphersuites) != 1)
        return tls_fail("TLS 1.3 ciphersuites \"%s\"", t->ciphersuites);
    if (SSL_CTX_set_session_id_context(ctx, session_id_context, sizeof(session_id_context) - 1) !=
        1)
        return tls_fail("TLS session id context");
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    SSL_CTX_sess_set_cache_size(ctx, t->session_cache_size);
    if (SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_cb) != 1)
        return tls_fail("TLS session tickets");
    SSL_CTX_set_alpn_select_cb(ctx, alpn_cb, t);
    SSL_CTX_set_tlsext_servername_callback(ctx, sni_cb);
    return 0;
}

static void set_free(ctx_set_t *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n; i++) {
        SSL_CTX_free(s->cert[i].ctx); /* connections still on it hold their own ref */
        free(s->cert[i].names);
    }
    free(s);
}

void flare__tls_set_release(ctx_set_t *s)
{
    if (s != NULL && atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
        set_free(s);
}

static int set_build(flare_tls_t *t, ctx_set_t **out)
{
    ctx_set_t *s = calloc(1, sizeof(*s) + t->ncerts * sizeof(s->cert[0]));
    if (s == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "TLS contexts");
    atomic_init(&s->refs, 1);
    s->tls = t;
    int rc = 0;
    for (size_t i = 0; i < t->ncerts; i++) {
        const char *cf = t->cert_files[i], *kf = t->key_files[i];
        SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
        if (ctx == NULL) {
            rc = tls_fail("TLS context for \"%s\"", cf);
            goto fail;
        }
        s->cert[i].ctx = ctx;
        s->n = i + 1;
        if ((rc = ctx_configure(t, ctx)) != 0)
            goto fail;
        SSL_CTX_set_app_data(ctx, s);
        if (SSL_CTX_use_certificate_chain_file(ctx, cf) != 1) {
            rc = tls_fail("TLS certificate file \"%s\"", cf);
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, kf, SSL_FILETYPE_PEM) != 1) {
            rc = tls_fail("TLS key file \"%s\" (for certificate \"%s\")", kf, cf);
            goto fail;
        }
        if (SSL_CTX_check_private_key(ctx) != 1) {
            rc = tls_fail("TLS key file \"%s\" does not match certificate \"%s\"", kf, cf);
            goto fail;
        }
        if ((s->cert[i].names = cert_names(SSL_CTX_get0_certificate(ctx))) == NULL) {
            rc = flare__fail(FLARE_ENOMEM, 0, "TLS certificate names of \"%s\"", cf);
            goto fail;
        }
    }
    *out = s;
    return 0;
fail:
    set_free(s);
    ERR_clear_error();
    return rc;
}

/* ---- configuration ------------------------------------------------------ */

static int alpn_wire(flare_tls_t *t, const char *list)
{
    size_t n = strlen(list);
    t->alpn = malloc(n + 1);
    if (t->alpn == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "TLS ALPN");
    size_t len = 0;
    for (const char *p = list;;) {
        const char *end = strchr(p, ',');
        size_t l = end != NULL ? (size_t)(end - p) : strlen(p);
        while (l > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            l--;
        }
        while (l > 0 && (p[l - 1] == ' ' || p[l - 1] == '\t'))
            l--;
        if (l == 0 || l > 255)
            return flare__fail(FLARE_EINVAL, 0,
                               "TLS alpn \"%s\": each protocol is 1 to 255 bytes, "
                               "comma-separated",
                               list);
        t->alpn[len++] = (unsigned char)l;
        memcpy(t->alpn + len, p, l);
        len += l;
        if (end == NULL)
            break;
        p = end + 1;
    }
    t->alpn_len = len;
    return 0;
}

static char *dup_or_null(const char *s, bool *oom)
{
    if (s == NULL)
        return NULL;
    char *d = strdup(s);
    if (d == NULL)
        *oom = true;
    return d;
}

int flare__tls_new(flare_tls_t **out, const flare_tls_config_t *cfg)
{
    *out = NULL;
    if (cfg == NULL || cfg->cert_file == NULL || cfg->key_file == NULL)
        return flare__fail(FLARE_EINVAL, 0, "TLS: cert_file and key_file are required");
    for (size_t i = 0; i < cfg->nmore_certs; i++) {
        if (cfg->more_certs == NULL || cfg->more_certs[i].cert_file == NULL ||
            cfg->more_certs[i].key_file == NULL)
            return flare__fail(FLARE_EINVAL, 0,
                               "TLS more_certs[%zu]: cert_file and key_file are required", i);
    }
    flare_tls_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "TLS listener");
    int rc;
    bool oom = false;
    bool ring_ok = false, pub_ok = false, reload_ok = false;
    t->ncerts = 1 + cfg->nmore_certs;
    t->cert_files = calloc(t->ncerts, sizeof(char *));
    t->key_files = calloc(t->ncerts, sizeof(char *));
    if (t->cert_files == NULL || t->key_files == NULL) {
        rc = flare__fail(FLARE_ENOMEM, 0, "TLS listener");
        goto fail;
    }
    for (size_t i = 0; i < t->ncerts; i++) {
        const flare_tls_cert_t c =
            i == 0 ? (flare_tls_cert_t){ cfg->cert_file, cfg->key_file } : cfg->more_certs[i - 1];
        t->cert_files[i] = dup_or_null(c.cert_file, &oom);
        t->key_files[i] = dup_or_null(c.key_file, &oom);
    }
    t->ciphers = dup_or_null(cfg->ciphers != NULL ? cfg->ciphers : DEFAULT_CIPHERS, &oom);
    t->ciphersuites = dup_or_null(cfg->ciphersuites, &oom);
    if (oom) {
        rc = flare__fail(FLARE_ENOMEM, 0, "TLS listener");
        goto fail;
    }
    t->handshake_timeout_ms = cfg->handshake_timeout_ms != 0 ? cfg->handshake_timeout_ms : 10000;
    t->session_cache_size = cfg->session_cache_size != 0 ? cfg->session_cache_size : 20480;
    t->no_tickets = cfg->no_tickets;
    t->tls13_only = cfg->tls13_only;
    if ((rc = alpn_wire(t, cfg->alpn != NULL ? cfg->alpn : "h2,http/1.1")) != 0)
        goto fail;
    if ((rc = ring_init(&t->ring, cfg->ticket_rotate_s != 0 ? cfg->ticket_rotate_s : 3600)) != 0)
        goto fail;
    ring_ok = true;
    if (pthread_mutex_init(&t->pub_lock, NULL) != 0) {
        rc = flare__fail(FLARE_ENOMEM, 0, "TLS listener mutex");
        goto fail;
    }
    pub_ok = true;
    if (pthread_mutex_init(&t->reload_lock, NULL) != 0) {
        rc = flare__fail(FLARE_ENOMEM, 0, "TLS listener mutex");
        goto fail;
    }
    reload_ok = true;
    if ((t->ticket_cipher = EVP_CIPHER_fetch(NULL, "AES-256-CBC", NULL)) == NULL) {
        rc = tls_fail("TLS session tickets: AES-256-CBC");
        goto fail;
    }
    if ((t->base = SSL_CTX_new(TLS_server_method())) == NULL) {
        rc = tls_fail("TLS context");
        goto fail;
    }
    if ((rc = ctx_configure(t, t->base)) != 0)
        goto fail;
    if ((rc = set_build(t, &t->set)) != 0)
        goto fail;
    *out = t;
    return 0;
fail:
    ERR_clear_error();
    if (!reload_ok) { /* flare__tls_free destroys all three */
        if (pub_ok)
            pthread_mutex_destroy(&t->pub_lock);
        if (ring_ok)
            pthread_mutex_destroy(&t->ring.lock);
        SSL_CTX_free(t->base);
        EVP_CIPHER_free(t->ticket_cipher);
        for (size_t i = 0; t->cert_files != NULL && i < t->ncerts; i++) {
            free(t->cert_files[i]);
            free(t->key_files != NULL ? t->key_files[i] : NULL);
        }
        free(t->cert_files);
        free(t->key_files);
        free(t->ciphers);
        free(t->ciphersuites);
        free(t->alpn);
        free(t);
        return rc;
    }
    flare__tls_free(t);
    return rc;
}

int flare__tls_reload(flare_tls_t *t)
{
    pthread_mutex_lock(&t->reload_lock);
    ctx_set_t *fresh;
    int rc = set_build(t, &fresh);
    if (rc == 0) {
        pthread_mutex_lock(&t->pub_lock);
        ctx_set_t *old = t->set;
        t->set = fresh;
        pthread_mutex_unlock(&t->pub_lock);
        flare__tls_set_release(old); /* freed now, or by its last connection */
    }
    pthread_mutex_unlock(&t->reload_lock);
    return rc;
}

void flare__tls_free(flare_tls_t *t)
{
    if (t == NULL)
        return;
    flare__tls_set_release(t->set);
    SSL_CTX_free(t->base);
    EVP_CIPHER_free(t->ticket_cipher);
    pthread_mutex_destroy(&t->pub_lock);
    pthread_mutex_destroy(&t->reload_lock);
    pthread_mutex_destroy(&t->ring.lock);
    OPENSSL_cleanse((void *)t->ring.words, sizeof(t->ring.words));
    for (size_t i = 0; i < t->ncerts; i++) {
        free(t->cert_files[i]);
        free(t->key_files[i]);
    }
    free(t->cert_files);
    free(t->key_files);
    free(t->ciphers);
    free(t->ciphersuites);
    free(t->alpn);
    free(t);
}

unsigned flare__tls_handshake_timeout(const flare_tls_t *t)
{
    return t->handshake_timeout_ms;
}
