/* The hop-by-hop fields: the one list of the header fields that describe a
 * connection rather than the message (RFC 9110 7.6.1; RFC 9113 8.2.2 for
 * HTTP/2), for every layer that filters them: the proxy drops them both
 * ways, HTTP/2 neither accepts nor sends the connection-specific ones, the
 * client refuses a caller's framing fields. Each user picks its subset of
 * the bits; the names are matched in one place. */
#ifndef FLARE_HTTP_HOP_H
#define FLARE_HTTP_HOP_H

#include "core/core.h"

enum {
    FLARE_HOP_CONNECTION = 1u << 0,
    FLARE_HOP_KEEP_ALIVE = 1u << 1,
    FLARE_HOP_PROXY_CONNECTION = 1u << 2,
    FLARE_HOP_TE = 1u << 3,
    FLARE_HOP_TRAILER = 1u << 4,
    FLARE_HOP_TRANSFER_ENCODING = 1u << 5,
    FLARE_HOP_UPGRADE = 1u << 6,
};

/* The connection-specific fields, which no HTTP/2 message carries (RFC 9113
 * 8.2.2; TE is allowed there with the value "trailers" only, and Trailer is
 * an end-to-end field in HTTP/2). */
#define FLARE_HOP_CONN_SPECIFIC                                                 \
    (FLARE_HOP_CONNECTION | FLARE_HOP_KEEP_ALIVE | FLARE_HOP_PROXY_CONNECTION | \
     FLARE_HOP_TRANSFER_ENCODING | FLARE_HOP_UPGRADE)

/* Which hop-by-hop field `name` is (ASCII case-insensitive): one FLARE_HOP_*
 * bit, or 0 for any other name. HTTP/2 asks for every field of every
 * request and response, so it is always inlined and picks the one
 * candidate by the length and the first letter before comparing the rest:
 * most names stop at the switch or the first letter. */
static inline __attribute__((always_inline)) unsigned flare__http_hop_field(flare_str_t name)
{
    const char *lit;
    unsigned hop;
    unsigned char first;
    switch (name.len) {
    case 2:
        lit = "te", hop = FLARE_HOP_TE;
        break;
    case 7:
        first = flare__lower((unsigned char)name.ptr[0]);
        if (first == 'u')
            lit = "upgrade", hop = FLARE_HOP_UPGRADE;
        else if (first == 't')
            lit = "trailer", hop = FLARE_HOP_TRAILER;
        else
            return 0;
        break;
    case 10:
        first = flare__lower((unsigned char)name.ptr[0]);
        if (first == 'c')
            lit = "connection", hop = FLARE_HOP_CONNECTION;
        else if (first == 'k')
            lit = "keep-alive", hop = FLARE_HOP_KEEP_ALIVE;
        else
            return 0; /* user-agent */
        break;
    case 16:
        lit = "proxy-connection", hop = FLARE_HOP_PROXY_CONNECTION;
        break;
    case 17:
        lit = "transfer-encoding", hop = FLARE_HOP_TRANSFER_ENCODING;
        break;
    default:
        return 0;
    }
    return flare__ieq_lit(name, lit, name.len) ? hop : 0;
}

#endif
