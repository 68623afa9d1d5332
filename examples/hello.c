/* The example server: the routes the benchmarks and the outside tests use.
 *
 *   hello --listen HOST:PORT --workers N [--header-timeout S] [--idle-timeout S]
 *         [--max-body BYTES] [--static DIR]
 *         [--tls-cert FILE --tls-key FILE [--tls-sni-cert FILE --tls-sni-key FILE]...
 *          [--tls-handshake-timeout S]] [--listen-plain HOST:PORT]...
 *         [--log FILE|-] [--log-level LEVEL] [--log-format text|json]
 *         [--access-log FILE|-] [--access-log-format combined|json] [--request-id on|off]
 *
 * The logging flags set up flare/log.h (docs/logging.md); GET /log writes one
 * info line through flare_req_log.
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

#include <flare/flare.h>
#include <flare/log.h>
#include <flare/middleware.h>
#include <flare/tls.h>
#include <flare/ws.h>

#define MAX_SNI_CERTS       16
#define MAX_PLAIN_LISTENERS 8

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

/* A pass-through middleware: the cost of the pipeline itself. */
static int pass(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)res;
    (void)ud;
    return 0;
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

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s --listen HOST:PORT --workers N [--header-timeout SECONDS]\n"
            "          [--idle-timeout SECONDS] [--max-body BYTES] [--static DIR]\n"
            "          [--tls-cert FILE --tls-key FILE]\n"
            "          [--tls-sni-cert FILE --tls-sni-key FILE]...\n"
            "          [--tls-handshake-timeout SECONDS] [--listen-plain HOST:PORT]...\n"
            "  --tls-cert, --tls-key    the --listen address speaks TLS with this certificate\n"
            "                           chain (PEM, leaf first) and its private key\n"
            "  --tls-sni-cert/-key      one more certificate, chosen by SNI (repeatable; the\n"
            "                           n-th --tls-sni-key goes with the n-th --tls-sni-cert)\n"
            "  --tls-handshake-timeout  seconds from accept to the end of the handshake [10]\n"
            "  --listen-plain           an extra plain HTTP listener (repeatable)\n"
            "  --log FILE|-             error log (\"-\": stderr) [stderr]\n"
            "  --log-level LEVEL        error, warn, info, debug [error]\n"
            "  --log-format text|json   error log lines [text]\n"
            "  --access-log FILE|-      access log [off]\n"
            "  --access-log-format combined|json  [combined]\n"
            "  --request-id on|off      the request-id middleware on every route [off]\n",
            argv0);
}

