/* HTTP/2 responses: the operations the exchange layer calls. Headers go
 * to nghttp2_submit_response (names lower-cased, connection-specific
 * fields dropped); bodies through a data provider that reads, as the flow
 * control windows allow, from the exchange's buffer (copied bodies and
 * streamed pieces), a borrowed body, or the file (no whole-file buffering). */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "core/sys.h"
#include "http/hop.h"
#include "http/svc.h"
#include "http2/h2_int.h"

static bool h2_status_has_body(int status)
{
    return !(status < 200 || status == 204 || status == 304);
}

/* Lower-cases the bytes 'A'..'Z' of a word: the bytes' low seven bits are
 * compared by additions whose carries cannot cross into the next byte;
 * bytes >= 0x80 are left alone. */
static inline uint64_t lower8(uint64_t x)
{
    const uint64_t ones = 0x0101010101010101u, high = 0x8080808080808080u;
    uint64_t low7 = x & ~high;
    uint64_t ge_a = low7 + (0x80 - 'A') * ones; /* high bit: >= 'A' */
    uint64_t gt_z = low7 + (0x7f - 'Z') * ones; /* high bit: > 'Z' */
    return x | (ge_a & ~gt_z & ~x & high) >> 2;
}

/* Copies n bytes lower-cased, a word at a time; the last word overlaps the
 * one before it instead of a byte loop (names are 4 to 20 bytes long). */
static void lower_copy(char *dst, const char *src, size_t n)
{
    uint64_t x;
    if (n >= 8) {
        for (size_t i = 0; i + 8 <= n; i += 8) {
            memcpy(&x, src + i, 8);
            x = lower8(x);
            memcpy(dst + i, &x, 8);
        }
        if (n % 8 != 0) {
            memcpy(&x, src + n - 8, 8);
            x = lower8(x);
            memcpy(dst + n - 8, &x, 8);
        }
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, src, 4);
        memcpy(&b, src + n - 4, 4);
        a = (uint32_t)lower8(a);
        b = (uint32_t)lower8(b);
        memcpy(dst, &a, 4);
        memcpy(dst + n - 4, &b, 4);
    } else {
        for (size_t i = 0; i < n; i++)
            dst[i] = (char)flare__lower((unsigned char)src[i]);
    }
}

/* Names and values stay in the exchange (its arena, the worker's date
 * line, static strings) until the stream is closed, after its HEADERS
 * frame is serialized: nghttp2 keeps the pointers instead of copies. */
static nghttp2_nv mknv(const char *n, size_t nl, const char *v, size_t vl)
{
    return (nghttp2_nv){ (uint8_t *)(uintptr_t)n, (uint8_t *)(uintptr_t)v, nl, vl,
                         NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE };
}

void flare__h2_add_nv(flare_h2_nvb_t *b, flare_str_t name, flare_str_t value)
{
    while (value.len > 0 && (value.ptr[value.len - 1] == ' ' || value.ptr[value.len - 1] == '\t'))
        value.len--;
    if (name.len == 0 || b->n >= b->cap || (flare__http_hop_field(name) & FLARE_HOP_CONN_SPECIFIC))
        return;
    char *lc = b->lc;
    lower_copy(lc, name.ptr, name.len);
    b->lc += name.len;
    b->nva[b->n++] = mknv(lc, name.len, value.ptr, value.len);
}

void flare__h2_add_block(flare_h2_nvb_t *b, flare_str_t blk)
{
    const char *p = blk.ptr, *end = p + blk.len;
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
            flare__h2_add_nv(b, (flare_str_t){ p, (size_t)(colon - p) },
                             (flare_str_t){ v, (size_t)(ve - v) });
        }
        p = le + 1;
    }
}

