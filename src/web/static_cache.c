/* The static files' per-worker cache.
 *
 * Small files (up to CACHE_FILE_MAX) are kept per worker, contents and
 * validators, with their descriptor open: a hit costs one fstat (which
 * sees in-place changes at once) instead of openat2 + fstat + pread +
 * close. The path is opened again after cache_ms, so a file replaced by
 * rename or removed is seen within that time. Each worker touches only
 * its own table: no lock. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "web/static_int.h"

#define CACHE_SLOTS 64 /* per worker; a power of two */
#define CACHE_PROBE 4

void flare__static_cbody_release(void *ud)
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

struct static_cache {
    cache_entry_t e[CACHE_SLOTS];
};

static void entry_clear(cache_entry_t *e)
{
    if (e->fd >= 0)
        close(e->fd);
    if (e->body != NULL)
        flare__static_cbody_release(e->body);
    e->fd = -1;
    e->body = NULL;
    e->pathlen = 0;
}

static uint32_t path_hash(const char *p, size_t n)
{
    return (uint32_t)flare__hash(p, n);
}

static_cache_t *flare__static_cache_of(static_dir_t *sd, unsigned id)
{
    if (sd->cache_ms == 0)
        return NULL;
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

bool flare__static_cache_get(static_cache_t *c, uint32_t cache_ms, const char *key, size_t klen,
                             bool slash, uint8_t gzreq, uint64_t now, uint64_t turn,
                             file_info_t *fi)
{
    cache_entry_t *e = cache_find(c, key, klen, slash, gzreq);
    if (e == NULL)
        return false;
    /* a change in place is seen by the first request read after it: one
     * fstat per loop turn, not one per request (the turn's requests arrived
     * together) */
    struct stat cur;
    if (now - e->opened_ms < cache_ms &&
        (e->checked == turn || (fstat(e->fd, &cur) == 0 && same_file(&cur, e)))) {
        e->checked = turn;
        info_from_entry(fi, e);
        return true;
    }
    entry_clear(e); /* changed, or time to look the path up again */
    return false;
}

bool flare__static_cache_fill(static_cache_t *c, const char *key, size_t klen, bool slash,
                              uint8_t gzreq, uint8_t gz, int fd, const struct stat *st,
                              flare_str_t ctype, uint64_t now, file_info_t *fi)
{
    cbody_t *cb = malloc(sizeof(*cb) + (st->st_size > 0 ? (size_t)st->st_size : 1));
    if (cb == NULL)
        return false;
    cb->refs = 1; /* the entry's */
    if (flare__pread_all(fd, cb->data, 0, (size_t)st->st_size) != 0) {
        free(cb);
        return false;
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
    e->vhdrs_len = (uint8_t)flare__static_vhdrs(e->vhdrs, st, &elen);
    e->etag_len = (uint8_t)elen;
    e->body = cb;
    info_from_entry(fi, e);
    return true;
}

void flare__static_cache_free(static_cache_t *c)
{
    for (size_t i = 0; i < CACHE_SLOTS; i++)
        entry_clear(&c->e[i]);
    free(c);
}
