/* Response serialization and the flare_res_* API.
 *
 * The head is written with memcpy from precomputed pieces: status lines are
 * string constants generated from FLARE_STATUS_MAP, the Date line is cached
 * per worker per second, lengths are formatted by hand. No printf. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

#define STATUS_LINE_MAX 48

/* Status lines indexed by code, each padded to 48 bytes so the copy has a
 * constant size (three vector moves instead of a memcpy call and a switch:
 * -30 instructions per response, callgrind). */
typedef struct status_line {
    uint8_t len;
    char text[STATUS_LINE_MAX];
} status_line_t;

static const status_line_t status_lines[900] = {
#define STATUS_LINE(code, name, reason)                               \
    [(code)-100] = { sizeof("HTTP/1.1 " #code " " reason "\r\n") - 1, \
                     "HTTP/1.1 " #code " " reason "\r\n" },
    FLARE_STATUS_MAP(STATUS_LINE)
#undef STATUS_LINE
};

/* Writes the status line at p (may write up to STATUS_LINE_MAX bytes), returns its length. */
static inline __attribute__((always_inline)) size_t put_status_line(char *p, int status)
{
    const status_line_t *sl = &status_lines[status - 100];
    if (flare__likely(sl->len != 0)) {
        memcpy(p, sl->text, STATUS_LINE_MAX);
        return sl->len;
    }
    /* a code outside the table: "HTTP/1.1 NNN Unknown" */
    memcpy(p, "HTTP/1.1 ", 9);
    p[9] = (char)('0' + status / 100 % 10);
    p[10] = (char)('0' + status / 10 % 10);
    p[11] = (char)('0' + status % 10);
    memcpy(p + 12, " Unknown\r\n", 10);
    return 22;
}

static bool status_has_body(int status)
{
    return !(status < 200 || status == 204 || status == 304);
}

/* The buffer the exchange writes to: the connection's when it is the head
 * of the queue (responses leave in order), its own otherwise. */
static inline flare_buf_t *out_buf(struct flare_req *ex)
{
    flare_conn_t *c = ex->conn;
    if (c->qhead != ex)
        return &ex->out;
    return flare__stream_wbuf(&c->s);
}

#define PUT(p, lit)                          \
    do {                                     \
        memcpy((p), (lit), sizeof(lit) - 1); \
        (p) += sizeof(lit) - 1;              \
    } while (0)

/* "Name: value\r\n" for each header a handler or middleware added. */
static char *put_headers(char *p, const flare_res_hdr_t *h)
{
    for (; h != NULL; h = h->next) {
        if (h->name.len == 0) { /* a trusted block of whole lines (flare__res_header_block) */
            memcpy(p, h->value.ptr, h->value.len);
            p += h->value.len;
            continue;
        }
        memcpy(p, h->name.ptr, h->name.len);
        p += h->name.len;
        PUT(p, ": ");
        memcpy(p, h->value.ptr, h->value.len);
        p += h->value.len;
        PUT(p, "\r\n");
    }
    return p;
}

/* Inlined into send_common (the hot path: a call there measured +30
 * instructions per request); other callers use flare__serialize_head. */
static inline __attribute__((always_inline)) int serialize_head(struct flare_req *ex,
                                                                flare_buf_t *out, int status,
                                                                flare_str_t ctype, uint64_t clen,
                                                                bool chunked)
{
    flare_worker_t *w = ex->worker;
    /* when draining, only the last queued response says close: one behind
     * it would otherwise follow a response that announced the end */
    bool close = (ex->flags & EX_CLOSE) || (w->draining && ex->next == NULL);
    bool body = status_has_body(status);

    size_t need = STATUS_LINE_MAX + sizeof("Server: flare\r\n") + FLARE_DATE_LINE_LEN +
                  sizeof("Content-Type: \r\n") + ctype.len + sizeof("Content-Length: \r\n") + 20 +
                  sizeof("Transfer-Encoding: chunked\r\n") + sizeof("Connection: keep-alive\r\n") +
                  2;
    for (flare_res_hdr_t *h = ex->res.hdrs; h != NULL; h = h->next)
        need += h->name.len + h->value.len + 4;
    if (flare__buf_reserve(out, need) != 0)
        return FLARE_ENOMEM;

    char *p = out->data + out->len;
    p += put_status_line(p, status);
    PUT(p, "Server: flare\r\n");
    memcpy(p, w->date_line, FLARE_DATE_LINE_LEN);
    p += FLARE_DATE_LINE_LEN;
    if (ctype.len > 0) {
        PUT(p, "Content-Type: ");
        memcpy(p, ctype.ptr, ctype.len);
        p += ctype.len;
        PUT(p, "\r\n");
    }
    p = put_headers(p, ex->res.hdrs);
    if (body) {
        if (chunked) {
            PUT(p, "Transfer-Encoding: chunked\r\n");
        } else {
            PUT(p, "Content-Length: ");
            p += flare__u64toa(p, clen);
            PUT(p, "\r\n");
        }
    }
    if (close)
        PUT(p, "Connection: close\r\n");
    else if (ex->head.minor == 0)
        PUT(p, "Connection: keep-alive\r\n");
    if (out == &ex->out)
        ex->out_head_end = (size_t)(p - out->data);
    PUT(p, "\r\n");
    out->len = (size_t)(p - out->data);
    if (close)
        ex->flags |= EX_CLOSE;
    return 0;
}

int flare__serialize_head(struct flare_req *ex, flare_buf_t *out, int status, flare_str_t ctype,
                          uint64_t clen, bool chunked)
{
    return serialize_head(ex, out, status, ctype, clen, chunked);
}

/* An exchange whose connection is gone: the send is a no-op that frees it. */
static int orphan_done(struct flare_req *ex)
{
    ex->flags |= EX_SENT;
    if (!(ex->flags & EX_IN_HANDLER))
        flare__ex_put(ex->worker, ex);
    return 0;
}

/* No control bytes (CR, LF, NUL, DEL) in a Content-Type: eight bytes at a
 * time with an overlapping last block, since it runs on every response. */
static inline bool ctl_free8(const char *p)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t x;
    memcpy(&x, p, 8);
    uint64_t lt20 = (x - ones * 0x20) & ~x & highs; /* a byte < 0x20 */
    uint64_t d = x ^ (ones * 0x7f);
    uint64_t del = (d - ones) & ~d & highs; /* a byte == 0x7f */
    return (lt20 | del) == 0;
}

/* HTAB is allowed in a field value, so a block that trips the fast check
 * gets a byte-by-byte look. */
static bool ctype_ok(flare_str_t s)
{
    if (s.len >= 8) {
        for (size_t i = 0; i + 8 < s.len; i += 8) {
            if (!ctl_free8(s.ptr + i))
                return flare__field_value_ok(s);
        }
        return ctl_free8(s.ptr + s.len - 8) || flare__field_value_ok(s);
    }
    return flare__field_value_ok(s);
}

static int run_after(struct flare_req *ex, int status)
{
    if (ex->flags & EX_AFTER_DONE)
        return status;
    ex->flags |= EX_AFTER_DONE;
    ex->res.status = status;
    flare__chain_after(ex);
    return ex->res.status;
}

int flare_res_status(const flare_res_t *res)
{
    return res->status;
}

int flare_res_set_status(flare_res_t *res, int status)
{
    if (flare__res_ex(res)->flags & (EX_SENT | EX_STREAM))
        return FLARE_ESTATE;
    if (status < 200 || status > 999)
        return FLARE_EINVAL;
    res->status = status;
    return 0;
}

enum { SEND_GO = 1, SEND_ORPHAN = 2 };

/* What every complete response goes through first: state and argument
 * checks (invalid: the caller's own extra ones), then the after hooks,
 * which may change *status or answer themselves. Returns SEND_GO, or
 * SEND_ORPHAN / a result once the caller has released its body. */
static inline __attribute__((always_inline)) int send_prologue(struct flare_req *ex, int *status,
                                                               flare_str_t ctype, bool invalid)
{
    if (ex->flags & EX_ORPHAN)
        return SEND_ORPHAN;
    if (ex->flags & (EX_SENT | EX_STREAM))
        return FLARE_ESTATE;
    if ((unsigned)(*status - 200) > 799u || !ctype_ok(ctype) || invalid)
        return FLARE_EINVAL;
    if (ex->flags & EX_HAS_AFTER) {
        *status = run_after(ex, *status);
        if (ex->flags & EX_ORPHAN)
            return SEND_ORPHAN;
        if (ex->flags & (EX_SENT | EX_STREAM))
            return 0;
    }
    return SEND_GO;
}

static int send_common(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body,
                       flare_task_fn release, void *ud)
{
    int rc = send_prologue(ex, &status, ctype, false);
    if (rc != SEND_GO) {
        if (release != NULL)
            release(ud);
        return rc == SEND_ORPHAN ? orphan_done(ex) : rc;
    }
    flare_buf_t *out = out_buf(ex);
    size_t mark = out->len;
    if (serialize_head(ex, out, status, ctype, body.len, false) != 0)
        goto nomem;
    if (!(ex->flags & EX_HEAD_ONLY) && status_has_body(status) && body.len > 0) {
        flare_conn_t *c = ex->conn;
        if (release != NULL && out == &c->s.wbuf && body.len >= 4096) {
            /* borrowed: goes out by reference in the same writev */
            flare_outseg_t seg = { out->len, body.ptr, body.len, release, ud, -1, 0 };
            release = NULL;
            if (flare__stream_add_seg(&c->s, &seg) != 0)
                goto nomem;
        } else if (flare__buf_append(out, body.ptr, body.len) != 0) {
            goto nomem;
        }
    }
    if (release != NULL)
        release(ud);
    ex->flags |= EX_SENT;
    /* inside the handler, dispatch completes the exchange when it returns */
    if (!(ex->flags & EX_IN_HANDLER))
        flare__ex_complete(ex);
    return 0;
nomem:
    out->len = mark;
    if (release != NULL)
        release(ud);
    return FLARE_ENOMEM;
}

int flare_res_send(flare_res_t *res, int status, flare_str_t content_type, flare_str_t body)
{
    return send_common(flare__res_ex(res), status, content_type, body, NULL, NULL);
}

static void no_release(void *ud)
{
    (void)ud;
}

int flare_res_send_ref(flare_res_t *res, int status, flare_str_t content_type, flare_str_t body,
                       flare_task_fn release, void *ud)
{
    return send_common(flare__res_ex(res), status, content_type, body,
                       release != NULL ? release : no_release, ud);
}

/* Files up to this size are read into the response: one write with the
 * head instead of a write and a sendfile. */
#define SENDFILE_MIN 16384

static void close_pending_file(void *ud)
{
    struct flare_req *ex = ud;
    if (ex->file_fd >= 0) {
        close(ex->file_fd);
        ex->file_fd = -1;
    }
}

int flare_res_sendfile(flare_res_t *res, int status, flare_str_t content_type, int fd, uint64_t off,
                       uint64_t len)
{
    struct flare_req *ex = flare__res_ex(res);
    if (fd < 0)
        return FLARE_EINVAL;
    int rc = send_prologue(ex, &status, content_type, off > INT64_MAX || len > INT64_MAX - off);
    if (rc != SEND_GO) {
        close(fd);
        return rc == SEND_ORPHAN ? orphan_done(ex) : rc;
    }
    rc = 0;
    flare_buf_t *out = out_buf(ex);
    size_t mark = out->len;
    if (flare__serialize_head(ex, out, status, content_type, len, false) != 0) {
        rc = FLARE_ENOMEM;
        goto out;
    }
    if (!(ex->flags & EX_HEAD_ONLY) && status_has_body(status) && len > 0) {
        flare_conn_t *c = ex->conn;
        if (len <= SENDFILE_MIN) {
            if (flare__buf_reserve(out, (size_t)len) != 0) {
                out->len = mark;
                rc = FLARE_ENOMEM;
                goto out;
            }
            if ((rc = flare__pread_all(fd, out->data + out->len, off, (size_t)len)) != 0) {
                out->len = mark;
                goto out;
            }
            out->len += (size_t)len;
        } else if (out == &c->s.wbuf) {
            int f = fd;
            fd = -1;
            if (flare__stream_push_file(&c->s, f, off, len) != 0) {
                out->len = mark;
                return FLARE_ENOMEM;
            }
        } else {
            /* sent when this exchange reaches the head of the queue; closed
             * by the cleanup if it never does */
            if (flare_req_on_cleanup(ex, close_pending_file, ex) != 0) {
                out->len = mark;
                rc = FLARE_ENOMEM;
                goto out;
            }
            ex->file_fd = fd;
            ex->file_off = off;
            ex->file_len = len;
            fd = -1;
        }
    }
    if (fd >= 0)
        close(fd);
    ex->flags |= EX_SENT;
    if (!(ex->flags & EX_IN_HANDLER))
        flare__ex_complete(ex);
    return 0;
out:
    close(fd);
    return rc;
}

int flare_res_begin(flare_res_t *res, int status, flare_str_t content_type)
{
    struct flare_req *ex = flare__res_ex(res);
    if (ex->flags & EX_ORPHAN)
        return 0;
    if (ex->flags & (EX_SENT | EX_STREAM))
        return FLARE_ESTATE;
    if (status < 200 || status > 999 || !ctype_ok(content_type))
        return FLARE_EINVAL;
    if (ex->flags & EX_HAS_AFTER) {
        status = run_after(ex, status);
        if (ex->flags & (EX_SENT | EX_STREAM | EX_ORPHAN))
            return 0;
    }
    flare_buf_t *out = out_buf(ex);
    if (flare__serialize_head(ex, out, status, content_type, 0, true) != 0)
        return FLARE_ENOMEM;
    ex->flags |= EX_STREAM;
    if (!status_has_body(status) || (ex->flags & EX_HEAD_ONLY))
        ex->flags |= EX_HEAD_ONLY; /* writes are dropped, end adds nothing */
    flare__ex_complete(ex);
    return 0;
}

int flare_res_write(flare_res_t *res, flare_str_t data)
{
    struct flare_req *ex = flare__res_ex(res);
    if (ex->flags & EX_ORPHAN)
        return 0;
    if (!(ex->flags & EX_STREAM) || (ex->flags & EX_SENT))
        return FLARE_ESTATE;
    if (data.len == 0 || (ex->flags & EX_HEAD_ONLY))
        return 0;
    flare_buf_t *out = out_buf(ex);
    if (flare__buf_reserve(out, data.len + 20) != 0)
        return FLARE_ENOMEM;
    static const char hex[] = "0123456789abcdef";
    char tmp[16];
    int n = 0;
    for (size_t v = data.len; v != 0; v >>= 4)
        tmp[n++] = hex[v & 15];
    char *p = out->data + out->len;
    while (n > 0)
        *p++ = tmp[--n];
    *p++ = '\r';
    *p++ = '\n';
    memcpy(p, data.ptr, data.len);
    p += data.len;
    *p++ = '\r';
    *p++ = '\n';
    out->len = (size_t)(p - out->data);
    flare__ex_complete(ex);
    return 0;
}

int flare_res_end(flare_res_t *res)
{
    struct flare_req *ex = flare__res_ex(res);
    if (ex->flags & EX_ORPHAN)
        return orphan_done(ex);
    if (!(ex->flags & EX_STREAM) || (ex->flags & EX_SENT))
        return FLARE_ESTATE;
    if (!(ex->flags & EX_HEAD_ONLY)) {
        flare_buf_t *out = out_buf(ex);
        if (flare__buf_append(out, "0\r\n\r\n", 5) != 0)
            return FLARE_ENOMEM;
    }
    ex->flags |= EX_SENT;
    flare__ex_complete(ex);
    return 0;
}

void flare_res_close(flare_res_t *res)
{
    flare__res_ex(res)->flags |= EX_CLOSE;
}

static void append_hdr(struct flare_req *ex, flare_res_hdr_t *h)
{
    h->next = NULL;
    *ex->res.hdrs_tail = h;
    ex->res.hdrs_tail = &h->next;
}

int flare_res_header(flare_res_t *res, flare_str_t name, flare_str_t value)
{
    struct flare_req *ex = flare__res_ex(res);
    if (ex->flags & (EX_SENT | EX_STREAM))
        return FLARE_ESTATE;
    if (!flare__is_token(name) || !flare__field_value_ok(value))
        return FLARE_EINVAL;
    if (FLARE__IEQ(name, "content-length") || FLARE__IEQ(name, "transfer-encoding") ||
        FLARE__IEQ(name, "date") || FLARE__IEQ(name, "connection") || FLARE__IEQ(name, "server") ||
        FLARE__IEQ(name, "content-type"))
        return FLARE_EINVAL;
    flare_res_hdr_t *h = flare__arena_alloc(&ex->arena, sizeof(*h) + name.len + value.len);
    if (h == NULL)
        return FLARE_ENOMEM;
    char *s = (char *)(h + 1);
    memcpy(s, name.ptr, name.len);
    if (value.len > 0)
        memcpy(s + name.len, value.ptr, value.len);
    h->name = (flare_str_t){ s, name.len };
    h->value = (flare_str_t){ s + name.len, value.len };
    append_hdr(ex, h);
    return 0;
}

int flare__res_header_block(flare_res_t *res, flare_str_t block)
{
    struct flare_req *ex = flare__res_ex(res);
    if (ex->flags & (EX_SENT | EX_STREAM))
        return FLARE_ESTATE;
    flare_res_hdr_t *h = flare__arena_alloc(&ex->arena, sizeof(*h));
    if (h == NULL)
        return FLARE_ENOMEM;
    h->name = (flare_str_t){ "", 0 };
    h->value = block;
    append_hdr(ex, h);
    return 0;
}

int flare__res_upgrade(flare_res_t *res, flare_str_t token, flare_upgrade_fn fn, void *ud)
{
    struct flare_req *ex = flare__res_ex(res);
    if (ex->flags & (EX_SENT | EX_STREAM))
        return FLARE_ESTATE;
    if (ex->flags & EX_ORPHAN)
        return orphan_done(ex);
    if (fn == NULL || token.len == 0 || !ctype_ok(token))
        return FLARE_EINVAL;
    flare_conn_t *c = ex->conn;
    flare_buf_t *out = out_buf(ex);
    size_t need = 128 + token.len;
    for (flare_res_hdr_t *h = ex->res.hdrs; h != NULL; h = h->next)
        need += h->name.len + h->value.len + 4;
    if (flare__buf_reserve(out, need) != 0)
        return FLARE_ENOMEM;
    char *p = out->data + out->len;
    PUT(p, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: ");
    memcpy(p, token.ptr, token.len);
    p += token.len;
    PUT(p, "\r\nConnection: Upgrade\r\n");
    p = put_headers(p, ex->res.hdrs);
    PUT(p, "\r\n");
    out->len = (size_t)(p - out->data);
    c->flags |= C_UPGRADE;
    c->upgrade_fn = fn;
    c->upgrade_ud = ud;
    ex->flags |= EX_SENT;
    if (!(ex->flags & EX_IN_HANDLER))
        flare__ex_complete(ex);
    return 0;
}

int flare__res_error(struct flare_req *ex, int status, const char *msg)
{
    char body[160];
    size_t n = strlen(msg);
    if (n > sizeof(body) - 2)
        n = sizeof(body) - 2;
    memcpy(body, msg, n);
    body[n++] = '\n';
    /* headers set so far stay: a middleware's (request id, CORS) belong on
     * error answers too */
    ex->flags &= ~(uint32_t)EX_STREAM;
    if (ex->flags & EX_SENT)
        return 0;
    return send_common(ex, status, FLARE_STR("text/plain; charset=utf-8"), (flare_str_t){ body, n },
                       NULL, NULL);
}

/* "GET, HEAD, POST, OPTIONS": HEAD whenever GET is there, OPTIONS always. */
static flare_str_t allow_value(uint32_t bits, char *buf)
{
    if (bits & (1u << FLARE_METHOD_GET))
        bits |= 1u << FLARE_METHOD_HEAD;
    bits |= 1u << FLARE_METHOD_OPTIONS;
    char *p = buf;
    for (int m = 1; m < FLARE_METHOD_COUNT; m++) {
        if (!(bits & (1u << m)))
            continue;
        if (p != buf) {
            *p++ = ',';
            *p++ = ' ';
        }
        flare_str_t name = flare_method_name((flare_method_t)m);
        memcpy(p, name.ptr, name.len);
        p += name.len;
    }
    return (flare_str_t){ buf, (size_t)(p - buf) };
}

int flare__res_auto(struct flare_req *ex)
{
    uint32_t allowed = ex->match.allowed;
    flare_method_t m = ex->head.method_id;
    char allow[128];
    if (m == FLARE_METHOD_OPTIONS && ex->head.path.len == 1 && ex->head.path.ptr[0] == '*') {
        flare_res_header(&ex->res, FLARE_STR("Allow"), allow_value(~0u & ~1u, allow));
        return flare_res_send(&ex->res, 204, FLARE_STR_NULL, FLARE_STR_NULL);
    }
    if (allowed == 0)
        return flare__res_error(ex, 404, "not found");
    flare_res_header(&ex->res, FLARE_STR("Allow"), allow_value(allowed, allow));
    if (m == FLARE_METHOD_OPTIONS)
        return flare_res_send(&ex->res, 204, FLARE_STR_NULL, FLARE_STR_NULL);
    return send_common(ex, 405, FLARE_STR("text/plain; charset=utf-8"),
                       FLARE_STR("method not allowed\n"), NULL, NULL);
}