static int submit(struct flare_req *ex, int status, flare_str_t ctype, int64_t clen, bool body)
{
    h2_stream_t *st = ex->pstream;
    flare_h2_t *h2 = st->h2;
    flare_worker_t *w = ex->worker;
    /* bounds: a field per header, per line of a block (each line holds at
     * least "x:\n"), and the names' bytes */
    size_t cap = 4, names = 0;
    for (flare_res_hdr_t *h = ex->res.hdrs; h != NULL; h = h->next) {
        if (h->name.len == 0) {
            cap += h->value.len / 3 + 1;
            names += h->value.len;
        } else {
            cap++;
            names += h->name.len;
        }
    }
    size_t size = cap * sizeof(nghttp2_nv) + 24 + names;
    nghttp2_nv *nva = flare__arena_try(&ex->arena, size);
    if (nva == NULL && (nva = flare__arena_alloc(&ex->arena, size)) == NULL)
        return FLARE_ENOMEM;
    flare_h2_nvb_t b = { nva, 0, cap, NULL };
    char *num = (char *)(b.nva + cap);
    b.lc = num + 24;
    if (status < 100 || status > 999)
        status = 500;
    bool has_body = h2_status_has_body(status);
    num[0] = (char)('0' + status / 100);
    memcpy(num + 1, flare__digits2 + 2 * (status % 100), 2);
    b.nva[b.n++] = mknv(":status", 7, num, 3);
    /* "Date: <date>\r\n" cached per worker per second */
    b.nva[b.n++] = mknv("date", 4, w->date_line + 6, FLARE_DATE_LINE_LEN - 8);
    if (ctype.len > 0)
        b.nva[b.n++] = mknv("content-type", 12, ctype.ptr, ctype.len);
    if (clen >= 0 && has_body) {
        size_t l = flare__u64toa(num + 4, (uint64_t)clen);
        /* never indexed: a per-response value nghttp2 leaves out of its
         * dynamic table anyway; the flag spares its encoder the search of
         * the static table's values (literal with the name's index either
         * way) */
        b.nva[b.n] = mknv("content-length", 14, num + 4, l);
        b.nva[b.n++].flags |= NGHTTP2_NV_FLAG_NO_INDEX;
    }
    for (flare_res_hdr_t *h = ex->res.hdrs; h != NULL; h = h->next) {
        if (h->name.len != 0)
            flare__h2_add_nv(&b, h->name, h->value);
        else
            flare__h2_add_block(&b, h->value);
    }
    size_t n = b.n;
    ex->res.status = status;
    nghttp2_data_provider prd = { .source = { .ptr = st }, .read_callback = flare__h2_read_cb };
    bool with_body = body && has_body && !(ex->flags & EX_HEAD_ONLY);
    if (with_body && (clen < 0 || clen > H2_ONE_FRAME)) {
        /* more than one DATA frame (a file, a stream): incremental (RFC
         * 9218), so it takes turns with the other streams' DATA instead of
         * keeping the connection until it is done */
        static const nghttp2_extpri inc = { NGHTTP2_EXTPRI_DEFAULT_URGENCY, 1 };
        nghttp2_session_change_extpri_stream_priority(h2->sess, st->id, &inc, 1);
    }
    int rv = nghttp2_submit_response(h2->sess, st->id, nva, n, with_body ? &prd : NULL);
    if (rv != 0)
        return rv == NGHTTP2_ERR_NOMEM ? FLARE_ENOMEM : FLARE_ESTATE;
    st->flags |= ST_ANSWERED;
    h2->t_out = h2->w->loop.now;
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
    if (flare__unlikely(ex->flags & EX_STREAM))
        st->h2->flags |= H2_STREAM_OUT;
    flare__h2_output(st->h2);
}

