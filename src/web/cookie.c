/* Cookies: Cookie header iteration, Set-Cookie building, HMAC signing. */
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <pthread.h>
#include <string.h>

#include "core/clock.h"
#include "core/core.h"
#include "flare/cookie.h"

/* ---- character classes --------------------------------------------------- */

/* RFC 6265 cookie-octet: %x21 / %x23-2B / %x2D-3A / %x3C-5B / %x5D-7E */
static bool is_cookie_octet(unsigned char c)
{
    return c >= 0x21 && c <= 0x7E && c != '"' && c != ',' && c != ';' && c != '\\';
}

static bool all_cookie_octets(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!is_cookie_octet((unsigned char)p[i]))
            return false;
    }
    return true;
}

/* cookie-value = *cookie-octet / ( DQUOTE *cookie-octet DQUOTE ) */
static bool is_cookie_value(flare_str_t v)
{
    if (v.len == 0)
        return true;
    if (v.ptr == NULL)
        return false;
    if (v.len >= 2 && v.ptr[0] == '"' && v.ptr[v.len - 1] == '"')
        return all_cookie_octets(v.ptr + 1, v.len - 2);
    return all_cookie_octets(v.ptr, v.len);
}

static bool has_prefix_ci(flare_str_t s, const char *lower, size_t n)
{
    return s.len >= n && flare__ieq_lit((flare_str_t){ s.ptr, n }, lower, n);
}

/* ---- parsing -------------------------------------------------------------- */

void flare_cookie_iter_init(flare_cookie_iter_t *it, flare_str_t header)
{
    it->p = header.ptr;
    it->end = header.ptr != NULL ? header.ptr + header.len : NULL;
}

static flare_str_t trim(const char *a, const char *b)
{
    while (a < b && (*a == ' ' || *a == '\t'))
        a++;
    while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
        b--;
    return (flare_str_t){ a, (size_t)(b - a) };
}

int flare_cookie_next(flare_cookie_iter_t *it, flare_str_t *name, flare_str_t *value)
{
    while (it->p != NULL && it->p < it->end) {
        const char *seg = it->p;
        const char *semi = memchr(seg, ';', (size_t)(it->end - seg));
        const char *seg_end = semi != NULL ? semi : it->end;
        it->p = semi != NULL ? semi + 1 : it->end;
        const char *eq = memchr(seg, '=', (size_t)(seg_end - seg));
        if (eq == NULL)
            continue;
        flare_str_t n = trim(seg, eq);
        if (n.len == 0)
            continue;
        flare_str_t v = trim(eq + 1, seg_end);
        if (v.len >= 2 && v.ptr[0] == '"' && v.ptr[v.len - 1] == '"') {
            v.ptr++;
            v.len -= 2;
        }
        *name = n;
        *value = v;
        return 0;
    }
    return FLARE_EEND;
}

flare_str_t flare_cookie_get(flare_str_t header, flare_str_t name)
{
    flare_cookie_iter_t it;
    flare_str_t n, v;
    flare_cookie_iter_init(&it, header);
    while (flare_cookie_next(&it, &n, &v) == 0) {
        if (flare_str_eq(n, name))
            return v;
    }
    return FLARE_STR_NULL;
}

/* ---- Set-Cookie ---------------------------------------------------------- */

void flare_cookie_init(flare_cookie_t *c, flare_str_t name, flare_str_t value)
{
    memset(c, 0, sizeof(*c));
    c->name = name;
    c->value = value;
    c->path = FLARE_STR("/");
    c->max_age = -1;
    c->http_only = true;
    c->same_site = FLARE_SAME_SITE_LAX;
}

typedef struct out {
    char *buf;
    size_t cap;
    size_t len;
    bool full;
} out_t;

static void out_put(out_t *o, const char *p, size_t n)
{
    if (o->full || o->cap - o->len < n) {
        o->full = true;
        return;
    }
    memcpy(o->buf + o->len, p, n);
    o->len += n;
}

#define OUT_LIT(o, lit) out_put((o), (lit), sizeof(lit) - 1)

static bool valid_path(flare_str_t p)
{
    if (p.len == 0 || p.len > FLARE_COOKIE_MAX_ATTR || p.ptr[0] != '/')
        return false;
    for (size_t i = 0; i < p.len; i++) {
        unsigned char c = (unsigned char)p.ptr[i];
        if (c < 0x20 || c >= 0x7F || c == ';')
            return false;
    }
    return true;
}

