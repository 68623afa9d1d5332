/* flare/test.h: the app on a thread of its own, and a blocking client on
 * the test's thread that speaks HTTP/1.1 (one keep-alive connection),
 * WebSocket and server-sent events to it over loopback.
 *
 * The client reads answers with the same pure parsers the server and the
 * HTTP client trust (http1/resp_head.h for heads, the chunked decoder,
 * ws/frame.h for frames), so a test sees what a strict client would: an
 * answer with ambiguous framing is an error here too. */
#include "flare/test.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/core.h"
#include "http1/parser.h"
#include "http1/resp_head.h"
#include "ws/frame.h"
#include "ws/handshake.h"

#define TEST_MAX_FIELDS 128
#define TEST_MAX_BODY   (256u << 20) /* an answer larger than this is a test bug */
#define TEST_START_MS   10000
#define TEST_DEFAULT_MS 5000

static const flare_http_limits_t resp_limits = { .max_request_line = 8192,
                                                 .max_head = 65536,
                                                 .max_headers = TEST_MAX_FIELDS };

/* A text built piece by piece: core/buf.h's buffer, NUL-terminated after
 * every append; the first failure sticks, so a builder checks once. */
typedef struct sbuf {
    flare_buf_t b;
    bool oom;
} sbuf_t;

static void sb_add(sbuf_t *sb, const void *p, size_t n)
{
    if (!sb->oom && flare__buf_append_cstr(&sb->b, p, n) != 0)
        sb->oom = true;
}

/* One connection's bytes received and not yet consumed. */
typedef struct conn {
    int fd; /* -1: none */
    flare_buf_t in;
    bool reused; /* an answer was read on it: a close before the next one is a stale connection */
} conn_t;

struct flare_test {
    flare_app_t *app;
    pthread_t thread;
    _Atomic bool ran; /* flare_app_run returned */
    int run_rc;
    char run_err[256];
    int run_errno;
    char *listen;
    int port;
    unsigned timeout_ms;
    conn_t c;
    bool no_cookies;
    char *cookies; /* "a=1; b=2", NULL when none */
    char err[256];
};

struct flare_test_ws {
    flare_test_t *t;
    conn_t c;
    flare_ws_parser_t p;
    int close_code;
    bool closed;
};

struct flare_test_sse {
    flare_test_t *t;
    conn_t c;
    flare_chunked_t ch; /* the stream's body is chunked: decoded into text */
    bool chunked;
    sbuf_t text; /* decoded, not yet split into events */
    char *id, *event, *data;
    bool ended;
};

static int test_fail(flare_test_t *t, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int test_fail(flare_test_t *t, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof(t->err), fmt, ap);
    va_end(ap);
    return code;
}

/* ---- the app's thread ---- */

static void *run_thread(void *arg)
{
    flare_test_t *t = arg;
    t->run_rc = flare_app_run(t->app, t->listen);
    if (t->run_rc != 0) {
        snprintf(t->run_err, sizeof(t->run_err), "%s", flare_last_error());
        t->run_errno = flare_last_errno();
    }
    atomic_store(&t->ran, true);
    return NULL;
}

static void noop(void *ud)
{
    (void)ud;
}

