/* TLS listeners and the TLS transport (OpenSSL 3).
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
 * Unexpected EOF (the peer closes without close_notify) reads as 0, as a
 * clean close, like nginx (SSL_OP_IGNORE_UNEXPECTED_EOF): HTTP framing, not
 * TLS, tells a truncated request or message, and OpenSSL 3 would otherwise
 * also drop the session from the cache.
 *
 * OpenSSL's per-thread error queue is kept empty at this module's boundary:
 * a stale entry makes SSL_get_error() report SSL_ERROR_SSL for a plain
 * WANT_READ. */
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
#include "loop/loop.h"
#include "net/tls.h"

/* The largest TLS record payload: one SSL_write of at most this many bytes
 * makes one record (partial-write mode), so a retry is one record too. */
#define TLS_RECORD 16384

#define DEFAULT_CIPHERS                                                                 \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-" \
    "SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-"       \
    "CHACHA20-POLY1305"

static const unsigned char session_id_context[] = "flare-tls";

/* ---- ticket key ring ---------------------------------------------------- */

typedef struct ticket_key {
    unsigned char name[16];
    unsigned char aes[32];
    unsigned char hmac[32];
} ticket_key_t;

#define RING_WORDS (2 * sizeof(ticket_key_t) / sizeof(uint64_t))

/* Written once per rotation, read by every handshake: its own cache lines.
 * words[] holds the current key then the previous one. seq is odd while a
 * rotation writes them (the C11 seqlock: every access is atomic, so readers
 * racing a writer retry instead of racing). */
typedef struct ticket_ring {
    _Alignas(64) _Atomic uint64_t seq;
    _Atomic uint64_t words[RING_WORDS];
    _Atomic uint64_t rotate_at_ms;
    uint64_t period_ms;
    pthread_mutex_t lock;
} ticket_ring_t;

_Static_assert(sizeof(ticket_key_t) % sizeof(uint64_t) == 0, "key is whole words");

/* ---- listener state ----------------------------------------------------- */

typedef struct cert_slot {
    SSL_CTX *ctx;
    char *names; /* lower-case DNS names, each NUL-terminated, "" ends the list */
} cert_slot_t;

typedef struct ctx_set {
    _Atomic unsigned refs; /* the listener's (while published) + one per connection */
    flare_tls_t *tls;
    size_t n;
    cert_slot_t cert[]; /* cert[0]: the default certificate */
} ctx_set_t;

struct flare_tls {
    SSL_CTX *base;            /* session cache, ticket callback, protocol settings */
    pthread_mutex_t pub_lock; /* guards `set` and taking a reference on it */
    ctx_set_t *set;
    pthread_mutex_t reload_lock; /* one reload at a time */
    EVP_CIPHER *ticket_cipher;
    unsigned char *alpn; /* ALPN wire format: length-prefixed names */
    size_t alpn_len;
    size_t ncerts;
    char **cert_files, **key_files;
    char *ciphers, *ciphersuites;
    unsigned handshake_timeout_ms, session_cache_size;
    bool no_tickets, tls13_only;
    ticket_ring_t ring;
};

/* ---- the transport ------------------------------------------------------ */

typedef struct tls_conn {
    flare_transport_t base; /* first: the stream sees only this */
    SSL *ssl;
    ctx_set_t *set;
    flare_tls_counters_t *ctr;
    /* Length of the SSL_write that last returned WANT_*: OpenSSL must be
     * called again with exactly this length (else SSL_R_BAD_LENGTH or
     * SSL_R_BAD_WRITE_RETRY). 0: no write pending. */
    size_t wpending;
    /* With kTLS OpenSSL keeps pointing into the caller's buffer until a
     * pending record is sent, so it must stay put: this connection's own. */
    char *kbuf;
    /* Coalesced output (see "output" below): sealed records the socket did
     * not take yet, this connection's own until they are out; and how many
     * plaintext bytes they hold that were not reported written. */
    char *pend;
    size_t pend_len, pend_off, sealed;
    /* pend holds output OpenSSL made on its own, never tried on the socket
     * yet (the TLS 1.3 session tickets): the next write appends its records
     * to it (out_append) and sends it all at once */
    bool held;
    bool peeked, ktls_send, shut_sent, coalesce;
} tls_conn_t;

static flare_tls_counters_t no_counters;

