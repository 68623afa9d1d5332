/* What the static file files share: static.c (the handler), static_open.c
 * (opening under the root), static_cache.c (the per-worker cache),
 * static_respond.c (validators, conditionals, Range, sending) and
 * static_mime.c (content types). */
#ifndef FLARE_WEB_STATIC_INT_H
#define FLARE_WEB_STATIC_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "flare/flare.h"
#include "flare/static.h"

/* Small files (up to CACHE_FILE_MAX) are kept per worker (static_cache.c):
 * a path of CACHE_PATH_MAX bytes or more is never cached, and workers past
 * CACHE_MAX_WORKERS have no cache. */
#define CACHE_MAX_WORKERS 256
#define CACHE_PATH_MAX    200
#define CACHE_FILE_MAX    16384
#define ETAG_MAX          (2 + 16 + 1 + 16 + 1 + 16)
/* "ETag: <etag>\r\nLast-Modified: <date>\r\n" */
#define VHDRS_MAX         (sizeof("ETag: \r\nLast-Modified: \r\n") - 1 + ETAG_MAX + 29)

typedef struct static_cache static_cache_t; /* static_cache.c */

/* One flare_static registration: its root, options and caches. */
typedef struct static_dir {
    int root; /* O_PATH directory */
    flare_static_opts_t o;
    char *index;         /* owned copy */
    char *cache_control; /* owned: the Cache-Control value, or NULL */
    char *fixed_hdrs;    /* owned: the header lines every file response carries */
    size_t fixed_len;
    uint32_t cache_ms;
    flare_mime_t *mime; /* owned copy of opts.mime (strings included), or NULL */
    size_t nmime;
    static_cache_t *cache[CACHE_MAX_WORKERS]; /* by worker id, made on first use */
} static_dir_t;

/* Cached contents, referenced by the cache entry and by every response that
 * sends them by reference (4 KiB and up: no copy into the write buffer).
 * Counted without atomics: entries, responses and their release all live
 * on one worker. */
typedef struct cbody {
    uint32_t refs;
    char data[];
} cbody_t;

/* The request headers a file response depends on, found in one pass. */
typedef struct conds {
    flare_str_t im, ius, inm, ims, range, ir, ae;
} conds_t;

/* What a response needs to know about the file: from the cache (body set)
 * or an open descriptor (body NULL; fd owned, handed to sendfile). */
typedef struct file_info {
    flare_str_t etag, vhdrs, ctype; /* etag: a view into vhdrs */
    time_t mtime;
    uint64_t size;
    const char *body;
    cbody_t *shared; /* body's owner when it comes from the cache */
    int fd;
    uint8_t gz; /* 0, FLARE_CODING_GZIP or FLARE_CODING_BR: the sibling served */
} file_info_t;

/* A plain-text response. */
static inline int flare__static_fail(flare_res_t *res, int status, const char *msg)
{
    return flare_res_send(res, status, FLARE_STR("text/plain; charset=utf-8"), flare_str(msg));
}

/* ---- static_open.c ---- */

/* Opens rel (relative, checked by flare__static_path; "" is the root
 * itself) beneath root: no "..", absolute or symlinked way out. Returns the
 * fd or -errno. */
int flare__static_open(int root, const char *rel);

/* Precompressed siblings: which the client takes, in the order it prefers
 * them (a WANT_* value; ae is the Accept-Encoding value). */
enum { WANT_NONE, WANT_GZ, WANT_BR, WANT_BR_GZ, WANT_GZ_BR };
uint8_t flare__static_want(flare_str_t ae);

/* Replaces *fd and *st by the first sibling of rel (rel[rlen] is its end,
 * with room for 4 more bytes) that want names and that is a regular file;
 * returns its coding (FLARE_CODING_BR or FLARE_CODING_GZIP), or 0 when
 * there is none (*fd and *st unchanged). */
uint8_t flare__static_sibling(int root, char *rel, size_t rlen, uint8_t want, int *fd,
                              struct stat *st);

/* ---- static_cache.c ---- */

/* Releases one reference to cached contents (ud: the cbody_t). */
void flare__static_cbody_release(void *ud);

/* The table of worker `id` (made on first use), or NULL: no caching. */
static_cache_t *flare__static_cache_of(static_dir_t *sd, unsigned id);

/* A hit for the key (the request's path, its trailing slash, the siblings
 * wanted) that is still valid at `now` in loop turn `turn`: fills *fi and
 * returns true. An entry found stale is dropped. */
bool flare__static_cache_get(static_cache_t *c, uint32_t cache_ms, const char *key, size_t klen,
                             bool slash, uint8_t gzreq, uint64_t now, uint64_t turn,
                             file_info_t *fi);

/* Reads a small regular file into the table, which takes fd, and fills *fi
 * from it: true. false (out of memory, or the file changed while read):
 * fd is still the caller's. */
bool flare__static_cache_fill(static_cache_t *c, const char *key, size_t klen, bool slash,
                              uint8_t gzreq, uint8_t gz, int fd, const struct stat *st,
                              flare_str_t ctype, uint64_t now, file_info_t *fi);

/* Closes and frees a worker's table. */
void flare__static_cache_free(static_cache_t *c);

/* ---- static_respond.c ---- */

/* "ETag: <etag>\r\nLast-Modified: <date>\r\n" into out (VHDRS_MAX);
 * returns its length, the etag's in *etag_len (it starts at out + 6). */
size_t flare__static_vhdrs(char *out, const struct stat *st, size_t *etag_len);

/* The request's conditional, Range and Accept-Encoding fields into *c. */
void flare__static_scan_conds(flare_req_t *req, conds_t *c);

/* The response for the file fi: conditionals (412, 304), Range (206, 416),
 * the body by reference, copied or with sendfile (which takes fi->fd). */
int flare__static_respond(flare_req_t *req, flare_res_t *res, const static_dir_t *sd,
                          file_info_t *fi, const conds_t *c);

/* ---- static_mime.c ---- */

/* The Content-Type of name: sd's own types first, then flare_mime_type. */
flare_str_t flare__static_mime(const static_dir_t *sd, flare_str_t name);

#endif
