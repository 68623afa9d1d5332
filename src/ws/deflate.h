/* permessage-deflate (RFC 7692): negotiation and the zlib streams.
 *
 * Negotiation is pure (header views in, parameters and the response
 * element out). Compression uses raw deflate (negative windowBits): a
 * message is deflated with Z_SYNC_FLUSH and the 00 00 ff ff tail stripped;
 * inflating appends it back. Inflation runs in bounded steps into a buffer
 * that never grows past the message limit, so a "zip bomb" costs at most
 * the limit in memory before it is refused (1009). */
#ifndef FLARE_WS_DEFLATE_H
#define FLARE_WS_DEFLATE_H

#include <stdbool.h>
#include <stdint.h>
#include <zlib.h>

#include "core/buf.h"
#include "flare/common.h"

typedef struct flare_ws_pmd_policy {
    unsigned max_window_bits; /* 9..15: the largest window either side may use */
    bool no_context_takeover; /* always answer server_ and client_no_context_takeover */
} flare_ws_pmd_policy_t;

/* What was agreed for one connection. */
typedef struct flare_ws_pmd {
    bool server_nct;      /* we reset our compressor after each message */
    bool client_nct;      /* the client resets its compressor: our inflater may too */
    uint8_t server_bits;  /* our compressor's window (9..15) */
    uint8_t inflate_bits; /* our inflater's window (9..15) */
} flare_ws_pmd_t;

#define FLARE_WS_PMD_RESPONSE_MAX 160

/* Reads every Sec-WebSocket-Extensions field and accepts the first
 * permessage-deflate offer that is valid and acceptable; invalid ones
 * (unknown or repeated parameters, bad values) and unacceptable ones
 * (server_max_window_bits=8: zlib's raw deflate cannot use a 256-byte
 * window, and answering 9 would break the client's limit, so such an offer
 * is declined and the next one considered) are skipped. Returns true with
 * *out set and the response element (e.g. "permessage-deflate;
 * server_no_context_takeover") in resp[0..*resp_len) when one is accepted. */
bool flare__ws_pmd_negotiate(const flare_header_t *h, size_t n, const flare_ws_pmd_policy_t *pol,
                             flare_ws_pmd_t *out, char *resp, size_t *resp_len);

/* zlib streams. level: 0-9 (Z_DEFAULT_COMPRESSION allowed); mem_level 1-9.
 * 0 or FLARE_ENOMEM. */
int flare__ws_deflate_init(z_stream *z, int level, unsigned window_bits, unsigned mem_level);
int flare__ws_inflate_init(z_stream *z, unsigned window_bits);

/* Compresses one whole message and appends the payload (tail stripped) to
 * out. reset: forget the context afterwards (no context takeover).
 * 0 or FLARE_ENOMEM / FLARE_ESYS. */
int flare__ws_deflate_message(z_stream *z, const void *in, size_t len, bool reset,
                              flare_buf_t *out);

/* Inflates a piece of a compressed message, appending to out, which never
 * grows past `max` bytes (out->len counts). last: this is the message's last
 * piece (the tail is fed after it). *ended: per-message state, false at the
 * message's start; set when the sender closed the stream with a final block
 * (the stream is then reset, and more data in the message is an error).
 * Returns 0, FLARE_ETOOBIG (past max), FLARE_EINVAL (corrupt data) or
 * FLARE_ENOMEM. With reset_at_end the stream forgets its context after the
 * last piece (client_no_context_takeover). */
int flare__ws_inflate_piece(z_stream *z, const void *in, size_t len, bool last, bool reset_at_end,
                            size_t max, flare_buf_t *out, bool *ended);

#endif
