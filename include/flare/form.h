/* Flare: query strings and application/x-www-form-urlencoded bodies.
 *
 * "a=1&b=two+words&a=%C3%A9": pairs separated by '&', key and value by the
 * first '='. Iteration is pure and allocation-free: it yields raw (still
 * encoded) views into the input, valid as long as the input (for a
 * request: until the response completes). Decoding ('+' is a space, %XX a
 * byte) copies only when the raw bytes contain '%' or '+', into caller
 * memory or memory from an allocator callback (the request arena).
 *
 * Choices (WHATWG URL "application/x-www-form-urlencoded parsing"):
 *   - empty pieces ("a=1&&b=2", a trailing '&') are skipped;
 *   - a piece without '=' is a key with an empty value ("flag" -> "");
 *   - an empty key ("=v") is a pair with key "";
 *   - an invalid percent escape ('%' not followed by two hex digits: "%",
 *     "%4", "%zz") is kept literally, never an error;
 *   - decoded bytes are not checked: %00 and invalid UTF-8 come through
 *     (values are views with a length, never C strings);
 *   - only '&' separates pairs (not ';'). */
#ifndef FLARE_FORM_H
#define FLARE_FORM_H

#include <stdbool.h>

#include "flare/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Default bound on the pairs one input may have (like PHP's max_input_vars):
 * parsing stops with FLARE_ETOOBIG past it, so a hostile query cannot make
 * a lookup walk a million pairs. */
#define FLARE_FORM_MAX_PAIRS 1000

/* An iterator over the pairs of a query string or form body
 * (flare_form_iter_init). */
typedef struct flare_form_iter {
    const char *p;    /* the next byte to read */
    const char *end;  /* just past the input's last byte */
    size_t count;     /* pairs returned so far */
    size_t max_pairs; /* bound (FLARE_FORM_MAX_PAIRS unless changed) */
} flare_form_iter_t;

/* Starts it iterating over input (a query string without the '?', or a body).
 * max_pairs may be changed afterwards (0 means no bound). */
FLARE_API void flare_form_iter_init(flare_form_iter_t *it, flare_str_t input);

/* Next pair of it as raw views: returns 0 with *key and *value set,
 * FLARE_EEND at the end, FLARE_ETOOBIG when the input has more than max_pairs pairs (the caller
 * should answer 400, or 413/414). */
FLARE_API int flare_form_next(flare_form_iter_t *it, flare_str_t *key, flare_str_t *value);

/* Advances it to the next pair whose decoded key equals `key` (compared
 * without allocating): 0 with *raw_value set, FLARE_EEND when there is none left,
 * FLARE_ETOOBIG as above. Repeated calls walk all values of a key. */
FLARE_API int flare_form_find(flare_form_iter_t *it, flare_str_t key, flare_str_t *raw_value);

/* Decodes raw into out (room for raw.len bytes) and returns the decoded
 * length. out may equal raw.ptr (in-place decoding). No NUL is added. */
FLARE_API size_t flare_form_decode_into(flare_str_t raw, char *out);

/* Decodes raw into *out. When raw has no '%' and no '+' *out is raw itself
 * (no copy); otherwise the bytes come from alloc(ctx, raw.len + 1) and are
 * NUL-terminated. Returns 0 or FLARE_ENOMEM (also when a copy is needed
 * and alloc is NULL). *out lives as long as raw or the allocator's memory. */
FLARE_API int flare_form_decode(flare_str_t raw, flare_alloc_fn alloc, void *ctx, flare_str_t *out);

/* Next pair of it, decoded into *key and *value (flare_form_next +
 * flare_form_decode on both, copies from alloc(ctx, ...)). Returns
 * 0, FLARE_EEND at the end, FLARE_ETOOBIG or FLARE_ENOMEM. */
FLARE_API int flare_form_next_decoded(flare_form_iter_t *it, flare_alloc_fn alloc, void *ctx,
                                      flare_str_t *key, flare_str_t *value);

/* The decoded value (in *value) of the first pair of input with that
 * (decoded) key; copies come from alloc(ctx, ...) as for
 * flare_form_decode. Returns 0,
 * FLARE_ENOTFOUND, FLARE_ETOOBIG (more than FLARE_FORM_MAX_PAIRS pairs
 * before it) or FLARE_ENOMEM. */
FLARE_API int flare_form_get(flare_str_t input, flare_str_t key, flare_alloc_fn alloc, void *ctx,
                             flare_str_t *value);

/* All decoded values of a key in input, in order (copies from
 * alloc(ctx, ...) as for flare_form_decode): fills values[0..max) and sets
 * *count to the number of values found (which may exceed max: the extra
 * ones are counted, not stored). Returns 0 (also when there is none),
 * FLARE_ETOOBIG or FLARE_ENOMEM. */
FLARE_API int flare_form_get_all(flare_str_t input, flare_str_t key, flare_alloc_fn alloc,
                                 void *ctx, flare_str_t *values, size_t max, size_t *count);

#ifdef __cplusplus
}
#endif
#endif
