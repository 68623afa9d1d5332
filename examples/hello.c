/* The example server: the routes the benchmarks and the outside tests use.
 *
 *   hello [--config FILE] [--check-config] --listen HOST:PORT --workers N
 *         [--header-timeout S] [--idle-timeout S] [--max-body BYTES] [--max-conn-body BYTES]
 *         [--static DIR]
 *         [--tls-cert FILE --tls-key FILE [--tls-sni-cert FILE --tls-sni-key FILE]...
 *          [--tls-handshake-timeout S]] [--listen-plain HOST:PORT]...
 *         [--log FILE|-] [--log-level error|warn|info|debug] [--access-log FILE|-]
 *         [--log-format text|json] [--access-log-format combined|json] [--request-id on|off]
 *         [--gzip-level N] [--br-quality N] [--compress-min BYTES]
 *
 * Every flag is also a key of the --config YAML file and a FLARE_* variable
 * (flags win, then the environment, then the file: flare/settings.h,
 * docs/config.md); SIGHUP re-reads the file (examples/hello.yaml) and reopens
 * the log files (logrotate). The logging flags set up flare/log.h
 * (docs/logging.md); GET /log writes one info line through flare_req_log.
 *
 * POST /trailer?name=N answers what the handler sees of the field N sent
 * as a request trailer and as a header (flare_req_trailer, flare_req_header).
 *
 * POST /sha256 and POST /upload stream their bodies (flare/body.h): the
 * SHA-256 of the raw body, and of each multipart part, computed as the
 * bytes pass, with --max-body as their only limit.
 *
 * With --static, GET /static/... serves the files of DIR (flare/static.h),
 * with precompressed "<file>.gz" variants for clients that accept gzip.
 *
 * With --tls-cert and --tls-key, the --listen address speaks TLS (flare/tls.h)
 * with every route, /ws/echo and --static over it. Each --tls-sni-cert /
 * --tls-sni-key pair (in the order given) adds a certificate chosen by SNI.
 * --listen-plain adds a plain listener beside it (the 80 + 443 case).
 *
 * Every handler uses the public API exactly as an application would. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <flare/body.h>
#include <flare/flare.h>
#include <flare/log.h>
#include <flare/middleware.h>
#include <flare/settings.h>
#include <flare/sse.h>
#include <flare/metrics.h>
#include <flare/tls.h>
#include <flare/ws.h>

static int plaintext(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("Hello, World!"));
}

static int json(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("application/json"),
                          FLARE_STR("{\"message\":\"Hello, World!\"}"));
}

/* Appends s as a JSON string (quotes included); returns bytes written. */
static size_t json_quote(char *out, flare_str_t s)
{
    static const char hex[] = "0123456789abcdef";
    char *p = out;
    *p++ = '"';
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\') {
            *p++ = '\\';
            *p++ = (char)c;
        } else if (c < 0x20) {
            memcpy(p, "\\u00", 4);
            p[4] = hex[c >> 4];
            p[5] = hex[c & 15];
            p += 6;
        } else {
            *p++ = (char)c;
        }
    }
    *p++ = '"';
    return (size_t)(p - out);
}

static int get_user(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t id = flare_req_param(req, "id");
    char *body = flare_req_alloc(req, id.len * 6 + 16); /* lives until the response is sent */
    if (body == NULL)
        return FLARE_ENOMEM;
    size_t n = 0;
    memcpy(body, "{\"id\":", 6);
    n = 6;
    n += json_quote(body + n, id);
    body[n++] = '}';
    return flare_res_send(res, 200, FLARE_STR("application/json"), (flare_str_t){ body, n });
}

static int echo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t ctype = flare_req_header(req, "Content-Type");
    if (ctype.ptr == NULL)
        ctype = FLARE_STR("application/octet-stream");
    return flare_res_send(res, 200, ctype, flare_req_body(req));
}

/* POST /trailer?name=N: what the handler sees of the field N, as a
 * request trailer (flare_req_trailer) and as a header (flare_req_header),
 * and the body: {"trailer": "v" | null, "header": "v" | null, "body": "..."}.
 * A trailer is never a header (tests/integ/test_trailers.py). */
static void kv_or_null(flare_json_t *j, const char *key, flare_str_t v)
{
    if (v.ptr != NULL)
        flare_json_kv_str(j, key, v);
    else
        flare_json_kv_null(j, key);
}

