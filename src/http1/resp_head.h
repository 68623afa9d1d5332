/* Pure HTTP/1.1 response-head parser (RFC 9112 sections 4, 5 and 6.3), the
 * client side's counterpart of http1/parser.h: bytes in, views into those
 * bytes and the body's framing out. No I/O, no allocation.
 *
 * It is strict where a lenient reading could desynchronise a connection
 * that carries more than one response (a client's keep-alive pool, a
 * proxy): the framing is decided once, here, and anything ambiguous is an
 * error for the caller rather than a guess:
 * - lines end in CRLF (a bare LF or CR is an error), no obs-fold, no
 *   whitespace between a field name and its colon, no control bytes;
 * - Content-Length: digits only; a list of equal values counts as one,
 *   different values are an error;
 * - Transfer-Encoding: only "chunked", once, last (any other coding cannot
 *   be decoded here); together with Content-Length, or in an HTTP/1.0
 *   response, it is an error;
 * - the status code is three digits from 100 to 599. */
#ifndef FLARE_HTTP1_RESP_HEAD_H
#define FLARE_HTTP1_RESP_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/common.h"
#include "http/head.h"

/* How the response's body is delimited. */
typedef enum flare_resp_body {
    FLARE_RESP_BODY_NONE,    /* no body: HEAD, 1xx, 204, 304 */
    FLARE_RESP_BODY_LENGTH,  /* content_length bytes */
    FLARE_RESP_BODY_CHUNKED, /* chunked (http1/parser.h's decoder) */
    FLARE_RESP_BODY_CLOSE,   /* until the server closes: the connection ends with it */
} flare_resp_body_t;

typedef struct flare_resp_head {
    int minor;          /* HTTP/1.minor: 0 or 1 */
    int status;         /* 100..599 */
    flare_str_t reason; /* may be empty */

    /* header fields, in order; array provided by the caller */
    flare_header_t *headers;
    size_t nheaders;

    int64_t content_length; /* -1 when absent */
    flare_resp_body_t body;
    bool keep_alive; /* the connection may carry another request after this body */
    bool upgrade;    /* Connection names "upgrade" (a 101 switches protocols) */

    /* on FLARE_PARSE_ERROR: a short static text naming the problem */
    const char *error;
} flare_resp_head_t;

/* Parses one response head from buf[0..len). head->headers must point to
 * limits->max_headers entries. `head_request`: the request was HEAD (no body
 * whatever the fields say). Returns the head's length including the final
 * CRLFCRLF (> 0), FLARE_PARSE_PARTIAL when more bytes are needed (the limits
 * are checked on what is there: a status line longer than
 * limits->max_request_line, or a head longer than limits->max_head, is an
 * error before its end arrives), or FLARE_PARSE_ERROR with head->error set.
 * Stateless: call again from the start with more bytes; the result for a
 * prefix never contradicts the result for the whole. A 1xx head other than
 * 101 is interim: the caller skips it and parses the next head. */
int flare__http_parse_resp_head(const char *buf, size_t len, const flare_http_limits_t *limits,
                                bool head_request, flare_resp_head_t *head);

#endif