static bool valid_domain(flare_str_t d)
{
    if (d.len == 0 || d.len > 253)
        return false;
    for (size_t i = 0; i < d.len; i++) {
        unsigned char c = (unsigned char)d.ptr[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              c == '-' || c == '.'))
            return false;
    }
    return true;
}

/* 9999-12-31T23:59:59Z: the last instant an IMF-fixdate can carry. */
#define MAX_EXPIRES INT64_C(253402300799)

int flare_cookie_format(const flare_cookie_t *c, char *buf, size_t cap, size_t *len)
{
    *len = 0;
    if (!flare__is_token(c->name) || !is_cookie_value(c->value))
        return FLARE_EINVAL;
    if (c->name.len + c->value.len > FLARE_COOKIE_MAX_PAIR)
        return FLARE_ETOOBIG;
    bool has_path = c->path.ptr != NULL;
    bool has_domain = c->domain.len > 0;
    if ((has_path && !valid_path(c->path)) || (has_domain && !valid_domain(c->domain)) ||
        (c->domain.ptr == NULL && c->domain.len != 0))
        return FLARE_EINVAL;
    if (c->expires < 0 || (int64_t)c->expires > MAX_EXPIRES)
        return FLARE_EINVAL;
    if (c->same_site != FLARE_SAME_SITE_LAX && c->same_site != FLARE_SAME_SITE_STRICT &&
        c->same_site != FLARE_SAME_SITE_NONE)
        return FLARE_EINVAL;

    bool secure = c->secure || c->partitioned || c->same_site == FLARE_SAME_SITE_NONE;
    if (has_prefix_ci(c->name, "__secure-", 9))
        secure = true;
    if (has_prefix_ci(c->name, "__host-", 7)) {
        if (has_domain || !has_path || !flare_str_eq(c->path, FLARE_STR("/")))
            return FLARE_EINVAL;
        secure = true;
    }

    out_t o = { buf, cap, 0, false };
    out_put(&o, c->name.ptr, c->name.len);
    OUT_LIT(&o, "=");
    if (c->value.len > 0)
        out_put(&o, c->value.ptr, c->value.len);
    if (has_path) {
        OUT_LIT(&o, "; Path=");
        out_put(&o, c->path.ptr, c->path.len);
    }
    if (has_domain) {
        OUT_LIT(&o, "; Domain=");
        out_put(&o, c->domain.ptr, c->domain.len);
    }
    if (c->max_age >= 0) {
        char num[24];
        OUT_LIT(&o, "; Max-Age=");
        out_put(&o, num, flare__u64toa(num, (uint64_t)c->max_age));
    }
    if (c->expires != 0) {
        char date[29];
        flare__format_http_date(date, c->expires);
        OUT_LIT(&o, "; Expires=");
        out_put(&o, date, sizeof(date));
    }
    if (secure)
        OUT_LIT(&o, "; Secure");
    if (c->http_only)
        OUT_LIT(&o, "; HttpOnly");
    switch (c->same_site) {
    case FLARE_SAME_SITE_LAX:
        OUT_LIT(&o, "; SameSite=Lax");
        break;
    case FLARE_SAME_SITE_STRICT:
        OUT_LIT(&o, "; SameSite=Strict");
        break;
    case FLARE_SAME_SITE_NONE:
        OUT_LIT(&o, "; SameSite=None");
        break;
    }
    if (c->partitioned)
        OUT_LIT(&o, "; Partitioned");
    if (o.full)
        return FLARE_ETOOBIG;
    *len = o.len;
    return 0;
}

/* ---- HMAC-SHA256 ---------------------------------------------------------
 * One EVP_MAC_CTX per thread, created on first use with the digest set
 * once; each signature only re-keys it (no fetch, no allocation), and a
 * thread-exit destructor frees it. */

static EVP_MAC *hmac_alg;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;
static pthread_key_t hmac_key;
static bool hmac_key_ok;
static _Thread_local EVP_MAC_CTX *hmac_tls;

static void hmac_ctx_free(void *p)
{
    EVP_MAC_CTX_free(p);
}

static void hmac_global_init(void)
{
    hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
    hmac_key_ok = pthread_key_create(&hmac_key, hmac_ctx_free) == 0;
}