int flare_test_start(flare_app_t *app, const flare_test_opts_t *opts, flare_test_t **out)
{
    *out = NULL;
    if (app == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_test_start: app is NULL");
    flare_test_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return FLARE_ENOMEM;
    t->app = app;
    t->c.fd = -1;
    t->timeout_ms = opts != NULL && opts->timeout_ms > 0 ? opts->timeout_ms : TEST_DEFAULT_MS;
    t->no_cookies = opts != NULL && opts->no_cookies;
    t->listen = strdup(opts != NULL && opts->listen != NULL ? opts->listen : "127.0.0.1:0");
    if (t->listen == NULL) {
        free(t);
        return FLARE_ENOMEM;
    }
    if (pthread_create(&t->thread, NULL, run_thread, t) != 0) {
        free(t->listen);
        free(t);
        return flare__fail(FLARE_ETHREAD, errno, "flare_test_start: pthread_create");
    }
    /* up once a task can be posted to its workers (their sockets listen by then) */
    uint64_t deadline = flare__now_ms() + TEST_START_MS;
    for (;;) {
        if (atomic_load(&t->ran)) {
            pthread_join(t->thread, NULL);
            int rc = t->run_rc != 0 ? t->run_rc : FLARE_ESTATE;
            flare__fail(rc, t->run_errno, "flare_test_start: flare_app_run: %s", t->run_err);
            free(t->listen);
            free(t);
            return rc;
        }
        if (flare_app_post(app, 0, noop, NULL) == 0)
            break;
        if (flare__now_ms() > deadline) {
            flare_app_stop(app);
            pthread_join(t->thread, NULL);
            free(t->listen);
            free(t);
            return flare__fail(FLARE_ETIMEDOUT, 0, "flare_test_start: the app did not start");
        }
        usleep(1000);
    }
    t->port = flare_app_port(app);
    *out = t;
    return 0;
}

static void conn_close(conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->in.len = 0;
    c->reused = false;
}

static void conn_free(conn_t *c)
{
    conn_close(c);
    flare__buf_free(&c->in);
}

int flare_test_stop(flare_test_t *t)
{
    if (t == NULL)
        return 0;
    conn_free(&t->c);
    flare_app_stop(t->app);
    pthread_join(t->thread, NULL);
    int rc = t->run_rc;
    free(t->cookies);
    free(t->listen);
    free(t);
    return rc;
}

int flare_test_port(const flare_test_t *t)
{
    return t->port;
}

const char *flare_test_error(const flare_test_t *t)
{
    return t->err;
}

/* ---- bytes on a socket, with the call's deadline ---- */

static int wait_fd(flare_test_t *t, int fd, short events, uint64_t deadline)
{
    for (;;) {
        uint64_t now = flare__now_ms();
        if (now >= deadline)
            return test_fail(t, FLARE_ETIMEDOUT, "no answer within %u ms", t->timeout_ms);
        struct pollfd pfd = { .fd = fd, .events = events };
        int n = poll(&pfd, 1, (int)(deadline - now));
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return test_fail(t, FLARE_ESYS, "poll: %s", strerror(errno));
    }
}

static int conn_open(flare_test_t *t, conn_t *c, uint64_t deadline)
{
    conn_close(c);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return test_fail(t, FLARE_ESYS, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)t->port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return test_fail(t, FLARE_ESYS, "connect to port %d: %s", t->port, strerror(e));
    }
    int rc = wait_fd(t, fd, POLLOUT, deadline);
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    if (rc == 0 && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0))
        rc = test_fail(t, FLARE_ESYS, "connect to port %d: %s", t->port, strerror(soerr));
    if (rc != 0) {
        close(fd);
        return rc;
    }
    c->fd = fd;
    c->in.len = 0;
    c->reused = false;
    return 0;
}

static int send_all(flare_test_t *t, conn_t *c, const void *data, size_t len, uint64_t deadline)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            int rc = wait_fd(t, c->fd, POLLOUT, deadline);
            if (rc != 0)
                return rc;
            continue;
        }
        if (errno == EPIPE || errno == ECONNRESET)
            return test_fail(t, FLARE_ECLOSED, "the app closed the connection");
        return test_fail(t, FLARE_ESYS, "send: %s", strerror(errno));
    }
    return 0;
}

/* Reads more into c->in.data: 0 (bytes added), FLARE_ECLOSED at the end, or
 * a failure. */
static int fill(flare_test_t *t, conn_t *c, uint64_t deadline)
{
    if (c->in.len > TEST_MAX_BODY + 65536)
        return test_fail(t, FLARE_ETOOBIG, "the answer is larger than %u bytes", TEST_MAX_BODY);
    if (flare__buf_reserve(&c->in, 4096) != 0)
        return FLARE_ENOMEM;
    for (;;) {
        ssize_t n = recv(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len, 0);
        if (n > 0) {
            c->in.len += (size_t)n;
            return 0;
        }
        if (n == 0)
            return test_fail(t, FLARE_ECLOSED, "the app closed the connection");
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN) {
            int rc = wait_fd(t, c->fd, POLLIN, deadline);
            if (rc != 0)
                return rc;
            continue;
        }
        if (errno == ECONNRESET)
            return test_fail(t, FLARE_ECLOSED, "the app reset the connection");
        return test_fail(t, FLARE_ESYS, "recv: %s", strerror(errno));
    }
}

static void consume(conn_t *c, size_t n)
{
    flare__buf_consume(&c->in, n);
}

/* ---- requests ---- */