static inline void bump(_Atomic unsigned long long *c)
{
    /* written only by the owning worker: a load and a store, no lock prefix */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* Empty the queue before an SSL call when something left an entry there
 * (peeking is cheaper than clearing every slot). */
static inline void clear_errors(void)
{
    if (flare__unlikely(ERR_peek_error() != 0))
        ERR_clear_error();
}

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

static bool ktls_available(void)
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
    if (ktls_available())
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

static void set_release(ctx_set_t *s)
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
        set_release(old); /* freed now, or by its last connection */
    }
    pthread_mutex_unlock(&t->reload_lock);
    return rc;
}

void flare__tls_free(flare_tls_t *t)
{
    if (t == NULL)
        return;
    set_release(t->set);
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

/* ---- I/O ---------------------------------------------------------------- */

/* A per-thread record buffer for coalescing a vector or reading a file
 * range: OpenSSL encrypts from it into its own write buffer during
 * SSL_write and, without kTLS, never reads it again (a retry after
 * WANT_WRITE only flushes the sealed record), so every connection of a
 * worker can share one instead of each holding 16 KiB. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static _Thread_local char *scratch;

static void scratch_key_init(void)
{
    (void)pthread_key_create(&scratch_key, free);
}

static char *record_buf(tls_conn_t *c)
{
    if (flare__unlikely(c->ktls_send)) {
        if (c->kbuf == NULL)
            c->kbuf = malloc(TLS_RECORD);
        return c->kbuf;
    }
    if (flare__likely(scratch != NULL))
        return scratch;
    pthread_once(&scratch_once, scratch_key_init);
    char *p = malloc(TLS_RECORD);
    if (p != NULL && pthread_setspecific(scratch_key, p) != 0) {
        free(p);
        p = NULL;
    }
    return scratch = p;
}

/* ---- output ------------------------------------------------------------ */

/* After the handshake (without kTLS) the connection's write BIO is ours, not
 * the socket's: OpenSSL seals a record into it, we append the record to a
 * per-thread buffer, and after a batch of records (up to OUT_BATCH bytes of
 * plaintext) one send(2) takes them all. OpenSSL's socket BIO makes one
 * write(2) per 16 KiB record. Measured (1 MiB over TLS, strace): 64
 * writes per MiB -> 16 with 64 KiB batches (as h2o does with its own
 * buffer) -> 4 with 256 KiB ones. A syscall's fixed cost is what the
 * batch saves (here about 2.5 us, as much as copying 200 KiB: pread of
 * 1 MiB in 64 KiB calls 70-100 us, in 256 KiB calls 45-65 us); past
 * 256 KiB little is left to save. The cost: per thread, this buffer and
 * the file buffer (512 KiB, within L2 with OpenSSL's 16 KiB record), and
 * a connection whose socket is full holds up to a batch of records.
 *
 * The per-thread buffer is empty between calls into this module: what the
 * socket does not take is moved to the connection (c->pend) and written
 * first by the next call, so every connection of a worker shares one
 * buffer, and a connection holds output only while its socket is full.
 * The plaintext of records that are sealed but not out yet is reported
 * written only once they are out (c->sealed); until then the stream offers
 * the same bytes again, as after a partial write. */
#define OUT_BATCH (16 * TLS_RECORD)
#define OUT_CAP   (OUT_BATCH + 16 * 256) /* 16 records and their headers and tags */

static _Thread_local struct {
    char *buf;
    size_t len, cap;
} out;
static pthread_key_t out_key;
static pthread_once_t out_once = PTHREAD_ONCE_INIT;
static BIO_METHOD *out_method;

static int out_append(tls_conn_t *c, const char *p, size_t n)
{
    if (c->pend_len > 0) { /* behind what is already waiting */
        char *g = realloc(c->pend, c->pend_len + n);
        if (g == NULL)
            return -1;
        memcpy(g + c->pend_len, p, n);
        c->pend = g;
        c->pend_len += n;
        return 0;
    }
    if (flare__unlikely(out.len + n > out.cap)) {
        size_t cap = out.cap != 0 ? out.cap : OUT_CAP;
        while (cap < out.len + n)
            cap *= 2;
        char *g = realloc(out.buf, cap);
        if (g == NULL)
            return -1;
        (void)pthread_setspecific(out_key, g); /* freed with the thread */
        out.buf = g;
        out.cap = cap;
    }
    memcpy(out.buf + out.len, p, n);
    out.len += n;
    return 0;
}

/* FLARE_TR_HELD tells the stream to flush: output is waiting that no write
 * of the stream's will push (none of its bytes are in it). */
static inline void held_sync(tls_conn_t *c)
{
    if (c->pend_len > 0 && c->sealed == 0)
        c->base.state |= FLARE_TR_HELD;
    else
        c->base.state &= ~(uint32_t)FLARE_TR_HELD;
}

static int out_flush_(tls_conn_t *c);

/* Sends what is waiting: 1 all out, 0 the socket is full (the rest is the
 * connection's now), -1 an error (errno). */
static int out_flush(tls_conn_t *c)
{
    c->held = false;
    int r = out_flush_(c);
    held_sync(c);
    return r;
}

static int out_flush_(tls_conn_t *c)
{
    const char *p = c->pend_len > 0 ? c->pend + c->pend_off : out.buf;
    size_t n = c->pend_len > 0 ? c->pend_len - c->pend_off : out.len;
    size_t sent = 0;
    while (sent < n) {
        ssize_t w = send(c->base.fd, p + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            sent += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            int e = errno;
            out.len = 0; /* lost with the connection */
            errno = e;
            return -1;
        }
        break;
    }
    if (c->pend_len > 0) {
        c->pend_off += sent;
        if (c->pend_off < c->pend_len)
            return 0;
        free(c->pend);
        c->pend = NULL;
        c->pend_len = c->pend_off = 0;
        return 1;
    }
    if (sent == n) {
        out.len = 0;
        return 1;
    }
    char *rest = malloc(n - sent);
    if (rest == NULL) {
        out.len = 0;
        errno = ENOMEM;
        return -1;
    }
    memcpy(rest, p + sent, n - sent);
    c->pend = rest;
    c->pend_len = n - sent;
    c->pend_off = 0;
    out.len = 0;
    return 0;
}

static int out_bio_write(BIO *b, const char *p, size_t n, size_t *written)
{
    BIO_clear_retry_flags(b);
    if (out_append(BIO_get_data(b), p, n) != 0)
        return 0;
    *written = n;
    return 1;
}

static long out_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num;
    (void)ptr;
    tls_conn_t *c = BIO_get_data(b);
    switch (cmd) {
    case BIO_CTRL_FLUSH: {
        BIO_clear_retry_flags(b);
        /* TLS 1.3 tickets: OpenSSL flushes after each one (2 sends); kept
         * instead for the first response to carry (see handshake) */
        if (SSL_get_state(c->ssl) == TLS_ST_SW_SESSION_TICKET)
            return 1;
        int r = out_flush(c);
        if (r == 0)
            BIO_set_retry_write(b);
        return r == 1 ? 1 : -1;
    }
    case BIO_CTRL_WPENDING:
        return (long)(c->pend_len > 0 ? c->pend_len - c->pend_off : out.len);
    case BIO_CTRL_PENDING:
        return 0;
    case BIO_CTRL_DUP:
        return 1;
    default:
        return 0;
    }
}