static int trailer_echo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t name = flare_req_query_param(req, "name");
    char *n = flare_req_alloc(req, name.len + 1);
    flare_json_t *j = flare_res_json(res, 200);
    if (n == NULL || j == NULL)
        return FLARE_ENOMEM;
    memcpy(n, name.ptr != NULL ? name.ptr : "", name.len);
    n[name.len] = '\0';
    flare_json_object_begin(j);
    kv_or_null(j, "trailer", flare_req_trailer(req, n));
    kv_or_null(j, "header", flare_req_header(req, n));
    flare_json_kv_str(j, "body", flare_req_body(req));
    flare_json_object_end(j);
    return flare_json_end(j);
}

static void slow_done(void *ud)
{
    flare_res_t *res = ud;
    /* a no-op when the client has already gone */
    flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("slow"));
}

static int slow(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t ms = flare_req_query_param(req, "ms");
    unsigned long v = 0;
    for (size_t i = 0; i < ms.len; i++) {
        if (ms.ptr[i] < '0' || ms.ptr[i] > '9' || v > 600000)
            return flare_res_send(res, 400, FLARE_STR("text/plain"),
                                  FLARE_STR("ms must be a number of milliseconds (<= 600000)\n"));
        v = v * 10 + (unsigned long)(ms.ptr[i] - '0');
    }
    if (v > 600000)
        return flare_res_send(res, 400, FLARE_STR("text/plain"),
                              FLARE_STR("ms must be a number of milliseconds (<= 600000)\n"));
    int rc = flare_worker_timer(flare_req_worker(req), v, slow_done, res);
    if (rc != 0)
        return rc;
    return FLARE_ASYNC;
}

/* GET /ws/echo: every message back as it came (permessage-deflate offered). */
static void ws_echo(flare_ws_t *ws, flare_ws_opcode_t op, flare_str_t msg)
{
    flare_ws_send(ws, op, msg);
}

static const flare_ws_config_t ws_echo_config = { .on_message = ws_echo, .deflate = true };

/* Readiness check "maintenance": fails while the file named by
 * $HELLO_MAINTENANCE_FILE exists (an operator's switch; the tests' too). */
static bool not_in_maintenance(void *ud)
{
    return access(ud, F_OK) != 0;
}

/* /metrics, /healthz, /readyz, /status (flare/metrics.h). FLARE_METRICS=off
 * leaves them out: the benchmark's baseline. */
static int ops_routes(flare_app_t *app)
{
    const char *env = getenv("FLARE_METRICS");
    if (env != NULL && strcmp(env, "off") == 0)
        return 0;
    int rc;
    if ((rc = flare_metrics_route(app, "/metrics")) != 0 ||
        (rc = flare_health_routes(app, NULL, NULL)) != 0 ||
        (rc = flare_status_route(app, "/status")) != 0)
        return rc;
    const char *maint = getenv("HELLO_MAINTENANCE_FILE");
    if (maint != NULL && *maint != '\0')
        rc = flare_health_check(app, "maintenance", not_in_maintenance, (void *)maint);
    return rc;
}

/* A pass-through middleware: the cost of the pipeline itself. */
static int pass(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)res;
    (void)ud;
    return 0;
}

/* ---- GET /text?kb=N[&stream=MS]: N x 1024 bytes of compressible text
 * (1 <= N <= 10240), behind the compression middleware (flare/compress.h).
 * Line j of KiB k is "kkkkk.jj the quick brown fox jumps over the lazy dog
 * 0123456789\n" (64 bytes, k modulo 100000). With stream=MS the same text
 * goes out as N writes of 1 KiB, MS ms apart (0..10000): a chunked response
 * compressed as produced. With pace=1 instead it goes out as fast as the
 * client reads: written while flare_res_backpressured() is false, resumed
 * from the drain callback (flare_res_on_drain), and a last line
 * "paused P drained D\n" says how often that happened. ---- */
static void text_kib(char *out, unsigned k)
{
    static const char tail[] = " the quick brown fox jumps over the lazy dog 0123456789\n";
    for (unsigned j = 0; j < 16; j++) {
        char *l = out + j * 64;
        unsigned v = k % 100000;
        for (int d = 4; d >= 0; d--, v /= 10)
            l[d] = (char)('0' + v % 10);
        l[5] = '.';
        l[6] = (char)('0' + j / 10);
        l[7] = (char)('0' + j % 10);
        memcpy(l + 8, tail, 56);
    }
}

