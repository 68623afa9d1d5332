/* Response compression: gzip (zlib) and brotli (libbrotlienc), chosen by
 * the request's Accept-Encoding (RFC 9110 §12.5.3). See docs/compression.md.
 *
 * flare_compress() fills a flare_middleware_t (state owned by the app,
 * freed by flare_app_free); register it with flare_use, flare_group_use or
 * flare_route_mw, before flare_app_run. */
#ifndef FLARE_COMPRESS_H
#define FLARE_COMPRESS_H

#include <stdbool.h>
#include <stddef.h>

#include "flare/flare.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The content codings the middleware produces, and what the negotiation
 * can answer. */
typedef enum flare_coding {
    FLARE_CODING_IDENTITY = 0, /* no content coding */
    FLARE_CODING_GZIP = 1,
    FLARE_CODING_BR = 2,
    FLARE_CODING_NONE = 3, /* nothing offered is acceptable, identity refused too */
} flare_coding_t;

/* Bits of `offered` for flare_accept_encoding. */
#define FLARE_CODING_GZIP_BIT (1u << FLARE_CODING_GZIP)
#define FLARE_CODING_BR_BIT   (1u << FLARE_CODING_BR)

/* Picks the coding for a response from an Accept-Encoding value (value.ptr
 * NULL: no header) among the `offered` ones (FLARE_CODING_*_BIT):
 *   - no header: FLARE_CODING_IDENTITY (a client that says nothing gets no
 *     coding, as nginx and h2o do, although RFC 9110 would allow any);
 *   - an empty value: identity;
 *   - each coding's weight is its own entry's q (the highest when listed
 *     twice), else the "*" entry's, else it is not acceptable; q=0 means
 *     not acceptable; "x-gzip" is gzip (RFC 9110 §8.4.1.3);
 *   - the highest weight wins; ties prefer br, then gzip; identity wins
 *     only when it is listed with a weight above every offered coding's;
 *   - identity is acceptable unless "identity;q=0", or "*;q=0" without an
 *     identity entry; when it is refused and no offered coding is
 *     acceptable: FLARE_CODING_NONE.
 * Returns a flare_coding_t, or FLARE_EINVAL for a malformed value (a bad
 * token, a weight that is not a qvalue, a parameter other than q); the
 * middleware answers those with identity, ignoring the header. Pure: no
 * allocation, any thread. */
FLARE_API int flare_accept_encoding(flare_str_t value, unsigned offered);

/* flare_compress's options; a zeroed struct means the defaults. */
typedef struct flare_compress_config {
    int gzip_level;  /* zlib level 1..9 [6] */
    int br_quality;  /* brotli quality 1..11 [4] */
    size_t min_size; /* buffered bodies shorter than this are sent as they are [256] */
    bool no_gzip;    /* do not offer gzip */
    bool no_br;      /* do not offer brotli */
    /* Content types to compress (the media type before any ';', compared
     * case-insensitively): exact ("application/json") or a type with "/ *"
     * written as "text/" "*". NULL-terminated; NULL: text/ *,
     * application/json, application/javascript, application/xml,
     * application/wasm, image/svg+xml and any "+json" or "+xml" type. */
    const char *const *types;
} flare_compress_config_t;

/* Fills *out with a middleware, configured by cfg (read here; NULL:
 * defaults), that compresses the responses of the routes it is registered on:
 *   - buffered bodies (flare_res_send, flare_res_send_ref) of at least
 *     min_size bytes, compressed whole (the worker's zlib state is reused
 *     through deflateReset);
 *   - streamed bodies (flare_res_begin/write/end): compressed as produced,
 *     each flare_res_write flushed (Z_SYNC_FLUSH, BROTLI_OPERATION_FLUSH) so
 *     that the client can decode everything written so far; one encoder per
 *     streaming response, freed when it ends;
 *   - only when the Content-Type is allowed and the client accepts gzip or
 *     br; never for HEAD, 204, 206, 304, a response with Content-Range or
 *     Content-Encoding already, or file bodies (flare_res_sendfile: static
 *     files use precompressed siblings instead, see flare/static.h).
 * Every response that goes through it carries Vary: Accept-Encoding,
 * compressed or not. A compressed response's ETag gets "-gz" or "-br"
 * inside its quotes (W/ stays). A client that refuses identity and
 * accepts nothing offered gets identity anyway (RFC 9110 §12.1 lets a
 * server disregard the header rather than answer 406).
 * FLARE_EINVAL (flare_last_error() names the field): a level out of range,
 * both codings off, an empty type. */
FLARE_API int flare_compress(flare_app_t *app, const flare_compress_config_t *cfg,
                             flare_middleware_t *out);

#ifdef __cplusplus
}
#endif
#endif
