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

/* Appends s[0, n) to out (cap bytes) at *len; false when it does not fit
 * (with the NUL). */
static bool put(char *out, size_t cap, size_t *len, const char *s, size_t n)
{
    if (*len + n >= cap)
        return false;
    memcpy(out + *len, s, n);
    *len += n;
    out[*len] = '\0';
    return true;
}

/* RFC 3986 5.2.4 on the absolute path out[from, *len) in place: "." and
 * ".." segments removed (".." never climbs above the root). The output is
 * kept as "/seg" runs: a segment is popped back to its '/'. */
static void remove_dots(char *out, size_t from, size_t *len)
{
    size_t w = from, r = from;
    while (r < *len) {
        size_t e = r + 1; /* out[r] is '/': the segment runs to the next one */
        while (e < *len && out[e] != '/')
            e++;
        size_t sl = e - r - 1;
        bool last = e == *len;
        if (sl == 1 && out[r + 1] == '.') {
            if (last)
                out[w++] = '/'; /* "/a/." is "/a/" */
        } else if (sl == 2 && out[r + 1] == '.' && out[r + 2] == '.') {
            while (w > from && out[w - 1] != '/')
                w--;
            if (w > from)
                w--;
            if (last)
                out[w++] = '/'; /* "/a/b/.." is "/a/" */
        } else {
            memmove(out + w, out + r, e - r);
            w += e - r;
        }
        r = e;
    }
    if (w == from)
        out[w++] = '/';
    *len = w;
    out[w] = '\0';
}

int flare__url_resolve(const char *base, const char *ref, char *out, size_t cap)
{
    flare_url_t b;
    const char *why;
    if (cap == 0 || flare__url_parse(base, &b, &why) != 0)
        return -1;
    size_t rn = strcspn(ref, "#"); /* a fragment is never sent */
    /* a scheme: letters, digits, + - . before the first ':', ahead of any / ? */
    size_t i = 0;
    while (i < rn && ((ref[i] >= 'a' && ref[i] <= 'z') || (ref[i] >= 'A' && ref[i] <= 'Z') ||
                      (i > 0 && ((ref[i] >= '0' && ref[i] <= '9') || ref[i] == '+' ||
                                 ref[i] == '-' || ref[i] == '.'))))
        i++;
    size_t len = 0;
    out[0] = '\0';
    if (i > 0 && i < rn && ref[i] == ':') {
        if (!(i == 4 && strncasecmp(ref, "http", 4) == 0) &&
            !(i == 5 && strncasecmp(ref, "https", 5) == 0))
            return -1; /* another scheme */
        if (!put(out, cap, &len, ref, rn))
            return -1;
        flare_url_t u;
        return flare__url_parse(out, &u, &why) == 0 ? (int)len : -1;
    }
    const char *scheme = b.tls ? "https:" : "http:";
    if (!put(out, cap, &len, scheme, strlen(scheme)))
        return -1;
    if (rn >= 2 && ref[0] == '/' && ref[1] == '/') {
        /* another authority, this scheme */
        if (!put(out, cap, &len, ref, rn))
            return -1;
    } else {
        if (!put(out, cap, &len, "//", 2) || !put(out, cap, &len, b.authority.ptr, b.authority.len))
            return -1;
        size_t path_at = len;
        /* the base's path and query (target "?q" has the path "/") */
        const char *bt = b.target.ptr;
        size_t bpath = strcspn(bt, "?");
        if (bpath > b.target.len)
            bpath = b.target.len;
        if (rn == 0) {
            if ((bpath == 0 && !put(out, cap, &len, "/", 1)) ||
                !put(out, cap, &len, bt, b.target.len))
                return -1;
        } else if (ref[0] == '?') {
            if ((bpath == 0 && !put(out, cap, &len, "/", 1)) || !put(out, cap, &len, bt, bpath) ||
                !put(out, cap, &len, ref, rn))
                return -1;
        } else {
            size_t q = strcspn(ref, "?");
            if (q > rn)
                q = rn;
            if (ref[0] == '/') {
                if (!put(out, cap, &len, ref, q))
                    return -1;
            } else {
                /* the base path up to its last '/', then the reference */
                size_t dir = bpath;
                while (dir > 0 && bt[dir - 1] != '/')
                    dir--;
                if ((dir == 0 && !put(out, cap, &len, "/", 1)) || !put(out, cap, &len, bt, dir) ||
                    !put(out, cap, &len, ref, q))
                    return -1;
            }
            remove_dots(out, path_at, &len);
            if (!put(out, cap, &len, ref + q, rn - q))
                return -1;
        }
    }
    flare_url_t u;
    return flare__url_parse(out, &u, &why) == 0 ? (int)len : -1;
}
