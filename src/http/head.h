/* A parsed request head, protocol-neutral: what HTTP/1.1's parser
 * (http1/parser.h) and HTTP/2's session fill and the exchange embeds, and
 * the limits a head is parsed under, the parsers' result codes, the method
 * lookup (http1/parser.c) and the chunked body's decoder state. Views
 * into the protocol's buffers. */
#ifndef FLARE_HTTP_HEAD_H
#define FLARE_HTTP_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/parse.h"
#include "flare/common.h"

typedef struct flare_http_limits {
    size_t max_request_line; /* bytes, request line without CRLF (414) */
    size_t max_head;         /* bytes, whole head incl. request line (431) */
    size_t max_headers;      /* header fields (431) */
} flare_http_limits_t;

typedef struct flare_http_head {
    /* request line */
    flare_str_t method;       /* the token as sent */
    flare_method_t method_id; /* FLARE_METHOD_OTHER for unknown tokens */
    flare_str_t target;       /* request-target as sent */
    flare_str_t path;         /* target up to '?' (or all of it); absolute-form:
                                 from the first '/' after the authority (a
                                 static "/" if none); CONNECT: the authority;
                                 OPTIONS *: "*" */
    flare_str_t query;        /* after '?', without it; len 0 if none */
    int minor;                /* HTTP/1.minor: 0 or 1 (other 1.x treated as 1) */

    /* header fields, in order; array provided by the caller */
    flare_header_t *headers;
    size_t nheaders;

    /* framing and connection semantics, derived while parsing */
    int64_t content_length; /* -1 when absent */
    flare_str_t host;       /* Host value (len 0 if absent; HTTP/1.0 may omit);
                               the target's authority for absolute-form */
    bool chunked;           /* Transfer-Encoding: chunked */
    bool keep_alive;        /* after Connection: and version defaults */
    bool expect_continue;   /* Expect: 100-continue */
    bool upgrade;           /* Connection contains "upgrade" and Upgrade present */
    bool path_pct;          /* the path has %-escapes (all well-formed: a '%' not
                               followed by two hex digits before the query is a
                               400): normalise it before routing
                               (flare__router_normalize_path) */

    /* on FLARE_PARSE_ERROR */
    int status;        /* 400, 414, 431, 501, 505, 417 */
    const char *error; /* short static text naming the problem */
} flare_http_head_t;

/* The method id of a method token (FLARE_METHOD_OTHER when unknown): the
 * HTTP/1.1 request line's and HTTP/2's :method. Inline: each protocol's
 * parser compiles it in (no call between the protocols). */
static inline flare_method_t flare__http_method_id(const char *m, size_t n)
{
    switch (n) {
    case 3:
        if (memcmp(m, "GET", 3) == 0)
            return FLARE_METHOD_GET;
        if (memcmp(m, "PUT", 3) == 0)
            return FLARE_METHOD_PUT;
        break;
    case 4:
        if (memcmp(m, "POST", 4) == 0)
            return FLARE_METHOD_POST;
        if (memcmp(m, "HEAD", 4) == 0)
            return FLARE_METHOD_HEAD;
        break;
    case 5:
        if (memcmp(m, "PATCH", 5) == 0)
            return FLARE_METHOD_PATCH;
        if (memcmp(m, "TRACE", 5) == 0)
            return FLARE_METHOD_TRACE;
        break;
    case 6:
        if (memcmp(m, "DELETE", 6) == 0)
            return FLARE_METHOD_DELETE;
        break;
    case 7:
        if (memcmp(m, "OPTIONS", 7) == 0)
            return FLARE_METHOD_OPTIONS;
        if (memcmp(m, "CONNECT", 7) == 0)
            return FLARE_METHOD_CONNECT;
        break;
    }
    return FLARE_METHOD_OTHER;
}

/* Chunked transfer-coding decoder state (http1/parser.h decodes), resumable
 * at any byte boundary: the exchange carries it for a chunked body. */
typedef struct flare_chunked {
    uint8_t state;
    uint16_t line_len; /* bytes of the current size line */
    /* bytes of the trailer section consumed so far (its fields and the
     * final CRLF). The section ends the body, so the bytes a call adds to
     * it are always the last ones it consumed: a caller that keeps the
     * trailers takes in[consumed - added, consumed) after each call. */
    uint32_t trailer_len;
    uint64_t remaining; /* chunk-size being read, then bytes left in the chunk */
    uint64_t total;     /* sum of the chunk sizes announced so far (<= max_body) */
} flare_chunked_t;

#endif
