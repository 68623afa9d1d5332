/* Static files: a directory served under a URL prefix (see flare/static.h).
 *
 * Per request: decode and check the path (static_parse), openat2 under the
 * root with RESOLVE_BENEATH, fstat, validators and conditionals, Range, then
 * flare_res_sendfile, which owns the descriptor from there on. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/core.h"
#include "flare/compress.h"
#include "flare/flare.h"
#include "flare/static.h"
#include "app.h"
#include "web/static_parse.h"

/* ---- pure parts ------------------------------------------------------------ */

int flare__static_path(flare_str_t raw, char *out, size_t *outlen, bool *dir, bool dotfiles)
{
    size_t n = 0, seg = 0; /* seg: where the current segment starts in out */
    *dir = raw.len > 0 && raw.ptr[raw.len - 1] == '/';
    for (size_t i = 0; i <= raw.len; i++) {
        unsigned char ch;
        if (i == raw.len) {
            ch = '/';
        } else if (raw.ptr[i] == '%') {
            int hi = i + 2 < raw.len ? flare__hexval((unsigned char)raw.ptr[i + 1]) : -1;
            int lo = hi >= 0 ? flare__hexval((unsigned char)raw.ptr[i + 2]) : -1;
            if (lo < 0)
                return 400;
            ch = (unsigned char)(hi << 4 | lo);
            i += 2;
            if (ch == 0)
                return 400;
        } else {
            ch = (unsigned char)raw.ptr[i];
            if (ch == 0)
                return 400;
        }
        if (ch != '/') {
            out[n++] = (char)ch;
            continue;
        }
        /* end of a segment: out[seg, n) */
        size_t len = n - seg;
        const char *s = out + seg;
        if (len == 0 || (len == 1 && s[0] == '.')) {
            n = seg; /* dropped */
        } else if (len == 2 && s[0] == '.' && s[1] == '.') {
            return 400;
        } else if (s[0] == '.' && !dotfiles) {
            return 404;
        } else {
            out[n++] = '/';
            seg = n;
        }
    }
    if (n > 0)
        n--; /* the separator after the last segment */
    out[n] = '\0';
    *outlen = n;
    return 0;
}

/* Saturating decimal: digits at *p..end; false when there are none. */
static bool digits(const char **p, const char *end, uint64_t *v)
{
    const char *s = *p;
    uint64_t x = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        unsigned d = (unsigned)(*s - '0');
        x = x > (UINT64_MAX - d) / 10 ? UINT64_MAX : x * 10 + d;
        s++;
    }
    if (s == *p)
        return false;
    *p = s;
    *v = x;
    return true;
}

int flare__range_parse(flare_str_t value, uint64_t size, uint64_t *first, uint64_t *len)
{
    if (value.ptr == NULL) /* (NULL + 0 is undefined) */
        return FLARE__RANGE_NONE;
    const char *p = value.ptr, *end = value.ptr + value.len;
    if (value.len < 6 || strncasecmp(p, "bytes=", 6) != 0 || size == 0)
        return FLARE__RANGE_NONE;
    p += 6;
    unsigned specs = 0, satisfiable = 0;
    uint64_t f = 0, l = 0;
    while (p < end) {
        while (p < end && (flare__is_ows(*p) || *p == ','))
            p++;
        if (p == end)
            break;
        uint64_t a, b;
        bool sat;
        if (*p == '-') { /* suffix-range */
            p++;
            if (!digits(&p, end, &b))
                return FLARE__RANGE_NONE;
            sat = b > 0;
            a = b >= size ? 0 : size - b;
            b = size - 1;
        } else {
            if (!digits(&p, end, &a) || p == end || *p != '-')
                return FLARE__RANGE_NONE;
            p++;
            if (p < end && *p >= '0' && *p <= '9') {
                digits(&p, end, &b);
                if (b < a)
                    return FLARE__RANGE_NONE; /* invalid range-spec: ignore the field */
            } else {
                b = UINT64_MAX;
            }
            sat = a < size;
            if (b >= size)
                b = size - 1;
        }
        while (p < end && flare__is_ows(*p))
            p++;
        if (p < end && *p != ',')
            return FLARE__RANGE_NONE;
        specs++;
        if (sat) {
            satisfiable++;
            f = a;
            l = b - a + 1;
        }
    }
    if (specs == 0)
        return FLARE__RANGE_NONE;
    if (satisfiable == 0)
        return FLARE__RANGE_UNSAT;
    if (specs > 1)
        return FLARE__RANGE_NONE;
    *first = f;
    *len = l;
    return FLARE__RANGE_ONE;
}

bool flare__etag_match(flare_str_t list, flare_str_t etag, bool strong)
{
    if (list.ptr == NULL)
        return false;
    const char *p = list.ptr, *end = list.ptr + list.len;
    bool matched = false;
    unsigned elems = 0;
    while (p < end) {
        while (p < end && (flare__is_ows(*p) || *p == ','))
            p++;
        if (p == end)
            break;
        elems++;
        if (*p == '*') {
            p++;
            matched = true;
        } else {
            bool weak = false;
            if (end - p >= 2 && p[0] == 'W' && p[1] == '/') {
                weak = true;
                p += 2;
            }
            if (p == end || *p != '"')
                return false;
            const char *q = p + 1;
            while (q < end && *q != '"') {
                unsigned char c = (unsigned char)*q;
                if (c < 0x21 || c == 0x7f) /* etagc = %x21 / %x23-7E / obs-text */
                    return false;
                q++;
            }
            if (q == end)
                return false;
            q++; /* the closing quote */
            size_t n = (size_t)(q - p);
            if (!(strong && weak) && n == etag.len && memcmp(p, etag.ptr, n) == 0)
                matched = true;
            p = q;
        }
        while (p < end && flare__is_ows(*p))
            p++;
        if (p < end && *p != ',')
            return false;
    }
    return elems > 0 && matched;
}