static int text_num(flare_str_t s, unsigned long max, unsigned long *out)
{
    unsigned long v = 0;
    if (s.len == 0 || s.len > 8)
        return -1;
    for (size_t i = 0; i < s.len; i++) {
        if (s.ptr[i] < '0' || s.ptr[i] > '9')
            return -1;
        v = v * 10 + (unsigned long)(s.ptr[i] - '0');
    }
    if (v > max)
        return -1;
    *out = v;
    return 0;
}

typedef struct text_stream {
    flare_res_t *res;
    flare_worker_t *w;
    unsigned next, n, ms;
    unsigned paused, drained; /* pace=1 */
} text_stream_t;

/* pace=1: the backpressure idiom (flare/common.h) */
static void text_pace(flare_res_t *res, void *ud)
{
    text_stream_t *ts = ud;
    char kib[1024];
    while (ts->next < ts->n && !flare_res_backpressured(res)) {
        text_kib(kib, ts->next++);
        if (flare_res_write(res, (flare_str_t){ kib, sizeof(kib) }) != 0) {
            flare_res_end(res);
            return;
        }
    }
    if (ts->next < ts->n) {
        ts->paused++; /* the drain callback resumes */
        return;
    }
    int n = snprintf(kib, sizeof(kib), "paused %u drained %u\n", ts->paused, ts->drained);
    flare_res_write(res, (flare_str_t){ kib, (size_t)n });
    flare_res_end(res);
}

static void text_drained(flare_res_t *res, void *ud)
{
    text_stream_t *ts = ud;
    ts->drained++;
    text_pace(res, ud);
}

static void text_tick(void *ud)
{
    text_stream_t *ts = ud;
    char kib[1024];
    text_kib(kib, ts->next++);
    if (flare_res_write(ts->res, (flare_str_t){ kib, sizeof(kib) }) != 0 || ts->next == ts->n ||
        flare_worker_timer(ts->w, ts->ms, text_tick, ts) != 0)
        flare_res_end(ts->res); /* also what frees an exchange whose client left */
}

static int text(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    unsigned long kb, ms = 0;
    flare_str_t stream = flare_req_query_param(req, "stream");
    if (text_num(flare_req_query_param(req, "kb"), 10240, &kb) != 0 || kb == 0 ||
        (stream.ptr != NULL && text_num(stream, 10000, &ms) != 0))
        return flare_res_send(res, 400, FLARE_STR("text/plain"),
                              FLARE_STR("kb must be 1..10240 (and stream 0..10000 ms)\n"));
    bool pace = flare_req_query_param(req, "pace").len > 0;
    if (stream.ptr != NULL || pace) {
        text_stream_t *ts = flare_req_alloc(req, sizeof(*ts));
        if (ts == NULL)
            return FLARE_ENOMEM;
        *ts = (text_stream_t){ res, flare_req_worker(req), 0, (unsigned)kb, (unsigned)ms, 0, 0 };
        int rc = flare_res_begin(res, 200, FLARE_STR("text/plain; charset=utf-8"));
        if (rc == 0 && pace)
            rc = flare_res_on_drain(res, 0, text_drained, ts);
        if (rc != 0)
            return rc;
        if (pace)
            text_pace(res, ts); /* as much as fits, the rest from text_drained */
        else
            text_tick(ts); /* the first KiB now, the rest on the timer */
        return 0;
    }
    char *body = flare_req_alloc(req, kb * 1024); /* lives until the response is sent */
    if (body == NULL)
        return FLARE_ENOMEM;
    for (unsigned k = 0; k < kb; k++)
        text_kib(body + (size_t)k * 1024, k);
    return flare_res_send(res, 200, FLARE_STR("text/plain; charset=utf-8"),
                          (flare_str_t){ body, kb * 1024 });
}

/* --gzip-level N (1..9), --br-quality N (1..11), --compress-min BYTES (also
 * keys of the --config file): the middleware's settings */
static const char *request_id_opt; /* --request-id on|off */
static unsigned text_gzip_level = 6, text_br_quality = 4;
static size_t text_compress_min = 256;

