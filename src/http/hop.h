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
 * bit, or 0 for any other name. A switch on the length and at most two
 * comparisons: HTTP/2 calls it for every field of every response. */
static inline unsigned flare__http_hop_field(flare_str_t name)
{
    switch (name.len) {
    case 2:
        return FLARE__IEQ(name, "te") ? FLARE_HOP_TE : 0;
    case 7:
        return FLARE__IEQ(name, "upgrade")   ? FLARE_HOP_UPGRADE
               : FLARE__IEQ(name, "trailer") ? FLARE_HOP_TRAILER
                                             : 0;
    case 10:
        return FLARE__IEQ(name, "connection")   ? FLARE_HOP_CONNECTION
               : FLARE__IEQ(name, "keep-alive") ? FLARE_HOP_KEEP_ALIVE
                                                : 0;
    case 16:
        return FLARE__IEQ(name, "proxy-connection") ? FLARE_HOP_PROXY_CONNECTION : 0;
    case 17:
        return FLARE__IEQ(name, "transfer-encoding") ? FLARE_HOP_TRANSFER_ENCODING : 0;
    default:
        return 0;
    }
}

#endif
