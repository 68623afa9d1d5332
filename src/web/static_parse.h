/* The pure parts of static file serving: request path checks, Range,
 * entity-tag lists, Accept-Encoding. Bytes in, result out: no I/O, no
 * allocation (fuzzed by fuzz/fuzz_static.c). */
#ifndef FLARE_STATIC_PARSE_H
#define FLARE_STATIC_PARSE_H

#include <stdbool.h>
#include <stdint.h>

#include "flare/common.h"

/* Percent-decodes the wildcard part of a static URL (raw, as sent) into out
 * (room for raw.len + 1 bytes) as a relative path: segments joined by '/',
 * empty and "." segments dropped, NUL-terminated; *outlen its length ("" is
 * the root). *dir tells whether raw ended with '/'. Returns 0, 400 (a bad
 * %-escape, a NUL byte, a ".." segment) or 404 (a segment starting with '.'
 * when !dotfiles). */
int flare__static_path(flare_str_t raw, char *out, size_t *outlen, bool *dir, bool dotfiles);

enum {
    FLARE__RANGE_NONE,  /* no usable Range: send the whole representation (200) */
    FLARE__RANGE_ONE,   /* one satisfiable range: [*first, *first + *len) (206) */
    FLARE__RANGE_UNSAT, /* none satisfiable: 416 */
};

/* A Range field value against a representation of `size` bytes (RFC 9110
 * section 14.1.2). Malformed values, other units, empty files and several
 * ranges give FLARE__RANGE_NONE (the server may ignore Range). */
int flare__range_parse(flare_str_t value, uint64_t size, uint64_t *first, uint64_t *len);

/* Does the If-Match / If-None-Match list contain etag (a strong tag with its
 * quotes)? "*" matches. strong: a weak list entry never matches (If-Match);
 * else the weak comparison (If-None-Match). A malformed list matches nothing. */
bool flare__etag_match(flare_str_t list, flare_str_t etag, bool strong);

/* Does Accept-Encoding accept gzip (by name or "*", with q > 0)? */
bool flare__accepts_gzip(flare_str_t value);

/* Tests only: true makes the static module open files without openat2,
 * as on kernels that lack it (component by component, no symlinks). */
void flare__static_no_openat2(bool on);

#endif
