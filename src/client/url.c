/* flare__url_parse (url.h). */
#include "client/url.h"

#include <string.h>
#include <strings.h>

#include "core/core.h"

static bool host_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_';
}

int flare__url_parse(const char *s, flare_url_t *u, const char **why)
{
    *u = (flare_url_t){ 0 };
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7f) {
            *why = "control byte or space in the URL";
            return -1;
        }
    }
    const char *p;
    if (n >= 7 && strncasecmp(s, "http://", 7) == 0) {
        p = s + 7;
        u->port = 80;
    } else if (n >= 8 && strncasecmp(s, "https://", 8) == 0) {
        p = s + 8;
        u->tls = true;
        u->port = 443;
    } else {
        *why = "not an http:// or https:// URL";
        return -1;
    }
    const char *end = s + n;
    const char *auth_end = p;
    while (auth_end < end && *auth_end != '/' && *auth_end != '?' && *auth_end != '#')
        auth_end++;
    u->authority = (flare_str_t){ p, (size_t)(auth_end - p) };
    if (memchr(p, '@', (size_t)(auth_end - p)) != NULL) {
        *why = "userinfo in the URL";
        return -1;
    }
    const char *h = p, *port = NULL;
    if (*h == '[') {
        const char *close = memchr(h, ']', (size_t)(auth_end - h));
        if (close == NULL || close == h + 1) {
            *why = "bad IPv6 address";
            return -1;
        }
        for (const char *q = h + 1; q < close; q++) {
            if (!(flare__hexval((unsigned char)*q) >= 0 || *q == ':' || *q == '.')) {
                *why = "bad IPv6 address";
                return -1;
            }
        }
        u->host = (flare_str_t){ h + 1, (size_t)(close - h - 1) };
        u->ip6 = true;
        if (close + 1 < auth_end) {
            if (close[1] != ':') {
                *why = "bad authority";
                return -1;
            }
            port = close + 2;
        }
    } else {
        const char *colon = memchr(h, ':', (size_t)(auth_end - h));
        const char *hend = colon ? colon : auth_end;
        for (const char *q = h; q < hend; q++) {
            if (!host_char((unsigned char)*q)) {
                *why = "bad host name";
                return -1;
            }
        }
        u->host = (flare_str_t){ h, (size_t)(hend - h) };
        if (colon)
            port = colon + 1;
    }
    if (u->host.len == 0) {
        *why = "no host in the URL";
        return -1;
    }
    if (port != NULL) {
        unsigned v = 0;
        if (port == auth_end) {
            *why = "empty port";
            return -1;
        }
        for (const char *q = port; q < auth_end; q++) {
            unsigned d = (unsigned char)*q - (unsigned)'0';
            if (d > 9 || (v = v * 10 + d) > 65535) {
                *why = "bad port";
                return -1;
            }
        }
        if (v == 0) {
            *why = "bad port";
            return -1;
        }
        u->port = (uint16_t)v;
    }
    const char *t = auth_end;
    const char *frag = memchr(t, '#', (size_t)(end - t));
    const char *tend = frag ? frag : end;
    /* no path: "/"; a query without one ("?a=1") is kept as it is: the
     * request line puts "/" before it */
    u->target = t == tend ? (flare_str_t){ "/", 1 } : (flare_str_t){ t, (size_t)(tend - t) };
    return 0;
}
