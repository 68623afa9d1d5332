/* Static files: a directory served under a URL prefix (see flare/static.h).
 * This file registers it and serves a request, step by step: decode and
 * check the path (static_parse.c), the worker's cache (static_cache.c),
 * else open it under the root with its precompressed sibling
 * (static_open.c), its type (static_mime.c), then validators,
 * conditionals and Range (static_respond.c), ending in flare_res_sendfile,
 * which owns the descriptor from there on, or a send of the cached bytes. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mw/chain.h"
#include "core/core.h"
#include "flare/flare.h"
#include "flare/static.h"
#include "app_svc.h"
#include "http/svc.h"
#include "worker.h"
#include "web/static_int.h"
#include "web/static_parse.h"

static void static_dir_free(void *p)
{
    static_dir_t *sd = p;
    if (sd->root >= 0)
        close(sd->root);
    for (size_t w = 0; w < CACHE_MAX_WORKERS; w++) {
        if (sd->cache[w] != NULL)
            flare__static_cache_free(sd->cache[w]);
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

static int open_error(flare_res_t *res, int err)
{
    switch (err) {
    case -EACCES:
    case -EPERM:
        return flare__static_fail(res, 403, "Forbidden\n");
    case -EMFILE:
    case -ENFILE:
    case -ENOMEM:
        return flare__static_fail(res, 503, "Service Unavailable: out of file descriptors\n");
    default: /* ENOENT, ENOTDIR, EXDEV (outside the root), ELOOP, ENAMETOOLONG... */
        return flare__static_fail(res, 404, "Not Found\n");
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
        return flare__static_fail(res, 400, "Bad Request: bad path\n");
    return flare__static_fail(res, 301, "Moved Permanently\n");
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
        return flare__static_fail(
            res, 400, "Bad Request: invalid path (bad %-escape, NUL byte or '..' segment)\n");
    if (st != 0)
        return flare__static_fail(res, 404, "Not Found\n");

    /* want_gz: the precompressed siblings wanted, in the client's order
     * (they are looked for when the path is opened; the cache remembers
     * what was found) */
    conds_t cd;
    flare__static_scan_conds(req, &cd);
    uint8_t want_gz =
        sd->o.precompressed && cd.ae.ptr != NULL ? flare__static_want(cd.ae) : WANT_NONE;
    file_info_t fi;
    flare_worker_t *w = flare_req_worker(req);
    uint64_t now = w->loop.now;
    static_cache_t *cache = rlen < CACHE_PATH_MAX ? flare__static_cache_of(sd, w->id) : NULL;
    size_t klen = rlen; /* the cache key: the request's path, before any index is added */
    if (cache != NULL && flare__static_cache_get(cache, sd->cache_ms, rel, klen, slash, want_gz,
                                                 now, w->loop.turn, &fi))
        return flare__static_respond(req, res, sd, &fi, &cd);

    int fd = flare__static_open(sd->root, rel);
    if (fd < 0)
        return open_error(res, fd);
    struct stat stt;
    if (fstat(fd, &stt) != 0) {
        close(fd);
        return flare__static_fail(res, 500, "Internal Server Error\n");
    }
    if (S_ISDIR(stt.st_mode)) {
        close(fd);
        if (!slash && rlen > 0)
            return redirect_dir(req, res);
        if (sd->index == NULL)
            return flare__static_fail(res, 404, "Not Found\n");
        if (rlen > 0)
            rel[rlen++] = '/';
        strcpy(rel + rlen, sd->index);
        rlen += strlen(sd->index);
        fd = flare__static_open(sd->root, rel);
        if (fd < 0)
            return open_error(res, fd);
        if (fstat(fd, &stt) != 0) {
            close(fd);
            return flare__static_fail(res, 500, "Internal Server Error\n");
        }
    } else if (slash && rlen > 0) {
        close(fd); /* "file/": not a directory (ENOTDIR, as the kernel would say) */
        return flare__static_fail(res, 404, "Not Found\n");
    }
    if (!S_ISREG(stt.st_mode)) {
        close(fd);
        return flare__static_fail(res, 404, "Not Found\n");
    }
    flare_str_t ctype = flare__static_mime(sd, (flare_str_t){ rel, rlen });

    fi.gz = flare__static_sibling(sd->root, rel, rlen, want_gz, &fd, &stt);

    if (cache != NULL && stt.st_size <= CACHE_FILE_MAX) {
        if (flare__static_cache_fill(cache, rel, klen, slash, want_gz, fi.gz, fd, &stt, ctype, now,
                                     &fi))
            return flare__static_respond(req, res, sd, &fi, &cd);
        /* out of memory or the file changed while read: serve it uncached */
    }

    char *vh = flare_req_alloc(req, VHDRS_MAX);
    if (vh == NULL) {
        close(fd);
        return FLARE_ENOMEM;
    }
    size_t elen;
    fi.vhdrs = (flare_str_t){ vh, flare__static_vhdrs(vh, &stt, &elen) };
    fi.etag = (flare_str_t){ vh + 6, elen };
    fi.ctype = ctype;
    fi.mtime = stt.st_mtim.tv_sec;
    fi.size = (uint64_t)stt.st_size;
    fi.body = NULL;
    fi.shared = NULL;
    fi.fd = fd;
    return flare__static_respond(req, res, sd, &fi, &cd);
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
