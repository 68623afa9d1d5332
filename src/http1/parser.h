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
#include "http/head.h"

/* Parses one request head from buf[0..len).
 * Before the call: head->headers points to an array of at least
 * limits->max_headers entries.
 * Returns the length of the head including the final CRLFCRLF (> 0),
 * FLARE_PARSE_PARTIAL when more bytes are needed (limits already checked on
 * what is there: a request line longer than max_request_line gives 414 even
 * before its CRLF arrives, a head longer than max_head gives 431), or
 * FLARE_PARSE_ERROR with head->status / head->error set.
 * Stateless: call again from the start of the request with more bytes.
 * Up to 4 empty lines before the request line are skipped (counted in the
 * returned length). Only a successful return fills every field of *head;
 * after PARTIAL or ERROR the fields other than status/error are unspecified.
 * The views point into buf (the path of an absolute-form target without a
 * path points to a static "/") and live as long as buf does. The result for
 * a prefix never contradicts the result for the whole: an error in a prefix
 * is the same error with more bytes. max_head is capped at INT_MAX. */
int flare__http_parse_head(const char *buf, size_t len, const flare_http_limits_t *limits,
                           flare_http_head_t *head);

/* Cheap pre-check for callers that receive a head in many small reads:
 * returns true when buf[0..len) may hold a complete head or an error worth
 * reporting now; *scanned is a resume hint (start it at 0 for each new head).
 * Lets a slow client feeding one byte at a time cost O(n), not O(n^2).
 *
 * It looks only at LF bytes at or after *scanned (one memchr per LF) and
 * returns true at the first one that ends "\r\n\r\n" (a head may be
 * complete) or has no CR before it (a bare LF, which includes "\n\n": the
 * parser answers 400 at once). On return *scanned is one past the last byte
 * examined; the same LF never makes it return true twice. It knows no
 * limits and ignores other bad bytes (a bare CR, a NUL...), which the parser
 * reports when it runs. Intended use: parse the first read of a head
 * directly (most heads arrive whole, and junk such as a TLS hello is refused
 * then); after a PARTIAL, parse again only when this returns true, or when
 * the buffered head grows past limits->max_request_line or max_head (where
 * 414 and 431 become certain; once each per head). */
bool flare__http_head_ready(const char *buf, size_t len, size_t *scanned);

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
 * FLARE_PARSE_ERROR (*status set to 400, 413 or 431, *error a static text).
 * max_body bounds the decoded total (413, as soon as a chunk-size would pass
 * it); a size line is at most 4 KiB with its extensions (400), the trailer
 * section at most 8 KiB (431). Chunk extensions must match RFC 9112 7.1.1's
 * grammar exactly (400 otherwise: BWS only before ';' or '=', names tokens,
 * values tokens or quoted-strings); they are ignored. The trailer section is
 * checked (token ":" field text CRLF per line) and skipped; a caller that
 * keeps it reads it through trailer_len and flare__chunked_trailer_next.
 * After DONE every call returns DONE with *consumed 0; after an error, 400. */
int flare__chunked_decode(flare_chunked_t *c, const char *in, size_t len, uint64_t max_body,
                          size_t *consumed, flare_str_t *data, int *status, const char **error);

/* The fields of a trailer section the decoder accepted, one per call:
 * raw[0..len) is the section as consumed (see trailer_len), *pos starts at
 * 0. true with *name and *value views into raw (the value without the
 * whitespace around it), false at the end of the section. */
bool flare__chunked_trailer_next(const char *raw, size_t len, size_t *pos, flare_str_t *name,
                                 flare_str_t *value);

#endif
