/* Response compression (gzip, brotli) as a middleware.
 *
 * The seam: a middleware's hooks see the status and the headers, never the
 * body. So the before hook of a compressible route puts a filter in front
 * of the protocol: a copy of the exchange's ops table, in the request's
 * arena, whose response calls compress and then call the protocol's own.
 * The copy is the first member of the per-request state, so a filtered op
 * finds its state from ex->ops alone (no field in the exchange); the
 * protocol's other ops (complete, peer...) are copied as they are. A
 * cleanup hook puts the protocol's table back before the arena goes.
 *
 * Memory: a buffered body is compressed in one call with the worker's
 * zlib state (deflateReset, no allocation after the first), its output in
 * the arena; a stream gets its own encoder, freed when the exchange ends. */
#include <brotli/encode.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "flare/compress.h"
#include "app_svc.h"
#include "http/exchange.h"
#include "module.h"

#define DEF_GZIP_LEVEL 6
#define DEF_BR_QUALITY 4
#define DEF_MIN_SIZE   256
#define STREAM_OUT     16384 /* output piece of a streamed write */
#define STREAM_BR_WIN  18    /* 256 KiB brotli window for streams: bounded memory */

/* ---- Accept-Encoding (RFC 9110 §12.5.3) ---- */

/* qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ), in 1/1000 */
static int parse_qvalue(const char *p, size_t n)
{
    if (n == 0 || (p[0] != '0' && p[0] != '1'))
        return -1;
    int q = (p[0] - '0') * 1000;
    if (n == 1)
        return q;
    if (p[1] != '.' || n > 5)
        return -1;
    int scale = 100;
    for (size_t i = 2; i < n; i++, scale /= 10) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        q += (p[i] - '0') * scale;
    }
    return q > 1000 ? -1 : q;
}

static bool ieq(const char *p, size_t n, const char *lit)
{
    return strlen(lit) == n && strncasecmp(p, lit, n) == 0;
}

