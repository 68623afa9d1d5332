/* WebSocket opening handshake (RFC 6455 4.2): checks the client's request
 * and picks the subprotocol. Pure: header views in, a decision out. */
#ifndef FLARE_WS_HANDSHAKE_H
#define FLARE_WS_HANDSHAKE_H

#include <stdbool.h>
#include <stddef.h>

#include "flare/common.h"

#define FLARE_WS_ACCEPT_LEN 28 /* base64 of a SHA-1 digest */

typedef struct flare_ws_hs_policy {
    const flare_str_t *protocols; /* supported subprotocols, most preferred first */
    size_t nprotocols;
    const flare_str_t *origins; /* allowed origins ("https://example.com"); "*": any */
    size_t norigins;            /* 0: same origin as the Host header only */
    bool origin_required;       /* refuse requests without Origin (browsers only) */
} flare_ws_hs_policy_t;

typedef struct flare_ws_hs {
    int status;           /* 0: accept; else the HTTP status to answer (400, 403, 426) */
    const char *error;    /* short static text naming the problem */
    flare_str_t key;      /* Sec-WebSocket-Key (view into the headers) */
    flare_str_t protocol; /* chosen subprotocol (view into policy->protocols) or len 0 */
} flare_ws_hs_t;

/* Checks a handshake request: GET, HTTP/1.1, Upgrade listing "websocket",
 * Connection listing "upgrade" (case-insensitive lists, repeated fields
 * joined), Sec-WebSocket-Version 13 (else 426: the answer must carry
 * "Sec-WebSocket-Version: 13"), one Sec-WebSocket-Key that is the base64 of
 * 16 bytes (else 400), the Origin policy (else 403), then the subprotocol:
 * the first of policy->protocols the client offered. Returns out->status. */
int flare__ws_handshake_check(flare_method_t method, int minor, const flare_header_t *h, size_t n,
                              const flare_ws_hs_policy_t *policy, flare_ws_hs_t *out);

/* Sec-WebSocket-Accept for a key: base64(SHA-1(key + GUID)), written to out
 * (FLARE_WS_ACCEPT_LEN bytes, no NUL). 0 or FLARE_ESYS (libcrypto failed). */
int flare__ws_accept_key(flare_str_t key, char *out);

/* Iterates the comma-separated elements of every field named `name`
 * (case-insensitive), with surrounding whitespace trimmed and empty
 * elements skipped. Start with *field = 0, *pos = 0; returns false at the
 * end. A quoted string is kept whole (commas inside do not split). */
bool flare__ws_list_next(const flare_header_t *h, size_t n, const char *name, size_t *field,
                         size_t *pos, flare_str_t *elem);

#endif
