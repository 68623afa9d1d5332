/* HTTP/2 responses: the operations the exchange layer calls. Headers go
 * to nghttp2_submit_response (names lower-cased, connection-specific
 * fields dropped); bodies through a data provider that reads, as the flow
 * control windows allow, from the exchange's buffer (copied bodies and
 * streamed pieces), a borrowed body, or the file (no whole-file buffering). */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "core/sys.h"
#include "http2/h2_int.h"

static bool status_has_body(int status)
{
    return !(status < 200 || status == 204 || status == 304);
}

static bool conn_specific(flare_str_t n)
{
    static const char *const names[] = { "connection", "keep-alive", "proxy-connection",
                                         "transfer-encoding", "upgrade" };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (n.len == strlen(names[i]) && strncasecmp(n.ptr, names[i], n.len) == 0)
            return true;
    return false;
}

static nghttp2_nv mknv(const char *n, size_t nl, const char *v, size_t vl)
{
    return (nghttp2_nv){ (uint8_t *)(uintptr_t)n, (uint8_t *)(uintptr_t)v, nl, vl,
                         NGHTTP2_NV_FLAG_NONE };
}

bool flare__h2_add_nv(struct flare_req *ex, nghttp2_nv *nva, size_t *n, size_t cap,
                      flare_str_t name, flare_str_t value)
{
    while (value.len > 0 && (value.ptr[value.len - 1] == ' ' || value.ptr[value.len - 1] == '\t'))
        value.len--;
    if (name.len == 0 || conn_specific(name) || *n >= cap)
        return true;
    char *lc = flare__arena_alloc(&ex->arena, name.len);
    if (lc == NULL)
        return false;
    for (size_t i = 0; i < name.len; i++) {
        char ch = name.ptr[i];
        lc[i] = (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch;
    }
    nva[(*n)++] = mknv(lc, name.len, value.ptr, value.len);
    return true;
}

static int submit(struct flare_req *ex, int status, flare_str_t ctype, int64_t clen, bool body)
{
    h2_stream_t *st = ex->pstream;
    flare_h2_t *h2 = st->h2;
    flare_worker_t *w = ex->worker;
    size_t cap = 4;
    for (flare_res_hdr_t *h = ex->res.hdrs; h != NULL; h = h->next) {
        if (h->name.len == 0) {
            for (size_t i = 0; i < h->value.len; i++)
                cap += h->value.ptr[i] == '\n';
        } else {
            cap++;
        }
    }
    nghttp2_nv *nva = flare__arena_alloc(&ex->arena, (cap + 1) * sizeof(*nva));
    char *num = flare__arena_alloc(&ex->arena, 24);
    if (nva == NULL || num == NULL)
        return FLARE_ENOMEM;
    size_t n = 0;
    if (status < 100 || status > 999)
        status = 500;
    num[0] = (char)('0' + status / 100);
    num[1] = (char)('0' + status / 10 % 10);
    num[2] = (char)('0' + status % 10);
    nva[n++] = mknv(":status", 7, num, 3);
    /* "Date: <date>\r\n" cached per worker per second */
    nva[n++] = mknv("date", 4, w->date_line + 6, FLARE_DATE_LINE_LEN - 8);
    if (ctype.len > 0)
        nva[n++] = mknv("content-type", 12, ctype.ptr, ctype.len);
    if (clen >= 0 && status_has_body(status)) {
        size_t l = flare__u64toa(num + 4, (uint64_t)clen);
        nva[n++] = mknv("content-length", 14, num + 4, l);
    }
    cap += 1;
    for (flare_res_hdr_t *h = ex->res.hdrs; h != NULL; h = h->next) {
        if (h->name.len != 0) {
            if (!flare__h2_add_nv(ex, nva, &n, cap, h->name, h->value))
                return FLARE_ENOMEM;
            continue;
        }
        /* a trusted block of "Name: value\r\n" lines */
        const char *p = h->value.ptr, *end = p + h->value.len;
        while (p < end) {
            const char *eol = memchr(p, '\n', (size_t)(end - p));
            const char *le = eol != NULL ? eol : end;
            const char *colon = memchr(p, ':', (size_t)(le - p));
            if (colon != NULL) {
                const char *v = colon + 1, *ve = le;
                while (v < ve && (*v == ' ' || *v == '\t'))
                    v++;
                if (ve > v && ve[-1] == '\r')
                    ve--;
                if (!flare__h2_add_nv(ex, nva, &n, cap, (flare_str_t){ p, (size_t)(colon - p) },
                                      (flare_str_t){ v, (size_t)(ve - v) }))
                    return FLARE_ENOMEM;
            }
            p = le + 1;
        }
    }
    ex->res.status = status;
    nghttp2_data_provider prd = { .source = { .ptr = st }, .read_callback = flare__h2_read_cb };
    bool with_body = body && status_has_body(status) && !(ex->flags & EX_HEAD_ONLY);
    int rv = nghttp2_submit_response(h2->sess, st->id, nva, n, with_body ? &prd : NULL);
    if (rv != 0)
        return rv == NGHTTP2_ERR_NOMEM ? FLARE_ENOMEM : FLARE_ESTATE;
    st->flags |= ST_ANSWERED;
    h2->t_out = h2->c->w->loop.now;
    return 0;
}

/* The exchange is complete, or has more output. */
static void complete(struct flare_req *ex)
{
    h2_stream_t *st = ex->pstream;
    if (ex->conn == NULL || st == NULL) {
        if ((ex->flags & EX_ORPHAN) && (ex->flags & EX_SENT) && !(ex->flags & EX_IN_HANDLER))
            flare__ex_put(ex->worker, ex);
        return;
    }
    flare__h2_output(st->h2);
}

static int respond_body(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body,
                        const flare_release_t *ref)
{
    h2_stream_t *st = ex->pstream;
    bool with = body.len > 0 && status_has_body(status) && !(ex->flags & EX_HEAD_ONLY);
    if (with) {
        if (ref != NULL) {
            st->src = SRC_REF;
            st->ref = body;
            st->rel = *ref;
            ref = NULL;
        } else {
            ex->out.len = 0;
            st->opos = 0;
            if (flare__buf_append(&ex->out, body.ptr, body.len) != 0)
                goto nomem;
            st->src = SRC_BUF;
        }
    }
    int rc = submit(ex, status, ctype, (int64_t)body.len, with);
    if (rc != 0) {
        flare__h2_src_release(st);
        return rc;
    }
    if (ref != NULL && ref->fn != NULL)
        ref->fn(ref->ud);
    ex->flags |= EX_SENT;
    if (!(ex->flags & EX_IN_HANDLER))
        complete(ex);
    return 0;
nomem:
    if (ref != NULL && ref->fn != NULL)
        ref->fn(ref->ud);
    return FLARE_ENOMEM;
}

static int respond(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body)
{
    return respond_body(ex, status, ctype, body, NULL);
}

static int respond_ref(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body,
                       const flare_release_t *ref)
{
    return respond_body(ex, status, ctype, body, ref);
}

static int respond_file(struct flare_req *ex, int status, flare_str_t ctype, int fd, uint64_t off,
                        uint64_t len)
{
    h2_stream_t *st = ex->pstream;
    bool with = len > 0 && status_has_body(status) && !(ex->flags & EX_HEAD_ONLY);
    if (with) {
        st->src = SRC_FILE;
        st->fd = fd;
        st->foff = off;
        st->fleft = len;
    } else {
        close(fd);
    }
    int rc = submit(ex, status, ctype, (int64_t)len, with);
    if (rc != 0)
        flare__h2_src_release(st);
    return rc;
}

static int stream_begin(struct flare_req *ex, int status, flare_str_t ctype)
{
    h2_stream_t *st = ex->pstream;
    if (!status_has_body(status))
        ex->flags |= EX_HEAD_ONLY;
    ex->out.len = 0;
    st->opos = 0;
    st->src = SRC_STREAM;
    return submit(ex, status, ctype, -1, true);
}

static void resume(h2_stream_t *st)
{
    if (st->flags & ST_DEFERRED) {
        st->flags &= ~(uint32_t)ST_DEFERRED;
        nghttp2_session_resume_data(st->h2->sess, st->id);
    }
}

static int stream_write(struct flare_req *ex, flare_str_t data)
{
    h2_stream_t *st = ex->pstream;
    if (ex->flags & EX_HEAD_ONLY)
        return 0;
    if (st->opos > 0 && st->opos == ex->out.len)
        ex->out.len = st->opos = 0;
    if (flare__buf_append(&ex->out, data.ptr, data.len) != 0)
        return FLARE_ENOMEM;
    resume(st);
    return 0;
}

static int stream_end(struct flare_req *ex)
{
    h2_stream_t *st = ex->pstream;
    st->flags |= ST_EOF;
    resume(st);
    return 0;
}

ssize_t flare__h2_read_cb(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t len,
                          uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    (void)sess, (void)id, (void)ud;
    h2_stream_t *st = src->ptr;
    struct flare_req *ex = st->ex;
    size_t n;
    switch (st->src) {
    case SRC_BUF:
    case SRC_STREAM:
        n = ex->out.len - st->opos;
        if (n > len)
            n = len;
        memcpy(buf, ex->out.data + st->opos, n);
        st->opos += n;
        if (st->opos == ex->out.len) {
            ex->out.len = st->opos = 0;
            if (st->src == SRC_BUF || (st->flags & ST_EOF)) {
                *flags |= NGHTTP2_DATA_FLAG_EOF;
                st->src = SRC_NONE;
            } else if (n == 0) {
                st->flags |= ST_DEFERRED;
                return NGHTTP2_ERR_DEFERRED;
            }
        }
        return (ssize_t)n;
    case SRC_REF:
        n = st->ref.len < len ? st->ref.len : len;
        memcpy(buf, st->ref.ptr, n);
        st->ref.ptr += n;
        st->ref.len -= n;
        if (st->ref.len == 0) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            flare__h2_src_release(st);
        }
        return (ssize_t)n;
    case SRC_FILE: {
        n = st->fleft < len ? (size_t)st->fleft : len;
        ssize_t r;
        do
            r = pread(st->fd, buf, n, (off_t)st->foff);
        while (r < 0 && errno == EINTR);
        if (r <= 0) /* an error, or the file shrank: the stream is reset */
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        st->foff += (uint64_t)r;
        st->fleft -= (uint64_t)r;
        if (st->fleft == 0) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            flare__h2_src_release(st);
        }
        return r;
    }
    default:
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return 0;
    }
}