static int parse_num(const char *s, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    if (s == NULL || *s == '\0' || *s == '-')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > max)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    const char *listen = "127.0.0.1:8080";
    const char *static_dir = NULL;
    flare_tls_config_t tls = { 0 };
    flare_tls_cert_t sni[MAX_SNI_CERTS] = { { 0 } };
    size_t nsni_cert = 0, nsni_key = 0;
    const char *plain[MAX_PLAIN_LISTENERS];
    size_t nplain = 0;
    flare_config_t cfg;
    flare_config_init(&cfg);
    /* logging (flare/log.h): --log, --log-level, --log-format, --access-log,
     * --access-log-format, --request-id */
    flare_log_config_t log_cfg = { 0 };
    bool log_on = false, request_id = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned long long v;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(argv[0]);
            return 0;
        }
        if (val == NULL) {
            fprintf(stderr, "%s: missing value for %s\n", argv[0], arg);
            usage(argv[0]);
            return 2;
        }
        i++;
        if (strcmp(arg, "--listen") == 0) {
            listen = val;
        } else if (strcmp(arg, "--workers") == 0 && parse_num(val, 1024, &v) == 0) {
            cfg.workers = (unsigned)v;
        } else if (strcmp(arg, "--header-timeout") == 0 && parse_num(val, 86400, &v) == 0 &&
                   v > 0) {
            cfg.header_timeout_ms = (unsigned)v * 1000;
        } else if (strcmp(arg, "--idle-timeout") == 0 && parse_num(val, 86400, &v) == 0 && v > 0) {
            cfg.idle_timeout_ms = (unsigned)v * 1000;
        } else if (strcmp(arg, "--max-body") == 0 && parse_num(val, 1ull << 40, &v) == 0) {
            cfg.max_body = (size_t)v;
        } else if (strcmp(arg, "--static") == 0) {
            static_dir = val;
        } else if (strcmp(arg, "--tls-cert") == 0) {
            tls.cert_file = val;
        } else if (strcmp(arg, "--tls-key") == 0) {
            tls.key_file = val;
        } else if (strcmp(arg, "--tls-sni-cert") == 0 && nsni_cert < MAX_SNI_CERTS) {
            sni[nsni_cert++].cert_file = val;
        } else if (strcmp(arg, "--tls-sni-key") == 0 && nsni_key < MAX_SNI_CERTS) {
            sni[nsni_key++].key_file = val;
        } else if (strcmp(arg, "--tls-handshake-timeout") == 0 && parse_num(val, 86400, &v) == 0 &&
                   v > 0) {
            tls.handshake_timeout_ms = (unsigned)v * 1000;
        } else if (strcmp(arg, "--listen-plain") == 0 && nplain < MAX_PLAIN_LISTENERS) {
            plain[nplain++] = val;
        } else if (strcmp(arg, "--log") == 0) { /* logging flags: one block */
            log_cfg.path = val;
            log_on = true;
        } else if (strcmp(arg, "--log-level") == 0 &&
                   flare_log_level_parse(val, &log_cfg.level) == 0) {
            log_on = true;
        } else if (strcmp(arg, "--log-format") == 0 &&
                   (strcmp(val, "text") == 0 || strcmp(val, "json") == 0)) {
            log_cfg.format = strcmp(val, "json") == 0 ? FLARE_LOG_JSON : FLARE_LOG_TEXT;
            log_on = true;
        } else if (strcmp(arg, "--access-log") == 0) {
            log_cfg.access_path = val;
            log_on = true;
        } else if (strcmp(arg, "--access-log-format") == 0 &&
                   (strcmp(val, "combined") == 0 || strcmp(val, "json") == 0)) {
            log_cfg.access_format =
                strcmp(val, "json") == 0 ? FLARE_ACCESS_JSON : FLARE_ACCESS_COMBINED;
        } else if (strcmp(arg, "--request-id") == 0 &&
                   (strcmp(val, "on") == 0 || strcmp(val, "off") == 0)) {
            request_id = strcmp(val, "on") == 0;
        } else {
            fprintf(stderr, "%s: invalid option or value: %s %s\n", argv[0], arg, val);
            usage(argv[0]);
            return 2;
        }
    }

    bool use_tls = tls.cert_file != NULL || tls.key_file != NULL;
    if (use_tls && (tls.cert_file == NULL || tls.key_file == NULL)) {
        fprintf(stderr, "%s: --tls-cert and --tls-key go together\n", argv[0]);
        return 2;
    }
    if (nsni_cert != nsni_key) {
        fprintf(stderr, "%s: %zu --tls-sni-cert but %zu --tls-sni-key\n", argv[0], nsni_cert,
                nsni_key);
        return 2;
    }
    if (!use_tls && (nsni_cert > 0 || tls.handshake_timeout_ms != 0)) {
        fprintf(stderr, "%s: --tls-sni-* and --tls-handshake-timeout need --tls-cert\n", argv[0]);
        return 2;
    }
    tls.more_certs = nsni_cert > 0 ? sni : NULL;
    tls.nmore_certs = nsni_cert;

    flare_app_t *app = flare_app_new(&cfg);
    if (app == NULL) {
        fprintf(stderr, "flare: %s\n", flare_last_error());
        return 1;
    }
    int rc = 0;
    /* logging: the files are opened here, so a bad path fails before serving */
    flare_middleware_t rid;
    if ((log_on && (rc = flare_log_setup(app, &log_cfg)) != 0) ||
        (request_id &&
         ((rc = flare_request_id(app, &rid)) != 0 || (rc = flare_use(app, &rid)) != 0)) ||
        (rc = flare_get(app, "/log", log_line, NULL)) != 0) {
        fprintf(stderr, "flare: logging: %s: %s\n", flare_strerror(rc), flare_last_error());
        flare_app_free(app);
        return 1;
    }
    if ((rc = flare_get(app, "/plaintext", plaintext, NULL)) != 0 ||
        (rc = flare_get(app, "/json", json, NULL)) != 0 ||
        (rc = flare_get(app, "/users/{id}", get_user, NULL)) != 0 ||
        (rc = flare_post(app, "/echo", echo, NULL)) != 0 ||
        (rc = flare_get(app, "/slow", slow, NULL)) != 0 ||
        (rc = flare_ws_route(app, "/ws/echo", &ws_echo_config)) != 0) {
        fprintf(stderr, "flare: route: %s\n", flare_strerror(rc));
        flare_app_free(app);
        return 1;
    }
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
    flare_static_opts_t so;
    flare_static_opts_init(&so);
    so.precompressed = true; /* x.gz beside x, for clients that take gzip */
    if (rc == 0 && static_dir != NULL &&
        (rc = flare_static(app, "/static", static_dir, &so)) != 0) {
        fprintf(stderr, "flare: --static %s: %s\n", static_dir, flare_strerror(rc));
        flare_app_free(app);
        return 1;
    }
    if (rc != 0) {
        fprintf(stderr, "flare: route: %s\n", flare_strerror(rc));
        flare_app_free(app);
        return 1;
    }
    if (use_tls || nplain > 0) {
        /* every listener through flare_app_listen, in this order: --listen
         * is listener 0, then each --listen-plain */
        if ((rc = flare_app_listen(app, listen, use_tls ? &tls : NULL)) != 0) {
            fprintf(stderr, "flare: --listen %s: %s: %s\n", listen, flare_strerror(rc),
                    flare_last_error());
            flare_app_free(app);
            return 1;
        }
        fprintf(stderr, "hello: listening on %s%s\n", listen, use_tls ? " (TLS)" : "");
        for (size_t i = 0; i < nplain; i++) {
            if ((rc = flare_app_listen(app, plain[i], NULL)) != 0) {
                fprintf(stderr, "flare: --listen-plain %s: %s: %s\n", plain[i], flare_strerror(rc),
                        flare_last_error());
                flare_app_free(app);
                return 1;
            }
            fprintf(stderr, "hello: listening on %s\n", plain[i]);
        }
        rc = flare_app_run(app, NULL);
    } else {
        fprintf(stderr, "hello: listening on %s\n", listen);
        rc = flare_app_run(app, listen);
    }
    if (rc != 0)
        fprintf(stderr, "flare: %s: %s\n", flare_strerror(rc), flare_last_error());
    flare_app_free(app);
    return rc != 0;
}