static int respond_body(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body,
                        const flare_release_t *ref)
{
    h2_stream_t *st = ex->pstream;
    bool with = body.len > 0 && h2_status_has_body(status) && !(ex->flags & EX_HEAD_ONLY);
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

static int h2_respond(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body)
{
    return respond_body(ex, status, ctype, body, NULL);
}

static int h2_respond_ref(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body,
                          const flare_release_t *ref)
{
    return respond_body(ex, status, ctype, body, ref);
}

static int h2_respond_file(struct flare_req *ex, int status, flare_str_t ctype, int fd,
                           uint64_t off, uint64_t len)
{
    h2_stream_t *st = ex->pstream;
    bool with = len > 0 && h2_status_has_body(status) && !(ex->flags & EX_HEAD_ONLY);
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

static int h2_stream_begin(struct flare_req *ex, int status, flare_str_t ctype)
{
    h2_stream_t *st = ex->pstream;
    if (!h2_status_has_body(status))
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

static int h2_stream_write(struct flare_req *ex, flare_str_t data)
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

static int h2_stream_end(struct flare_req *ex)
{
    h2_stream_t *st = ex->pstream;
    st->flags |= ST_EOF;
    resume(st);
    return 0;
}

/* The data provider sizes each DATA frame and leaves its payload where it
 * is (NGHTTP2_DATA_FLAG_NO_COPY); flare__h2_send_data then puts the frame
 * on the connection's output: the header and the payload copied once into
 * the write buffer (a file read straight into it), or a borrowed body
 * queued by reference. Nothing runs between the two calls. */
ssize_t flare__h2_read_cb(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t len,
                          uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    (void)sess, (void)id, (void)buf, (void)ud;
    h2_stream_t *st = src->ptr;
    struct flare_req *ex = st->ex;
    size_t n;
    switch (st->src) {
    case SRC_BUF:
    case SRC_STREAM:
        n = ex->out.len - st->opos;
        if (n > len)
            n = len;
        if (n == ex->out.len - st->opos) {
            if (st->src == SRC_BUF || (st->flags & ST_EOF)) {
                *flags |= NGHTTP2_DATA_FLAG_EOF;
            } else if (n == 0) {
                st->flags |= ST_DEFERRED;
                return NGHTTP2_ERR_DEFERRED;
            }
        }
        break;
    case SRC_REF:
        n = st->ref.len < len ? st->ref.len : len;
        if (n == st->ref.len)
            *flags |= NGHTTP2_DATA_FLAG_EOF;
        break;
    case SRC_FILE:
        n = st->fleft < len ? (size_t)st->fleft : len;
        if (n == st->fleft)
            *flags |= NGHTTP2_DATA_FLAG_EOF;
        break;
    default:
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return 0;
    }
    *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    return (ssize_t)n;
}

int flare__h2_send_data(nghttp2_session *sess, nghttp2_frame *frame, const uint8_t *framehd,
                        size_t len, nghttp2_data_source *src, void *ud)
{
    (void)sess, (void)ud;
    h2_stream_t *st = src->ptr;
    struct flare_req *ex = st->ex;
    flare_stream_t *s = &st->h2->c->s;
    flare_buf_t *wb = flare__stream_wbuf(s);
    size_t mark = wb->len;
    /* no padding is asked for (no select_padding callback) */
    if (frame->data.padlen != 0 || flare__buf_append(wb, framehd, 9) != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    switch (st->src) {
    case SRC_BUF:
    case SRC_STREAM:
        if (flare__buf_append(wb, ex->out.data + st->opos, len) != 0)
            goto fail;
        st->opos += len;
        if (st->opos == ex->out.len) {
            ex->out.len = st->opos = 0;
            if (st->src == SRC_BUF || (st->flags & ST_EOF))
                st->src = SRC_NONE;
        }
        break;
    case SRC_REF:
        if (len <= H2_COPY_MAX) {
            if (flare__buf_append(wb, st->ref.ptr, len) != 0)
                goto fail;
        } else {
            flare_outseg_t seg = { 0, st->ref.ptr, len, NULL, NULL, -1, 0 };
            if (flare__stream_add_seg(s, &seg) != 0)
                goto fail;
        }
        st->ref.ptr += len;
        st->ref.len -= len;
        if (st->ref.len == 0)
            flare__h2_src_release(st);
        break;
    case SRC_FILE: {
        if (flare__buf_reserve(wb, len) != 0)
            goto fail;
        size_t got = 0;
        while (got < len) {
            ssize_t r = pread(st->fd, wb->data + wb->len + got, len - got, (off_t)(st->foff + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) /* an error, or the file shrank: the stream is reset */
                goto reset;
            got += (size_t)r;
        }
        wb->len += len;
        st->foff += len;
        st->fleft -= len;
        if (st->fleft == 0)
            flare__h2_src_release(st);
        break;
    }
    default:
        break;
    }
    return 0;
reset:
    wb->len = mark;
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
fail:
    wb->len = mark;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

/* A release that must wait for what is queued: borrowed body pieces may
 * still be in the connection's output. */
static void release_after_output(h2_stream_t *st, flare_task_fn fn, void *ud)
{
    flare_stream_t *s = st->h2 != NULL && st->h2->c != NULL ? &st->h2->c->s : NULL;
    if (s == NULL || flare__stream_nsegs(s) == 0) {
        fn(ud);
        return;
    }
    /* an empty segment after them: released when the queue reaches it
     * (or is dropped); on failure add_seg runs fn itself, which could free
     * memory still queued, so the output is dropped first */
    flare_outseg_t mark = { 0, NULL, 0, fn, ud, -1, 0 };
    if (flare__stream_add_seg(s, &mark) != 0)
        flare__conn_close(st->h2->c, false); /* (a no-op when it is closing already) */
}

void flare__h2_src_release(h2_stream_t *st)
{
    if (st->src == SRC_REF && st->rel.fn != NULL) {
        flare_task_fn fn = st->rel.fn;
        st->rel.fn = NULL;
        release_after_output(st, fn, st->rel.ud);
    }
    if (st->src == SRC_FILE && st->fd >= 0) {
        close(st->fd); /* read into the write buffer: nothing queued refers to it */
        st->fd = -1;
    }
    st->src = SRC_NONE;
}

void flare__h2_error(h2_stream_t *st, int status, const char *msg)
{
    flare__res_error(st->ex, status, msg);
}

static flare_proto_t h2_protocol(const struct flare_req *ex)
{
    (void)ex;
    return FLARE_PROTO_HTTP2;
}

static bool h2_secure(const struct flare_req *ex)
{
    return ex->conn != NULL && flare__stream_tls(&ex->conn->s);
}

static int h2_peer(const struct flare_req *ex, uint8_t addr[16])
{
    const flare_conn_t *c = ex->conn;
    if (c == NULL || flare__conn_peer_family(c) == 0)
        return 0;
    memcpy(addr, c->peer, 16);
    return flare__conn_peer_family(c);
}

/* Streamed bytes not yet taken by nghttp2, plus the connection's output. */
static size_t h2_unsent(const struct flare_req *ex)
{
    const h2_stream_t *st = ex->pstream;
    if (ex->conn == NULL || st == NULL)
        return 0;
    return ex->out.len - st->opos + flare__stream_unsent(&ex->conn->s);
}

const flare_proto_ops_t flare__h2_ops = {
    .respond = h2_respond,
    .respond_ref = h2_respond_ref,
    .respond_file = h2_respond_file,
    .stream_begin = h2_stream_begin,
    .stream_write = h2_stream_write,
    .stream_end = h2_stream_end,
    .upgrade = NULL, /* WebSocket stays on HTTP/1.1 */
    .complete = complete,
    .protocol = h2_protocol,
    .secure = h2_secure,
    .peer = h2_peer,
    .unsent = h2_unsent,
};