static int text_route(flare_app_t *app)
{
    flare_compress_config_t cc = { .gzip_level = (int)text_gzip_level,
                                   .br_quality = (int)text_br_quality,
                                   .min_size = text_compress_min };
    flare_middleware_t cz;
    int rc = flare_compress(app, &cc, &cz);
    if (rc != 0)
        return rc;
    return flare_route_mw(app, FLARE_METHOD_GET, "/text", text, NULL, &cz, 1);
}

/* ---- GET /sse?n=N&ms=M[&hb=H]: N events "data: i" with ids 1..N, M ms
 * apart (the first at once), then the end of the stream; H: heartbeat
 * period in ms [15000]. A reconnecting client's Last-Event-ID k resumes at
 * k+1. (flare/sse.h) ---- */

typedef struct sse_demo {
    flare_sse_t *s;
    flare_timer_t *t;
    unsigned long long next, n, ms;
} sse_demo_t;

/* A decimal number in 0..max from a query value (a view, not NUL-terminated). */
static int sse_num(flare_str_t v, unsigned long long max, unsigned long long *out)
{
    unsigned long long x = 0;
    if (v.ptr == NULL || v.len == 0 || v.len > 20)
        return -1;
    for (size_t i = 0; i < v.len; i++) {
        if (v.ptr[i] < '0' || v.ptr[i] > '9')
            return -1;
        x = x * 10 + (unsigned long long)(v.ptr[i] - '0');
        if (x > max)
            return -1;
    }
    *out = x;
    return 0;
}

static void sse_demo_tick(void *ud)
{
    sse_demo_t *d = ud;
    if (d->next > d->n) {
        flare_sse_end(d->s); /* on_close frees d */
        return;
    }
    char num[24];
    int len = snprintf(num, sizeof(num), "%llu", d->next++);
    flare_sse_event_t ev = { .id = { num, (size_t)len }, .data = { num, (size_t)len } };
    if (flare_sse_send(d->s, &ev) == 0)
        flare_timer_start(d->t, d->next > d->n ? 0 : d->ms);
}

static void sse_demo_closed(flare_sse_t *s, int reason, void *ud)
{
    (void)s;
    (void)reason;
    sse_demo_t *d = ud;
    flare_timer_free(d->t);
    free(d);
}

static int sse_demo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    unsigned long long n, ms, hb = 0, last = 0;
    flare_str_t hbs = flare_req_query_param(req, "hb");
    if (sse_num(flare_req_query_param(req, "n"), 100000, &n) != 0 || n == 0 ||
        sse_num(flare_req_query_param(req, "ms"), 60000, &ms) != 0 ||
        (hbs.ptr != NULL && (sse_num(hbs, 600000, &hb) != 0 || hb < 10)))
        return flare_res_send(res, 400, FLARE_STR("text/plain"),
                              FLARE_STR("n must be 1..100000, ms 0..60000, hb 10..600000\n"));
    /* an id that is not ours (or past the end) is ignored: start over */
    if (sse_num(flare_req_header(req, "Last-Event-ID"), n, &last) != 0)
        last = 0;
    sse_demo_t *d = calloc(1, sizeof(*d));
    if (d == NULL || flare_timer_new(flare_req_worker(req), sse_demo_tick, d, &d->t) != 0) {
        free(d);
        return FLARE_ENOMEM;
    }
    d->next = last + 1;
    d->n = n;
    d->ms = ms;
    flare_sse_config_t cfg = { .heartbeat_ms = (unsigned)hb, .on_close = sse_demo_closed, .ud = d };
    int rc = flare_sse_start(req, res, &cfg, &d->s);
    if (rc != 0) {
        flare_timer_free(d->t);
        free(d);
        if (rc == FLARE_EUNAVAIL)
            return flare_res_send(res, 503, FLARE_STR("text/plain"), FLARE_STR("draining\n"));
        return rc;
    }
    sse_demo_tick(d); /* the first event at once */
    return FLARE_ASYNC;
}

/* GET /log: one line in the error log through flare_req_log (with the
 * request's id), then 200 "logged\n". */
static int log_line(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t q = flare_req_query(req);
    flare_req_log(req, FLARE_LOG_INFO, "hello /log %.*s", (int)q.len, q.ptr);
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("logged\n"));
}

/* ---- POST /sha256 and POST /upload: streamed bodies (flare/body.h) ----
 *
 * Both hash what passes and store nothing: memory stays flat whatever the
 * size. Their body limit is the app's max_body (--max-body): the route
 * limit 0 means "the app's". */

static const char sha_tag[] = "sha256";

