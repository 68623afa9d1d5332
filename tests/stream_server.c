/* The server of tests/integ/test_stream_body.py: streaming routes
 * (flare/body.h) that show what the callbacks saw.
 *
 *   stream_server --listen HOST:PORT [--max-body BYTES] [--tmpdir DIR]
 *                 [--body-timeout-ms MS]
 *
 * One worker (the paused requests are a plain list). Routes:
 *   POST /count       bytes and chunks received, answered at the end
 *   POST /small       the same with a route limit of 100 bytes
 *   POST /big         the same with a route limit of 64 MiB
 *   POST /pause       pauses in its first chunk until GET /resume (64 MiB)
 *   POST /early       answers 403 from on_start, before any body
 *   POST /store       multipart into memory / temporary files (threshold
 *                     1 KiB, in --tmpdir), answers the fields it kept
 *   POST /wait        behind a middleware that waits (FLARE_ASYNC) until GET /resume
 *   GET  /resume      resumes every paused request (and lets /wait go on)
 *   GET  /stats       {"ends":[err codes of on_end, in order],"paused":N}
 *   POST /buffered    an ordinary buffered route (the app's max_body) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/body.h"
#include "flare/flare.h"
#include "flare/multipart.h"

#define MAX_PAUSED 64
#define MAX_ENDS   256

static flare_req_t *paused[MAX_PAUSED];
static size_t npaused;
static int ends[MAX_ENDS];
static size_t nends;
static const char *tmpdir;

typedef struct count {
    uint64_t bytes, chunks;
    bool pause_once;
    flare_multipart_stream_t *ms;
} count_t;

static const char tag[] = "count";

static void record_end(int err)
{
    if (nends < MAX_ENDS)
        ends[nends++] = err;
}

static void unpark(flare_req_t *req)
{
    for (size_t i = 0; i < npaused; i++)
        if (paused[i] == req) {
            paused[i] = paused[--npaused];
            return;
        }
}

static int c_start(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)res;
    count_t *c = flare_req_alloc(req, sizeof(*c));
    if (c == NULL)
        return FLARE_ENOMEM;
    memset(c, 0, sizeof(*c));
    c->pause_once = ud != NULL && strcmp(ud, "pause") == 0;
    if (ud != NULL && strcmp(ud, "store") == 0) {
        flare_multipart_opts_t o = { .file_threshold = 1024, .tmpdir = tmpdir };
        flare_multipart_err_t why;
        int rc = flare_multipart_stream_start(req, &o, NULL, NULL, &c->ms, &why);
        if (rc != 0) {
            const char *m = flare_multipart_err_message(why);
            return flare_res_send(res, flare_multipart_err_status(why), FLARE_STR("text/plain"),
                                  (flare_str_t){ m, strlen(m) });
        }
    }
    return flare_req_set_ptr(req, tag, tag, c);
}

static int c_chunk(flare_req_t *req, flare_res_t *res, flare_str_t data, void *ud)
{
    (void)ud;
    count_t *c = flare_req_get_ptr(req, tag, tag);
    c->bytes += data.len;
    c->chunks++;
    if (c->pause_once && npaused < MAX_PAUSED) {
        c->pause_once = false;
        paused[npaused++] = req;
        flare_req_body_pause(req);
    }
    if (c->ms != NULL) {
        int rc = flare_multipart_stream_feed(c->ms, data);
        if (rc != 0) {
            flare_multipart_err_t why = flare_multipart_stream_err(c->ms);
            const char *m = flare_multipart_err_message(why);
            int st = flare_multipart_err_status(why);
            return flare_res_send(res, st != 0 ? st : 500, FLARE_STR("text/plain"),
                                  (flare_str_t){ m, strlen(m) });
        }
    }
    return 0;
}

static int c_end(flare_req_t *req, flare_res_t *res, int err, void *ud)
{
    (void)ud;
    record_end(err);
    unpark(req);
    if (err != 0)
        return 0;
    count_t *c = flare_req_get_ptr(req, tag, tag);
    char *body = flare_req_alloc(req, 4096);
    if (body == NULL)
        return FLARE_ENOMEM;
    int n = snprintf(body, 4096, "{\"bytes\":%llu,\"chunks\":%llu", (unsigned long long)c->bytes,
                     (unsigned long long)c->chunks);
    if (c->ms != NULL) {
        const flare_multipart_form_t *form;
        int rc = flare_multipart_stream_finish(c->ms, &form);
        if (rc != 0) {
            const char *m = flare_multipart_err_message(flare_multipart_stream_err(c->ms));
            return flare_res_send(res, 400, FLARE_STR("text/plain"), (flare_str_t){ m, strlen(m) });
        }
        n += snprintf(body + n, 4096 - (size_t)n, ",\"fields\":[");
        for (size_t i = 0; i < form->count && n < 3900; i++) {
            const flare_multipart_field_t *f = &form->fields[i];
            n += snprintf(body + n, 4096 - (size_t)n, "%s{\"size\":%llu,\"file\":%s,\"mem\":%zu}",
                          i > 0 ? "," : "", (unsigned long long)f->size,
                          f->fd >= 0 ? "true" : "false", f->fd >= 0 ? 0 : f->data.len);
        }
        n += snprintf(body + n, 4096 - (size_t)n, "]");
    }
    n += snprintf(body + n, 4096 - (size_t)n, "}");
    return flare_res_send(res, 200, FLARE_STR("application/json"),
                          (flare_str_t){ body, (size_t)n });
}

static int early(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 403, FLARE_STR("text/plain"), FLARE_STR("no\n"));
}

/* before every request: POST /wait waits (FLARE_ASYNC) until GET /resume */
static flare_req_t *waiting[MAX_PAUSED];
static size_t nwaiting;