static void sb_str(sbuf_t *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

const char *flare_test_cookies(const flare_test_t *t)
{
    return t->cookies != NULL ? t->cookies : "";
}

void flare_test_clear_cookies(flare_test_t *t)
{
    free(t->cookies);
    t->cookies = NULL;
}

/* Set-Cookie: name=value[; attributes]: kept, replaced, or removed
 * (Max-Age=0 or less, or an empty value). */
static int cookie_set(flare_test_t *t, flare_str_t v)
{
    const char *semi = memchr(v.ptr, ';', v.len);
    size_t pl = semi ? (size_t)(semi - v.ptr) : v.len;
    const char *eq = memchr(v.ptr, '=', pl);
    if (eq == NULL || eq == v.ptr)
        return 0; /* not a cookie: ignored, as a browser does */
    size_t nl = (size_t)(eq - v.ptr);
    size_t vl = pl - nl - 1;
    bool remove = vl == 0;
    for (const char *a = semi; a != NULL && !remove;) {
        a++;
        while (a < v.ptr + v.len && *a == ' ')
            a++;
        size_t left = (size_t)(v.ptr + v.len - a);
        if (left >= 8 && strncasecmp(a, "max-age=", 8) == 0 && left > 8 &&
            (a[8] == '0' || a[8] == '-'))
            remove = true;
        a = memchr(a, ';', left);
    }
    /* the jar without this name */
    sbuf_t out = { 0 };
    const char *j = t->cookies;
    while (j != NULL && *j != '\0') {
        const char *end = strstr(j, "; ");
        size_t len = end ? (size_t)(end - j) : strlen(j);
        if (!(len > nl && j[nl] == '=' && memcmp(j, v.ptr, nl) == 0)) {
            if (out.b.len > 0)
                sb_str(&out, "; ");
            sb_add(&out, j, len);
        }
        j = end ? end + 2 : NULL;
    }
    if (!remove) {
        if (out.b.len > 0)
            sb_str(&out, "; ");
        sb_add(&out, v.ptr, pl);
    }
    if (out.oom) {
        free(out.b.data);
        return FLARE_ENOMEM;
    }
    free(t->cookies);
    t->cookies = out.b.data;
    return 0;
}

/* A request line's and fields' text may not end the line early. */
static bool line_ok(const char *s)
{
    for (; *s; s++) {
        if (*s == '\r' || *s == '\n')
            return false;
    }
    return true;
}

static int build_head(flare_test_t *t, sbuf_t *b, const char *method, const char *path,
                      const char *const *headers, bool has_body, size_t body_len, bool close)
{
    const char *cookies = t->no_cookies ? NULL : t->cookies;
    if (path == NULL || (path[0] != '/' && strcmp(path, "*") != 0) || !line_ok(path) ||
        strchr(path, ' ') != NULL)
        return test_fail(t, FLARE_EINVAL, "bad path \"%s\"", path ? path : "(null)");
    if (!line_ok(method) || strchr(method, ' ') != NULL || method[0] == '\0')
        return test_fail(t, FLARE_EINVAL, "bad method \"%s\"", method);
    char line[64];
    sb_str(b, method);
    sb_str(b, " ");
    sb_str(b, path);
    snprintf(line, sizeof(line), " HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n", t->port);
    sb_str(b, line);
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++) {
        if (!line_ok(headers[i]) || strchr(headers[i], ':') == NULL)
            return test_fail(t, FLARE_EINVAL, "bad header \"%s\"", headers[i]);
        if (strncasecmp(headers[i], "cookie:", 7) == 0)
            cookies = NULL; /* the caller's own */
        sb_str(b, headers[i]);
        sb_str(b, "\r\n");
    }
    if (cookies != NULL) {
        sb_str(b, "Cookie: ");
        sb_str(b, cookies);
        sb_str(b, "\r\n");
    }
    if (has_body) {
        snprintf(line, sizeof(line), "Content-Length: %zu\r\n", body_len);
        sb_str(b, line);
    }
    if (close)
        sb_str(b, "Connection: close\r\n");
    sb_str(b, "\r\n");
    return b->oom ? FLARE_ENOMEM : 0;
}

/* Reads one head (interim 1xx skipped unless keep_1xx) from c. */
static int read_head(flare_test_t *t, conn_t *c, bool head_req, flare_resp_head_t *h,
                     uint64_t deadline)
{
    static _Thread_local flare_header_t fields[TEST_MAX_FIELDS];
    for (;;) {
        *h = (flare_resp_head_t){ .headers = fields };
        int n = c->in.len > 0
                    ? flare__http_parse_resp_head(c->in.data, c->in.len, &resp_limits, head_req, h)
                    : FLARE_PARSE_PARTIAL;
        if (n == FLARE_PARSE_ERROR)
            return test_fail(t, FLARE_EIO, "bad answer: %s", h->error);
        if (n == FLARE_PARSE_PARTIAL) {
            int rc = fill(t, c, deadline);
            if (rc != 0)
                return rc;
            continue;
        }
        if (h->status >= 100 && h->status < 200 && h->status != 101) {
            consume(c, (size_t)n);
            continue;
        }
        return n;
    }
}