static void out_init(void)
{
    (void)pthread_key_create(&out_key, free);
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "flare tls output");
    if (m != NULL &&
        (BIO_meth_set_write_ex(m, out_bio_write) != 1 || BIO_meth_set_ctrl(m, out_bio_ctrl) != 1)) {
        BIO_meth_free(m);
        m = NULL;
    }
    out_method = m; /* NULL: every connection keeps the socket BIO */
    ERR_clear_error();
}

/* After the handshake: OpenSSL writes into our BIO from now on. Without it
 * (no memory) the socket BIO stays, one write(2) per record. */
static void out_attach(tls_conn_t *c)
{
    pthread_once(&out_once, out_init);
    if (out_method == NULL)
        return;
    BIO *b = BIO_new(out_method);
    if (b == NULL) {
        ERR_clear_error();
        return;
    }
    BIO_set_data(b, c);
    BIO_set_init(b, 1);
    SSL_set0_wbio(c->ssl, b); /* drops the wbio's reference to the socket BIO */
    c->coalesce = true;
}

/* After an SSL call that may have written (a read answering a key update,
 * an alert): nothing stays in the per-thread buffer. */
static inline void out_settle(tls_conn_t *c)
{
    if (flare__unlikely(out.len > 0) && c->pend_len == 0)
        (void)out_flush(c);
}