bool flare__accepts_gzip(flare_str_t value)
{
    if (value.ptr == NULL)
        return false;
    const char *p = value.ptr, *end = value.ptr + value.len;
    bool gzip = false, star = false, gzip_seen = false;
    while (p < end) {
        while (p < end && (flare__is_ows(*p) || *p == ','))
            p++;
        const char *t = p;
        while (p < end && *p != ',' && *p != ';' && !flare__is_ows(*p))
            p++;
        size_t tlen = (size_t)(p - t);
        /* parameters: only q matters; q=0 (0, 0.0, 0.000) refuses */
        bool refused = false;
        while (p < end && *p != ',') {
            while (p < end && (flare__is_ows(*p) || *p == ';'))
                p++;
            if (end - p >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
                p += 2;
                refused = p < end && *p == '0';
                if (refused) {
                    p++;
                    if (p < end && *p == '.') {
                        p++;
                        while (p < end && *p == '0')
                            p++;
                        refused = p == end || !(*p >= '1' && *p <= '9');
                    }
                }
            }
            while (p < end && *p != ',' && *p != ';')
                p++;
        }
        if (tlen == 4 && strncasecmp(t, "gzip", 4) == 0) {
            gzip_seen = true;
            gzip = !refused;
        } else if (tlen == 1 && t[0] == '*') {
            star = !refused;
        }
    }
    return gzip || (!gzip_seen && star);
}

/* ---- HTTP dates ------------------------------------------------------------ */

static int month_of(const char *s)
{
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    for (int m = 0; m < 12; m++) {
        if (memcmp(s, months + 3 * m, 3) == 0)
            return m;
    }
    return -1;
}

static bool num(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * days_from_civil algorithm) */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static bool hms(const char *s, int *h, int *mi, int *sec)
{
    return num(s, 2, h) && s[2] == ':' && num(s + 3, 2, mi) && s[5] == ':' && num(s + 6, 2, sec) &&
           *h < 24 && *mi < 60 && *sec <= 60;
}

static bool day_name(const char *s, size_t n)
{
    static const char *const names[] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
    static const char *const long_names[] = { "Sunday",   "Monday", "Tuesday", "Wednesday",
                                              "Thursday", "Friday", "Saturday" };
    for (int i = 0; i < 7; i++) {
        if ((n == 3 && memcmp(s, names[i], 3) == 0) ||
            (n == strlen(long_names[i]) && memcmp(s, long_names[i], n) == 0))
            return true;
    }
    return false;
}

bool flare_http_date_parse(flare_str_t str, time_t *out)
{
    const char *s = str.ptr;
    size_t n = str.len;
    int d, m, y, h, mi, sec;
    if (s == NULL)
        return false;
    if (n == 29 && s[3] == ',') {
        /* IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT */
        if (!day_name(s, 3) || s[4] != ' ' || !num(s + 5, 2, &d) || s[7] != ' ' ||
            (m = month_of(s + 8)) < 0 || s[11] != ' ' || !num(s + 12, 4, &y) || s[16] != ' ' ||
            !hms(s + 17, &h, &mi, &sec) || memcmp(s + 25, " GMT", 4) != 0)
            return false;
    } else if (n == 24 && s[3] == ' ') {
        /* asctime: Sun Nov  6 08:49:37 1994 */
        if (!day_name(s, 3) || (m = month_of(s + 4)) < 0 || s[7] != ' ' ||
            !(s[8] == ' ' ? num(s + 9, 1, &d) : num(s + 8, 2, &d)) || s[10] != ' ' ||
            !hms(s + 11, &h, &mi, &sec) || s[19] != ' ' || !num(s + 20, 4, &y))
            return false;
    } else {
        /* RFC 850: Sunday, 06-Nov-94 08:49:37 GMT */
        const char *comma = memchr(s, ',', n);
        if (comma == NULL || !day_name(s, (size_t)(comma - s)))
            return false;
        size_t k = (size_t)(comma - s);
        if (n != k + 24 || comma[1] != ' ' || !num(comma + 2, 2, &d) || comma[4] != '-' ||
            (m = month_of(comma + 5)) < 0 || comma[8] != '-' || !num(comma + 9, 2, &y) ||
            comma[11] != ' ' || !hms(comma + 12, &h, &mi, &sec) ||
            memcmp(comma + 20, " GMT", 4) != 0)
            return false;
        y += y < 70 ? 2000 : 1900;
    }
    static const unsigned char mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d < 1 || d > mdays[m] || (m == 1 && d == 29 && !leap))
        return false;
    int64_t t = days_from_civil(y, (unsigned)m + 1, (unsigned)d) * 86400 + h * 3600 + mi * 60 + sec;
    *out = (time_t)t;
    return true;
}

/* ---- MIME types ------------------------------------------------------------ */

