/* Pure HTTP/1.1 request-head parser and chunked body decoder (RFC 9112).
 *
 * No I/O, no allocation: bytes in, views into those bytes and a result code
 * out. The views stay valid as long as the caller's buffer does not move.
 * Parsers return bytes consumed (> 0), FLARE_PARSE_PARTIAL or
 * FLARE_PARSE_ERROR; on error `status` and `error` tell what to answer. */
#ifndef FLARE_HTTP1_PARSER_H
#define FLARE_HTTP1_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/common.h"

#define FLARE_PARSE_ERROR (-1)
#define FLARE_PARSE_PARTIAL (-2)

typedef struct flare_http_limits {
    size_t max_request_line; /* bytes, request line without CRLF (414) */
    size_t max_head;         /* bytes, whole head incl. request line (431) */
    size_t max_headers;      /* header fields (431) */
} flare_http_limits_t;

typedef struct flare_http_head {
    /* request line */
    flare_str_t method;         /* the token as sent */
    flare_method_t method_id;   /* FLARE_METHOD_OTHER for unknown tokens */
    flare_str_t target;         /* request-target as sent */
    flare_str_t path;           /* target up to '?' (or all of it) */
    flare_str_t query;          /* after '?', without it; len 0 if none */
    int minor;                  /* HTTP/1.minor: 0 or 1 (other 1.x treated as 1) */

    /* header fields, in order; array provided by the caller */
    flare_header_t *headers;
    size_t nheaders;

    /* framing and connection semantics, derived while parsing */
    int64_t content_length;     /* -1 when absent */
    flare_str_t host;           /* Host value (len 0 if absent; HTTP/1.0 may omit) */
    bool chunked;               /* Transfer-Encoding: chunked */
    bool keep_alive;            /* after Connection: and version defaults */
    bool expect_continue;       /* Expect: 100-continue */
    bool upgrade;               /* Connection contains "upgrade" and Upgrade present */

    /* on FLARE_PARSE_ERROR */
    int status;                 /* 400, 414, 431, 501, 505, 417 */
    const char *error;          /* short static text naming the problem */
} flare_http_head_t;

/* Parses one request head from buf[0..len).
 * Before the call: head->headers points to an array of at least
 * limits->max_headers entries.
 * Returns the length of the head including the final CRLFCRLF (> 0),
 * FLARE_PARSE_PARTIAL when more bytes are needed (limits already checked on
 * what is there: a request line longer than max_request_line gives 414 even
 * before its CRLF arrives, a head longer than max_head gives 431), or
 * FLARE_PARSE_ERROR with head->status / head->error set.
 * Stateless: call again from the start of the request with more bytes. */
int flare__http_parse_head(const char *buf, size_t len, const flare_http_limits_t *limits,
                           flare_http_head_t *head);

/* Cheap pre-check for callers that receive a head in many small reads:
 * returns true when buf[0..len) may hold a complete head or an error worth
 * reporting now; *scanned is a resume hint (start it at 0 for each new head).
 * Lets a slow client feeding one byte at a time cost O(n), not O(n^2). */
bool flare__http_head_ready(const char *buf, size_t len, size_t *scanned);

/* Chunked transfer-coding decoder, resumable at any byte boundary. */
typedef struct flare_chunked {
    uint8_t state;
    uint8_t ext_seen;
    uint16_t line_len;     /* bytes of the current size line / trailer line */
    uint64_t remaining;    /* bytes left in the current chunk */
    uint64_t total;        /* decoded bytes so far */
    uint64_t trailer_len;  /* bytes of trailer section so far */
} flare_chunked_t;

enum {
    FLARE_CHUNKED_DATA = 1, /* *data is a view of body bytes inside the input */
    FLARE_CHUNKED_DONE = 0, /* last-chunk and trailers consumed */
};

static inline void flare__chunked_init(flare_chunked_t *c)
{
    memset(c, 0, sizeof(*c));
}

/* Decodes from in[0..len). Sets *consumed to the input bytes used.
 * Returns FLARE_CHUNKED_DATA (with *data a view inside `in`: the caller may
 * copy or move it and call again with the rest), FLARE_CHUNKED_DONE (the body
 * ended; bytes after *consumed belong to the next request),
 * FLARE_PARSE_PARTIAL (input exhausted, *consumed == len), or
 * FLARE_PARSE_ERROR (*status set to 400 or 413, *error a static text).
 * max_body bounds the decoded total (413); chunk extensions and trailer
 * fields are bounded in size and ignored. */
int flare__chunked_decode(flare_chunked_t *c, const char *in, size_t len, uint64_t max_body,
                          size_t *consumed, flare_str_t *data, int *status,
                          const char **error);

#endif