/* Maps a failed SSL call. errno must still be the call's. */
static ssize_t io_error(tls_conn_t *c, int ret)
{
    int sys = errno;
    switch (SSL_get_error(c->ssl, ret)) {
    case SSL_ERROR_WANT_READ:
        c->base.want = FLARE_IO_READ;
        return -EAGAIN;
    case SSL_ERROR_WANT_WRITE:
        c->base.want = FLARE_IO_WRITE;
        return -EAGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    case SSL_ERROR_SYSCALL:
        ERR_clear_error();
        c->base.state |= FLARE_TR_FAILED;
        return sys != 0 && sys != EAGAIN ? -sys : -ECONNRESET;
    default:
        ERR_clear_error();
        c->base.state |= FLARE_TR_FAILED;
        return -EPROTO;
    }
}

static const char plain_http_400[] = "HTTP/1.1 400 Bad Request\r\n"
                                     "Content-Type: text/plain\r\n"
                                     "Content-Length: 50\r\n"
                                     "Connection: close\r\n"
                                     "\r\n"
                                     "The plain HTTP request was sent to the HTTPS port\n";
#define PLAIN_HTTP_400_HEAD (sizeof(plain_http_400) - 1 - 50)

_Static_assert(sizeof("The plain HTTP request was sent to the HTTPS port\n") - 1 == 50,
               "Content-Length of the plain-HTTP answer");

/* Before OpenSSL sees a byte: a TLS connection starts with a handshake
 * record (0x16). A plain HTTP request gets a readable 400 instead of an
 * alert; anything else is dropped. 1 TLS, 0 EOF, -EAGAIN, -errno. */
static ssize_t peek_first(tls_conn_t *c)
{
    unsigned char b;
    ssize_t r;
    do
        r = recv(c->base.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            c->base.want = FLARE_IO_READ;
            return -EAGAIN;
        }
        int e = errno;
        bump(&c->ctr->handshake_errors);
        c->base.state |= FLARE_TR_FAILED;
        return -e;
    }
    if (r == 0)
        return 0; /* closed before saying anything: not a failed handshake */
    if (b == 0x16) {
        c->peeked = true;
        return 1;
    }
    c->base.state |= FLARE_TR_FAILED;
    if (b >= 'A' && b <= 'Z') {
        bump(&c->ctr->plaintext_http);
        /* take what has arrived, so closing does not reset the connection
         * (and the answer with it) for unread bytes */
        char sink[4096];
        ssize_t got = recv(c->base.fd, sink, sizeof(sink), MSG_DONTWAIT);
        /* a HEAD request gets the head alone (RFC 9110 section 9.3.2) */
        bool head = got >= 5 && memcmp(sink, "HEAD ", 5) == 0;
        while (got == (ssize_t)sizeof(sink))
            got = recv(c->base.fd, sink, sizeof(sink), MSG_DONTWAIT);
        (void)send(c->base.fd, plain_http_400,
                   head ? PLAIN_HTTP_400_HEAD : sizeof(plain_http_400) - 1,
                   MSG_NOSIGNAL | MSG_DONTWAIT);
    } else {
        bump(&c->ctr->handshake_errors);
    }
    return -EPROTO;
}

/* After an SSL call of the handshake: what it left in the per-thread
 * buffer is sent, or, with `keep` (the handshake is done), kept by the
 * connection for its first response to carry. That is the TLS 1.3 session
 * tickets: the client's Finished usually comes with its request, and the
 * tickets, the response and (Connection: close) close_notify then leave in
 * one send instead of four (nginx: four writes; h2o: three). No response
 * in this batch (an incomplete or asynchronous one): the stream's flush at
 * the end of the batch sends them (FLARE_TR_HELD). */
static void out_after_handshake(tls_conn_t *c, bool keep)
{
    if (flare__likely(out.len == 0)) {
        held_sync(c);
        return;
    }
    char *p = keep && c->pend_len == 0 ? malloc(out.len) : NULL;
    if (p == NULL) {
        (void)out_flush(c); /* an error shows on the next call */
        return;
    }
    memcpy(p, out.buf, out.len);
    c->pend = p;
    c->pend_len = out.len;
    c->pend_off = 0;
    c->held = true;
    out.len = 0;
    held_sync(c);
}