typedef struct sha_state {
    EVP_MD_CTX *md;
    uint64_t len;
} sha_state_t;

static void sha_free(void *ud)
{
    EVP_MD_CTX_free(((sha_state_t *)ud)->md);
}

static sha_state_t *sha_new(flare_req_t *req)
{
    sha_state_t *st = flare_req_alloc(req, sizeof(*st));
    if (st == NULL)
        return NULL;
    st->len = 0;
    st->md = EVP_MD_CTX_new();
    if (st->md == NULL || EVP_DigestInit_ex(st->md, EVP_sha256(), NULL) != 1 ||
        flare_req_on_cleanup(req, sha_free, st) != 0) {
        EVP_MD_CTX_free(st->md);
        return NULL;
    }
    return st;
}

/* the digest as 64 hex digits (out: 65 bytes) */
static int sha_hex(sha_state_t *st, char *out)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    if (EVP_DigestFinal_ex(st->md, d, &n) != 1 || n != 32)
        return FLARE_EIO;
    for (unsigned i = 0; i < n; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[64] = '\0';
    return 0;
}

static int sha_start(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)res;
    (void)ud;
    sha_state_t *st = sha_new(req);
    return st != NULL ? flare_req_set_ptr(req, sha_tag, sha_tag, st) : FLARE_ENOMEM;
}

static int sha_chunk(flare_req_t *req, flare_res_t *res, flare_str_t data, void *ud)
{
    (void)res;
    (void)ud;
    sha_state_t *st = flare_req_get_ptr(req, sha_tag, sha_tag);
    st->len += data.len;
    return EVP_DigestUpdate(st->md, data.ptr, data.len) == 1 ? 0 : FLARE_EIO;
}

static int sha_end(flare_req_t *req, flare_res_t *res, int err, void *ud)
{
    (void)ud;
    if (err != 0)
        return 0; /* the server answers (or the client is gone) */
    sha_state_t *st = flare_req_get_ptr(req, sha_tag, sha_tag);
    char hex[65];
    int rc = sha_hex(st, hex);
    if (rc != 0)
        return rc;
    /* ?trailer=N: also the request trailer N, readable once the body
     * has ended (flare_req_trailer) */
    flare_str_t tn = flare_req_query_param(req, "trailer");
    if (tn.ptr != NULL) {
        char *name = flare_req_alloc(req, tn.len + 1);
        flare_json_t *j = flare_res_json(res, 200);
        if (name == NULL || j == NULL)
            return FLARE_ENOMEM;
        memcpy(name, tn.ptr, tn.len);
        name[tn.len] = '\0';
        flare_json_object_begin(j);
        flare_json_kv_cstr(j, "sha256", hex);
        flare_json_kv_int(j, "length", (int64_t)st->len);
        kv_or_null(j, "trailer", flare_req_trailer(req, name));
        flare_json_object_end(j);
        return flare_json_end(j);
    }
    char *body = flare_req_alloc(req, 128);
    if (body == NULL)
        return FLARE_ENOMEM;
    int n = snprintf(body, 128, "{\"sha256\":\"%s\",\"length\":%llu}", hex,
                     (unsigned long long)st->len);
    return flare_res_send(res, 200, FLARE_STR("application/json"),
                          (flare_str_t){ body, (size_t)n });
}

static const char upload_tag[] = "upload";

typedef struct upload_state {
    flare_multipart_stream_t *ms;
    sha_state_t *part; /* the current part's hash */
    flare_json_t json; /* the answer, built as parts end */
    flare_req_t *req;
} upload_state_t;

static void *req_alloc(void *ctx, size_t n)
{
    return flare_req_alloc(ctx, n);
}

static int up_part(void *ud, const flare_multipart_field_t *f)
{
    (void)f;
    upload_state_t *u = ud;
    u->part = sha_new(u->req);
    return u->part != NULL ? 0 : FLARE_ENOMEM;
}

static int up_data(void *ud, const flare_multipart_field_t *f, flare_str_t data)
{
    (void)f;
    upload_state_t *u = ud;
    return EVP_DigestUpdate(u->part->md, data.ptr, data.len) == 1 ? 0 : FLARE_EIO;
}