static const struct {
    const char *ext;
    const char *type;
} mime_table[] = {
    { "html", "text/html; charset=utf-8" },
    { "htm", "text/html; charset=utf-8" },
    { "css", "text/css; charset=utf-8" },
    { "js", "text/javascript; charset=utf-8" },
    { "mjs", "text/javascript; charset=utf-8" },
    { "json", "application/json" },
    { "map", "application/json" },
    { "txt", "text/plain; charset=utf-8" },
    { "md", "text/markdown; charset=utf-8" },
    { "csv", "text/csv; charset=utf-8" },
    { "xml", "application/xml" },
    { "svg", "image/svg+xml" },
    { "png", "image/png" },
    { "jpg", "image/jpeg" },
    { "jpeg", "image/jpeg" },
    { "gif", "image/gif" },
    { "webp", "image/webp" },
    { "avif", "image/avif" },
    { "ico", "image/x-icon" },
    { "wasm", "application/wasm" },
    { "pdf", "application/pdf" },
    { "zip", "application/zip" },
    { "gz", "application/gzip" },
    { "woff", "font/woff" },
    { "woff2", "font/woff2" },
    { "ttf", "font/ttf" },
    { "otf", "font/otf" },
    { "mp4", "video/mp4" },
    { "webm", "video/webm" },
    { "mp3", "audio/mpeg" },
    { "ogg", "audio/ogg" },
    { "wav", "audio/wav" },
    { "webmanifest", "application/manifest+json" },
};

/* The extension of the last path segment (after its last '.'), or
 * .ptr == NULL when it has none. */
static flare_str_t file_ext(flare_str_t name)
{
    size_t i = name.len;
    while (i > 0 && name.ptr[i - 1] != '.' && name.ptr[i - 1] != '/')
        i--;
    if (i == 0 || name.ptr[i - 1] != '.')
        return FLARE_STR_NULL;
    return (flare_str_t){ name.ptr + i, name.len - i };
}

flare_str_t flare_mime_type(flare_str_t name)
{
    flare_str_t ext = file_ext(name);
    if (ext.ptr != NULL) {
        for (size_t k = 0; k < sizeof(mime_table) / sizeof(mime_table[0]); k++) {
            if (flare_str_ieq(ext, flare_str(mime_table[k].ext)))
                return flare_str(mime_table[k].type);
        }
    }
    return FLARE_STR("application/octet-stream");
}

/* ---- serving --------------------------------------------------------------- */

/* Small files (up to CACHE_FILE_MAX) are kept per worker, contents and
 * validators, with their descriptor open: a hit costs one fstat (which
 * sees in-place changes at once) instead of openat2 + fstat + pread +
 * close. The path is opened again after cache_ms, so a file replaced by
 * rename or removed is seen within that time. Each worker touches only
 * its own table: no lock. */
#define CACHE_SLOTS       64 /* per worker; a power of two */
#define CACHE_PROBE       4
#define CACHE_MAX_WORKERS 256
#define CACHE_PATH_MAX    200
#define CACHE_FILE_MAX    16384
#define ETAG_MAX          (2 + 16 + 1 + 16 + 1 + 16)
#define VHDRS_MAX         (sizeof("ETag: \r\nLast-Modified: \r\n") - 1 + ETAG_MAX + 29)

/* Cached contents, referenced by the entry and by every response that
 * sends them by reference (4 KiB and up: no copy into the write buffer).
 * Counted without atomics: entries, responses and their release all live
 * on one worker. */
typedef struct cbody {
    uint32_t refs;
    char data[];
} cbody_t;

static void cbody_release(void *ud)
{
    cbody_t *b = ud;
    if (--b->refs == 0)
        free(b);
}

typedef struct cache_entry {
    int fd; /* -1: empty slot */
    uint32_t pathlen;
    bool slash;         /* the request path ended with '/' (a directory's index) */
    uint8_t gzreq;      /* the siblings the client takes, in its order (key): WANT_* */
    uint8_t gz;         /* the entry holds the ".gz" (1) or ".br" (2) sibling, or 0 */
    uint64_t opened_ms; /* when the path was last opened */
    uint64_t checked;   /* the loop turn whose fstat found it unchanged (0: none) */
    dev_t dev;
    ino_t ino;
    struct timespec mtime;
    off_t size;
    flare_str_t ctype;
    uint8_t etag_len, vhdrs_len;
    /* "ETag: <etag>\r\nLast-Modified: <date>\r\n": the etag is at offset 6 */
    char vhdrs[VHDRS_MAX];
    struct cbody *body; /* the contents (shared with responses still being sent) */
    char path[CACHE_PATH_MAX];
} cache_entry_t;

typedef struct static_cache {
    cache_entry_t e[CACHE_SLOTS];
} static_cache_t;

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

static void entry_clear(cache_entry_t *e)
{
    if (e->fd >= 0)
        close(e->fd);
    if (e->body != NULL)
        cbody_release(e->body);
    e->fd = -1;
    e->body = NULL;
    e->pathlen = 0;
}

static void static_dir_free(void *p)
{
    static_dir_t *sd = p;
    if (sd->root >= 0)
        close(sd->root);
    for (size_t w = 0; w < CACHE_MAX_WORKERS; w++) {
        if (sd->cache[w] == NULL)
            continue;
        for (size_t i = 0; i < CACHE_SLOTS; i++)
            entry_clear(&sd->cache[w]->e[i]);
        free(sd->cache[w]);
    }
    for (size_t i = 0; i < sd->nmime; i++) {
        free((char *)sd->mime[i].ext);
        free((char *)sd->mime[i].type);
    }
    free(sd->mime);
    free(sd->index);
    free(sd->cache_control);
    free(sd->fixed_hdrs);
    free(sd);
}

void flare_static_opts_init(flare_static_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->index = "index.html";
    o->cache_ms = 1000;
}

#define OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)

/* Without openat2 (kernels before 5.6, valgrind, some seccomp filters):
 * one openat per component with O_NOFOLLOW, so no symlink is followed at
 * all (rel has no "..", "." or empty segment: flare__static_path). */