static int read_body(flare_test_t *t, conn_t *c, const flare_resp_head_t *h, flare_test_res_t *res,
                     uint64_t deadline)
{
    sbuf_t body = { 0 };
    sb_add(&body, "", 0);
    int rc = 0;
    switch (h->body) {
    case FLARE_RESP_BODY_NONE:
        break;
    case FLARE_RESP_BODY_LENGTH:
        if ((uint64_t)h->content_length > TEST_MAX_BODY) {
            rc = test_fail(t, FLARE_ETOOBIG, "Content-Length %lld is too large",
                           (long long)h->content_length);
            break;
        }
        while (c->in.len < (size_t)h->content_length && (rc = fill(t, c, deadline)) == 0) {
        }
        if (rc == FLARE_ECLOSED)
            rc = test_fail(t, FLARE_EIO, "the body ended after %zu of %lld bytes", c->in.len,
                           (long long)h->content_length);
        if (rc == 0) {
            sb_add(&body, c->in.data, (size_t)h->content_length);
            consume(c, (size_t)h->content_length);
        }
        break;
    case FLARE_RESP_BODY_CHUNKED: {
        flare_chunked_t ch;
        flare__chunked_init(&ch);
        for (;;) {
            size_t used = 0;
            flare_str_t data;
            int status;
            const char *why;
            int d = flare__chunked_decode(&ch, c->in.data, c->in.len, TEST_MAX_BODY, &used, &data,
                                          &status, &why);
            if (d == FLARE_CHUNKED_DATA)
                sb_add(&body, data.ptr, data.len);
            if (d != FLARE_PARSE_ERROR)
                consume(c, used);
            if (d == FLARE_CHUNKED_DONE)
                break;
            if (d == FLARE_PARSE_ERROR) {
                rc = test_fail(t, FLARE_EIO, "bad chunked body: %s", why);
                break;
            }
            if (d == FLARE_PARSE_PARTIAL && (rc = fill(t, c, deadline)) != 0) {
                if (rc == FLARE_ECLOSED)
                    rc = test_fail(t, FLARE_EIO, "the chunked body ended early");
                break;
            }
        }
        break;
    }
    case FLARE_RESP_BODY_CLOSE:
        while ((rc = fill(t, c, deadline)) == 0) {
        }
        if (rc == FLARE_ECLOSED) {
            rc = 0;
            sb_add(&body, c->in.data, c->in.len);
            consume(c, c->in.len);
        }
        break;
    }
    if (body.oom && rc == 0)
        rc = FLARE_ENOMEM;
    res->body = body.b.data;
    res->body_len = body.b.len;
    return rc;
}

static int request_once(flare_test_t *t, const flare_test_req_t *req, const sbuf_t *head,
                        flare_test_res_t *res, uint64_t deadline)
{
    conn_t *c = &t->c;
    int rc;
    if (c->fd < 0 && (rc = conn_open(t, c, deadline)) != 0)
        return rc;
    if ((rc = send_all(t, c, head->b.data, head->b.len, deadline)) != 0 ||
        (req->body_len > 0 && (rc = send_all(t, c, req->body, req->body_len, deadline)) != 0))
        return rc;
    flare_resp_head_t h;
    bool head_req = strcmp(req->method ? req->method : "GET", "HEAD") == 0;
    int n = read_head(t, c, head_req, &h, deadline);
    if (n < 0)
        return n;
    res->status = h.status;
    if ((rc = flare__fields_copy(h.headers, h.nheaders, &res->headers)) != 0)
        return rc;
    res->nheaders = h.nheaders;
    for (size_t i = 0; i < h.nheaders && !t->no_cookies; i++) {
        if (FLARE__IEQ(h.headers[i].name, "set-cookie") &&
            (rc = cookie_set(t, h.headers[i].value)) != 0)
            return rc;
    }
    consume(c, (size_t)n);
    if ((rc = read_body(t, c, &h, res, deadline)) != 0)
        return rc;
    c->reused = true;
    if (!h.keep_alive || req->close)
        conn_close(c);
    return 0;
}

