/* Flare: cookies — parsing the Cookie header, building Set-Cookie, signing.
 *
 * Parsing is pure and allocation-free: views into the header value, valid
 * as long as the header (for a request: until the response completes).
 * Building writes into a caller buffer and validates every part, so no
 * input can inject a header or an attribute. Signing uses HMAC-SHA256
 * (OpenSSL libcrypto). */
#ifndef FLARE_COOKIE_H
#define FLARE_COOKIE_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "flare/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- parsing the Cookie request header ---------------------------------- */

/* Iterator over the pairs of a Cookie header value (RFC 6265 section 5.4
 * cookie-string, "a=1; b=2"). Tolerant like browsers and common servers:
 * pairs are split at ';', spaces and tabs around names and values are
 * dropped, the value is everything after the first '=' (it may contain
 * '='), a value wrapped in a pair of double quotes is returned without
 * them, pieces without '=' or with an empty name are skipped. Bytes are not
 * otherwise validated (the HTTP parser has already refused CR, LF and NUL):
 * check a value before trusting it (flare_cookie_verify does). */
typedef struct flare_cookie_iter {
    const char *p;   /* the next byte to read */
    const char *end; /* just past the header's last byte */
} flare_cookie_iter_t;

/* Starts iterating over header, a Cookie field's value; the views the
 * iterator returns point into it. */
FLARE_API void flare_cookie_iter_init(flare_cookie_iter_t *it, flare_str_t header);

/* Next pair of it: 0 with *name and *value set (views into the header),
 * FLARE_EEND at the end. */
FLARE_API int flare_cookie_next(flare_cookie_iter_t *it, flare_str_t *name, flare_str_t *value);

/* The value in a Cookie header's value (header) of the first cookie with
 * that name (case-sensitive, as
 * browsers send the most specific path first), or {NULL, 0} when absent;
 * an empty value is {"", 0}-like (ptr non-NULL, len 0). */
FLARE_API flare_str_t flare_cookie_get(flare_str_t header, flare_str_t name);

/* ---- building Set-Cookie ------------------------------------------------- */

/* The SameSite attribute of a Set-Cookie. */
typedef enum flare_same_site {
    FLARE_SAME_SITE_LAX = 0, /* the default */
    FLARE_SAME_SITE_STRICT,
    FLARE_SAME_SITE_NONE /* forces Secure (browsers reject it otherwise) */
} flare_same_site_t;

/* A cookie to set. Start with flare_cookie_init (secure defaults), then
 * change fields. Views are only read during flare_cookie_format. */
typedef struct flare_cookie {
    flare_str_t name;            /* an RFC 9110 token */
    flare_str_t value;           /* cookie-octets, optionally in one pair of DQUOTEs */
    flare_str_t path;            /* default "/"; {NULL, 0}: no Path attribute */
    flare_str_t domain;          /* default none; letters, digits, '-', '.' */
    int64_t max_age;             /* seconds; < 0 (default -1): no Max-Age; 0: delete */
    time_t expires;              /* Unix time; 0 (default): no Expires */
    bool secure;                 /* default false, forced by SameSite=None, Partitioned,
                                    and the __Secure- / __Host- name prefixes */
    bool http_only;              /* default true */
    bool partitioned;            /* CHIPS; forces Secure */
    flare_same_site_t same_site; /* default Lax */
} flare_cookie_t;

/* Sets *c to name/value with the defaults: Path=/, HttpOnly, SameSite=Lax,
 * no Domain, Max-Age or Expires, Secure off (turn it on behind TLS). */
FLARE_API void flare_cookie_init(flare_cookie_t *c, flare_str_t name, flare_str_t value);

/* Longest name + value accepted (browsers keep at most 4096 bytes). */
#define FLARE_COOKIE_MAX_PAIR 4096
/* Longest Path or Domain value accepted (RFC 6265bis). */
#define FLARE_COOKIE_MAX_ATTR 1024