static int open_walk(int root, const char *rel)
{
    char comp[NAME_MAX + 1];
    int dir = root;
    for (;;) {
        const char *slash = strchr(rel, '/');
        size_t n = slash != NULL ? (size_t)(slash - rel) : strlen(rel);
        if (n > NAME_MAX) {
            if (dir != root)
                close(dir);
            return -ENAMETOOLONG;
        }
        memcpy(comp, rel, n);
        comp[n] = '\0';
        int fd = slash != NULL ? openat(dir, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                               : openat(dir, comp, OPEN_FLAGS | O_NOFOLLOW);
        int err = errno;
        if (dir != root)
            close(dir);
        if (fd < 0)
            return -err;
        if (slash == NULL)
            return fd;
        dir = fd;
        rel = slash + 1;
    }
}

static _Atomic bool no_openat2;

void flare__static_no_openat2(bool on)
{
    atomic_store(&no_openat2, on);
}

/* openat2 RESOLVE_BENEATH: no "..", absolute or symlinked way out of the
 * root. Returns the fd or -errno. */
static int open_beneath(int root, const char *rel)
{
    if (*rel == '\0')
        rel = ".";
    if (!atomic_load_explicit(&no_openat2, memory_order_relaxed)) {
        struct open_how how = {
            .flags = OPEN_FLAGS,
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
        };
        long fd = syscall(SYS_openat2, root, rel, &how, sizeof(how));
        if (fd >= 0)
            return (int)fd;
        if (errno != ENOSYS)
            return -errno;
        atomic_store_explicit(&no_openat2, true, memory_order_relaxed);
    }
    return open_walk(root, rel);
}

static int fail(flare_res_t *res, int status, const char *msg)
{
    return flare_res_send(res, status, FLARE_STR("text/plain; charset=utf-8"), flare_str(msg));
}

static int open_error(flare_res_t *res, int err)
{
    switch (err) {
    case -EACCES:
    case -EPERM:
        return fail(res, 403, "Forbidden\n");
    case -EMFILE:
    case -ENFILE:
    case -ENOMEM:
        return fail(res, 503, "Service Unavailable: out of file descriptors\n");
    default: /* ENOENT, ENOTDIR, EXDEV (outside the root), ELOOP, ENAMETOOLONG... */
        return fail(res, 404, "Not Found\n");
    }
}

static int redirect_dir(flare_req_t *req, flare_res_t *res)
{
    flare_str_t path = flare_req_path(req), query = flare_req_query(req);
    size_t n = path.len + 1 + (query.len > 0 ? query.len + 1 : 0);
    char *loc = flare_req_alloc(req, n);
    if (loc == NULL)
        return FLARE_ENOMEM;
    memcpy(loc, path.ptr, path.len);
    loc[path.len] = '/';
    if (query.len > 0) {
        loc[path.len + 1] = '?';
        memcpy(loc + path.len + 2, query.ptr, query.len);
    }
    int rc = flare_res_header(res, FLARE_STR("Location"), (flare_str_t){ loc, n });
    if (rc != 0)
        return fail(res, 400, "Bad Request: bad path\n");
    return fail(res, 301, "Moved Permanently\n");
}

/* "ETag: <etag>\r\nLast-Modified: <date>\r\n" into out (VHDRS_MAX);
 * returns its length, the etag's in *etag_len (it starts at out + 6). */
static size_t format_vhdrs(char *out, const struct stat *st, size_t *etag_len)
{
    size_t n = 6;
    memcpy(out, "ETag: ", 6);
    out[n++] = '"';
    n += flare__u64tohex(out + n, (uint64_t)st->st_mtim.tv_sec);
    out[n++] = '.';
    n += flare__u64tohex(out + n, (uint64_t)st->st_mtim.tv_nsec);
    out[n++] = '-';
    n += flare__u64tohex(out + n, (uint64_t)st->st_size);
    out[n++] = '"';
    *etag_len = n - 6;
    memcpy(out + n, "\r\nLast-Modified: ", 17);
    n += 17;
    flare__format_http_date(out + n, st->st_mtim.tv_sec);
    n += 29;
    memcpy(out + n, "\r\n", 2);
    return n + 2;
}

/* The request headers a file response depends on, found in one pass. */
typedef struct conds {
    flare_str_t im, ius, inm, ims, range, ir, ae;
} conds_t;

static void scan_conds(flare_req_t *req, conds_t *c)
{
    memset(c, 0, sizeof(*c));
    size_t n = flare_req_header_count(req);
    for (size_t i = 0; i < n; i++) {
        const flare_header_t *h = flare_req_header_at(req, i);
        flare_str_t *slot = NULL;
        switch (h->name.len) {
        case 5:
            slot = flare_str_ieq(h->name, FLARE_STR("range")) ? &c->range : NULL;
            break;
        case 8:
            slot = flare_str_ieq(h->name, FLARE_STR("if-match"))   ? &c->im
                   : flare_str_ieq(h->name, FLARE_STR("if-range")) ? &c->ir
                                                                   : NULL;
            break;
        case 13:
            slot = flare_str_ieq(h->name, FLARE_STR("if-none-match")) ? &c->inm : NULL;
            break;
        case 15:
            slot = flare_str_ieq(h->name, FLARE_STR("accept-encoding")) ? &c->ae : NULL;
            break;
        case 17:
            slot = flare_str_ieq(h->name, FLARE_STR("if-modified-since")) ? &c->ims : NULL;
            break;
        case 19:
            slot = flare_str_ieq(h->name, FLARE_STR("if-unmodified-since")) ? &c->ius : NULL;
            break;
        default:
            break;
        }
        if (slot != NULL && slot->ptr == NULL) /* the first one counts */
            *slot = h->value;
    }
}

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

static int respond(flare_req_t *req, flare_res_t *res, const static_dir_t *sd, file_info_t *fi,
                   const conds_t *c)
{
    int rc = flare__res_header_block(res, fi->vhdrs);
    if (rc == 0)
        rc = flare__res_header_block(res, (flare_str_t){ sd->fixed_hdrs, sd->fixed_len });
    if (rc == 0 && fi->gz)
        rc = flare__res_header_block(res, fi->gz == FLARE_CODING_BR
                                              ? FLARE_STR("Content-Encoding: br\r\n")
                                              : FLARE_STR("Content-Encoding: gzip\r\n"));
    if (rc != 0)
        goto done;

    /* conditionals, RFC 9110 section 13.2.2 */
    time_t when;
    if (c->im.ptr != NULL
            ? !flare__etag_match(c->im, fi->etag, true)
            : (c->ius.ptr != NULL && flare_http_date_parse(c->ius, &when) && fi->mtime > when)) {
        rc = fail(res, 412, "Precondition Failed\n");
        goto done;
    }
    if (c->inm.ptr != NULL
            ? flare__etag_match(c->inm, fi->etag, false)
            : (c->ims.ptr != NULL && flare_http_date_parse(c->ims, &when) && fi->mtime <= when)) {
        rc = flare_res_send(res, 304, FLARE_STR_NULL, FLARE_STR_NULL);
        goto done;
    }

    uint64_t first = 0, len = fi->size;
    int status = 200;
    if (c->range.ptr != NULL && flare_req_method(req) == FLARE_METHOD_GET) {
        bool use = true;
        if (c->ir.ptr != NULL) {
            /* an entity tag ("x" or W/"x"), else a date; "Wed, ..." is a date */
            if (c->ir.len > 0 && (c->ir.ptr[0] == '"' ||
                                  (c->ir.len > 1 && c->ir.ptr[0] == 'W' && c->ir.ptr[1] == '/')))
                use = flare__etag_match(c->ir, fi->etag, true);
            else
                use = flare_http_date_parse(c->ir, &when) && when == fi->mtime;
        }
        int r = use ? flare__range_parse(c->range, fi->size, &first, &len) : FLARE__RANGE_NONE;
        if (r != FLARE__RANGE_NONE) {
            char *cr = flare_req_alloc(req, 96);
            if (cr == NULL) {
                rc = FLARE_ENOMEM;
                goto done;
            }
            size_t cl = sizeof("Content-Range: bytes ") - 1;
            memcpy(cr, "Content-Range: bytes ", cl);
            if (r == FLARE__RANGE_UNSAT) {
                cr[cl++] = '*';
            } else {
                cl += flare__u64toa(cr + cl, first);
                cr[cl++] = '-';
                cl += flare__u64toa(cr + cl, first + len - 1);
            }
            cr[cl++] = '/';
            cl += flare__u64toa(cr + cl, fi->size);
            cr[cl++] = '\r';
            cr[cl++] = '\n';
            if ((rc = flare__res_header_block(res, (flare_str_t){ cr, cl })) != 0)
                goto done;
            if (r == FLARE__RANGE_UNSAT) {
                rc = fail(res, 416, "Range Not Satisfiable\n");
                goto done;
            }
            status = 206;
        }
    }
    if (fi->shared != NULL) {
        /* by reference: send_ref releases at once when it copies instead */
        fi->shared->refs++;
        return flare_res_send_ref(res, status, fi->ctype,
                                  (flare_str_t){ fi->body + first, (size_t)len }, cbody_release,
                                  fi->shared);
    }
    if (fi->body != NULL)
        return flare_res_send(res, status, fi->ctype,
                              (flare_str_t){ fi->body + first, (size_t)len });
    int fd = fi->fd;
    fi->fd = -1;
    rc = flare_res_sendfile(res, status, fi->ctype, fd, first, len);
    if (rc == FLARE_EIO) /* the file changed size under us: nothing was sent */
        return fail(res, 500, "Internal Server Error: file changed while being sent\n");
    return rc;
done:
    if (fi->body == NULL && fi->fd >= 0) {
        close(fi->fd);
        fi->fd = -1;
    }
    return rc;
}

static uint32_t path_hash(const char *p, size_t n)
{
    return (uint32_t)flare__hash(p, n);
}

/* The worker's table (made on first use), or NULL: no caching. */
static static_cache_t *worker_cache(static_dir_t *sd, flare_req_t *req)
{
    if (sd->cache_ms == 0)
        return NULL;
    unsigned id = req->worker->id;
    if (id >= CACHE_MAX_WORKERS)
        return NULL;
    if (sd->cache[id] == NULL) {
        static_cache_t *c = malloc(sizeof(*c));
        if (c == NULL)
            return NULL;
        for (size_t i = 0; i < CACHE_SLOTS; i++) {
            c->e[i].fd = -1;
            c->e[i].body = NULL;
            c->e[i].pathlen = 0;
        }
        sd->cache[id] = c;
    }
    return sd->cache[id];
}

static cache_entry_t *cache_find(static_cache_t *c, const char *rel, size_t rlen, bool slash,
                                 uint8_t gzreq)
{
    uint32_t h = path_hash(rel, rlen);
    for (uint32_t k = 0; k < CACHE_PROBE; k++) {
        cache_entry_t *e = &c->e[(h + k) & (CACHE_SLOTS - 1)];
        if (e->fd >= 0 && e->pathlen == rlen && e->slash == slash && e->gzreq == gzreq &&
            memcmp(e->path, rel, rlen) == 0)
            return e;
    }
    return NULL;
}

/* A free slot for rel, or the least recently opened of its probe run. */
static cache_entry_t *cache_slot(static_cache_t *c, const char *rel, size_t rlen)
{
    uint32_t h = path_hash(rel, rlen);
    cache_entry_t *victim = NULL;
    for (uint32_t k = 0; k < CACHE_PROBE; k++) {
        cache_entry_t *e = &c->e[(h + k) & (CACHE_SLOTS - 1)];
        if (e->fd < 0)
            return e;
        if (victim == NULL || e->opened_ms < victim->opened_ms)
            victim = e;
    }
    entry_clear(victim);
    return victim;
}

static bool same_file(const struct stat *st, const cache_entry_t *e)
{
    return st->st_ino == e->ino && st->st_dev == e->dev && st->st_size == e->size &&
           st->st_mtim.tv_sec == e->mtime.tv_sec && st->st_mtim.tv_nsec == e->mtime.tv_nsec;
}

static void info_from_entry(file_info_t *fi, const cache_entry_t *e)
{
    fi->etag = (flare_str_t){ e->vhdrs + 6, e->etag_len };
    fi->vhdrs = (flare_str_t){ e->vhdrs, e->vhdrs_len };
    fi->ctype = e->ctype;
    fi->mtime = e->mtime.tv_sec;
    fi->size = (uint64_t)e->size;
    fi->body = e->body->data;
    fi->shared = e->body;
    fi->fd = -1;
    fi->gz = e->gz;
}

/* Reads a small regular file into a cache slot, which takes fd. */
static cache_entry_t *cache_fill(static_cache_t *c, const char *key, size_t klen, bool slash,
                                 uint8_t gzreq, uint8_t gz, int fd, const struct stat *st,
                                 flare_str_t ctype, uint64_t now)
{
    cbody_t *cb = malloc(sizeof(*cb) + (st->st_size > 0 ? (size_t)st->st_size : 1));
    if (cb == NULL)
        return NULL;
    cb->refs = 1; /* the entry's */
    if (flare__pread_all(fd, cb->data, 0, (size_t)st->st_size) != 0) {
        free(cb);
        return NULL;
    }
    cache_entry_t *e = cache_slot(c, key, klen);
    e->fd = fd;
    e->pathlen = (uint32_t)klen;
    e->slash = slash;
    e->gzreq = gzreq;
    e->gz = gz;
    memcpy(e->path, key, klen);
    e->opened_ms = now;
    e->checked = 0;
    e->dev = st->st_dev;
    e->ino = st->st_ino;
    e->mtime = st->st_mtim;
    e->size = st->st_size;
    e->ctype = ctype;
    size_t elen;
    e->vhdrs_len = (uint8_t)format_vhdrs(e->vhdrs, st, &elen);
    e->etag_len = (uint8_t)elen;
    e->body = cb;
    return e;
}

/* The directory's own types first, then the built-in table. */
static flare_str_t dir_mime_type(const static_dir_t *sd, flare_str_t name)
{
    flare_str_t ext = file_ext(name);
    for (size_t k = 0; ext.ptr != NULL && k < sd->nmime; k++) {
        if (flare_str_ieq(ext, flare_str(sd->mime[k].ext)))
            return flare_str(sd->mime[k].type);
    }
    return flare_mime_type(name);
}

/* Precompressed siblings: which the client takes, in the order it prefers
 * them (flare_accept_encoding's q-values, ties to br). A malformed
 * Accept-Encoding keeps the lenient gzip-only reading it always had. */
enum { WANT_NONE, WANT_GZ, WANT_BR, WANT_BR_GZ, WANT_GZ_BR };

static uint8_t want_siblings(flare_str_t ae)
{
    const unsigned both = FLARE_CODING_GZIP_BIT | FLARE_CODING_BR_BIT;
    int first = flare_accept_encoding(ae, both);
    if (first < 0)
        return flare__accepts_gzip(ae) ? WANT_GZ : WANT_NONE;
    if (first == FLARE_CODING_BR)
        return flare_accept_encoding(ae, FLARE_CODING_GZIP_BIT) == FLARE_CODING_GZIP ? WANT_BR_GZ
                                                                                     : WANT_BR;
    if (first == FLARE_CODING_GZIP)
        return flare_accept_encoding(ae, FLARE_CODING_BR_BIT) == FLARE_CODING_BR ? WANT_GZ_BR
                                                                                 : WANT_GZ;
    return WANT_NONE;
}

/* The k-th sibling to try (0: none left). */
static int want_sibling(uint8_t want, int k)
{
    static const uint8_t order[][2] = {
        [WANT_NONE] = { 0, 0 },
        [WANT_GZ] = { FLARE_CODING_GZIP, 0 },
        [WANT_BR] = { FLARE_CODING_BR, 0 },
        [WANT_BR_GZ] = { FLARE_CODING_BR, FLARE_CODING_GZIP },
        [WANT_GZ_BR] = { FLARE_CODING_GZIP, FLARE_CODING_BR },
    };
    return order[want][k];
}

static int static_serve(flare_req_t *req, flare_res_t *res, static_dir_t *sd, flare_str_t raw,
                        bool bare_prefix)
{
    if (bare_prefix) /* "/static": the directory itself, without its slash */
        return redirect_dir(req, res);

    /* rel + "/" + index + ".gz" */
    size_t cap = raw.len + 2 + (sd->index != NULL ? strlen(sd->index) : 0) + 4;
    char *rel = flare_req_alloc(req, cap);
    if (rel == NULL)
        return FLARE_ENOMEM;
    size_t rlen;
    bool slash;
    int st = flare__static_path(raw, rel, &rlen, &slash, sd->o.dotfiles);
    if (st == 400)
        return fail(res, 400,
                    "Bad Request: invalid path (bad %-escape, NUL byte or '..' segment)\n");
    if (st != 0)
        return fail(res, 404, "Not Found\n");

    /* want_gz: the precompressed siblings wanted, in the client's order
     * (they are looked for when the path is opened; the cache remembers
     * what was found) */
    conds_t cd;
    scan_conds(req, &cd);
    uint8_t want_gz = sd->o.precompressed && cd.ae.ptr != NULL ? want_siblings(cd.ae) : WANT_NONE;
    file_info_t fi;
    uint64_t now = req->worker->loop.now;
    static_cache_t *cache = rlen < CACHE_PATH_MAX ? worker_cache(sd, req) : NULL;
    size_t klen = rlen; /* the cache key: the request's path, before any index is added */
    if (cache != NULL) {
        cache_entry_t *e = cache_find(cache, rel, klen, slash, want_gz);
        if (e != NULL) {
            /* a change in place is seen by the first request read after
             * it: one fstat per loop turn, not one per request (the turn's
             * requests arrived together) */
            struct stat cur;
            uint64_t turn = req->worker->loop.turn;
            if (now - e->opened_ms < sd->cache_ms &&
                (e->checked == turn || (fstat(e->fd, &cur) == 0 && same_file(&cur, e)))) {
                e->checked = turn;
                info_from_entry(&fi, e);
                return respond(req, res, sd, &fi, &cd);
            }
            entry_clear(e); /* changed, or time to look the path up again */
        }
    }

    int fd = open_beneath(sd->root, rel);
    if (fd < 0)
        return open_error(res, fd);
    struct stat stt;
    if (fstat(fd, &stt) != 0) {
        close(fd);
        return fail(res, 500, "Internal Server Error\n");
    }
    if (S_ISDIR(stt.st_mode)) {
        close(fd);
        if (!slash && rlen > 0)
            return redirect_dir(req, res);
        if (sd->index == NULL)
            return fail(res, 404, "Not Found\n");
        if (rlen > 0)
            rel[rlen++] = '/';
        strcpy(rel + rlen, sd->index);
        rlen += strlen(sd->index);
        fd = open_beneath(sd->root, rel);
        if (fd < 0)
            return open_error(res, fd);
        if (fstat(fd, &stt) != 0) {
            close(fd);
            return fail(res, 500, "Internal Server Error\n");
        }
    } else if (slash && rlen > 0) {
        close(fd); /* "file/": not a directory (ENOTDIR, as the kernel would say) */
        return fail(res, 404, "Not Found\n");
    }
    if (!S_ISREG(stt.st_mode)) {
        close(fd);
        return fail(res, 404, "Not Found\n");
    }
    flare_str_t ctype = dir_mime_type(sd, (flare_str_t){ rel, rlen });

    fi.gz = 0;
    for (int k = 0; k < 2 && want_gz != WANT_NONE && fi.gz == 0; k++) {
        int coding = want_sibling(want_gz, k);
        if (coding == 0)
            break;
        memcpy(rel + rlen, coding == FLARE_CODING_BR ? ".br" : ".gz", 4);
        int gfd = open_beneath(sd->root, rel);
        rel[rlen] = '\0';
        struct stat gst;
        if (gfd >= 0 && fstat(gfd, &gst) == 0 && S_ISREG(gst.st_mode)) {
            close(fd);
            fd = gfd;
            stt = gst;
            fi.gz = (uint8_t)coding;
        } else if (gfd >= 0) {
            close(gfd);
        }
    }

    if (cache != NULL && stt.st_size <= CACHE_FILE_MAX) {
        cache_entry_t *e =
            cache_fill(cache, rel, klen, slash, want_gz, fi.gz, fd, &stt, ctype, now);
        if (e != NULL) {
            info_from_entry(&fi, e);
            return respond(req, res, sd, &fi, &cd);
        }
        /* out of memory or the file changed while read: serve it uncached */
    }

    char *vh = flare_req_alloc(req, VHDRS_MAX);
    if (vh == NULL) {
        close(fd);
        return FLARE_ENOMEM;
    }
    size_t elen;
    fi.vhdrs = (flare_str_t){ vh, format_vhdrs(vh, &stt, &elen) };
    fi.etag = (flare_str_t){ vh + 6, elen };
    fi.ctype = ctype;
    fi.mtime = stt.st_mtim.tv_sec;
    fi.size = (uint64_t)stt.st_size;
    fi.body = NULL;
    fi.shared = NULL;
    fi.fd = fd;
    return respond(req, res, sd, &fi, &cd);
}

static int static_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    /* raw: flare__static_path decodes exactly once ("%2520" is "%20", not " ").
     * The path was routed in normal form, with only unreserved characters
     * decoded (no '%' among them): an encoded ".." arrives as "..", which
     * flare__static_path refuses like a literal one. */
    return static_serve(req, res, ud, flare__req_param_raw(req, "path"), false);
}