static EVP_MAC_CTX *hmac_ctx(void)
{
    if (hmac_tls != NULL)
        return hmac_tls;
    pthread_once(&hmac_once, hmac_global_init);
    if (hmac_alg == NULL || !hmac_key_ok)
        return NULL;
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(hmac_alg);
    if (ctx == NULL)
        return NULL;
    char digest[] = "SHA256";
    OSSL_PARAM params[2] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };
    if (EVP_MAC_CTX_set_params(ctx, params) != 1 || pthread_setspecific(hmac_key, ctx) != 0) {
        EVP_MAC_CTX_free(ctx);
        return NULL;
    }
    hmac_tls = ctx;
    return ctx;
}

/* The 43-character base64url signature of name "=" value. */
static int signature(flare_str_t name, flare_str_t value, flare_str_t key, char sig[43])
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    EVP_MAC_CTX *ctx = hmac_ctx();
    if (ctx == NULL)
        return FLARE_ENOMEM;
    unsigned char md[32];
    size_t mdlen = 0;
    if (EVP_MAC_init(ctx, (const unsigned char *)key.ptr, key.len, NULL) != 1 ||
        EVP_MAC_update(ctx, (const unsigned char *)name.ptr, name.len) != 1 ||
        EVP_MAC_update(ctx, (const unsigned char *)"=", 1) != 1 ||
        (value.len > 0 && EVP_MAC_update(ctx, (const unsigned char *)value.ptr, value.len) != 1) ||
        EVP_MAC_final(ctx, md, &mdlen, sizeof(md)) != 1 || mdlen != sizeof(md))
        return FLARE_ENOMEM;
    size_t o = 0, i = 0;
    for (; i + 3 <= 30; i += 3) {
        uint32_t v = (uint32_t)md[i] << 16 | (uint32_t)md[i + 1] << 8 | md[i + 2];
        sig[o++] = b64[v >> 18];
        sig[o++] = b64[v >> 12 & 63];
        sig[o++] = b64[v >> 6 & 63];
        sig[o++] = b64[v & 63];
    }
    /* 30 bytes done (40 chars); the last 2 bytes give 3 chars, no padding */
    uint32_t v = (uint32_t)md[30] << 16 | (uint32_t)md[31] << 8;
    sig[o++] = b64[v >> 18];
    sig[o++] = b64[v >> 12 & 63];
    sig[o++] = b64[v >> 6 & 63];
    OPENSSL_cleanse(md, sizeof(md));
    return 0;
}

int flare_cookie_sign(flare_str_t name, flare_str_t value, flare_str_t key, char *buf, size_t cap,
                      size_t *len)
{
    *len = 0;
    if (!flare__is_token(name) || (value.ptr == NULL && value.len != 0) ||
        !all_cookie_octets(value.ptr, value.len) || key.ptr == NULL ||
        key.len < FLARE_COOKIE_KEY_MIN)
        return FLARE_EINVAL;
    if (value.len > FLARE_COOKIE_MAX_PAIR || cap < value.len + FLARE_COOKIE_SIG_LEN)
        return FLARE_ETOOBIG;
    char sig[43];
    int rc = signature(name, value, key, sig);
    if (rc < 0)
        return rc;
    if (value.len > 0)
        memcpy(buf, value.ptr, value.len);
    buf[value.len] = '.';
    memcpy(buf + value.len + 1, sig, sizeof(sig));
    *len = value.len + FLARE_COOKIE_SIG_LEN;
    return 0;
}

int flare_cookie_verify(flare_str_t name, flare_str_t signed_value, const flare_str_t *keys,
                        size_t nkeys, flare_str_t *value, size_t *key_index)
{
    if (!flare__is_token(name) || signed_value.ptr == NULL ||
        signed_value.len < FLARE_COOKIE_SIG_LEN || keys == NULL)
        return FLARE_EINVAL;
    size_t vlen = signed_value.len - FLARE_COOKIE_SIG_LEN;
    if (signed_value.ptr[vlen] != '.' || vlen > FLARE_COOKIE_MAX_PAIR ||
        !all_cookie_octets(signed_value.ptr, vlen))
        return FLARE_EINVAL;
    flare_str_t v = { signed_value.ptr, vlen };
    const char *got = signed_value.ptr + vlen + 1;
    for (size_t k = 0; k < nkeys; k++) {
        if (keys[k].ptr == NULL || keys[k].len < FLARE_COOKIE_KEY_MIN)
            continue;
        char sig[43];
        int rc = signature(name, v, keys[k], sig);
        if (rc < 0)
            return rc;
        if (CRYPTO_memcmp(sig, got, sizeof(sig)) == 0) {
            *value = v;
            if (key_index != NULL)
                *key_index = k;
            return 0;
        }
    }
    return FLARE_EINVAL;
}