int flare_test_request(flare_test_t *t, const flare_test_req_t *req, flare_test_res_t *res)
{
    *res = (flare_test_res_t){ 0 };
    t->err[0] = '\0';
    const char *method = req->method ? req->method : "GET";
    bool has_body = req->body != NULL || strcmp(method, "POST") == 0 ||
                    strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0;
    sbuf_t head = { 0 };
    int rc = build_head(t, &head, method, req->path, req->headers, has_body,
                        req->body ? req->body_len : 0, req->close);
    if (rc == 0) {
        uint64_t deadline = flare__now_ms() + t->timeout_ms;
        bool stale_ok = t->c.fd >= 0 && t->c.reused;
        rc = request_once(t, req, &head, res, deadline);
        if (rc == FLARE_ECLOSED && stale_ok && res->headers == NULL) {
            /* the app closed the idle keep-alive connection before it saw
             * this request: once more on a new one */
            conn_close(&t->c);
            rc = request_once(t, req, &head, res, deadline);
        }
        if (rc != 0)
            conn_close(&t->c);
    }
    free(head.b.data);
    return rc;
}

int flare_test_get(flare_test_t *t, const char *path, flare_test_res_t *res)
{
    return flare_test_request(t, &(flare_test_req_t){ .path = path }, res);
}

int flare_test_json(flare_test_t *t, const char *method, const char *path, const char *json,
                    const char *const *headers, flare_test_res_t *res)
{
    const char *all[64];
    size_t n = 0;
    all[n++] = "Content-Type: application/json";
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++) {
        if (n == 63) {
            *res = (flare_test_res_t){ 0 };
            return test_fail(t, FLARE_EINVAL, "more than 62 headers");
        }
        all[n++] = headers[i];
    }
    all[n] = NULL;
    return flare_test_request(t,
                              &(flare_test_req_t){ .method = method,
                                                   .path = path,
                                                   .headers = all,
                                                   .body = json,
                                                   .body_len = json ? strlen(json) : 0 },
                              res);
}

const char *flare_test_res_header(const flare_test_res_t *res, const char *name)
{
    flare_str_t want = { name, strlen(name) };
    for (size_t i = 0; i < res->nheaders; i++) {
        flare_str_t n = res->headers[i].name;
        if (n.len != want.len)
            continue;
        size_t k = 0;
        while (k < n.len &&
               flare__lower((unsigned char)n.ptr[k]) == flare__lower((unsigned char)name[k]))
            k++;
        if (k == n.len)
            return res->headers[i].value.ptr;
    }
    return NULL;
}

int flare_test_res_json(const flare_test_res_t *res, flare_json_doc_t **doc)
{
    *doc = NULL;
    if (res->body == NULL)
        return FLARE_EINVAL;
    return flare_json_parse(res->body, res->body_len, doc, NULL);
}

void flare_test_res_free(flare_test_res_t *res)
{
    if (res == NULL)
        return;
    free(res->headers);
    free(res->body);
    *res = (flare_test_res_t){ 0 };
}

/* ---- WebSocket ---- */

static int ws_send_frame(flare_test_ws_t *ws, uint8_t op, const void *data, size_t len)
{
    uint8_t mask[4];
    if (getrandom(mask, sizeof(mask), 0) != sizeof(mask))
        memcpy(mask, "\x37\xfa\x21\x3d", 4);
    uint8_t hdr[FLARE_WS_MAX_HEADER];
    size_t hl = flare__ws_frame_header(hdr, op, true, false, len, mask);
    uint8_t *frame = malloc(hl + len + 1);
    if (frame == NULL)
        return FLARE_ENOMEM;
    memcpy(frame, hdr, hl);
    if (len > 0)
        memcpy(frame + hl, data, len);
    flare__ws_unmask(frame + hl, len, mask, 0);
    int rc = send_all(ws->t, &ws->c, frame, hl + len, flare__now_ms() + ws->t->timeout_ms);
    free(frame);
    return rc;
}