/* Writes cookie c as the Set-Cookie header value (without "Set-Cookie: ", not
 * NUL-terminated) into buf[0..cap) and its length into *len:
 *   name=value; Path=/; Domain=d; Max-Age=n; Expires=<IMF-fixdate>;
 *   Secure; HttpOnly; SameSite=Lax; Partitioned
 * Returns 0, FLARE_ETOOBIG (buf too small or name + value over
 * FLARE_COOKIE_MAX_PAIR) or FLARE_EINVAL when anything is not allowed:
 * name not a token, value not cookie-octets (no space, '"' except as the
 * outer pair, ',', ';', '\', CTLs or non-ASCII), path not starting with '/'
 * or containing ';' or a CTL or non-ASCII byte, domain with anything but
 * letters, digits, '-', '.', expires outside years 1970..9999, a __Host-
 * name with a Domain or a Path other than "/". Nothing can break out of
 * the header. FLARE_COOKIE_FORMAT_MAX bytes always suffice. */
FLARE_API int flare_cookie_format(const flare_cookie_t *c, char *buf, size_t cap, size_t *len);

/* Bytes that always suffice for flare_cookie_format's output. */
#define FLARE_COOKIE_FORMAT_MAX (FLARE_COOKIE_MAX_PAIR + 2 * FLARE_COOKIE_MAX_ATTR + 160)

/* ---- signed cookies ------------------------------------------------------ */

/* The signature: '.' and 43 characters (HMAC-SHA256, base64url, no padding). */
#define FLARE_COOKIE_SIG_LEN 44
/* Shortest key accepted (bytes): a full-strength HMAC-SHA256 key. */
#define FLARE_COOKIE_KEY_MIN 32

/* Writes "value.signature" into buf[0..cap) (length in *len), where the
 * signature is HMAC-SHA256(key, name "=" value): binding the name stops a
 * value signed for one cookie from being replayed in another. value must
 * be cookie-octets (it may itself contain '.'); the result is too, so it
 * can be the value of a flare_cookie_t. Needs value.len +
 * FLARE_COOKIE_SIG_LEN bytes. Returns 0, FLARE_EINVAL (bad name or value,
 * key shorter than FLARE_COOKIE_KEY_MIN), FLARE_ETOOBIG or FLARE_ENOMEM. */
FLARE_API int flare_cookie_sign(flare_str_t name, flare_str_t value, flare_str_t key, char *buf,
                                size_t cap, size_t *len);

/* Checks a signed value received in cookie `name` against keys[0..nkeys)
 * (the current key first, then older ones still accepted: rotation). The
 * comparison is constant-time. On success returns 0, sets *value to the
 * unsigned part (a view into signed_value) and, if key_index is not NULL,
 * *key_index to the key that matched (> 0: re-sign with keys[0]). Returns
 * FLARE_EINVAL when the value is malformed or no key matches (tampered),
 * FLARE_ENOMEM on a crypto library failure. */
FLARE_API int flare_cookie_verify(flare_str_t name, flare_str_t signed_value,
                                  const flare_str_t *keys, size_t nkeys, flare_str_t *value,
                                  size_t *key_index);

/* ---- on requests and responses ------------------------------------------ */

/* The request and response handles (flare/flare.h). */
typedef struct flare_req flare_req_t;
typedef struct flare_res flare_res_t;

/* The value of cookie `name` in the request's Cookie header(s); .ptr == NULL
 * when absent. A view into the request, valid until the response completes. */
FLARE_API flare_str_t flare_req_cookie(flare_req_t *req, const char *name);

/* Adds a Set-Cookie header for cookie c, built by flare_cookie_format (validated: nothing
 * can break out of the header). 0, FLARE_EINVAL, FLARE_ETOOBIG, FLARE_ESTATE
 * (response already sent) or FLARE_ENOMEM. */
FLARE_API int flare_res_cookie(flare_res_t *res, const flare_cookie_t *c);

#ifdef __cplusplus
}
#endif
#endif