void flare__h2_src_release(h2_stream_t *st)
{
    if (st->src == SRC_REF && st->rel.fn != NULL) {
        flare_task_fn fn = st->rel.fn;
        st->rel.fn = NULL;
        fn(st->rel.ud);
    }
    if (st->src == SRC_FILE && st->fd >= 0) {
        close(st->fd);
        st->fd = -1;
    }
    st->src = SRC_NONE;
}

void flare__h2_error(h2_stream_t *st, int status, const char *msg)
{
    flare__res_error(st->ex, status, msg);
}

static flare_proto_t protocol(const struct flare_req *ex)
{
    (void)ex;
    return FLARE_PROTO_HTTP2;
}

static bool secure(const struct flare_req *ex)
{
    return ex->conn != NULL && ex->conn->s.tr != NULL;
}

static int peer(const struct flare_req *ex, uint8_t addr[16])
{
    const flare_conn_t *c = ex->conn;
    if (c == NULL || c->peer_family == 0)
        return 0;
    memcpy(addr, c->peer, 16);
    return c->peer_family;
}

/* Streamed bytes not yet taken by nghttp2, plus the connection's output. */
static size_t unsent(const struct flare_req *ex)
{
    const h2_stream_t *st = ex->pstream;
    if (ex->conn == NULL || st == NULL)
        return 0;
    return ex->out.len - st->opos + flare__stream_unsent(&ex->conn->s);
}

const flare_proto_ops_t flare__h2_ops = {
    .respond = respond,
    .respond_ref = respond_ref,
    .respond_file = respond_file,
    .stream_begin = stream_begin,
    .stream_write = stream_write,
    .stream_end = stream_end,
    .upgrade = NULL, /* WebSocket stays on HTTP/1.1 */
    .complete = complete,
    .protocol = protocol,
    .secure = secure,
    .peer = peer,
    .unsent = unsent,
};