int flare_test_ws_open(flare_test_t *t, const char *path, const char *const *headers, int *status,
                       flare_test_ws_t **out)
{
    *out = NULL;
    if (status != NULL)
        *status = 0;
    t->err[0] = '\0';
    uint8_t raw[16];
    if (getrandom(raw, sizeof(raw), 0) != sizeof(raw))
        return test_fail(t, FLARE_ESYS, "getrandom: %s", strerror(errno));
    char key[32];
    int kl = EVP_EncodeBlock((unsigned char *)key, raw, sizeof(raw));
    char line[80];
    snprintf(line, sizeof(line), "Sec-WebSocket-Key: %.*s", kl, key);
    const char *all[64];
    size_t n = 0;
    all[n++] = "Upgrade: websocket";
    all[n++] = "Connection: Upgrade";
    all[n++] = "Sec-WebSocket-Version: 13";
    all[n++] = line;
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++) {
        if (n == 63)
            return test_fail(t, FLARE_EINVAL, "more than 59 headers");
        all[n++] = headers[i];
    }
    all[n] = NULL;

    flare_test_ws_t *ws = calloc(1, sizeof(*ws));
    if (ws == NULL)
        return FLARE_ENOMEM;
    ws->t = t;
    ws->c.fd = -1;
    sbuf_t head = { 0 };
    uint64_t deadline = flare__now_ms() + t->timeout_ms;
    int rc = build_head(t, &head, "GET", path, all, false, 0, false);
    if (rc == 0)
        rc = conn_open(t, &ws->c, deadline);
    if (rc == 0)
        rc = send_all(t, &ws->c, head.b.data, head.b.len, deadline);
    free(head.b.data);
    flare_resp_head_t h;
    int hn = rc == 0 ? read_head(t, &ws->c, false, &h, deadline) : rc;
    if (hn < 0) {
        rc = hn;
    } else {
        if (status != NULL)
            *status = h.status;
        char want[FLARE_WS_ACCEPT_LEN + 1] = { 0 };
        const flare_str_t *accept = NULL;
        for (size_t i = 0; i < h.nheaders; i++) {
            if (FLARE__IEQ(h.headers[i].name, "sec-websocket-accept"))
                accept = &h.headers[i].value;
        }
        if (h.status != 101)
            rc = test_fail(t, FLARE_EIO, "the upgrade was answered %d", h.status);
        else if (flare__ws_accept_key((flare_str_t){ key, (size_t)kl }, want) != 0 ||
                 accept == NULL || accept->len != FLARE_WS_ACCEPT_LEN ||
                 memcmp(accept->ptr, want, FLARE_WS_ACCEPT_LEN) != 0)
            rc = test_fail(t, FLARE_EIO, "101 without the right Sec-WebSocket-Accept");
        else
            consume(&ws->c, (size_t)hn);
    }
    if (rc != 0) {
        conn_free(&ws->c);
        free(ws);
        return rc;
    }
    flare__ws_parser_init(&ws->p, false, TEST_MAX_BODY);
    ws->p.max_compressed = TEST_MAX_BODY;
    *out = ws;
    return 0;
}

int flare_test_ws_send(flare_test_ws_t *ws, bool binary, const void *data, size_t len)
{
    if (ws->closed)
        return FLARE_ECLOSED;
    return ws_send_frame(ws, binary ? FLARE_WS_OP_BINARY : FLARE_WS_OP_TEXT, data, len);
}

int flare_test_ws_recv(flare_test_ws_t *ws, char **msg, size_t *len, bool *binary)
{
    *msg = NULL;
    if (ws->closed)
        return FLARE_ECLOSED;
    flare_test_t *t = ws->t;
    uint64_t deadline = flare__now_ms() + t->timeout_ms;
    sbuf_t m = { 0 };
    sb_add(&m, "", 0);
    int rc;
    for (;;) {
        flare_ws_event_t ev;
        int n = ws->c.in.len > 0
                    ? flare__ws_parse(&ws->p, (uint8_t *)ws->c.in.data, ws->c.in.len, &ev)
                    : FLARE_PARSE_PARTIAL;
        if (n == FLARE_PARSE_ERROR) {
            rc = test_fail(t, FLARE_EIO, "bad frame from the app (close code %u)", ws->p.error);
            break;
        }
        if (n == FLARE_PARSE_PARTIAL) {
            if ((rc = fill(t, &ws->c, deadline)) != 0) {
                if (rc == FLARE_ECLOSED)
                    ws->closed = true;
                break;
            }
            continue;
        }
        if (ev.type == FLARE_WS_EV_DATA) {
            sb_add(&m, ev.data, ev.len);
            if (binary != NULL)
                *binary = ev.opcode == FLARE_WS_OP_BINARY;
            consume(&ws->c, (size_t)n);
            if (ev.fin) {
                rc = m.oom ? FLARE_ENOMEM : 0;
                break;
            }
            continue;
        }
        if (ev.type == FLARE_WS_EV_CONTROL && ev.opcode == FLARE_WS_OP_PING) {
            uint8_t pong[FLARE_WS_MAX_CONTROL];
            size_t pl = ev.len;
            memcpy(pong, ev.data, pl);
            consume(&ws->c, (size_t)n);
            if ((rc = ws_send_frame(ws, FLARE_WS_OP_PONG, pong, pl)) != 0)
                break;
            continue;
        }
        if (ev.type == FLARE_WS_EV_CONTROL && ev.opcode == FLARE_WS_OP_CLOSE) {
            ws->close_code = ev.close_code ? ev.close_code : FLARE_WS_CLOSE_NO_STATUS;
            consume(&ws->c, (size_t)n);
            uint8_t payload[2];
            size_t pl = flare__ws_close_payload(payload, ev.close_code, (flare_str_t){ "", 0 });
            ws_send_frame(ws, FLARE_WS_OP_CLOSE, payload, pl);
            ws->closed = true;
            rc = test_fail(t, FLARE_ECLOSED, "the app closed the WebSocket (%d)", ws->close_code);
            break;
        }
        consume(&ws->c, (size_t)n); /* a frame header, a pong */
    }
    if (rc != 0) {
        free(m.b.data);
        return rc;
    }
    *msg = m.b.data;
    if (len != NULL)
        *len = m.b.len;
    return 0;
}