static int up_part_end(void *ud, const flare_multipart_field_t *f)
{
    upload_state_t *u = ud;
    char hex[65];
    int rc = sha_hex(u->part, hex);
    if (rc != 0)
        return rc;
    flare_json_t *w = &u->json;
    flare_json_object_begin(w);
    flare_json_kv_str(w, "name", f->name);
    if (f->filename.ptr != NULL)
        flare_json_kv_str(w, "filename", f->filename);
    else
        flare_json_kv_null(w, "filename");
    if (f->content_type.ptr != NULL)
        flare_json_kv_str(w, "content_type", f->content_type);
    else
        flare_json_kv_null(w, "content_type");
    flare_json_kv_int(w, "size", (int64_t)f->size);
    flare_json_kv_cstr(w, "sha256", hex);
    return flare_json_object_end(w);
}

static const flare_multipart_sink_t upload_sink = { up_part, up_data, up_part_end, true };

static int upload_refuse(flare_res_t *res, flare_multipart_err_t why, int rc)
{
    int status = flare_multipart_err_status(why);
    if (status == 0)
        return rc; /* not the client's fault: a 500 */
    const char *msg = flare_multipart_err_message(why);
    return flare_res_send(res, status, FLARE_STR("text/plain; charset=utf-8"),
                          (flare_str_t){ msg, strlen(msg) });
}

static int upload_start(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    upload_state_t *u = flare_req_alloc(req, sizeof(*u));
    if (u == NULL)
        return FLARE_ENOMEM;
    u->req = req;
    u->part = NULL;
    flare_json_init_alloc(&u->json, NULL, 0, req_alloc, req);
    flare_json_array_begin(&u->json);
    flare_multipart_err_t why;
    int rc = flare_multipart_stream_start(req, NULL, &upload_sink, u, &u->ms, &why);
    if (rc != 0)
        return upload_refuse(res, why, rc);
    return flare_req_set_ptr(req, upload_tag, upload_tag, u);
}

static int upload_chunk(flare_req_t *req, flare_res_t *res, flare_str_t data, void *ud)
{
    (void)ud;
    upload_state_t *u = flare_req_get_ptr(req, upload_tag, upload_tag);
    int rc = flare_multipart_stream_feed(u->ms, data);
    return rc != 0 ? upload_refuse(res, flare_multipart_stream_err(u->ms), rc) : 0;
}

static int upload_end(flare_req_t *req, flare_res_t *res, int err, void *ud)
{
    (void)ud;
    if (err != 0)
        return 0;
    upload_state_t *u = flare_req_get_ptr(req, upload_tag, upload_tag);
    int rc = flare_multipart_stream_finish(u->ms, NULL);
    if (rc != 0)
        return upload_refuse(res, flare_multipart_stream_err(u->ms), rc);
    flare_json_array_end(&u->json);
    if ((rc = flare_json_finish(&u->json)) != 0)
        return rc;
    return flare_res_send(res, 200, FLARE_STR("application/json"), flare_json_output(&u->json));
}

static int add_upload_routes(flare_app_t *app)
{
    static const flare_body_route_t sha = { sha_start, sha_chunk, sha_end, 0 };
    static const flare_body_route_t upload = { upload_start, upload_chunk, upload_end, 0 };
    int rc = flare_route_stream(app, FLARE_METHOD_POST, "/sha256", &sha, NULL);
    return rc != 0 ? rc : flare_route_stream(app, FLARE_METHOD_POST, "/upload", &upload, NULL);
}

/* Every route of the example, in one place (the contract the tests and the
 * benchmarks use). */
