/* Absolute http(s) URLs for the client: pure, no allocation. */
#ifndef FLARE_CLIENT_URL_H
#define FLARE_CLIENT_URL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/common.h"

typedef struct flare_url {
    bool tls;              /* https */
    flare_str_t host;      /* a name, an IPv4 address, or an IPv6 one (without its brackets) */
    bool ip6;              /* host was bracketed */
    uint16_t port;         /* explicit, or 80 / 443 */
    flare_str_t target;    /* path and query ("/" when the URL has neither; "?q" when it
                              has only a query: the request line needs "/" first); no
                              fragment */
    flare_str_t authority; /* host[:port] as written: the Host header's value */
} flare_url_t;

/* Parses "http://host[:port][/path][?query][#fragment]" (or https): 0, or
 * -1 with *why a static text. The views point into s. Refused: other
 * schemes, userinfo ("user@"), an empty host, a port outside 1..65535,
 * control bytes or spaces anywhere. */
int flare__url_parse(const char *s, flare_url_t *u, const char **why);

/* The absolute URL a reference (a redirect's Location) names against the
 * absolute http(s) URL base (RFC 3986 5.2: absolute, "//authority",
 * "/path", "?query", relative paths with "." and ".." segments; the
 * fragment dropped), written NUL-terminated into out (cap bytes). Its
 * length, or -1: base or the result not a URL flare__url_parse takes
 * (another scheme included), or out too small. */
int flare__url_resolve(const char *base, const char *ref, char *out, size_t cap);

#endif