static int wait_mw(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)res;
    (void)ud;
    flare_str_t p = flare_req_path(req);
    if (p.len != 5 || memcmp(p.ptr, "/wait", 5) != 0 || nwaiting == MAX_PAUSED)
        return 0;
    waiting[nwaiting++] = req;
    return FLARE_ASYNC;
}

static int resume(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    while (nwaiting > 0)
        flare_next(waiting[--nwaiting]);
    size_t n = npaused;
    while (npaused > 0) {
        flare_req_t *r = paused[--npaused];
        flare_req_body_resume(r);
    }
    char body[32];
    int len = snprintf(body, sizeof(body), "%zu\n", n);
    return flare_res_send(res, 200, FLARE_STR("text/plain"), (flare_str_t){ body, (size_t)len });
}

static int stats(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    char *body = flare_req_alloc(req, 16 * MAX_ENDS + 64);
    if (body == NULL)
        return FLARE_ENOMEM;
    int n = snprintf(body, 64, "{\"ends\":[");
    for (size_t i = 0; i < nends; i++)
        n += snprintf(body + n, 16, "%s%d", i > 0 ? "," : "", ends[i]);
    n += snprintf(body + n, 48, "],\"paused\":%zu}", npaused);
    return flare_res_send(res, 200, FLARE_STR("application/json"),
                          (flare_str_t){ body, (size_t)n });
}

static int buffered(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    char body[32];
    int n = snprintf(body, sizeof(body), "%zu\n", flare_req_body(req).len);
    return flare_res_send(res, 200, FLARE_STR("text/plain"), (flare_str_t){ body, (size_t)n });
}

int main(int argc, char **argv)
{
    const char *listen = NULL;
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--listen") == 0)
            listen = argv[i + 1];
        else if (strcmp(argv[i], "--max-body") == 0)
            cfg.max_body = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--body-timeout-ms") == 0)
            cfg.body_timeout_ms = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--workers") == 0)
            cfg.workers = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--tmpdir") == 0)
            tmpdir = argv[i + 1];
        else {
            fprintf(stderr, "stream_server: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (listen == NULL) {
        fprintf(stderr, "usage: stream_server --listen HOST:PORT [--max-body N] [--tmpdir D]\n");
        return 2;
    }
    flare_app_t *app = flare_app_new(&cfg);
    if (app == NULL)
        return 1;
    const flare_body_route_t any = { c_start, c_chunk, c_end, 0 };
    const flare_body_route_t small = { c_start, c_chunk, c_end, 100 };
    const flare_body_route_t big = { c_start, c_chunk, c_end, 64u << 20 };
    const flare_body_route_t no = { early, c_chunk, c_end, 64u << 20 };
    static char s_pause[] = "pause", s_store[] = "store";
    int rc = 0;
    if ((rc = flare_route_stream(app, FLARE_METHOD_POST, "/count", &any, NULL)) != 0 ||
        (rc = flare_route_stream(app, FLARE_METHOD_POST, "/small", &small, NULL)) != 0 ||
        (rc = flare_route_stream(app, FLARE_METHOD_POST, "/big", &big, NULL)) != 0 ||
        (rc = flare_route_stream(app, FLARE_METHOD_POST, "/pause", &big, s_pause)) != 0 ||
        (rc = flare_route_stream(app, FLARE_METHOD_POST, "/early", &no, NULL)) != 0 ||
        (rc = flare_route_stream(app, FLARE_METHOD_POST, "/store", &big, s_store)) != 0 ||
        (rc = flare_route_stream(app, FLARE_METHOD_POST, "/wait", &big, NULL)) != 0 ||
        (rc = flare_use(app, &(flare_middleware_t){ "wait", wait_mw, NULL, NULL })) != 0 ||
        (rc = flare_get(app, "/resume", resume, NULL)) != 0 ||
        (rc = flare_get(app, "/stats", stats, NULL)) != 0 ||
        (rc = flare_post(app, "/buffered", buffered, NULL)) != 0) {
        fprintf(stderr, "stream_server: route: %s\n", flare_strerror(rc));
        flare_app_free(app);
        return 1;
    }
    fprintf(stderr, "stream_server: listening on %s\n", listen);
    rc = flare_app_run(app, listen);
    if (rc != 0)
        fprintf(stderr, "stream_server: %s: %s\n", flare_strerror(rc), flare_last_error());
    flare_app_free(app);
    return rc != 0;
}