static int static_bare_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    return static_serve(req, res, ud, FLARE_STR_NULL, true);
}

static int add_static(flare_app_t *app, flare_group_t *g, const char *prefix, const char *root,
                      const flare_static_opts_t *opts)
{
    if (app == NULL || prefix == NULL || root == NULL)
        return FLARE_EINVAL;
    flare_static_opts_t o;
    if (opts != NULL)
        o = *opts;
    else
        flare_static_opts_init(&o);
    /* zero fields take the defaults */
    if (o.index == NULL)
        o.index = "index.html";
    else if (o.index[0] == '\0')
        o.index = NULL; /* no index file */
    if (o.cache_ms == 0)
        o.cache_ms = 1000;
    if (o.no_cache)
        o.cache_ms = 0; /* internally: 0 is off */
    size_t plen = strlen(prefix);
    while (plen > 0 && prefix[plen - 1] == '/')
        plen--;
    if (plen > 0 && prefix[0] != '/')
        return flare__fail(FLARE_EINVAL, 0, "flare_static: prefix \"%s\" does not start with '/'",
                           prefix);
    if (o.index != NULL && strchr(o.index, '/') != NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_static_opts_t.index: \"%s\" has a '/'", o.index);
    if (o.cache_control != NULL && !flare__field_value_ok(flare_str(o.cache_control)))
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_static_opts_t.cache_control: a control character");
    size_t nmime = 0;
    for (; o.mime != NULL && (o.mime[nmime].ext != NULL || o.mime[nmime].type != NULL); nmime++) {
        const flare_mime_t *m = &o.mime[nmime];
        if (m->ext == NULL || m->type == NULL || m->ext[0] == '\0' || m->type[0] == '\0' ||
            strchr(m->ext, '.') != NULL || strchr(m->ext, '/') != NULL ||
            !flare__field_value_ok(flare_str(m->type)))
            return flare__fail(FLARE_EINVAL, 0,
                               "flare_static_opts_t.mime[%zu]: an empty, dotted or unsafe entry",
                               nmime);
    }

    static_dir_t *sd = calloc(1, sizeof(*sd));
    if (sd == NULL)
        return FLARE_ENOMEM;
    sd->root = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (sd->root < 0) {
        free(sd);
        return FLARE_ENOTFOUND;
    }
    sd->o = o;
    sd->o.mime = NULL;
    sd->cache_ms = o.cache_ms;
    if (nmime > 0) {
        sd->mime = calloc(nmime, sizeof(*sd->mime));
        if (sd->mime == NULL) {
            static_dir_free(sd);
            return FLARE_ENOMEM;
        }
        for (size_t i = 0; i < nmime; i++, sd->nmime++) {
            sd->mime[i].ext = strdup(o.mime[i].ext);
            sd->mime[i].type = strdup(o.mime[i].type);
            if (sd->mime[i].ext == NULL || sd->mime[i].type == NULL) {
                sd->nmime++;
                static_dir_free(sd);
                return FLARE_ENOMEM;
            }
        }
    }
    sd->index = o.index != NULL ? strdup(o.index) : NULL;
    if (o.cache_control != NULL) {
        sd->cache_control = strdup(o.cache_control);
    } else if (o.max_age > 0) {
        char buf[48];
        memcpy(buf, "public, max-age=", 16);
        buf[16 + flare__u64toa(buf + 16, o.max_age)] = '\0';
        sd->cache_control = strdup(buf);
    }
    sd->o.index = sd->index;
    sd->o.cache_control = sd->cache_control;
    size_t cc = sd->cache_control != NULL ? strlen(sd->cache_control) : 0;
    sd->fixed_hdrs = malloc(64 + cc);
    if (sd->fixed_hdrs != NULL) {
        char *p = sd->fixed_hdrs;
        p = stpcpy(p, "Accept-Ranges: bytes\r\n");
        if (sd->cache_control != NULL) {
            p = stpcpy(p, "Cache-Control: ");
            p = stpcpy(p, sd->cache_control);
            p = stpcpy(p, "\r\n");
        }
        if (o.precompressed)
            p = stpcpy(p, "Vary: Accept-Encoding\r\n");
        sd->fixed_len = (size_t)(p - sd->fixed_hdrs);
    }
    if (sd->fixed_hdrs == NULL || (o.index != NULL && sd->index == NULL) ||
        ((o.cache_control != NULL || o.max_age > 0) && sd->cache_control == NULL)) {
        static_dir_free(sd);
        return FLARE_ENOMEM;
    }
    int rc = flare__app_own(app, sd, static_dir_free);
    if (rc != 0)
        return rc;

    char *pat = malloc(plen + sizeof("/{*path}"));
    if (pat == NULL)
        return FLARE_ENOMEM;
    memcpy(pat, prefix, plen);
    strcpy(pat + plen, "/{*path}");
    rc = g != NULL ? flare_group_route(g, FLARE_METHOD_GET, pat, static_handler, sd)
                   : flare_route(app, FLARE_METHOD_GET, pat, static_handler, sd);
    if (rc == 0 && plen > 0) {
        pat[plen] = '\0';
        rc = g != NULL ? flare_group_route(g, FLARE_METHOD_GET, pat, static_bare_handler, sd)
                       : flare_route(app, FLARE_METHOD_GET, pat, static_bare_handler, sd);
    }
    free(pat);
    return rc;
}

int flare_static(flare_app_t *app, const char *prefix, const char *root,
                 const flare_static_opts_t *opts)
{
    return add_static(app, NULL, prefix, root, opts);
}

int flare_group_static(flare_group_t *g, const char *prefix, const char *root,
                       const flare_static_opts_t *opts)
{
    if (g == NULL)
        return FLARE_EINVAL;
    return add_static(g->app, g, prefix, root, opts);
}