int flare_test_ws_close_code(const flare_test_ws_t *ws)
{
    return ws->close_code;
}

void flare_test_ws_close(flare_test_ws_t *ws)
{
    if (ws == NULL)
        return;
    if (!ws->closed) {
        uint8_t payload[2];
        size_t pl = flare__ws_close_payload(payload, FLARE_WS_CLOSE_NORMAL, (flare_str_t){ "", 0 });
        if (ws_send_frame(ws, FLARE_WS_OP_CLOSE, payload, pl) == 0) {
            /* the server's close (messages before it are dropped), briefly */
            unsigned saved = ws->t->timeout_ms;
            ws->t->timeout_ms = saved < 1000 ? saved : 1000;
            for (;;) {
                char *m;
                if (flare_test_ws_recv(ws, &m, NULL, NULL) != 0)
                    break;
                free(m);
            }
            ws->t->timeout_ms = saved;
        }
    }
    conn_free(&ws->c);
    free(ws);
}

/* ---- server-sent events ---- */

int flare_test_sse_open(flare_test_t *t, const char *path, const char *const *headers, int *status,
                        flare_test_sse_t **out)
{
    *out = NULL;
    if (status != NULL)
        *status = 0;
    t->err[0] = '\0';
    const char *all[64];
    size_t n = 0;
    all[n++] = "Accept: text/event-stream";
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i++) {
        if (n == 63)
            return test_fail(t, FLARE_EINVAL, "more than 62 headers");
        all[n++] = headers[i];
    }
    all[n] = NULL;
    flare_test_sse_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return FLARE_ENOMEM;
    s->t = t;
    s->c.fd = -1;
    sbuf_t head = { 0 };
    uint64_t deadline = flare__now_ms() + t->timeout_ms;
    int rc = build_head(t, &head, "GET", path, all, false, 0, false);
    if (rc == 0)
        rc = conn_open(t, &s->c, deadline);
    if (rc == 0)
        rc = send_all(t, &s->c, head.b.data, head.b.len, deadline);
    free(head.b.data);
    flare_resp_head_t h;
    int hn = rc == 0 ? read_head(t, &s->c, false, &h, deadline) : rc;
    if (hn < 0) {
        rc = hn;
    } else {
        if (status != NULL)
            *status = h.status;
        bool is_sse = false;
        for (size_t i = 0; i < h.nheaders; i++) {
            flare_str_t v = h.headers[i].value;
            if (FLARE__IEQ(h.headers[i].name, "content-type") && v.len >= 17 &&
                strncasecmp(v.ptr, "text/event-stream", 17) == 0)
                is_sse = true;
        }
        if (h.status != 200 || !is_sse)
            rc = test_fail(t, FLARE_EIO, "the event stream was answered %d%s", h.status,
                           is_sse ? "" : " (not text/event-stream)");
        else if (h.body == FLARE_RESP_BODY_LENGTH || h.body == FLARE_RESP_BODY_NONE)
            rc = test_fail(t, FLARE_EIO, "the event stream has a fixed length");
        else {
            consume(&s->c, (size_t)hn);
            s->chunked = h.body == FLARE_RESP_BODY_CHUNKED;
            flare__chunked_init(&s->ch);
        }
    }
    if (rc != 0) {
        conn_free(&s->c);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* Moves what has arrived into s->text (decoded when chunked). */
static int sse_decode(flare_test_sse_t *s)
{
    sbuf_t *tb = &s->text;
    if (!s->chunked) {
        sb_add(tb, s->c.in.data, s->c.in.len);
        consume(&s->c, s->c.in.len);
    } else {
        for (;;) {
            size_t used = 0;
            flare_str_t data;
            int status;
            const char *why;
            int d = flare__chunked_decode(&s->ch, s->c.in.data, s->c.in.len, UINT64_MAX, &used,
                                          &data, &status, &why);
            if (d == FLARE_PARSE_ERROR) {
                return test_fail(s->t, FLARE_EIO, "bad chunked event stream: %s", why);
            }
            if (d == FLARE_CHUNKED_DATA)
                sb_add(tb, data.ptr, data.len);
            consume(&s->c, used);
            if (d == FLARE_CHUNKED_DONE)
                s->ended = true;
            if (d != FLARE_CHUNKED_DATA)
                break;
        }
    }
    return tb->oom ? FLARE_ENOMEM : 0;
}

static char *dup_n(const char *p, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, p, n);
        d[n] = '\0';
    }
    return d;
}

