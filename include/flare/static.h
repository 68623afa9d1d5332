/* Flare: static files.
 *
 *   flare_static_opts_t o;
 *   flare_static_opts_init(&o);
 *   o.max_age = 3600;
 *   flare_static(app, "/assets", "/srv/www/assets", &o);
 *
 * serves GET and HEAD /assets/<path> from the directory, the way nginx's
 * `location /assets/ { root ...; }` does:
 *   - the path is percent-decoded, then checked: a NUL byte, a `..` segment
 *     or a bad escape is a 400; files are opened with openat2(2)
 *     RESOLVE_BENEATH, so no symlink leads out of the root either (404);
 *   - names starting with '.' are not served (404) unless opts.dotfiles;
 *   - a directory without a trailing slash is redirected (301) to the same
 *     path with one; with one, its index file (opts.index) is served, else 404;
 *   - only regular files are served (a FIFO or device is a 404);
 *   - validators: a strong ETag (modification time and size) and
 *     Last-Modified; If-Match / If-Unmodified-Since (412), If-None-Match /
 *     If-Modified-Since (304), RFC 9110 section 13.2.2 order;
 *   - single byte ranges (206 with Content-Range; 416 when unsatisfiable),
 *     with If-Range; a request for several ranges gets the whole file (200);
 *   - Content-Type from the file extension (text types with charset=utf-8),
 *     application/octet-stream when unknown;
 *   - optional precompressed variants: with opts.precompressed, "x.js.br"
 *     or "x.js.gz" next to "x.js" is sent with Content-Encoding: br or gzip
 *     to clients that accept it, the one with the higher q first (ties:
 *     br; flare_accept_encoding in flare/compress.h), the other when the
 *     first is missing (Vary: Accept-Encoding on all; each sibling has its
 *     own ETag);
 *   - files up to 16 KiB are kept per worker (contents, validators and an
 *     open descriptor; 64 per worker): a hit costs one fstat(2), which sees
 *     a file changed in place at once; the path itself is looked up again
 *     after opts.cache_ms (1 s), so a file replaced by rename or removed is
 *     seen within that time (opts.no_cache: every request opens the file);
 *   - larger files are opened per request and go out with sendfile(2).
 * Other methods get 405 with Allow: GET, HEAD. The root is opened once, at
 * registration; it must exist and be a directory. */
#ifndef FLARE_STATIC_H
#define FLARE_STATIC_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "flare/flare.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An extension and its Content-Type ("webc", "application/x-webc"). */
typedef struct flare_mime {
    const char *ext;  /* without the dot; compared case-insensitively */
    const char *type; /* the Content-Type */
} flare_mime_t;

/* Options. A zero field means its default (in brackets): a zeroed struct is
 * the same as flare_static_opts_init's, and as passing NULL. */
typedef struct flare_static_opts {
    const char *index;         /* directory index file name [NULL: "index.html"]; "": none */
    uint32_t max_age;          /* > 0: Cache-Control: public, max-age=N [0: none] */
    const char *cache_control; /* when set, used as Cache-Control instead of max_age */
    bool dotfiles;             /* serve names starting with '.' [false] */
    bool precompressed;        /* look for "<file>.br" and "<file>.gz" [false] */
    uint32_t cache_ms;         /* small-file cache: revalidate paths after [1000] */
    /* extra or overriding types, looked up before the built-in table; an
     * array ended by { NULL, NULL } (copied at registration), or NULL */
    const flare_mime_t *mime;
    bool no_cache; /* no small-file cache: every request opens its file [false] */
} flare_static_opts_t;

/* Sets *o to the defaults: index "index.html", no Cache-Control, no dotfiles, no .gz,
 * small-file cache revalidated every 1000 ms. */
FLARE_API void flare_static_opts_init(flare_static_opts_t *o);

/* Serves the directory root under URL prefix ("/static"; "" or "/" for the
 * whole site): registers GET <prefix>/{*path} and GET <prefix> (which
 * redirects to <prefix>/). opts may be NULL (defaults); it is copied.
 * FLARE_EINVAL for a bad prefix or options, FLARE_ENOTFOUND when root is
 * not an accessible directory, FLARE_EEXIST when the routes exist. On
 * FLARE_EINVAL, flare_last_error() names the option. */
FLARE_API int flare_static(flare_app_t *app, const char *prefix, const char *root,
                           const flare_static_opts_t *opts);

/* The same under route group g's prefix (and its middlewares): prefix,
 * root and opts as above. */
FLARE_API int flare_group_static(flare_group_t *g, const char *prefix, const char *root,
                                 const flare_static_opts_t *opts);

/* The Content-Type Flare uses for a file name (filename), by its extension
 * ("application/octet-stream" when unknown). Static storage. */
FLARE_API flare_str_t flare_mime_type(flare_str_t filename);

/* Parses s as an HTTP-date into *out (seconds since the epoch): IMF-fixdate,
 * and the obsolete RFC 850 and asctime forms, as RFC 9110 section 5.6.7
 * requires of recipients. 0, or FLARE_EINVAL (not a valid date; *out
 * untouched). */
FLARE_API int flare_http_date_parse(flare_str_t s, time_t *out);

#ifdef __cplusplus
}
#endif

#endif