int flare_accept_encoding(flare_str_t value, unsigned offered)
{
    if (value.ptr == NULL)
        return FLARE_CODING_IDENTITY;
    /* weights in 1/1000, -1: not listed */
    int q_gzip = -1, q_br = -1, q_id = -1, q_star = -1;
    const char *p = value.ptr, *end = value.ptr + value.len;
    while (p < end) {
        while (p < end && (flare__is_ows(*p) || *p == ','))
            p++; /* empty list elements are allowed (RFC 9110 §5.6.1) */
        if (p == end)
            break;
        const char *tok = p;
        while (p < end && flare__is_tchar((unsigned char)*p))
            p++;
        size_t tlen = (size_t)(p - tok);
        if (tlen == 0)
            return FLARE_EINVAL;
        int q = 1000;
        while (p < end && flare__is_ows(*p))
            p++;
        while (p < end && *p == ';') {
            p++;
            while (p < end && flare__is_ows(*p))
                p++;
            if (end - p < 2 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=')
                return FLARE_EINVAL; /* only a weight may follow a coding */
            p += 2;
            const char *v = p;
            while (p < end && !flare__is_ows(*p) && *p != ',' && *p != ';')
                p++;
            if ((q = parse_qvalue(v, (size_t)(p - v))) < 0)
                return FLARE_EINVAL;
            while (p < end && flare__is_ows(*p))
                p++;
        }
        if (p < end && *p != ',')
            return FLARE_EINVAL;
        int *slot = NULL;
        if (ieq(tok, tlen, "gzip") || ieq(tok, tlen, "x-gzip"))
            slot = &q_gzip;
        else if (ieq(tok, tlen, "br"))
            slot = &q_br;
        else if (ieq(tok, tlen, "identity"))
            slot = &q_id;
        else if (tlen == 1 && tok[0] == '*')
            slot = &q_star;
        if (slot != NULL && q > *slot)
            *slot = q;
    }
    if (q_gzip < 0)
        q_gzip = q_star;
    if (q_br < 0)
        q_br = q_star;
    if (!(offered & FLARE_CODING_GZIP_BIT))
        q_gzip = -1;
    if (!(offered & FLARE_CODING_BR_BIT))
        q_br = -1;
    bool id_ok = q_id > 0 || (q_id < 0 && q_star != 0);
    int best = q_br >= q_gzip ? FLARE_CODING_BR : FLARE_CODING_GZIP; /* ties: br */
    int qbest = best == FLARE_CODING_BR ? q_br : q_gzip;
    if (qbest <= 0)
        return id_ok ? FLARE_CODING_IDENTITY : FLARE_CODING_NONE;
    if (q_id > qbest)
        return FLARE_CODING_IDENTITY; /* the client prefers it, explicitly */
    return best;
}

/* ---- configuration ---- */

typedef struct compress {
    int gzip_level, br_quality;
    size_t min_size;
    unsigned offered;
    char **types; /* lowercase, owned; "text/" for "text/ *" */
    size_t ntypes;
    bool default_types;
    unsigned slot; /* the worker state of compress_module */
} compress_t;

static const char *const default_types[] = {
    "text/",
    "application/json",
    "application/javascript",
    "application/xml",
    "application/wasm",
    "image/svg+xml",
    NULL,
};

static void compress_free(void *p)
{
    compress_t *c = p;
    for (size_t i = 0; i < c->ntypes; i++)
        free(c->types[i]);
    free(c->types);
    free(c);
}

static bool type_allowed(const compress_t *c, flare_str_t ctype)
{
    size_t n = 0;
    while (n < ctype.len && ctype.ptr[n] != ';' && !flare__is_ows(ctype.ptr[n]))
        n++;
    if (n == 0)
        return false;
    for (size_t i = 0; i < c->ntypes; i++) {
        const char *t = c->types[i];
        size_t tl = strlen(t);
        if (t[tl - 1] == '/') { /* "type/ *" */
            if (n > tl && strncasecmp(ctype.ptr, t, tl) == 0)
                return true;
        } else if (tl == n && strncasecmp(ctype.ptr, t, n) == 0) {
            return true;
        }
    }
    if (c->default_types) { /* structured syntax suffixes (RFC 6839) */
        if ((n > 5 && strncasecmp(ctype.ptr + n - 5, "+json", 5) == 0) ||
            (n > 4 && strncasecmp(ctype.ptr + n - 4, "+xml", 4) == 0))
            return true;
    }
    return false;
}

/* ---- per-worker state: one zlib stream for buffered bodies ---- */

typedef struct worker_z {
    z_stream z;
    bool ready;
    int level;
} worker_z_t;

typedef struct module_state {
    unsigned slot;
} module_state_t;

static void mod_dispose_worker(flare_worker_t *w, void *state)
{
    module_state_t *ms = state;
    worker_z_t *wz = flare__worker_module_state(w, ms->slot);
    if (wz == NULL)
        return;
    if (wz->ready)
        deflateEnd(&wz->z);
    free(wz);
    flare__worker_module_set(w, ms->slot, NULL);
}

static void mod_free_app(flare_app_t *app, void *state)
{
    (void)app;
    free(state);
}

static const flare_module_t compress_module = {
    .name = "compress",
    .dispose_worker = mod_dispose_worker,
    .free_app = mod_free_app,
};

/* The worker's deflate stream, reset and at `level`; NULL when out of memory. */
static z_stream *worker_deflate(flare_worker_t *w, unsigned slot, int level)
{
    worker_z_t *wz = flare__worker_module_state(w, slot);
    if (wz == NULL) {
        wz = calloc(1, sizeof(*wz));
        if (wz == NULL)
            return NULL;
        flare__worker_module_set(w, slot, wz);
    }
    if (!wz->ready) {
        if (deflateInit2(&wz->z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            return NULL;
        wz->ready = true;
        wz->level = level;
        return &wz->z;
    }
    deflateReset(&wz->z);
    if (wz->level != level) { /* another middleware with another level */
        if (deflateParams(&wz->z, level, Z_DEFAULT_STRATEGY) != Z_OK)
            return NULL;
        wz->level = level;
    }
    return &wz->z;
}

/* ---- the filter ---- */

typedef struct filter {
    flare_proto_ops_t ops; /* first: ex->ops points here */
    const flare_proto_ops_t *inner;
    const compress_t *c;
    struct flare_req *ex;
    int coding; /* of a stream: FLARE_CODING_* */
    z_stream *z;
    BrotliEncoderState *br;
} filter_t;

static filter_t *filter_of(struct flare_req *ex)
{
    return (filter_t *)(void *)(uintptr_t)ex->ops;
}

static flare_res_hdr_t *find_hdr(struct flare_req *ex, const char *lower, size_t n)
{
    for (flare_res_hdr_t *h = ex->res.hdrs; h != NULL; h = h->next) {
        if (flare__ieq_lit(h->name, lower, n))
            return h;
    }
    return NULL;
}
#define FIND_HDR(ex, lit) find_hdr((ex), lit, sizeof(lit) - 1)

static bool has_token(flare_str_t list, const char *lower, size_t n)
{
    for (size_t i = 0; i + n <= list.len; i++) {
        if (strncasecmp(list.ptr + i, lower, n) == 0)
            return true;
    }
    return false;
}

static void add_vary(struct flare_req *ex)
{
    for (flare_res_hdr_t *h = ex->res.hdrs; h != NULL; h = h->next) {
        if (FLARE__IEQ(h->name, "vary") &&
            (has_token(h->value, "accept-encoding", 15) || has_token(h->value, "*", 1)))
            return;
    }
    flare_res_header(&ex->res, FLARE_STR("Vary"), FLARE_STR("Accept-Encoding"));
}

/* What this response gets: a coding, or FLARE_CODING_IDENTITY. Adds Vary.
 * HEAD chooses as GET does (RFC 9110 §9.3.2: the same header fields). */
static int choose(filter_t *f, int status, flare_str_t ctype, size_t len, bool stream)
{
    struct flare_req *ex = f->ex;
    add_vary(ex);
    if (status == 204 || status == 206 || status == 304 || status < 200 ||
        (!stream && len < f->c->min_size) || !type_allowed(f->c, ctype) ||
        FIND_HDR(ex, "content-encoding") != NULL || FIND_HDR(ex, "content-range") != NULL)
        return FLARE_CODING_IDENTITY;
    int coding = flare_accept_encoding(flare_req_header(ex, "Accept-Encoding"), f->c->offered);
    if (coding != FLARE_CODING_GZIP && coding != FLARE_CODING_BR)
        return FLARE_CODING_IDENTITY; /* also malformed, and nothing acceptable: see the header */
    return coding;
}

/* Content-Encoding and the ETag of the coded variant: "x" -> "x-gz",
 * W/"x" -> W/"x-gz". A malformed ETag is dropped: the same tag must not
 * name two representations. */
static int mark_coded(struct flare_req *ex, int coding)
{
    const char *sfx = coding == FLARE_CODING_BR ? "-br" : "-gz";
    flare_res_hdr_t **pp = &ex->res.hdrs;
    for (flare_res_hdr_t *h; (h = *pp) != NULL; pp = &h->next) {
        if (!FLARE__IEQ(h->name, "etag"))
            continue;
        flare_str_t v = h->value;
        if (v.len < 2 || v.ptr[v.len - 1] != '"') {
            *pp = h->next;
            if (ex->res.hdrs_tail == &h->next)
                ex->res.hdrs_tail = pp;
            break;
        }
        char *s = flare__arena_alloc(&ex->arena, v.len + 3);
        if (s == NULL)
            return FLARE_ENOMEM;
        memcpy(s, v.ptr, v.len - 1);
        memcpy(s + v.len - 1, sfx, 3);
        s[v.len + 2] = '"';
        h->value = (flare_str_t){ s, v.len + 3 };
        break;
    }
    return flare_res_header(&ex->res, FLARE_STR("Content-Encoding"),
                            coding == FLARE_CODING_BR ? FLARE_STR("br") : FLARE_STR("gzip"));
}

/* A whole body compressed into the arena; .ptr NULL when it could not be
 * (out of memory, or no smaller than the body: then it goes as it is). */
static flare_str_t compress_whole(filter_t *f, int coding, flare_str_t body)
{
    struct flare_req *ex = f->ex;
    flare_str_t none = FLARE_STR_NULL;
    if (coding == FLARE_CODING_BR) {
        size_t cap = BrotliEncoderMaxCompressedSize(body.len);
        if (cap == 0)
            return none;
        uint8_t *out = flare__arena_alloc(&ex->arena, cap);
        size_t n = cap;
        if (out == NULL ||
            !BrotliEncoderCompress(f->c->br_quality, BROTLI_DEFAULT_WINDOW, BROTLI_MODE_TEXT,
                                   body.len, (const uint8_t *)body.ptr, &n, out) ||
            n >= body.len)
            return none;
        return (flare_str_t){ (const char *)out, n };
    }
    if (body.len > UINT32_MAX)
        return none;
    z_stream *z = worker_deflate(ex->worker, f->c->slot, f->c->gzip_level);
    if (z == NULL)
        return none;
    uLong cap = deflateBound(z, (uLong)body.len);
    unsigned char *out = flare__arena_alloc(&ex->arena, cap);
    if (cap > UINT32_MAX || out == NULL)
        return none;
    z->next_in = (Bytef *)(uintptr_t)body.ptr;
    z->avail_in = (uInt)body.len;
    z->next_out = out;
    z->avail_out = (uInt)cap;
    if (deflate(z, Z_FINISH) != Z_STREAM_END || z->total_out >= body.len)
        return none;
    return (flare_str_t){ (const char *)out, (size_t)z->total_out };
}

/* A HEAD answer to a buffered body is compressed too: its Content-Length
 * is the coded body's, as GET's (the protocol then sends the head only).
 * That costs HEAD what it costs GET; the length cannot be known otherwise. */
static int f_respond(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body)
{
    filter_t *f = filter_of(ex);
    int coding = choose(f, status, ctype, body.len, false);
    if (coding != FLARE_CODING_IDENTITY) {
        flare_str_t z = compress_whole(f, coding, body);
        if (z.ptr != NULL) {
            int rc = mark_coded(ex, coding);
            if (rc != 0)
                return rc;
            body = z;
        }
    }
    return f->inner->respond(ex, status, ctype, body);
}

static int f_respond_ref(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body,
                         const flare_release_t *ref)
{
    filter_t *f = filter_of(ex);
    int coding = choose(f, status, ctype, body.len, false);
    if (coding != FLARE_CODING_IDENTITY) {
        flare_str_t z = compress_whole(f, coding, body);
        if (z.ptr != NULL) {
            int rc = mark_coded(ex, coding);
            ref->fn(ref->ud); /* the compressed copy is what goes out */
            if (rc != 0)
                return rc;
            return f->inner->respond(ex, status, ctype, z);
        }
    }
    return f->inner->respond_ref(ex, status, ctype, body, ref);
}

static void stream_free(void *ud)
{
    filter_t *f = ud;
    if (f->z != NULL) {
        deflateEnd(f->z);
        free(f->z);
        f->z = NULL;
    }
    if (f->br != NULL) {
        BrotliEncoderDestroyInstance(f->br);
        f->br = NULL;
    }
}

static int f_stream_begin(struct flare_req *ex, int status, flare_str_t ctype)
{
    filter_t *f = filter_of(ex);
    int coding = choose(f, status, ctype, 0, true);
    if (coding != FLARE_CODING_IDENTITY && (ex->flags & EX_HEAD_ONLY)) {
        /* HEAD: GET's fields, no encoder (writes never reach the filter) */
        int rc = mark_coded(ex, coding);
        return rc != 0 ? rc : f->inner->stream_begin(ex, status, ctype);
    }
    if (coding == FLARE_CODING_GZIP) {
        z_stream *z = calloc(1, sizeof(*z));
        if (z == NULL)
            return FLARE_ENOMEM;
        if (deflateInit2(z, f->c->gzip_level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
            free(z);
            return FLARE_ENOMEM;
        }
        f->z = z;
    } else if (coding == FLARE_CODING_BR) {
        f->br = BrotliEncoderCreateInstance(NULL, NULL, NULL);
        if (f->br == NULL)
            return FLARE_ENOMEM;
        BrotliEncoderSetParameter(f->br, BROTLI_PARAM_QUALITY, (uint32_t)f->c->br_quality);
        BrotliEncoderSetParameter(f->br, BROTLI_PARAM_LGWIN, STREAM_BR_WIN);
        BrotliEncoderSetParameter(f->br, BROTLI_PARAM_MODE, BROTLI_MODE_TEXT);
    }
    f->coding = coding;
    if (coding != FLARE_CODING_IDENTITY) {
        /* the cleanup frees the encoder on every path, a lost client too */
        int rc = flare_req_on_cleanup(ex, stream_free, f);
        if (rc == 0)
            rc = mark_coded(ex, coding);
        if (rc != 0) {
            stream_free(f);
            f->coding = FLARE_CODING_IDENTITY;
            return rc;
        }
    }
    return f->inner->stream_begin(ex, status, ctype);
}

/* Feeds data (finish: the end) and writes what comes out, flushed. */
static int stream_code(filter_t *f, flare_str_t data, bool finish)
{
    struct flare_req *ex = f->ex;
    unsigned char out[STREAM_OUT];
    if (f->z != NULL) {
        z_stream *z = f->z;
        z->next_in = (Bytef *)(uintptr_t)data.ptr;
        z->avail_in = (uInt)data.len;
        int flush = finish ? Z_FINISH : Z_SYNC_FLUSH;
        for (;;) {
            z->next_out = out;
            z->avail_out = sizeof(out);
            int zr = deflate(z, flush);
            if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR)
                return FLARE_EINVAL;
            size_t n = sizeof(out) - z->avail_out;
            if (n > 0) {
                int rc = f->inner->stream_write(ex, (flare_str_t){ (const char *)out, n });
                if (rc != 0)
                    return rc;
            }
            if (zr == Z_STREAM_END || (!finish && z->avail_out != 0 && z->avail_in == 0))
                return 0;
            if (zr == Z_BUF_ERROR && n == 0)
                return 0; /* nothing more to give */
        }
    }
    BrotliEncoderState *br = f->br;
    const uint8_t *in = (const uint8_t *)data.ptr;
    size_t avail_in = data.len;
    BrotliEncoderOperation op = finish ? BROTLI_OPERATION_FINISH : BROTLI_OPERATION_FLUSH;
    for (;;) {
        uint8_t *next_out = out;
        size_t avail_out = sizeof(out);
        if (!BrotliEncoderCompressStream(br, op, &avail_in, &in, &avail_out, &next_out, NULL))
            return FLARE_EINVAL;
        size_t n = sizeof(out) - avail_out;
        if (n > 0) {
            int rc = f->inner->stream_write(ex, (flare_str_t){ (const char *)out, n });
            if (rc != 0)
                return rc;
        }
        if (avail_in == 0 && !BrotliEncoderHasMoreOutput(br) &&
            (!finish || BrotliEncoderIsFinished(br)))
            return 0;
    }
}

static int f_stream_write(struct flare_req *ex, flare_str_t data)
{
    filter_t *f = filter_of(ex);
    if (f->coding == FLARE_CODING_IDENTITY)
        return f->inner->stream_write(ex, data);
    if (data.len > UINT32_MAX)
        return FLARE_ETOOBIG;
    return stream_code(f, data, false);
}

static int f_stream_end(struct flare_req *ex)
{
    filter_t *f = filter_of(ex);
    if (f->coding != FLARE_CODING_IDENTITY && !(ex->flags & EX_HEAD_ONLY)) {
        int rc = stream_code(f, FLARE_STR(""), true);
        stream_free(f);
        if (rc != 0)
            return rc;
    }
    return f->inner->stream_end(ex);
}

/* Before the arena goes: the protocol's own table again. Registered first,
 * so it runs last (cleanups run in reverse), after stream_free. */
static void filter_remove(void *ud)
{
    filter_t *f = ud;
    if (f->ex->ops == &f->ops)
        f->ex->ops = f->inner;
}

static int compress_before(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)res;
    struct flare_req *ex = req;
    if (ex->ops == NULL || ex->ops->respond == f_respond)
        return 0; /* already filtered (the middleware twice on a route) */
    filter_t *f = flare__arena_alloc(&ex->arena, sizeof(*f));
    if (f == NULL)
        return FLARE_ENOMEM;
    memset(f, 0, sizeof(*f));
    f->inner = ex->ops;
    f->ops = *ex->ops;
    f->ops.respond = f_respond;
    f->ops.respond_ref = f_respond_ref;
    /* respond_file stays the protocol's: files are not compressed here */
    f->ops.stream_begin = f_stream_begin;
    f->ops.stream_write = f_stream_write;
    f->ops.stream_end = f_stream_end;
    f->c = ud;
    f->ex = ex;
    f->coding = FLARE_CODING_IDENTITY;
    int rc = flare_req_on_cleanup(req, filter_remove, f);
    if (rc != 0)
        return rc;
    ex->ops = &f->ops;
    return 0;
}

int flare_compress(flare_app_t *app, const flare_compress_config_t *cfg, flare_middleware_t *out)
{
    if (app == NULL || out == NULL)
        return FLARE_EINVAL;
    memset(out, 0, sizeof(*out));
    flare_compress_config_t zero = { 0 };
    if (cfg == NULL)
        cfg = &zero;
    if (cfg->gzip_level < 0 || cfg->gzip_level > 9)
        return flare__fail(FLARE_EINVAL, 0, "flare_compress_config_t.gzip_level: %d is not 1..9",
                           cfg->gzip_level);
    if (cfg->br_quality < 0 || cfg->br_quality > 11)
        return flare__fail(FLARE_EINVAL, 0, "flare_compress_config_t.br_quality: %d is not 1..11",
                           cfg->br_quality);
    if (cfg->no_gzip && cfg->no_br)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_compress_config_t: no_gzip and no_br: no coding left");
    compress_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return FLARE_ENOMEM;
    int rc = FLARE_ENOMEM;
    c->gzip_level = cfg->gzip_level != 0 ? cfg->gzip_level : DEF_GZIP_LEVEL;
    c->br_quality = cfg->br_quality != 0 ? cfg->br_quality : DEF_BR_QUALITY;
    c->min_size = cfg->min_size != 0 ? cfg->min_size : DEF_MIN_SIZE;
    c->offered =
        (cfg->no_gzip ? 0 : FLARE_CODING_GZIP_BIT) | (cfg->no_br ? 0 : FLARE_CODING_BR_BIT);
    c->default_types = cfg->types == NULL;
    const char *const *types = cfg->types != NULL ? cfg->types : default_types;
    size_t n = 0;
    while (types[n] != NULL)
        n++;
    if (n > 0 && (c->types = calloc(n, sizeof(*c->types))) == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        const char *t = types[i];
        size_t tl = strlen(t);
        const char *slash = strchr(t, '/');
        if (slash == NULL || slash == t || !flare__field_value_ok(flare_str(t)) ||
            (slash[1] != '\0' && !(slash[1] == '*' && slash[2] == '\0') &&
             strchr(slash + 1, '*') != NULL)) {
            rc = flare__fail(FLARE_EINVAL, 0,
                             "flare_compress_config_t.types[%zu]: \"%s\" is not type/subtype or "
                             "type/*",
                             i, t);
            goto fail;
        }
        char *s = strdup(t);
        if (s == NULL)
            goto fail;
        if (tl >= 2 && s[tl - 1] == '*')
            s[tl - 1] = '\0'; /* "text/" stands for "text/ *" */
        c->types[c->ntypes++] = s;
    }
    module_state_t *ms = flare__app_module_state(app, &compress_module);
    if (ms == NULL) {
        if ((ms = calloc(1, sizeof(*ms))) == NULL)
            goto fail;
        if ((rc = flare__app_module(app, &compress_module, ms, &ms->slot)) != 0) {
            free(ms);
            goto fail;
        }
    }
    c->slot = ms->slot;
    if ((rc = flare__app_own(app, c, compress_free)) != 0)
        return rc;
    *out = (flare_middleware_t){ "compress", compress_before, NULL, c };
    return 0;
fail:
    compress_free(c);
    return rc;
}