/* Takes one complete event (ended by an empty line) from s->text.b.data, if there
 * is one: 1 taken, 0 none yet, or a failure. */
static int sse_take(flare_test_sse_t *s, flare_test_event_t *ev)
{
    for (;;) {
        /* an event ends at a blank line: "\n\n" (or with CRs) */
        size_t end = 0, i = 0, line_start = 0;
        bool found = false;
        while (i < s->text.b.len) {
            char ch = s->text.b.data[i];
            if (ch == '\n' || ch == '\r') {
                size_t next = i + 1;
                if (ch == '\r' && next < s->text.b.len && s->text.b.data[next] == '\n')
                    next++;
                else if (ch == '\r' && next == s->text.b.len)
                    break; /* may be half of a CRLF */
                if (i == line_start) {
                    end = next;
                    found = true;
                    break;
                }
                line_start = next;
                i = next;
                continue;
            }
            i++;
        }
        if (!found)
            return 0;
        free(s->id);
        free(s->event);
        free(s->data);
        s->id = s->event = s->data = NULL;
        sbuf_t data = { 0 };
        bool has_data = false;
        size_t p = 0;
        while (p < end) {
            size_t q = p;
            while (q < end && s->text.b.data[q] != '\n' && s->text.b.data[q] != '\r')
                q++;
            const char *line = s->text.b.data + p;
            size_t ll = q - p;
            if (q < end && s->text.b.data[q] == '\r' && q + 1 < end &&
                s->text.b.data[q + 1] == '\n')
                q++;
            p = q + 1;
            if (ll == 0 || line[0] == ':')
                continue;
            const char *colon = memchr(line, ':', ll);
            size_t nl = colon ? (size_t)(colon - line) : ll;
            const char *val = colon ? colon + 1 : line + ll;
            size_t vl = colon ? ll - nl - 1 : 0;
            if (vl > 0 && *val == ' ') {
                val++;
                vl--;
            }
            if (nl == 4 && memcmp(line, "data", 4) == 0) {
                if (has_data)
                    sb_add(&data, "\n", 1);
                sb_add(&data, val, vl);
                has_data = true;
            } else if (nl == 5 && memcmp(line, "event", 5) == 0) {
                free(s->event);
                s->event = dup_n(val, vl);
            } else if (nl == 2 && memcmp(line, "id", 2) == 0) {
                free(s->id);
                s->id = dup_n(val, vl);
            }
        }
        flare__buf_consume(&s->text.b, end);
        if (!has_data) {
            free(data.b.data);
            continue; /* no data: no event (comments, retry, a bare id) */
        }
        if (data.b.data == NULL)
            sb_add(&data, "", 0);
        if (data.oom) {
            free(data.b.data);
            return FLARE_ENOMEM;
        }
        s->data = data.b.data;
        ev->id = s->id;
        ev->event = s->event != NULL ? s->event : "message";
        ev->data = s->data;
        return 1;
    }
}

int flare_test_sse_next(flare_test_sse_t *s, flare_test_event_t *ev)
{
    *ev = (flare_test_event_t){ 0 };
    uint64_t deadline = flare__now_ms() + s->t->timeout_ms;
    for (;;) {
        int rc = sse_decode(s);
        if (rc == 0)
            rc = sse_take(s, ev);
        if (rc != 0)
            return rc < 0 ? rc : 0;
        if (s->ended)
            return test_fail(s->t, FLARE_ECLOSED, "the event stream ended");
        if ((rc = fill(s->t, &s->c, deadline)) != 0) {
            if (rc == FLARE_ECLOSED)
                s->ended = true;
            return rc;
        }
    }
}

void flare_test_sse_close(flare_test_sse_t *s)
{
    if (s == NULL)
        return;
    conn_free(&s->c);
    flare__buf_free(&s->text.b);
    free(s->id);
    free(s->event);
    free(s->data);
    free(s);
}