/* Runs the handshake: 1 established, 0 the peer closed, -EAGAIN, -errno. */
static ssize_t handshake(tls_conn_t *c)
{
    if (c->base.state & FLARE_TR_FAILED)
        return -EPROTO;
    if (!c->peeked) {
        ssize_t r = peek_first(c);
        if (r <= 0)
            return r;
    }
    clear_errors();
    errno = 0;
    int r = SSL_do_handshake(c->ssl);
    if (c->coalesce)
        out_after_handshake(c, r == 1);
    if (r == 1) {
        c->base.state |= FLARE_TR_ESTABLISHED;
        bump(&c->ctr->handshakes);
        if (SSL_session_reused(c->ssl))
            bump(&c->ctr->resumed);
        c->ktls_send = BIO_get_ktls_send(SSL_get_wbio(c->ssl));
        if (!c->ktls_send && !c->coalesce)
            out_attach(c);
        return 1;
    }
    ssize_t e = io_error(c, r);
    if (e != -EAGAIN) {
        bump(&c->ctr->handshake_errors);
        c->base.state |= FLARE_TR_FAILED;
    }
    return e;
}

static ssize_t tls_read(flare_transport_t *t, char *buf, size_t len)
{
    tls_conn_t *c = (tls_conn_t *)t;
    if (flare__unlikely(!(t->state & FLARE_TR_ESTABLISHED))) {
        ssize_t r = handshake(c);
        if (r <= 0)
            return r;
    }
    if (flare__unlikely(t->state & FLARE_TR_FAILED))
        return -EPROTO;
    if (len == 0)
        return -EINVAL;
    clear_errors();
    errno = 0;
    size_t got;
    int ok = SSL_read_ex(c->ssl, buf, len, &got);
    int sys = errno;
    if (c->coalesce)
        out_settle(c); /* a key update answered, an alert */
    if (flare__likely(ok == 1))
        return (ssize_t)got;
    errno = sys;
    return io_error(c, 0);
}

/* One record of len bytes from src; len is the pending length on a retry.
 * With our output BIO it only seals: OpenSSL's write cannot block. */
static ssize_t write_record(tls_conn_t *c, const void *src, size_t len)
{
    clear_errors();
    errno = 0;
    size_t done;
    if (flare__likely(SSL_write_ex(c->ssl, src, len, &done) == 1)) {
        c->wpending = 0;
        return (ssize_t)done;
    }
    ssize_t e = io_error(c, 0);
    if (e == -EAGAIN)
        c->wpending = len;
    return e == 0 ? -EPIPE : e;
}

/* Checks before a write: 0 go on, else what to return. */
static ssize_t write_ready(tls_conn_t *c)
{
    if (flare__unlikely(!(c->base.state & FLARE_TR_ESTABLISHED))) {
        ssize_t r = handshake(c);
        if (r <= 0)
            return r == 0 ? -EPIPE : r;
    }
    if (flare__unlikely(c->base.state & FLARE_TR_FAILED))
        return -EPROTO;
    /* after close_notify only the retry of the batch it was sealed with */
    if (flare__unlikely(c->shut_sent) && c->sealed == 0)
        return -EPIPE;
    return 0;
}

/* close_notify sealed behind the batch (FLARE_TR_LAST): SSL_shutdown's
 * flush sends both at once; out_batch then reports them out or waiting. */
static void seal_close_notify(tls_conn_t *c)
{
    clear_errors();
    if (SSL_shutdown(c->ssl) >= 0)
        c->shut_sent = true;
    else
        ERR_clear_error(); /* tls_shutdown tries again when the stream ends */
}

static ssize_t out_failed(tls_conn_t *c, int e)
{
    out.len = 0;
    c->base.state |= FLARE_TR_FAILED;
    return e != 0 && e != EAGAIN ? -e : -EPIPE;
}

/* Output still waiting from the last call goes first: 1 go on, *done the
 * plaintext it held (now out, so reported), else what to return. */
