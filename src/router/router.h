/* Route table: static paths in one hash lookup, `{name}` parameters and a
 * trailing `{*rest}` wildcard per method, 405 with the allowed set.
 *
 * Built single-threaded before the server starts, then immutable: match is
 * read-only and safe from every worker at once without locks. The router
 * copies every pattern string it is given. */
#ifndef FLARE_ROUTER_H
#define FLARE_ROUTER_H

#include <stdint.h>

#include "flare/common.h"

typedef struct flare_router flare_router_t;
struct flare_route_match;

flare_router_t *flare__router_new(void);
void flare__router_free(flare_router_t *r);

/* Adds a route. pattern: starts with '/', segments separated by '/', a
 * segment is literal text, `{name}` (one non-empty segment) or, as the last
 * segment only, `{*name}` (the rest of the path, possibly empty).
 * Names are [A-Za-z0-9_]+. A segment is either all literal or one whole
 * parameter (`/file{id}.txt` is rejected). A trailing slash is significant
 * (`/users` and `/users/` are different routes); `//` is invalid. Literal
 * text may not hold controls, space, '?' or '#', and a '%' in it must start
 * a %XX escape; it is stored in normal form (flare__router_normalize_path),
 * which is how request paths with escapes are matched: `/caf%c3%a9` and
 * `/caf%C3%A9` are one route, `/%61` is `/a`. `{*rest}` needs the '/'
 * before it: `/static/{*p}` matches
 * `/static/` (p = "") and `/static/a/b.css`, not `/static`.
 * Equivalent patterns differ only in parameter names (`/u/{a}`, `/u/{b}`).
 * The pattern is copied; data must not be NULL.
 * Returns 0, FLARE_EPATTERN (malformed pattern, duplicate parameter name,
 * more than FLARE_ROUTER_MAX_PARAMS, wildcard included), FLARE_EEXIST (same
 * method and an equivalent pattern already registered), FLARE_EINVAL
 * (method FLARE_METHOD_OTHER or out of range, data NULL) or FLARE_ENOMEM.
 * On any error the router is unchanged and flare_last_error() says why,
 * naming the method and pattern. */
int flare__router_add(flare_router_t *r, flare_method_t method, flare_str_t pattern, void *data);

/* The normal form of a path for routing (RFC 3986 6.2.2.1-2): %XX
 * escapes of unreserved characters (ALPHA, DIGIT, '-', '.', '_', '~') are
 * decoded, the hex digits of the other escapes upper-cased; everything else
 * is copied, a '%' without two hex digits after it too. Writes at most
 * path.len bytes to out (out may be path.ptr: it works in place) and
 * returns the length. Reserved characters stay escaped, so `/a%2Fb` is one
 * segment, never `/a/b`; nothing else changes either: no dot-segment
 * removal (`/a/%2e%2e/b` becomes `/a/../b`, which matches only a route
 * that has a literal `..` or a parameter there: handlers that map a path
 * to files must refuse `..` themselves, as flare_static does), no case
 * folding, no merging of slashes. Pure. For input whose every '%' starts
 * an escape (the request parser refuses other paths, flare__router_add
 * other patterns), applying it twice changes nothing and percent-decoding
 * its result gives what decoding the input gives. */
size_t flare__router_normalize_path(flare_str_t path, char *out);

/* Matches method + path (path as sent, without the query: normalised by
 * flare__router_normalize_path when it has escapes). An exact static
 * route (pattern without parameters) wins; otherwise, segment by segment,
 * literal beats parameter beats wildcard, with backtracking when a branch
 * fails. Fills *m; returns 1 when a route matched, 0 otherwise (then
 * m->allowed tells 404 vs 405). Only m->params[0 .. nparams) are written.
 * Read-only on the router, no allocation: safe from any thread at once.
 * HEAD falls back to GET when no HEAD route exists: the caller decides that
 * by matching GET again, the router does no implicit mapping. */
int flare__router_match(const flare_router_t *r, flare_method_t method, flare_str_t path,
                        struct flare_route_match *m);

/* Bit set of methods that have a route for `path` (used for Allow and for
 * automatic OPTIONS). */
uint32_t flare__router_allowed(const flare_router_t *r, flare_str_t path);

#endif