static int add_routes(flare_app_t *app, const flare_settings_t *s)
{
    int rc;
    flare_ws_config_t ws = ws_echo_config;
    flare_settings_ws_config(s, &ws); /* --ws-origin */
    if ((rc = flare_get(app, "/plaintext", plaintext, NULL)) != 0 ||
        (rc = flare_get(app, "/json", json, NULL)) != 0 ||
        (rc = flare_get(app, "/users/{id}", get_user, NULL)) != 0 ||
        (rc = flare_post(app, "/echo", echo, NULL)) != 0 ||
        (rc = flare_post(app, "/trailer", trailer_echo, NULL)) != 0 ||
        (rc = flare_get(app, "/slow", slow, NULL)) != 0 || (rc = text_route(app)) != 0 ||
        (rc = flare_get(app, "/log", log_line, NULL)) != 0 ||
        (rc = flare_ws_route(app, "/ws/echo", &ws)) != 0)
        return rc;
    /* /mw/plaintext: the same answer behind ten synchronous middlewares */
    flare_group_t *mw = flare_group_new(app, "/mw");
    static const char *names[10] = { "mw0", "mw1", "mw2", "mw3", "mw4",
                                     "mw5", "mw6", "mw7", "mw8", "mw9" };
    for (int i = 0; i < 10 && rc == 0; i++) {
        flare_middleware_t m = { names[i], pass, NULL, NULL };
        rc = mw != NULL ? flare_group_use(mw, &m) : FLARE_ENOMEM;
    }
    if (rc == 0)
        rc = flare_group_route(mw, FLARE_METHOD_GET, "/plaintext", plaintext, NULL);
    /* GET /sse: server-sent events */
    if (rc == 0)
        rc = flare_sse_route(app, "/sse", sse_demo, NULL);
    /* /metrics, /healthz, /readyz, /status */
    if (rc == 0)
        rc = ops_routes(app);
    /* POST /sha256, POST /upload: streamed bodies */
    if (rc == 0)
        rc = add_upload_routes(app);
    return rc;
}

int main(int argc, char **argv)
{
    /* --config FILE, FLARE_*, then the flags (flare/settings.h, docs/config.md):
     * --listen, --workers, the timeouts and limits, --static, --tls-cert/--tls-key,
     * --tls-sni-cert/--tls-sni-key, --tls-handshake-timeout, --listen-plain, --log,
     * --log-level, --access-log, --check-config... (--help lists them) */
    const flare_settings_option_t extra[] = {
        { "gzip-level", FLARE_SETTING_UINT, "gzip level of GET /text [6]", &text_gzip_level, 1, 9 },
        { "br-quality", FLARE_SETTING_UINT, "brotli quality of GET /text [4]", &text_br_quality, 1,
          11 },
        { "compress-min", FLARE_SETTING_SIZE, "smallest body GET /text compresses [256]",
          &text_compress_min, 0, 1u << 30 },
        { "request-id", FLARE_SETTING_STRING,
          "on|off: the request-id middleware on every route [off]", &request_id_opt, 0, 0 },
    };
    flare_settings_t s;
    int code;
    if (flare_settings_main(&s, argc, argv, extra, sizeof(extra) / sizeof(extra[0]), &code) != 0)
        return code;
    bool request_id = request_id_opt != NULL && strcmp(request_id_opt, "on") == 0;
    if (request_id_opt != NULL && !request_id && strcmp(request_id_opt, "off") != 0) {
        fprintf(stderr, "hello: --request-id: expected on or off, got \"%s\"\n", request_id_opt);
        flare_settings_free(&s);
        return 2;
    }
    /* the app with the logs (opened here: a bad path fails before serving),
     * every listener through flare_app_listen in order (--listen is
     * listener 0, then each --listen-plain), --static under /static with
     * precompressed "x.gz" beside x for clients that take gzip, SIGHUP */
    flare_static_opts_t so;
    flare_static_opts_init(&so);
    so.precompressed = true;
    flare_app_t *app;
    int rc = flare_settings_app_new(&s, &(flare_settings_setup_opts_t){ .static_opts = &so }, &app);
    if (rc != 0) {
        fprintf(stderr, "flare: %s\n", flare_settings_error(&s));
        flare_settings_free(&s);
        return 1;
    }
    flare_middleware_t rid;
    if (request_id &&
        ((rc = flare_request_id(app, &rid)) != 0 || (rc = flare_use(app, &rid)) != 0)) {
        fprintf(stderr, "flare: request-id: %s\n", flare_strerror(rc));
        goto out;
    }
    if ((rc = add_routes(app, &s)) != 0) {
        fprintf(stderr, "flare: route: %s\n", flare_strerror(rc));
        goto out;
    }
    for (size_t i = 0; i < s.nlisteners; i++)
        fprintf(stderr, "hello: listening on %s%s\n", s.listeners[i].addr,
                s.listeners[i].tls_cert != NULL ? " (TLS)" : "");
    if (s.admin_listen != NULL)
        fprintf(stderr, "hello: /metrics, /status, /healthz, /readyz on %s only\n", s.admin_listen);
    rc = flare_app_run(app, NULL);
    if (rc != 0)
        fprintf(stderr, "flare: %s: %s\n", flare_strerror(rc), flare_last_error());
out:
    flare_app_free(app);
    flare_settings_free(&s);
    return rc != 0;
}