static ssize_t out_resume(tls_conn_t *c, size_t len, size_t *done)
{
    *done = 0;
    if (flare__likely(c->pend_len == 0))
        return 1;
    if (c->held)
        return 1; /* the tickets: the records sealed next join them, one send */
    int r = out_flush(c);
    if (r == 0) {
        c->base.want = FLARE_IO_WRITE;
        return -EAGAIN;
    }
    if (r < 0)
        return out_failed(c, errno);
    if (len < c->sealed)
        return -EINVAL; /* a retry must offer at least the bytes sealed */
    *done = c->sealed;
    c->sealed = 0;
    return 1;
}

/* Sends the batch sealed after `done` reported bytes: what to report. */
static ssize_t out_batch(tls_conn_t *c, size_t done)
{
    int r = out_flush(c);
    if (r == 1) {
        done += c->sealed;
        c->sealed = 0;
        return (ssize_t)done;
    }
    if (r < 0)
        return done > 0 ? (ssize_t)done : out_failed(c, errno);
    c->base.want = FLARE_IO_WRITE;
    return done > 0 ? (ssize_t)done : -EAGAIN;
}

/* The next len bytes of the vector, advancing *i / *at: straight from it
 * when one piece holds them (not with kTLS: its pending record stays in the
 * caller's buffer), else gathered into the record buffer. */
static const char *iov_take(tls_conn_t *c, const struct iovec *iov, int *i, size_t *at, size_t len)
{
    while (iov[*i].iov_len == *at) {
        (*i)++;
        *at = 0;
    }
    if (iov[*i].iov_len - *at >= len && !c->ktls_send) {
        const char *p = (const char *)iov[*i].iov_base + *at;
        *at += len;
        return p;
    }
    char *rec = record_buf(c);
    if (rec == NULL)
        return NULL;
    for (size_t got = 0; got < len;) {
        if (iov[*i].iov_len == *at) {
            (*i)++;
            *at = 0;
            continue;
        }
        size_t take = iov[*i].iov_len - *at < len - got ? iov[*i].iov_len - *at : len - got;
        memcpy(rec + got, (const char *)iov[*i].iov_base + *at, take);
        got += take;
        *at += take;
    }
    return rec;
}

static ssize_t tls_writev(flare_transport_t *t, const struct iovec *iov, int n, bool more)
{
    (void)more; /* every call ends with its records sent: nothing to hold back */
    tls_conn_t *c = (tls_conn_t *)t;
    ssize_t r = write_ready(c);
    if (r != 0)
        return r;
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    size_t done = 0;
    if (c->coalesce && (r = out_resume(c, total, &done)) != 1)
        return r;
    if (flare__unlikely(c->shut_sent))
        return done > 0 ? (ssize_t)done : -EPIPE; /* nothing may follow close_notify */
    if (c->wpending != 0 && total < c->wpending)
        return -EINVAL; /* a retry must offer at least the pending bytes */
    int i = 0;
    size_t at = 0;
    for (size_t skip = done; skip > 0;) { /* reported by out_resume */
        size_t take = iov[i].iov_len - at < skip ? iov[i].iov_len - at : skip;
        at += take;
        skip -= take;
        if (at == iov[i].iov_len && skip > 0) {
            i++;
            at = 0;
        }
    }
    /* record after record until the vector is done or the socket is full
     * (the stream takes a short count for a full socket) */
    while (done < total) {
        size_t batch = 0;
        do {
            size_t len =
                c->wpending != 0
                    ? c->wpending
                    : (total - done - batch < TLS_RECORD ? total - done - batch : TLS_RECORD);
            const char *src = iov_take(c, iov, &i, &at, len);
            if (src == NULL)
                return done > 0 ? (ssize_t)done : -ENOMEM;
            r = write_record(c, src, len);
            if (r <= 0) {
                if (c->coalesce)
                    return out_failed(c, errno);
                return done > 0 ? (ssize_t)done : r;
            }
            if (!c->coalesce) {
                done += (size_t)r;
                break;
            }
            batch += (size_t)r;
            c->sealed += (size_t)r;
        } while (done + batch < total && batch < OUT_BATCH);
        if (c->coalesce) {
            if (flare__unlikely(t->state & FLARE_TR_LAST) && done + batch == total)
                seal_close_notify(c);
            r = out_batch(c, done);
            if (r < 0 || (size_t)r < done + batch)
                return r;
            done = (size_t)r;
        }
    }
    return (ssize_t)done;
}

