/* WebSocket frame codec (RFC 6455 section 5): pure, no I/O, no allocation.
 *
 * The parser takes bytes and gives events: pieces of data messages (as soon
 * as they arrive, unmasked in place in the caller's buffer, so a message that
 * sits whole in the read buffer is delivered without a copy) and complete
 * control frames. It enforces every framing rule a server must check and
 * names the close code to fail the connection with: 1002 (protocol error),
 * 1007 (invalid UTF-8 in a text message or a close reason), 1009 (message
 * too big). Text is validated incrementally, across fragments, and fails at
 * the first bad byte. The state to resume lives in the parser, so a frame
 * may be split anywhere.
 *
 * The encoder writes frame headers (server frames are never masked; the
 * client side, used by tests and the benchmark client, masks). */
#ifndef FLARE_WS_FRAME_H
#define FLARE_WS_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/common.h"

#define FLARE_WS_MAX_HEADER  14  /* 2 + 8 (length) + 4 (mask) */
#define FLARE_WS_MAX_CONTROL 125 /* control frame payload */

enum {
    FLARE_WS_OP_CONT = 0x0,
    FLARE_WS_OP_TEXT = 0x1,
    FLARE_WS_OP_BINARY = 0x2,
    FLARE_WS_OP_CLOSE = 0x8,
    FLARE_WS_OP_PING = 0x9,
    FLARE_WS_OP_PONG = 0xA,
};

/* close codes the codec and the runtime use */
enum {
    FLARE_WS_CLOSE_NORMAL = 1000,
    FLARE_WS_CLOSE_GOING_AWAY = 1001,
    FLARE_WS_CLOSE_PROTOCOL = 1002,
    FLARE_WS_CLOSE_NO_STATUS = 1005, /* never on the wire */
    FLARE_WS_CLOSE_ABNORMAL = 1006,  /* never on the wire */
    FLARE_WS_CLOSE_INVALID_DATA = 1007,
    FLARE_WS_CLOSE_POLICY = 1008,
    FLARE_WS_CLOSE_TOO_BIG = 1009,
    FLARE_WS_CLOSE_INTERNAL = 1011,
};

enum {
    FLARE_WS_EV_NONE = 0, /* bytes consumed (a frame header), nothing to deliver yet */
    FLARE_WS_EV_DATA,     /* a piece of a text/binary message */
    FLARE_WS_EV_CONTROL,  /* a complete close, ping or pong frame */
};

typedef struct flare_ws_parser {
    /* configuration: set before the first call, may change between calls */
    uint64_t max_message;    /* uncompressed messages: wire bytes past it -> 1009 */
    uint64_t max_compressed; /* RSV1 messages: wire bytes past it -> 1009 */
    bool expect_mask;        /* true on a server: client frames must be masked,
                                false on a client: server frames must not be */
    bool rsv1_allowed;       /* permessage-deflate was negotiated */

    /* the data frame whose payload is arriving */
    bool in_payload;
    bool frame_fin;
    uint8_t mask[4];
    uint32_t mask_pos;  /* payload offset mod 4 */
    uint64_t remaining; /* payload bytes still to come */

    /* the data message in progress (msg_opcode 0: none) */
    uint8_t msg_opcode;
    bool msg_compressed;
    bool msg_started; /* a piece of it was delivered */
    uint32_t utf8;    /* validator state, uncompressed text only */
    uint64_t msg_len; /* wire payload bytes so far */

    uint16_t error; /* close code once failed (sticky) */
} flare_ws_parser_t;

typedef struct flare_ws_event {
    int type;        /* FLARE_WS_EV_* */
    uint8_t opcode;  /* DATA: the message's TEXT/BINARY; CONTROL: CLOSE/PING/PONG */
    bool first;      /* DATA: first piece of the message */
    bool fin;        /* DATA: last piece of the message */
    bool compressed; /* DATA: the message has RSV1 (permessage-deflate) */
    const uint8_t *data;
    size_t len; /* DATA: piece (may be 0); CONTROL: whole payload */
    /* CONTROL CLOSE: the status code (0 when the payload is empty) and reason */
    uint16_t close_code;
    flare_str_t reason;
} flare_ws_event_t;

/* Zeroes the parser; the caller then sets the configuration fields. */
void flare__ws_parser_init(flare_ws_parser_t *p, bool expect_mask, uint64_t max_message);

/* Parses from buf[0..len) (modified: payloads are unmasked in place).
 * Returns the bytes consumed (> 0) with *ev set (EV_NONE when only a header
 * was consumed), FLARE_PARSE_PARTIAL (-2) when nothing can be consumed until
 * more bytes arrive (a header or a control frame is incomplete: keep the
 * bytes and call again with more), or FLARE_PARSE_ERROR (-1) with p->error
 * set to the close code to fail the connection with; errors are sticky.
 * Views in *ev point into buf. A complete control frame needs at most
 * FLARE_WS_MAX_HEADER + 125 contiguous bytes. */
int flare__ws_parse(flare_ws_parser_t *p, uint8_t *buf, size_t len, flare_ws_event_t *ev);

/* True when a data message is in progress (between its first and last frame). */
static inline bool flare__ws_parser_in_message(const flare_ws_parser_t *p)
{
    return p->msg_opcode != 0;
}

/* XORs p[0..n) with the 4-byte key, starting at key offset pos (0..3).
 * SSE2, 64 then 16 bytes per step; a scalar loop for the rest. */
void flare__ws_unmask(uint8_t *p, size_t n, const uint8_t key[4], uint32_t pos);

/* Writes a frame header into out (FLARE_WS_MAX_HEADER bytes) and returns its
 * length. mask NULL: unmasked (server); else the 4-byte key is written and
 * the caller masks the payload with flare__ws_unmask(payload, len, mask, 0). */
size_t flare__ws_frame_header(uint8_t *out, uint8_t opcode, bool fin, bool rsv1, uint64_t len,
                              const uint8_t *mask);

/* Close frame payload: 2-byte code + reason, the reason cut at a UTF-8
 * boundary to fit 125 bytes. code 0: empty payload. Returns the length. */
size_t flare__ws_close_payload(uint8_t *out, uint16_t code, flare_str_t reason);

/* A status code a peer may send in a close frame: 1000-1003, 1007-1014
 * (IANA-registered), 3000-4999. */
bool flare__ws_close_code_valid(unsigned code);

/* ---- UTF-8 (RFC 3629): incremental validation ---- */

#define FLARE_UTF8_ACCEPT 0u
#define FLARE_UTF8_REJECT 1u

/* Advances the validator over p[0..n) and returns the new state:
 * FLARE_UTF8_ACCEPT (at a character boundary), FLARE_UTF8_REJECT (invalid;
 * sticky; found at the first bad byte), or another value (inside a
 * character: more bytes needed). Start with FLARE_UTF8_ACCEPT. */
uint32_t flare__utf8_step(uint32_t state, const uint8_t *p, size_t n);

static inline bool flare__utf8_valid(const void *p, size_t n)
{
    return flare__utf8_step(FLARE_UTF8_ACCEPT, p, n) == FLARE_UTF8_ACCEPT;
}

#endif
