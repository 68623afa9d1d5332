/* HTTP/1.1 responses on the wire: the operations the exchange layer calls
 * (flare__http1_ops) once the response API has validated a response.
 *
 * The head is written with memcpy from precomputed pieces: status lines are
 * string constants generated from FLARE_STATUS_MAP, the Date line is cached
 * per worker per second, lengths are formatted by hand. No printf. The
 * oldest exchange of the connection writes straight into the stream's
 * buffer; a later one into its own (ex->out) until it becomes the oldest. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http1/http1.h"
#include "http1/conn.h"

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

static bool h1_status_has_body(int status)
{
    return !(status < 200 || status == 204 || status == 304);
}

/* The buffer the exchange writes to: the connection's when it is the head
 * of the queue (responses leave in order), its own otherwise. */
static inline flare_buf_t *out_buf(struct flare_req *ex)
{
    h1conn_t *c = (h1conn_t *)ex->conn;
    if (c->qhead != ex)
        return &ex->out;
    return flare__stream_wbuf(&c->base.s);
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

/* Inlined into h1_respond (the hot path: a call there measured +30
 * instructions per request); other callers use head_out. */
static inline __attribute__((always_inline)) int serialize_head(struct flare_req *ex,
                                                                flare_buf_t *out, int status,
                                                                flare_str_t ctype, uint64_t clen,
                                                                bool chunked)
{
    flare_worker_t *w = ex->worker;
    /* when draining, only the last queued response says close: one behind
     * it would otherwise follow a response that announced the end */
    /* ... and a response to a request whose streamed body is still
     * arriving ends the connection (the rest of the body is not read) */
    bool close = (ex->flags & (EX_CLOSE | EX_BODY_OPEN)) || (w->draining && ex->next == NULL);
    bool body = h1_status_has_body(status);

    size_t need = STATUS_LINE_MAX + sizeof("Server: flare\r\n") + FLARE_DATE_LINE_LEN +
                  sizeof("Content-Type: \r\n") + ctype.len + sizeof("Content-Length: \r\n") + 20 +
                  sizeof("Transfer-Encoding: chunked\r\n") + sizeof("Connection: keep-alive\r\n") +
                  2;
    for (flare_res_hdr_t *h = ex->res.hdrs; h != NULL; h = h->next)
        need += h->name.len + h->value.len + 4;
    if (flare__buf_reserve(out, need) != 0)
        return FLARE_ENOMEM;
    ex->res.status = status; /* what was sent: the exchange's observers read it */

    char *p = out->data + out->len;
    p += put_status_line(p, status);
    PUT(p, "Server: flare\r\n");
    memcpy(p, w->date_line, FLARE_DATE_LINE_LEN);
    p += FLARE_DATE_LINE_LEN;
    if (ctype.len > 0) {
        PUT(p, "Content-Type: ");
        flare__copy(p, ctype.ptr, ctype.len);
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

static int head_out(struct flare_req *ex, flare_buf_t *out, int status, flare_str_t ctype,
                    uint64_t clen, bool chunked)
{
    return serialize_head(ex, out, status, ctype, clen, chunked);
}

static inline __attribute__((always_inline)) int respond_body(struct flare_req *ex, int status,
                                                              flare_str_t ctype, flare_str_t body,
                                                              flare_task_fn release, void *ud)
{
    flare_buf_t *out = out_buf(ex);
    size_t mark = out->len;
    if (serialize_head(ex, out, status, ctype, body.len, false) != 0)
        goto nomem;
    if (!(ex->flags & EX_HEAD_ONLY) && h1_status_has_body(status) && body.len > 0) {
        h1conn_t *c = (h1conn_t *)ex->conn;
        if (release != NULL && out == &c->base.s.wbuf && body.len >= 4096) {
            /* borrowed: goes out by reference in the same writev */
            flare_outseg_t seg = { out->len, body.ptr, body.len, release, ud, -1, 0 };
            release = NULL;
            if (flare__stream_add_seg(&c->base.s, &seg) != 0)
                goto nomem;
        } else if (flare__buf_reserve(out, body.len) != 0) {
            goto nomem;
        } else {
            flare__copy(out->data + out->len, body.ptr, body.len);
            out->len += body.len;
        }
    }
    if (release != NULL)
        release(ud);
    ex->flags |= EX_SENT;
    if (!(ex->flags & EX_IN_HANDLER))
        flare__http1_complete(ex);
    return 0;
nomem:
    out->len = mark;
    if (release != NULL)
        release(ud);
    return FLARE_ENOMEM;
}

static int h1_respond(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body)
{
    return respond_body(ex, status, ctype, body, NULL, NULL);
}

static int h1_respond_ref(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body,
                          const flare_release_t *ref)
{
    return respond_body(ex, status, ctype, body, ref->fn, ref->ud);
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

static int h1_respond_file(struct flare_req *ex, int status, flare_str_t ctype, int fd,
                           uint64_t off, uint64_t len)
{
    int rc = 0;
    flare_buf_t *out = out_buf(ex);
    size_t mark = out->len;
    if (head_out(ex, out, status, ctype, len, false) != 0) {
        rc = FLARE_ENOMEM;
        goto out;
    }
    if (!(ex->flags & EX_HEAD_ONLY) && h1_status_has_body(status) && len > 0) {
        h1conn_t *c = (h1conn_t *)ex->conn;
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
        } else if (out == &c->base.s.wbuf) {
            int f = fd;
            fd = -1;
            if (flare__stream_push_file(&c->base.s, f, off, len) != 0) {
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
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

static int h1_stream_begin(struct flare_req *ex, int status, flare_str_t ctype)
{
    flare_buf_t *out = out_buf(ex);
    if (head_out(ex, out, status, ctype, 0, true) != 0)
        return FLARE_ENOMEM;
    if (!h1_status_has_body(status) || (ex->flags & EX_HEAD_ONLY))
        ex->flags |= EX_HEAD_ONLY; /* writes are dropped, end adds nothing */
    return 0;
}

/* One chunk: size in hex, CRLF, data, CRLF. */
static int h1_stream_write(struct flare_req *ex, flare_str_t data)
{
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
    return 0;
}

static int h1_stream_end(struct flare_req *ex)
{
    if (ex->flags & EX_HEAD_ONLY)
        return 0;
    return flare__buf_append(out_buf(ex), "0\r\n\r\n", 5) != 0 ? FLARE_ENOMEM : 0;
}

/* 101 Switching Protocols; no request after this one is read, and once
 * everything before it is out the stream goes to fn (conn.c: handoff). */
static int upgrade(struct flare_req *ex, flare_str_t token, flare_upgrade_fn fn, void *ud)
{
    h1conn_t *c = (h1conn_t *)ex->conn;
    flare_buf_t *out = out_buf(ex);
    size_t need = 128 + token.len;
    for (flare_res_hdr_t *h = ex->res.hdrs; h != NULL; h = h->next)
        need += h->name.len + h->value.len + 4;
    if (flare__buf_reserve(out, need) != 0 || flare__h1_upgrade_set(c, fn, ud) != 0)
        return FLARE_ENOMEM;
    char *p = out->data + out->len;
    PUT(p, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: ");
    memcpy(p, token.ptr, token.len);
    p += token.len;
    PUT(p, "\r\nConnection: Upgrade\r\n");
    p = put_headers(p, ex->res.hdrs);
    PUT(p, "\r\n");
    out->len = (size_t)(p - out->data);
    return 0;
}

/* HTTP/1.x: the enum's first two values are the minor version (the parser
 * gives 0 or 1), so this is a plain load. */
_Static_assert(FLARE_PROTO_HTTP10 == 0 && FLARE_PROTO_HTTP11 == 1, "minor -> flare_proto_t");

static flare_proto_t h1_protocol(const struct flare_req *ex)
{
    return (flare_proto_t)ex->head.minor;
}

static bool h1_secure(const struct flare_req *ex)
{
    return ex->conn != NULL && flare__stream_tls(&ex->conn->s);
}

static int h1_peer(const struct flare_req *ex, uint8_t addr[16])
{
    const h1conn_t *c = (h1conn_t *)ex->conn;
    if (c == NULL || flare__conn_peer_family(&c->base) == 0)
        return 0;
    memcpy(addr, c->base.peer, 16);
    return flare__conn_peer_family(&c->base);
}

/* What waits for the client: the stream's output when this exchange is
 * the head of the queue, its own buffer until then. */
static size_t h1_unsent(const struct flare_req *ex)
{
    const h1conn_t *c = (h1conn_t *)ex->conn;
    if (c == NULL)
        return 0;
    return c->qhead == ex ? flare__stream_unsent(&c->base.s) : ex->out.len;
}

const flare_proto_ops_t flare__http1_ops = {
    .respond = h1_respond,
    .respond_ref = h1_respond_ref,
    .respond_file = h1_respond_file,
    .stream_begin = h1_stream_begin,
    .stream_write = h1_stream_write,
    .stream_end = h1_stream_end,
    .upgrade = upgrade,
    .complete = flare__http1_complete,
    .protocol = h1_protocol,
    .secure = h1_secure,
    .peer = h1_peer,
    .unsent = h1_unsent,
    .body_read = flare__http1_body_read,
};