/* The buffer a file range is read into: OUT_BATCH bytes, per thread (see
 * record_buf: OpenSSL does not read it after SSL_write without kTLS). One
 * pread(2) per batch instead of one per record: 64 per MiB -> 4. */
static _Thread_local char *file_scratch;
static pthread_key_t file_key;
static pthread_once_t file_once = PTHREAD_ONCE_INIT;

static void file_key_init(void)
{
    (void)pthread_key_create(&file_key, free);
}

static char *file_buf(void)
{
    if (flare__likely(file_scratch != NULL))
        return file_scratch;
    pthread_once(&file_once, file_key_init);
    char *p = malloc(OUT_BATCH);
    if (p != NULL && pthread_setspecific(file_key, p) != 0) {
        free(p);
        p = NULL;
    }
    return file_scratch = p;
}

static ssize_t tls_sendfile(flare_transport_t *t, int fd, uint64_t off, size_t len)
{
    tls_conn_t *c = (tls_conn_t *)t;
    ssize_t r = write_ready(c);
    if (r != 0)
        return r;
    if (len == 0)
        return 0;
    if (c->ktls_send && c->wpending == 0) {
        /* the kernel seals the records: the file never enters user space */
        clear_errors();
        errno = 0;
        ossl_ssize_t s = SSL_sendfile(c->ssl, fd, (off_t)off, len, 0);
        if (s > 0)
            return (ssize_t)s;
        if (s == 0)
            return -EIO; /* the file ended before len */
        r = io_error(c, -1);
        return r == 0 ? -EPIPE : r;
    }
    size_t done = 0;
    if (c->coalesce) {
        if ((r = out_resume(c, len, &done)) != 1)
            return r;
        char *buf = file_buf();
        if (buf == NULL)
            return done > 0 ? (ssize_t)done : -ENOMEM;
        while (done < len) {
            size_t batch = len - done < OUT_BATCH ? len - done : OUT_BATCH;
            if (flare__pread_all(fd, buf, off + done, batch) != 0)
                return done > 0 ? (ssize_t)done : -EIO;
            for (size_t k = 0; k < batch; k += (size_t)r) {
                r = write_record(c, buf + k, batch - k < TLS_RECORD ? batch - k : TLS_RECORD);
                if (r <= 0)
                    return out_failed(c, errno);
                c->sealed += (size_t)r;
            }
            r = out_batch(c, done);
            if (r < 0 || (size_t)r < done + batch)
                return r;
            done = (size_t)r;
        }
        return (ssize_t)done;
    }
    char *rec = record_buf(c);
    if (rec == NULL)
        return -ENOMEM;
    /* record after record until the range is done or the socket is full:
     * the stream takes a short count for a full socket and waits for
     * EPOLLOUT, so returning after one record cost an epoll_wait per 16 KiB */
    while (done < len) {
        /* a retry reads the same bytes again (the record is already sealed,
         * but the contract is the same bytes) */
        size_t n =
            c->wpending != 0 ? c->wpending : (len - done < TLS_RECORD ? len - done : TLS_RECORD);
        if (len - done < n)
            return done > 0 ? (ssize_t)done : -EINVAL;
        if (flare__pread_all(fd, rec, off + done, n) != 0)
            return done > 0 ? (ssize_t)done : -EIO;
        r = write_record(c, rec, n);
        if (r <= 0)
            return done > 0 ? (ssize_t)done : r;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* The close_notify (and anything before it) out of our buffer: 0 out,
 * -EAGAIN (the socket is full), -errno. */
static int out_drain(tls_conn_t *c)
{
    if (!c->coalesce)
        return 0;
    out_settle(c);
    if (c->pend_len == 0)
        return 0;
    int r = out_flush(c);
    if (r == 1)
        return 0;
    if (r == 0) {
        c->base.want = FLARE_IO_WRITE;
        return -EAGAIN;
    }
    return (int)out_failed(c, errno);
}

static int tls_shutdown(flare_transport_t *t)
{
    tls_conn_t *c = (tls_conn_t *)t;
    if (t->state & FLARE_TR_FAILED)
        return -EPIPE;
    if (!(t->state & FLARE_TR_ESTABLISHED))
        return 0; /* nothing to close cleanly */
    if (c->shut_sent)
        return out_drain(c); /* already sent, or on its way */
    clear_errors();
    errno = 0;
    /* sends close_notify; the peer's is not waited for */
    int r = SSL_shutdown(c->ssl);
    if (r >= 0) {
        c->shut_sent = true;
        return out_drain(c);
    }
    ssize_t e = io_error(c, r);
    return e == 0 ? 0 : (int)e;
}

static int tls_flush(flare_transport_t *t)
{
    tls_conn_t *c = (tls_conn_t *)t;
    if (t->state & FLARE_TR_FAILED)
        return -EPIPE;
    int r = c->pend_len > 0 ? out_flush(c) : 1;
    if (r == 1)
        return 0;
    if (r == 0) {
        t->want = FLARE_IO_WRITE;
        return -EAGAIN;
    }
    return (int)out_failed(c, errno);
}

static size_t tls_pending(const flare_transport_t *t)
{
    const tls_conn_t *c = (const tls_conn_t *)t;
    if (!(t->state & FLARE_TR_ESTABLISHED) || (t->state & FLARE_TR_FAILED))
        return 0;
    int n = SSL_pending(c->ssl);
    if (n > 0)
        return (size_t)n;
    /* read-ahead may hold more records than the current one; this may also
     * be the start of a record still arriving, then a read says -EAGAIN */
    return SSL_has_pending(c->ssl) ? 1 : 0;
}

static void tls_free(flare_transport_t *t)
{
    tls_conn_t *c = (tls_conn_t *)t;
    /* OpenSSL drops the session from the cache when a connection goes
     * without close_notify sent; only a failed one should lose it (a
     * connection closed on a timeout or after the peer's EOF stays
     * resumable, as in nginx) */
    if (c->ssl != NULL && !(t->state & FLARE_TR_FAILED))
        SSL_set_shutdown(c->ssl, SSL_get_shutdown(c->ssl) | SSL_SENT_SHUTDOWN);
    SSL_free(c->ssl); /* never closes the fd: SSL_set_fd's BIO does not own it */
    ERR_clear_error();
    set_release(c->set);
    free(c->kbuf);
    free(c->pend);
    free(c);
}

static const flare_transport_ops_t tls_ops = {
    .read = tls_read,
    .writev = tls_writev,
    .sendfile = tls_sendfile,
    .shutdown = tls_shutdown,
    .flush = tls_flush,
    .pending = tls_pending,
    .free = tls_free,
};

flare_transport_t *flare__tls_accept(flare_tls_t *t, int fd, flare_tls_counters_t *ctr)
{
    tls_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->base.ops = &tls_ops;
    c->base.fd = fd;
    c->ctr = ctr != NULL ? ctr : &no_counters;
    /* one uncontended lock per accept, next to the handshake's ~100 us of
     * public-key work; the I/O path takes none */
    pthread_mutex_lock(&t->pub_lock);
    c->set = t->set;
    atomic_fetch_add_explicit(&c->set->refs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&t->pub_lock);
    c->ssl = SSL_new(t->base);
    if (c->ssl == NULL || SSL_set_SSL_CTX(c->ssl, c->set->cert[0].ctx) == NULL ||
        SSL_set_fd(c->ssl, fd) != 1) {
        ERR_clear_error();
        tls_free(&c->base);
        return NULL;
    }
    /* our output BIO from the start (the handshake's flights go out as
     * before, one send each; the tickets wait for the response), except
     * where kTLS may take over: OpenSSL sets it up on the socket BIO */
    if (!ktls_available())
        out_attach(c);
    SSL_set_accept_state(c->ssl);
    return &c->base;
}

flare_str_t flare__tls_alpn(const flare_transport_t *tr)
{
    const tls_conn_t *c = (const tls_conn_t *)tr;
    const unsigned char *p = NULL;
    unsigned n = 0;
    SSL_get0_alpn_selected(c->ssl, &p, &n);
    return p != NULL ? (flare_str_t){ (const char *)p, n } : (flare_str_t){ "", 0 };
}

flare_str_t flare__tls_sni(const flare_transport_t *tr)
{
    const tls_conn_t *c = (const tls_conn_t *)tr;
    const char *s = SSL_get_servername(c->ssl, TLSEXT_NAMETYPE_host_name);
    return s != NULL ? (flare_str_t){ s, strlen(s) } : (flare_str_t){ "", 0 };
}
