/* The HTTP/2 connection: one nghttp2 server session per connection, driven
 * through its memory interface.
 *
 * Invariants:
 * - Input: each read batch goes to nghttp2_session_mem_recv whole (nghttp2
 *   buffers partial frames itself), so the read buffer is always consumed
 *   and an idle connection holds none.
 * - No user code runs inside an nghttp2 callback: complete requests are
 *   put on a ready list and dispatched after mem_recv returns.
 * - Output: every chunk nghttp2_session_mem_send hands out is copied into
 *   the stream's buffer before the next call; DATA payloads never pass
 *   through nghttp2 (ops.c, flare__h2_send_data); everything one read
 *   batch produced leaves in one write at the end of the batch.
 * - Defences are Flare's own counters (h2_int.h), whatever nghttp2's
 *   version enforces: a verdict queues GOAWAY with its code, and the
 *   connection closes once that is flushed. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sys.h"
#include "flare/log.h"
#include "http2/h2_int.h"
#include "app.h"
#include "obs/metrics.h"

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define PREFACE_LEN (sizeof(preface) - 1)

/* h2_names.h's error enum is generated in code order: its index is the
 * code nghttp2 hands over */
_Static_assert((int)FLARE__H2E_NO_ERROR == (int)NGHTTP2_NO_ERROR &&
                   (int)FLARE__H2E_FLOW_CONTROL_ERROR == (int)NGHTTP2_FLOW_CONTROL_ERROR &&
                   (int)FLARE__H2E_ENHANCE_YOUR_CALM == (int)NGHTTP2_ENHANCE_YOUR_CALM &&
                   (int)FLARE__H2E_HTTP_1_1_REQUIRED == (int)NGHTTP2_HTTP_1_1_REQUIRED,
               "FLARE__H2_ERRORS is not in RFC 9113 code order");

bool flare__h2_preface(const char *buf, size_t len, bool *partial)
{
    size_t n = len < PREFACE_LEN ? len : PREFACE_LEN;
    if (memcmp(buf, preface, n) != 0)
        return false;
    *partial = len < PREFACE_LEN;
    return true;
}

static flare_h2_t *H2(flare_conn_t *c)
{
    return ((flare_h2conn_t *)c)->h2;
}

/* ---- streams ---- */

static h2_stream_t *stream_new(flare_h2_t *h2, int32_t id)
{
    flare_worker_t *w = h2->w;
    h2_stream_t *st = flare__h2_calloc(w, 1, sizeof(*st));
    if (st == NULL)
        return NULL;
    struct flare_req *ex = flare__ex_get(w);
    if (ex == NULL) {
        flare__h2_mfree(w, st);
        return NULL;
    }
    st->h2 = h2;
    st->id = id;
    st->ex = ex;
    st->fd = -1;
    st->t_body = w->loop.now;
    ex->ops = &flare__h2_ops;
    ex->conn = h2->c;
    ex->pstream = st;
    ex->flags |= EX_DETACHED; /* the head is built in the arena */
    ex->raw = NULL;
    ex->raw_len = 0;
    memset(&ex->head, 0, sizeof(ex->head));
    ex->head.headers = ex->headers;
    ex->head.content_length = -1;
    ex->head.minor = 1;
    ex->head.keep_alive = true;
    st->next = h2->streams;
    if (h2->streams != NULL)
        h2->streams->prev = st;
    h2->streams = st;
    h2_stream_t **b = &h2->tab[((uint32_t)id >> 1) % H2_TAB];
    st->hnext = *b;
    *b = st;
    h2->nstreams++;
    h2->ctr.streams++;
    flare__metrics_h2(w, FLARE__H2C_STREAMS);
    return st;
}

/* The stream of id, or NULL (never opened, refused, or freed). */
static h2_stream_t *stream_of(const flare_h2_t *h2, int32_t id)
{
    h2_stream_t *st = h2->tab[((uint32_t)id >> 1) % H2_TAB];
    while (st != NULL && st->id != id)
        st = st->hnext;
    return st;
}

static void ready_remove(flare_h2_t *h2, h2_stream_t *st)
{
    if (!(st->flags & ST_READY))
        return;
    h2_stream_t **pp = &h2->ready, *prev = NULL;
    while (*pp != NULL && *pp != st) {
        prev = *pp;
        pp = &(*pp)->rnext;
    }
    if (*pp == st) {
        *pp = st->rnext;
        if (h2->ready_tail == &st->rnext)
            h2->ready_tail = prev != NULL ? &prev->rnext : &h2->ready;
    }
    st->flags &= ~(uint32_t)ST_READY;
}

/* The stream is over (closed, or the connection ends): its exchange is
 * recycled when nothing will touch it any more, orphaned when a handler
 * still owes (or is streaming) its response. */
static void stream_free(flare_h2_t *h2, h2_stream_t *st)
{
    flare_worker_t *w = h2->w;
    h2_stream_t **b = &h2->tab[((uint32_t)st->id >> 1) % H2_TAB];
    while (*b != st)
        b = &(*b)->hnext;
    *b = st->hnext;
    if (st->flags & ST_READY)
        ready_remove(h2, st);
    if (st->src != SRC_NONE)
        flare__h2_src_release(st);
    /* its body leaves the budget; the window it held back comes back (the
     * stream's no longer matters) */
    h2->held -= st->held;
    if (st->owed > 0) {
        nghttp2_session_consume_connection(h2->sess, st->owed);
        h2->owed -= st->owed;
    }
    if (h2->leader == st)
        h2->leader = NULL;
    if (h2->hot == st)
        h2->hot = NULL;
    struct flare_req *ex = st->ex;
    if (ex != NULL) {
        ex->pstream = NULL;
        if (!(st->flags & ST_DISPATCHED) ||
            ((ex->flags & EX_SENT) && !(ex->flags & EX_IN_HANDLER))) {
            flare__ex_put(w, ex);
        } else {
            flare__ex_orphan(w, ex);
        }
    }
    if (st->prev != NULL)
        st->prev->next = st->next;
    else
        h2->streams = st->next;
    if (st->next != NULL)
        st->next->prev = st->prev;
    h2->nstreams--;
    flare__h2_mfree(w, st);
}

/* ---- defences ---- */

static int calm(flare_h2_t *h2, unsigned kind, const char *why)
{
    h2->goaway_code = NGHTTP2_ENHANCE_YOUR_CALM;
    h2->why = why;
    h2->ctr.calm++;
    flare__metrics_h2(h2->w, FLARE__H2C_FLOOD + kind);
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

/* A connection error found by Flare's own checks: GOAWAY with code. */
static int proto_error(flare_h2_t *h2, uint32_t code, const char *why)
{
    h2->goaway_code = code;
    h2->why = why;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

static void note_reset(flare_h2_t *h2, int32_t id)
{
    h2->reset_ids[h2->reset_pos++ % (sizeof(h2->reset_ids) / sizeof(h2->reset_ids[0]))] = id;
}

static bool reset_by_us(const flare_h2_t *h2, int32_t id)
{
    for (size_t i = 0; i < sizeof(h2->reset_ids) / sizeof(h2->reset_ids[0]); i++)
        if (h2->reset_ids[i] == id)
            return true;
    return false;
}

/* A client opened stream id (a request HEADERS nghttp2 took): the ids it
 * skipped since the last one are noted as never opened. */
static void note_open(flare_h2_t *h2, int32_t id)
{
    if (id <= h2->open_max)
        return;
    if (id > h2->open_max + 2) {
        unsigned i = h2->gap_pos++ % H2_GAPS;
        if (h2->gap_pos > H2_GAPS && h2->gap_hi[i] > h2->gap_floor)
            h2->gap_floor = h2->gap_hi[i];
        h2->gap_lo[i] = h2->open_max + 1;
        h2->gap_hi[i] = id - 1;
    }
    h2->open_max = id;
}

static bool never_opened(const flare_h2_t *h2, int32_t id)
{
    if (id > h2->open_max || id <= h2->gap_floor)
        return true;
    unsigned n = h2->gap_pos < H2_GAPS ? h2->gap_pos : H2_GAPS;
    for (unsigned i = 0; i < n; i++)
        if (id >= h2->gap_lo[i] && id <= h2->gap_hi[i])
            return true;
    return false;
}

/* HEADERS on a client stream id that is not open: nghttp2 1.52 drops it
 * silently (it keeps no closed streams); RFC 9113 makes it a connection
 * error: a stream id going backwards, never opened (5.1.1:
 * PROTOCOL_ERROR), or a stream that is closed, both ways or by the
 * client's RST_STREAM (5.1: STREAM_CLOSED). Streams this side reset are
 * the exception (their frames may still be on the way: ignored). */
static int headers_on_old_stream(nghttp2_session *sess, flare_h2_t *h2, int32_t id)
{
    if ((id & 1) == 0 || id > nghttp2_session_get_last_proc_stream_id(sess) ||
        nghttp2_session_find_stream(sess, id) != NULL || reset_by_us(h2, id))
        return 0;
    if (never_opened(h2, id))
        return proto_error(h2, NGHTTP2_PROTOCOL_ERROR, "HEADERS on a stream id never opened");
    return proto_error(h2, NGHTTP2_STREAM_CLOSED, "HEADERS on a closed stream");
}

static void window_roll(flare_h2_t *h2)
{
    uint64_t now = h2->w->loop.now;
    if (now - h2->t_win >= H2_WINDOW_MS) {
        h2->t_win = now;
        h2->w_resets = h2->w_settings = h2->w_pings = h2->w_prio = h2->w_empty = h2->w_wu = 0;
        h2->w_data_out = 0;
    }
}

int flare__h2_on_begin_frame(nghttp2_session *sess, const nghttp2_frame_hd *hd, void *ud)
{
    flare_h2_t *h2 = ud;
    window_roll(h2);
    /* a header block is open from its HEADERS until a frame with
     * END_HEADERS begins (anything else in between is a connection error) */
    if (hd->type != NGHTTP2_CONTINUATION || (hd->flags & NGHTTP2_FLAG_END_HEADERS))
        h2->flags &= ~(uint32_t)H2_IN_HDRS;
    switch (hd->type) {
    case NGHTTP2_HEADERS:
        h2->cont_frames = 0;
        h2->cont_bytes = hd->length;
        if (!(hd->flags & NGHTTP2_FLAG_END_HEADERS)) {
            h2->flags |= H2_IN_HDRS;
            h2->t_hdrs = h2->w->loop.now;
            h2->hdrs_sid = hd->stream_id;
        }
        return headers_on_old_stream(sess, h2, hd->stream_id);
    case NGHTTP2_CONTINUATION:
        h2->cont_bytes += hd->length;
        if (++h2->cont_frames > H2_MAX_CONT)
            return calm(h2, FLARE__H2F_CONTINUATION, "CONTINUATION flood");
        if (h2->cont_bytes > h2->w->app->limits.max_head + 16384)
            return calm(h2, FLARE__H2F_HEADER_LIST, "header block too large");
        break;
    case NGHTTP2_SETTINGS:
        if (!(hd->flags & NGHTTP2_FLAG_ACK) && ++h2->w_settings > H2_MAX_CTRL)
            return calm(h2, FLARE__H2F_SETTINGS, "SETTINGS flood");
        break;
    case NGHTTP2_PING:
        if (!(hd->flags & NGHTTP2_FLAG_ACK) && ++h2->w_pings > H2_MAX_CTRL)
            return calm(h2, FLARE__H2F_PING, "PING flood");
        break;
    case NGHTTP2_PRIORITY:
        if (++h2->w_prio > H2_MAX_PRIORITY)
            return calm(h2, FLARE__H2F_PRIORITY, "PRIORITY flood");
        /* RFC 9113 6.3, which nghttp2 no longer checks once RFC 7540's
         * priorities are off (SETTINGS_NO_RFC7540_PRIORITIES) */
        if (hd->stream_id == 0)
            return proto_error(h2, NGHTTP2_PROTOCOL_ERROR, "PRIORITY on stream 0");
        break;
    case NGHTTP2_WINDOW_UPDATE:
        if (++h2->w_wu > H2_MAX_WU + 2 * h2->w_data_out)
            return calm(h2, FLARE__H2F_WINDOW_UPDATE, "WINDOW_UPDATE flood");
        break;
    case NGHTTP2_DATA:
        if (hd->length == 0 && !(hd->flags & NGHTTP2_FLAG_END_STREAM) &&
            ++h2->w_empty > H2_MAX_EMPTY_DATA)
            return calm(h2, FLARE__H2F_EMPTY_DATA, "empty DATA flood");
        break;
    default:
        break;
    }
    return 0;
}

/* ---- input ---- */

static void make_ready(flare_h2_t *h2, h2_stream_t *st)
{
    if (st->flags & (ST_READY | ST_DISPATCHED | ST_MALFORMED))
        return;
    st->flags |= ST_READY;
    st->rnext = NULL;
    *h2->ready_tail = st;
    h2->ready_tail = &st->rnext;
}

static int on_begin_headers(nghttp2_session *sess, const nghttp2_frame *f, void *ud)
{
    flare_h2_t *h2 = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    h2->t_activity = h2->w->loop.now;
    note_open(h2, f->hd.stream_id);
    if (h2->nstreams >= H2_MAX_STREAMS) {
        nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_REFUSED_STREAM);
        return 0;
    }
    if ((h2->hot = stream_new(h2, f->hd.stream_id)) == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
}

/* Copies n <= 32 bytes by words, the last ones overlapping those before
 * (no call to memcpy, no byte loop but for n < 4). */
static inline void copy32(char *d, const uint8_t *p, size_t n)
{
    uint64_t a, b;
    if (n >= 16) {
        uint64_t c, e;
        memcpy(&a, p, 8);
        memcpy(&b, p + 8, 8);
        memcpy(&c, p + n - 16, 8);
        memcpy(&e, p + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + 8, &b, 8);
        memcpy(d + n - 16, &c, 8);
        memcpy(d + n - 8, &e, 8);
    } else if (n >= 8) {
        memcpy(&a, p, 8);
        memcpy(&b, p + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + n - 8, &b, 8);
    } else if (n >= 4) {
        uint32_t x, y;
        memcpy(&x, p, 4);
        memcpy(&y, p + n - 4, 4);
        memcpy(d, &x, 4);
        memcpy(d + n - 4, &y, 4);
    } else {
        for (size_t i = 0; i < n; i++)
            d[i] = (char)p[i];
    }
}

/* A field's name or value into the exchange's arena; inline for the
 * common case (a short one, room in the current chunk): a call to the
 * arena and one to memcpy cost more than the copy. */
__attribute__((always_inline)) static inline flare_str_t adup(struct flare_req *ex,
                                                              const uint8_t *p, size_t n)
{
    char *d = n <= 32 ? flare__arena_try(&ex->arena, n | 1) : NULL;
    if (d != NULL)
        copy32(d, p, n);
    else
        d = flare__arena_dup(&ex->arena, (const char *)p, n);
    return d != NULL ? (flare_str_t){ d, n } : FLARE_STR_NULL;
}

/* RFC 9113 8.1.1: a malformed request is a stream error PROTOCOL_ERROR;
 * the stream is never dispatched and what else comes for it is dropped. */
static int malformed(nghttp2_session *sess, h2_stream_t *st)
{
    st->flags |= ST_MALFORMED;
    ready_remove(st->h2, st);
    nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_PROTOCOL_ERROR);
    return 0;
}

/* The DATA received agrees with the request's content-length (8.1.1). */
static bool body_agrees(const h2_stream_t *st)
{
    int64_t cl = st->ex->head.content_length;
    return cl < 0 || st->body_len == (uint64_t)cl;
}

/* A trailer field (a HEADERS after the head, ending the stream): kept
 * apart from the head's fields (flare_req_trailer), never merged into them
 * nor into the cookie: a front proxy that strips Cookie or Authorization
 * from the head must not be bypassed by sending them after the body. */
static int on_trailer(h2_stream_t *st, const uint8_t *name, size_t nlen, const uint8_t *value,
                      size_t vlen)
{
    struct flare_req *ex = st->ex;
    if (flare_req_trailer_count(ex) >= ex->worker->app->limits.max_headers) {
        st->err_status = 431;
        st->err_msg = "too many trailer fields";
        return 0;
    }
    flare_str_t n = adup(ex, name, nlen);
    flare_str_t v = vlen > 0 ? adup(ex, value, vlen) : (flare_str_t){ "", 0 };
    if (n.ptr == NULL || v.ptr == NULL || flare__ex_trailer_add(ex, n, v) != 0) {
        st->err_status = 500;
        st->err_msg = "out of memory";
    }
    return 0;
}

static int on_header(nghttp2_session *sess, const nghttp2_frame *f, const uint8_t *name,
                     size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
    (void)flags;
    flare_h2_t *h2 = ud;
    h2_stream_t *st = h2->hot;
    if (flare__unlikely(st == NULL || st->id != f->hd.stream_id))
        st = stream_of(h2, f->hd.stream_id);
    if (st == NULL || st->err_status != 0 || (st->flags & (ST_DISPATCHED | ST_MALFORMED)))
        return 0;
    bool trailer = f->headers.cat != NGHTTP2_HCAT_REQUEST;
    int kind = flare__h2_check_field(&st->seen, trailer, name, nlen, value, vlen);
    if (kind == H2F_BAD)
        return malformed(sess, st);
    struct flare_req *ex = st->ex;
    const flare_http_limits_t *lim = &ex->worker->app->limits;
    flare_http_head_t *h = &ex->head;
    /* counted before anything is held: an HPACK bomb stops here. A cookie
     * field after the first also counts what it adds to the joined value
     * (and the first field's value the first time): with HPACK indexing a
     * repeated "cookie: a" costs the client one byte */
    bool crumb = nlen == 6 && st->cookie_ix != 0 && memcmp(name, "cookie", 6) == 0;
    st->hdr_bytes += nlen + vlen + 32;
    if (crumb)
        st->hdr_bytes +=
            vlen + 2 + (st->crumbs == NULL ? h->headers[st->cookie_ix - 1].value.len : 0);
    if (st->hdr_bytes > lim->max_head) {
        st->err_status = 431;
        st->err_msg = "header list too large";
        return 0;
    }
    flare_str_t v;
    switch (kind) {
    case H2F_SCHEME:
        return 0;
    case H2F_METHOD:
        /* a method Flare knows is its static name, not a copy */
        h->method_id = flare__http_method_id((const char *)value, vlen);
        if (h->method_id != FLARE_METHOD_OTHER) {
            h->method = flare_method_name(h->method_id);
            return 0;
        }
        v = adup(ex, value, vlen);
        if (v.ptr == NULL) /* not empty: fields.c */
            goto nomem;
        h->method = v;
        return 0;
    case H2F_PATH:
    case H2F_AUTHORITY:
        v = adup(ex, value, vlen);
        if (v.ptr == NULL && vlen > 0)
            goto nomem;
        if (kind == H2F_PATH)
            h->target = v;
        else
            h->host = v;
        return 0;
    default:
        break;
    }
    if (trailer)
        return on_trailer(st, name, nlen, value, vlen);
    if (h->nheaders >= lim->max_headers) {
        st->err_status = 431;
        st->err_msg = "too many header fields";
        return 0;
    }
    if (crumb) {
        /* kept as it came; joined once, at the block's end (join_cookies) */
        h2_crumb_t *cr = flare__arena_alloc(&ex->arena, sizeof(*cr) + vlen);
        if (cr == NULL)
            goto nomem;
        cr->next = NULL;
        cr->len = vlen;
        memcpy(cr->data, value, vlen);
        if (st->crumbs_last != NULL)
            st->crumbs_last->next = cr;
        else
            st->crumbs = cr;
        st->crumbs_last = cr;
        return 0;
    }
    flare_header_t *hf = &h->headers[h->nheaders];
    hf->name = adup(ex, name, nlen);
    hf->value = adup(ex, value, vlen);
    if (hf->name.ptr == NULL || (hf->value.ptr == NULL && vlen > 0))
        goto nomem;
    if (vlen == 0)
        hf->value = (flare_str_t){ "", 0 };
    h->nheaders++;
    if (nlen == 6 && memcmp(name, "cookie", 6) == 0)
        st->cookie_ix = (uint32_t)h->nheaders; /* the field's index + 1 */
    if (kind == H2F_CLEN)
        flare__h2_content_length(value, vlen, &h->content_length);
    else if (kind == H2F_HOST && !trailer && h->host.len == 0)
        h->host = hf->value;
    return 0;
nomem:
    st->err_status = 500;
    st->err_msg = "out of memory";
    return 0;
}

/* RFC 9113 8.2.3: the block's cookie fields become one again for the
 * rest of Flare, "; " between them: one copy of each crumb (their bytes
 * were counted against max_head as they came). */
static void join_cookies(h2_stream_t *st)
{
    struct flare_req *ex = st->ex;
    flare_header_t *hf = &ex->head.headers[st->cookie_ix - 1];
    size_t n = hf->value.len;
    for (const h2_crumb_t *cr = st->crumbs; cr != NULL; cr = cr->next)
        n += 2 + cr->len;
    char *j = flare__arena_alloc(&ex->arena, n);
    if (j == NULL) {
        st->err_status = 500;
        st->err_msg = "out of memory";
        return;
    }
    memcpy(j, hf->value.ptr, hf->value.len);
    size_t at = hf->value.len;
    for (const h2_crumb_t *cr = st->crumbs; cr != NULL; cr = cr->next) {
        memcpy(j + at, "; ", 2);
        memcpy(j + at + 2, cr->data, cr->len);
        at += 2 + cr->len;
    }
    hf->value = (flare_str_t){ j, n };
    st->crumbs = st->crumbs_last = NULL;
}

/* ---- the body budget ----
 *
 * Each stream's body is bounded by max_body, but a connection has up to
 * H2_MAX_STREAMS of them: past max_conn_body (at least max_body) buffered
 * on the connection, the window of what arrives is not given back (neither
 * the stream's nor the connection's), so the client stops within the
 * connection window. It is given back once bodies are answered and their
 * streams end (budget_release). Two rules keep a client that means no
 * harm going:
 * - the oldest stream receiving a body (the leader) always gets its window
 *   back: its body (<= max_body) completes, is answered, and frees its part;
 * - the connection window must stay open for the leader: when more than
 *   half of it is held back, the youngest streams holding it back are
 *   refused (REFUSED_STREAM: never processed, a client may send them again,
 *   RFC 9113 8.7), and their part of the window is given back. */

static bool receiving(const h2_stream_t *st)
{
    return st->err_status == 0 &&
           !(st->flags & (ST_ENDED_IN | ST_DISPATCHED | ST_ANSWERED | ST_MALFORMED));
}

static uint64_t budget(const flare_h2_t *h2)
{
    const flare_config_t *cfg = &h2->w->app->cfg;
    return cfg->max_conn_body > cfg->max_body ? cfg->max_conn_body : cfg->max_body;
}

static h2_stream_t *leader(flare_h2_t *h2)
{
    if (h2->leader != NULL && receiving(h2->leader))
        return h2->leader;
    h2_stream_t *best = NULL;
    for (h2_stream_t *st = h2->streams; st != NULL; st = st->next)
        if (st->held > 0 && receiving(st) && (best == NULL || st->id < best->id))
            best = st;
    return h2->leader = best;
}

static void give_back(flare_h2_t *h2, h2_stream_t *st)
{
    nghttp2_session_consume(h2->sess, st->id, st->owed);
    h2->owed -= st->owed;
    st->owed = 0;
}

/* Some window is held back and bodies were answered, streams ended, or the
 * leader changed: the leader's comes back, then the oldest streams' while
 * the connection holds less than its budget. */
static void budget_release(flare_h2_t *h2)
{
    if (h2->owed == 0 || flare__conn_dead(h2->c))
        return;
    h2_stream_t *ld = leader(h2);
    if (ld != NULL && ld->owed > 0)
        give_back(h2, ld);
    while (h2->owed > 0 && h2->held < budget(h2)) {
        h2_stream_t *best = NULL;
        for (h2_stream_t *st = h2->streams; st != NULL; st = st->next)
            if (st->owed > 0 && (best == NULL || st->id < best->id))
                best = st;
        if (best == NULL)
            break;
        give_back(h2, best);
    }
}

/* More than half the connection window held back: the leader could not go
 * on. The youngest streams still receiving are refused until it is less. */
static void budget_refuse(flare_h2_t *h2)
{
    h2_stream_t *ld = leader(h2);
    while (h2->owed > H2_CONN_WINDOW / 2) {
        h2_stream_t *young = NULL;
        for (h2_stream_t *st = h2->streams; st != NULL; st = st->next)
            if (st->owed > 0 && st != ld && receiving(st) && (young == NULL || st->id > young->id))
                young = st;
        if (young == NULL)
            return;                   /* what is held back belongs to bodies being answered */
        young->flags |= ST_MALFORMED; /* never dispatched, what else comes is dropped */
        ready_remove(h2, young);
        nghttp2_submit_rst_stream(h2->sess, NGHTTP2_FLAG_NONE, young->id, NGHTTP2_REFUSED_STREAM);
        nghttp2_session_consume_connection(h2->sess, young->owed);
        h2->owed -= young->owed;
        young->owed = 0;
    }
}

static int on_data(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data,
                   size_t len, void *ud)
{
    (void)flags;
    flare_h2_t *h2 = ud;
    h2_stream_t *st = stream_of(h2, id);
    struct flare_req *ex;
    if (st == NULL || st->err_status != 0 ||
        (st->flags & (ST_DISPATCHED | ST_ANSWERED | ST_MALFORMED)))
        goto drop;
    ex = st->ex;
    st->t_body = h2->t_activity = h2->w->loop.now;
    st->body_len += len;
    if (ex->head.content_length >= 0 && st->body_len > (uint64_t)ex->head.content_length) {
        malformed(sess, st);
        goto drop;
    }
    if (st->body_len > ex->worker->app->cfg.max_body) {
        st->err_status = 413;
        st->err_msg = "request body too large";
        make_ready(h2, st); /* answered now, not after the body */
        goto drop;
    }
    if (flare__buf_append(&ex->bodybuf, (const char *)data, len) != 0) {
        st->err_status = 500;
        st->err_msg = "out of memory";
        make_ready(h2, st);
        goto drop;
    }
    st->held += len;
    h2->held += len;
    if (h2->held > budget(h2) && st != leader(h2)) {
        st->owed += len; /* the window stays closed by this much */
        h2->owed += len;
        if (h2->owed > H2_CONN_WINDOW / 2)
            budget_refuse(h2);
        return 0;
    }
drop:
    nghttp2_session_consume(sess, id, len); /* buffered within the budget, or dropped */
    return 0;
}

static int on_frame_recv(nghttp2_session *sess, const nghttp2_frame *f, void *ud)
{
    flare_h2_t *h2 = ud;
    h2_stream_t *st = h2->hot;
    if (st == NULL || st->id != f->hd.stream_id)
        st = f->hd.stream_id != 0 ? stream_of(h2, f->hd.stream_id) : NULL;
    switch (f->hd.type) {
    case NGHTTP2_HEADERS:
        if (st == NULL || (st->flags & ST_MALFORMED))
            return 0;
        if (st->crumbs != NULL && st->err_status == 0)
            join_cookies(st);
        if (st->err_status == 0 && !(st->flags & (ST_DISPATCHED | ST_ANSWERED))) {
            bool end = f->hd.flags & NGHTTP2_FLAG_END_STREAM;
            if (f->headers.cat == NGHTTP2_HCAT_REQUEST
                    ? !flare__h2_head_ok(st->seen, st->ex->head.method_id == FLARE_METHOD_CONNECT)
                    : !end) /* trailers end the stream (8.1) */
                return malformed(sess, st);
            if (end && !body_agrees(st))
                return malformed(sess, st);
        }
        if (f->hd.flags & NGHTTP2_FLAG_END_STREAM) {
            st->flags |= ST_ENDED_IN;
            make_ready(h2, st);
        } else if (st->err_status != 0) {
            make_ready(h2, st);
        } else if (f->headers.cat == NGHTTP2_HCAT_REQUEST) {
            st->t_body = h2->w->loop.now; /* the body's clock starts with it */
            int64_t cl = st->ex->head.content_length;
            if (cl > 0 && (uint64_t)cl > st->ex->worker->app->cfg.max_body) {
                st->err_status = 413;
                st->err_msg = "request body too large";
                make_ready(h2, st);
            }
        }
        break;
    case NGHTTP2_DATA:
        if (st != NULL && (f->hd.flags & NGHTTP2_FLAG_END_STREAM) && !(st->flags & ST_MALFORMED)) {
            if (st->err_status == 0 && !(st->flags & (ST_DISPATCHED | ST_ANSWERED)) &&
                !body_agrees(st))
                return malformed(sess, st);
            st->flags |= ST_ENDED_IN;
            make_ready(h2, st);
        }
        break;
    case NGHTTP2_RST_STREAM:
        /* rapid reset: streams the client opens and cancels before their
         * response is complete */
        window_roll(h2);
        h2->ctr.resets++;
        if (++h2->w_resets > H2_MAX_RESETS)
            return calm(h2, FLARE__H2F_RAPID_RESET, "rapid reset");
        break;
    default:
        break;
    }
    return 0;
}

static int on_frame_send(nghttp2_session *sess, const nghttp2_frame *f, void *ud)
{
    flare_h2_t *h2 = ud;
    if (f->hd.type == NGHTTP2_RST_STREAM) {
        note_reset(h2, f->hd.stream_id);
        flare__metrics_h2(h2->w, FLARE__H2C_RST);
    } else if (f->hd.type == NGHTTP2_GOAWAY) {
        flare__metrics_h2(h2->w, flare__metrics_h2_goaway(f->goaway.error_code));
    }
    if (f->hd.type == NGHTTP2_DATA || f->hd.type == NGHTTP2_HEADERS) {
        h2->t_out = h2->w->loop.now;
        if (f->hd.type == NGHTTP2_DATA)
            h2->w_data_out++;
        /* answered before the request ended (413, an early error): tell
         * the client to stop sending (RFC 9113 8.1). ST_ENDED_IN is what
         * nghttp2_session_get_stream_remote_close says (a map lookup) */
        if (f->hd.flags & NGHTTP2_FLAG_END_STREAM) {
            h2_stream_t *st = stream_of(h2, f->hd.stream_id);
            if (st != NULL && !(st->flags & ST_ENDED_IN))
                nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, f->hd.stream_id,
                                          NGHTTP2_NO_ERROR);
        }
    }
    return 0;
}

static int on_stream_close(nghttp2_session *sess, int32_t id, uint32_t code, void *ud)
{
    (void)sess, (void)code;
    flare_h2_t *h2 = ud;
    h2_stream_t *st = stream_of(h2, id);
    if (st != NULL)
        stream_free(h2, st);
    return 0;
}

/* Builds what the request line gave HTTP/1.1: target, path, query. */
static bool finish_head(h2_stream_t *st)
{
    struct flare_req *ex = st->ex;
    flare_http_head_t *h = &ex->head;
    const flare_http_limits_t *lim = &ex->worker->app->limits;
    if (h->method_id == FLARE_METHOD_CONNECT) {
        h->path = h->target = h->host;
        return true;
    }
    if (h->target.len > lim->max_request_line) {
        flare__h2_error(st, 414, "request target too long");
        return false;
    }
    const char *t = h->target.ptr;
    size_t n = h->target.len;
    if (n == 0 || (t[0] != '/' && !(n == 1 && t[0] == '*'))) {
        flare__h2_error(st, 400, "invalid :path");
        return false;
    }
    unsigned cls = flare__h2_target_class((const uint8_t *)t, n);
    if (cls & H2T_PLAIN) {
        h->path = h->target;
        h->query = (flare_str_t){ t + n, 0 };
        return true;
    }
    if (!(cls & H2T_TARGET)) {
        flare__h2_error(st, 400, "invalid :path");
        return false;
    }
    const char *q = memchr(t, '?', n);
    size_t plen = q != NULL ? (size_t)(q - t) : n;
    h->path = (flare_str_t){ t, plen };
    h->query = q != NULL ? (flare_str_t){ q + 1, n - plen - 1 } : (flare_str_t){ t + n, 0 };
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)t[i];
        if (ch <= 0x20 || ch == 0x7f) {
            flare__h2_error(st, 400, "invalid :path");
            return false;
        }
        if (ch == '%' && i < plen) {
            if (i + 2 >= plen || flare__hexval((unsigned char)t[i + 1]) < 0 ||
                flare__hexval((unsigned char)t[i + 2]) < 0) {
                flare__h2_error(st, 400, "invalid percent-encoding in path");
                return false;
            }
            h->path_pct = true;
        }
    }
    return true;
}

/* Runs what the batch made ready, outside nghttp2's callbacks. */
static void dispatch_ready(flare_h2_t *h2)
{
    flare_app_t *app = h2->w->app;
    h2_stream_t *st;
    while ((st = h2->ready) != NULL && !flare__conn_dead(h2->c)) {
        h2->ready = st->rnext;
        if (h2->ready == NULL)
            h2->ready_tail = &h2->ready;
        st->flags &= ~(uint32_t)ST_READY;
        st->flags |= ST_DISPATCHED;
        struct flare_req *ex = st->ex;
        if (st->err_status != 0) {
            flare__h2_error(st, st->err_status, st->err_msg);
            continue;
        }
        if (!finish_head(st))
            continue;
        ex->body.ptr = ex->bodybuf.data;
        ex->body.len = ex->bodybuf.len;
        flare__http_route(app, ex);
        flare__http_dispatch(ex);
    }
}

/* ---- output ---- */

static void h2_close(flare_h2_t *h2, bool clean)
{
    if (clean)
        flare__conn_close(h2->c, true);
    else
        flare__conn_close(h2->c, false);
}

/* The connection is finished with: nothing more to read or write. */
static void maybe_close(flare_h2_t *h2)
{
    flare_conn_t *c = h2->c;
    if (flare__conn_dead(c) || flare__stream_has_output(&c->s))
        return;
    bool done = (!nghttp2_session_want_read(h2->sess) && !nghttp2_session_want_write(h2->sess)) ||
                (h2->flags & H2_CLOSING) || ((h2->flags & H2_GOAWAY) && h2->nstreams == 0);
    if (!done)
        return;
    if (c->s.sflags & FLARE_S_RD_EOF) {
        h2_close(h2, true);
        return;
    }
    /* the GOAWAY must not be lost to a reset of unread input */
    if (!(c->s.sflags & FLARE_S_LINGER))
        flare__stream_linger(&c->s);
}

/* mem_send until nghttp2 has nothing (or too much is queued), then one
 * write. false when the connection was closed. */
static bool send_flush(flare_h2_t *h2)
{
    flare_conn_t *c = h2->c;
    budget_release(h2);
    for (;;) {
        while (flare__stream_unsent(&c->s) < H2_MAX_UNSENT) {
            const uint8_t *data;
            ssize_t n = nghttp2_session_mem_send(h2->sess, &data);
            if (n < 0) {
                h2_close(h2, false);
                return false;
            }
            if (n == 0)
                break;
            /* the chunk is copied before the next call */
            if (flare__buf_append(flare__stream_wbuf(&c->s), (const char *)data, (size_t)n) != 0) {
                h2_close(h2, false);
                return false;
            }
        }
        size_t before = flare__stream_unsent(&c->s);
        int rc = flare__stream_flush(&c->s);
        if (flare__conn_worker(c)->metrics != NULL && before > flare__stream_unsent(&c->s))
            flare__metrics_tx(flare__conn_worker(c), before - flare__stream_unsent(&c->s));
        if (rc < 0) {
            h2_close(h2, false);
            return false;
        }
        if (rc == 0) {
            /* blocked: stop reading while a lot waits */
            if (flare__stream_unsent(&c->s) >= H2_MAX_UNSENT && !(h2->flags & H2_PAUSED)) {
                h2->flags |= H2_PAUSED;
                flare__stream_read_enable(&c->s, false);
            }
            return true;
        }
        if (h2->flags & H2_PAUSED) {
            h2->flags &= ~(uint32_t)H2_PAUSED;
            flare__stream_read_enable(&c->s, true);
        }
        if (!nghttp2_session_want_write(h2->sess))
            break;
    }
    maybe_close(h2);
    return !flare__conn_dead(c);
}

void flare__h2_output(flare_h2_t *h2)
{
    if (h2->flags & H2_IN_BATCH || flare__conn_dead(h2->c))
        return;
    send_flush(h2);
    if (!flare__conn_dead(h2->c))
        flare__stream_idle(&h2->c->s);
}

/* A connection error: GOAWAY with the code, then close once it is out. */
static void fail(flare_h2_t *h2, uint32_t code, const char *why)
{
    if (h2->flags & H2_CLOSING)
        return;
    h2->flags |= H2_CLOSING;
    h2->why = why;
    nghttp2_session_terminate_session(h2->sess, code);
}

/* DATA on a client stream nghttp2 no longer knows. With
 * nghttp2_option_set_no_closed_streams it forgets a stream once it is
 * closed (both ways after our response, or reset by the client), and then
 * drops its DATA silently, before any callback. RFC 9113 5.1 makes it a
 * STREAM_CLOSED error ("closed"; and "half-closed (remote)" when our
 * response closed the stream before the client's late DATA came): a stream
 * error here. (A stream nghttp2 still knows as half-closed (remote) gets
 * nghttp2's own verdict, GOAWAY STREAM_CLOSED: a stream error treated as a
 * connection error, 5.4.) Streams this side reset are the exception (5.1:
 * their frames may still be on the way: ignored); one RST_STREAM per
 * stream (it is noted as ours once sent). */
static void data_on_closed_stream(flare_h2_t *h2, int32_t id)
{
    nghttp2_session *sess = h2->sess;
    if ((id & 1) == 0 || (h2->flags & H2_IN_HDRS) || stream_of(h2, id) != NULL ||
        id > nghttp2_session_get_last_proc_stream_id(sess) ||
        nghttp2_session_find_stream(sess, id) != NULL || reset_by_us(h2, id))
        return;
    nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, id, NGHTTP2_STREAM_CLOSED);
}

/* Input to nghttp2, cut before each DATA frame's header so that the
 * frame's stream is looked at in the state the frames before it left
 * (data_on_closed_stream): a client's RST_STREAM and its late DATA often
 * share a read. Only frame headers are looked at (in_left skips payloads;
 * a header split between reads is completed in in_hd); nghttp2 still
 * parses everything. mem_recv's result, or the first error. */
static ssize_t recv_frames(flare_h2_t *h2, const uint8_t *p, size_t len)
{
    const uint8_t *end = p + len, *fed = p, *prio_at = p;
    while (p < end) {
        if (flare__unlikely(h2->prio_left > 0)) {
            while (h2->prio_left > 0 && p < end) {
                h2->prio_dep = h2->prio_dep << 8 | *p++;
                h2->in_left--;
                if (--h2->prio_left == 0 && (h2->prio_dep & 0x7fffffff) == (uint32_t)h2->prio_sid) {
                    /* RFC 9113 5.3.1: a stream error; a connection error here
                     * (5.4.1), as nghttp2 made it. What came before the frame
                     * is nghttp2's first. */
                    if (prio_at > fed) {
                        ssize_t n =
                            nghttp2_session_mem_recv(h2->sess, fed, (size_t)(prio_at - fed));
                        if (n < 0)
                            return n;
                    }
                    return proto_error(h2, NGHTTP2_PROTOCOL_ERROR, "PRIORITY: depends on itself");
                }
            }
        }
        if (h2->in_left > 0) {
            size_t k = (size_t)(end - p) < h2->in_left ? (size_t)(end - p) : h2->in_left;
            p += k;
            h2->in_left -= (uint32_t)k;
            continue;
        }
        const uint8_t *hs = p, *hd = p;
        if (h2->in_hdlen == 0 && end - p >= 9) {
            p += 9;
        } else {
            size_t k = 9u - h2->in_hdlen;
            if ((size_t)(end - p) < k)
                k = (size_t)(end - p);
            memcpy(h2->in_hd + h2->in_hdlen, p, k);
            h2->in_hdlen += (uint8_t)k;
            p += k;
            if (h2->in_hdlen < 9)
                break;
            h2->in_hdlen = 0;
            hd = h2->in_hd;
        }
        h2->in_left = (uint32_t)hd[0] << 16 | (uint32_t)hd[1] << 8 | hd[2];
        if (hd[3] != NGHTTP2_DATA && hd[3] != NGHTTP2_PRIORITY) {
            /* its payload passes at once (most frames are whole in the read) */
            size_t k = (size_t)(end - p) < h2->in_left ? (size_t)(end - p) : h2->in_left;
            p += k;
            h2->in_left -= (uint32_t)k;
            continue;
        }
        int32_t id = (int32_t)(((uint32_t)hd[5] << 24 | (uint32_t)hd[6] << 16 |
                                (uint32_t)hd[7] << 8 | hd[8]) &
                               0x7fffffff);
        if (hd[3] == NGHTTP2_PRIORITY) {
            /* its stream dependency (the payload's first 4 bytes, of 5: any
             * other length is nghttp2's FRAME_SIZE_ERROR) is looked at as
             * it comes in, maybe in a later read (prio_left) */
            if (h2->in_left == 5 && id != 0) {
                prio_at = hs;
                h2->prio_sid = id;
                h2->prio_left = 4;
                h2->prio_dep = 0;
            }
            continue;
        }
        if (hs > fed) {
            ssize_t n = nghttp2_session_mem_recv(h2->sess, fed, (size_t)(hs - fed));
            if (n < 0)
                return n;
            fed = hs;
        }
        data_on_closed_stream(h2, id);
    }
    return nghttp2_session_mem_recv(h2->sess, fed, (size_t)(end - fed));
}

/* Feeds the unconsumed input to nghttp2; false when the connection ended. */
static bool feed(flare_h2_t *h2)
{
    flare_stream_t *s = &h2->c->s;
    if (s->rpos == s->rlen || (h2->flags & H2_CLOSING)) {
        s->rpos = s->rlen;
        return true;
    }
    h2->flags |= H2_IN_RECV;
    ssize_t n = recv_frames(h2, (const uint8_t *)s->rbuf + s->rpos, s->rlen - s->rpos);
    h2->flags &= ~(uint32_t)H2_IN_RECV;
    s->rpos = s->rlen;
    if (n < 0) {
        if (n == H2_ERR_TOO_MANY_CONT)
            (void)calm(h2, FLARE__H2F_CONTINUATION, "CONTINUATION flood");
        if (h2->goaway_code != 0 &&
            (n == NGHTTP2_ERR_CALLBACK_FAILURE || n == H2_ERR_TOO_MANY_CONT))
            fail(h2, h2->goaway_code, h2->why);
        else if (n == NGHTTP2_ERR_BAD_CLIENT_MAGIC)
            fail(h2, NGHTTP2_PROTOCOL_ERROR, "bad client preface");
        else if (n == NGHTTP2_ERR_NOMEM)
            fail(h2, NGHTTP2_INTERNAL_ERROR, "out of memory");
        else
            fail(h2, NGHTTP2_PROTOCOL_ERROR, nghttp2_strerror((int)n));
        flare_log(h2->w, FLARE_LOG_INFO, "http2: connection error: %s", h2->why);
    }
    return true;
}

static void on_readable(flare_h2_t *h2)
{
    flare_conn_t *c = h2->c;
    flare_stream_t *s = &c->s;
    if (s->sflags & FLARE_S_LINGER) {
        if (flare__stream_linger_read(s))
            flare__conn_close(c, false);
        return;
    }
    h2->flags |= H2_IN_BATCH;
    do {
        ssize_t n = flare__stream_read(s, FLARE_CONN_BUF);
        if (n < 0) {
            if (n != -EAGAIN) {
                h2_close(h2, false);
                return;
            }
            break;
        }
        if (n == 0) {
            h2->flags &= ~(uint32_t)H2_IN_BATCH;
            h2_close(h2, true); /* the client is gone: its streams with it */
            return;
        }
        flare__metrics_rx(flare__conn_worker(c), (size_t)n);
        feed(h2);
        dispatch_ready(h2);
        if (flare__conn_dead(c))
            return;
    } while (flare__stream_has_pending(s) && !(h2->flags & (H2_PAUSED | H2_CLOSING)));
    h2->flags &= ~(uint32_t)H2_IN_BATCH;
    if (send_flush(h2))
        flare__stream_idle(s);
}

/* After I/O on a connection with streamed responses (H2_STREAM_OUT): the
 * drain callback of each backpressured one whose output has fallen far
 * enough (flow control or the socket). From the I/O callback only, never
 * nested in a call of the application. The callbacks may end streams: the
 * list is walked again until a pass calls none. */
static void stream_out_check(flare_h2_t *h2)
{
    bool streaming;
    bool again = true;
    while (again) {
        again = false;
        streaming = false;
        for (h2_stream_t *st = h2->streams; st != NULL; st = st->next) {
            struct flare_req *ex = st->ex;
            if (ex == NULL || !(ex->flags & EX_STREAM) || (ex->flags & EX_SENT))
                continue;
            streaming = true;
            if ((ex->flags & EX_BACKPRESSURED) && flare__res_drain_check(ex)) {
                /* the callback may have ended streams (this one too):
                 * walk again from the start; a drained stream cannot
                 * drain again before the next I/O, so this ends */
                if (flare__conn_dead(h2->c))
                    return;
                again = true;
                break;
            }
        }
    }
    if (!streaming)
        h2->flags &= ~(uint32_t)H2_STREAM_OUT;
}

static void h2_io_cb(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    (void)l;
    flare_conn_t *c = (flare_conn_t *)io;
    if (flare__conn_dead(c))
        return;
    flare_h2_t *h2 = H2(c);
    events = flare__stream_ready(&c->s, events);
    if ((events & FLARE_IO_ERR) && !(events & FLARE_IO_READ)) {
        h2_close(h2, false);
        return;
    }
    if (events & FLARE_IO_WRITE) {
        if (!send_flush(h2))
            return;
    }
    if (events & (FLARE_IO_READ | FLARE_IO_HUP | FLARE_IO_ERR)) {
        if ((c->s.sflags & FLARE_S_RD_EOF) && !(c->s.sflags & FLARE_S_LINGER)) {
            if (events & (FLARE_IO_HUP | FLARE_IO_ERR))
                h2_close(h2, false);
            return;
        }
        on_readable(h2);
    }
    if (flare__unlikely(h2->flags & H2_STREAM_OUT) && !flare__conn_dead(c))
        stream_out_check(h2);
}

/* ---- start, sweep, drain, end ---- */

static void h2_drain(flare_conn_t *c);

void flare__h2_start(flare_conn_t *c)
{
    flare_worker_t *w = flare__conn_worker(c);
    flare_h2_t *h2 = calloc(1, sizeof(*h2));
    nghttp2_session_callbacks *cb = NULL;
    nghttp2_option *opt = NULL;
    if (h2 == NULL || nghttp2_session_callbacks_new(&cb) != 0 || nghttp2_option_new(&opt) != 0)
        goto fail;
    nghttp2_session_callbacks_set_on_begin_frame_callback(cb, flare__h2_on_begin_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_send_data_callback(cb, flare__h2_send_data);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_outbound_ack(opt, 1000);
    nghttp2_option_set_max_settings(opt, 32);
    nghttp2_option_set_no_closed_streams(opt, 1);
    nghttp2_option_set_no_http_messaging(opt, 1); /* fields.c checks the fields */
    h2->c = c;
    h2->w = w;
    h2->in_left = PREFACE_LEN; /* recv_frames: the client preface comes first */
    h2->ready_tail = &h2->ready;
    h2->t_win = h2->t_activity = h2->t_out = w->loop.now;
    if (flare__h2_nghttp2_mem(w, &h2->mem) != 0 ||
        nghttp2_session_server_new3(&h2->sess, cb, h2, opt, &h2->mem) != 0)
        goto fail;
    nghttp2_session_callbacks_del(cb);
    nghttp2_option_del(opt);
    cb = NULL;
    opt = NULL;
    size_t mhl = w->app->limits.max_head;
    nghttp2_settings_entry iv[] = {
        { NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, H2_MAX_STREAMS },
        { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_STREAM_WINDOW },
        { NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, mhl > UINT32_MAX ? UINT32_MAX : (uint32_t)mhl },
        { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
        { NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1 },
    };
    if (nghttp2_submit_settings(h2->sess, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) != 0 ||
        nghttp2_session_set_local_window_size(h2->sess, NGHTTP2_FLAG_NONE, 0, H2_CONN_WINDOW) != 0)
        goto fail;
    /* in place: HTTP/1.1's fields (its queue is empty) give way to the
     * session pointer, its ops and io callback to HTTP/2's */
    c->ops = &flare__h2_conn_ops;
    ((flare_h2conn_t *)c)->h2 = h2;
    c->s.io.cb = h2_io_cb;
    flare__metrics_h2(w, FLARE__H2C_CONNS);
    if (w->draining)
        h2_drain(c);
    h2->flags |= H2_IN_BATCH;
    feed(h2);
    dispatch_ready(h2);
    if (flare__conn_dead(c))
        return;
    h2->flags &= ~(uint32_t)H2_IN_BATCH;
    if (send_flush(h2))
        flare__stream_idle(&c->s);
    /* TLS records already read from the socket: the poller will not say */
    if (!flare__conn_dead(c) && flare__stream_has_pending(&c->s))
        flare__loop_ready(c->s.loop, &c->s.io);
    return;
fail:
    if (cb != NULL)
        nghttp2_session_callbacks_del(cb);
    if (opt != NULL)
        nghttp2_option_del(opt);
    if (h2 != NULL && h2->sess != NULL)
        nghttp2_session_del(h2->sess);
    free(h2);
    flare__conn_close(c, false); /* still HTTP/1.1's (nothing in flight) */
}

/* Whether a stream has response bytes waiting for the peer's window. */
static bool owes_data(const h2_stream_t *st)
{
    if (st->src == SRC_REF || st->src == SRC_FILE || st->src == SRC_BUF)
        return true;
    return st->src == SRC_STREAM && st->ex != NULL && st->ex->out.len > st->opos;
}

static void h2_sweep(flare_conn_t *c, uint64_t now)
{
    flare_h2_t *h2 = H2(c);
    flare_worker_t *w = h2->w;
    const flare_config_t *cfg = &w->app->cfg;
    if (c->s.sflags & FLARE_S_LINGER) {
        if (now - c->s.t_active > FLARE_LINGER_MS)
            flare__conn_close(c, false);
        return;
    }
    if (flare__stream_has_output(&c->s) && (c->s.sflags & FLARE_S_WANT_WRITE) &&
        now - c->s.t_active > cfg->write_timeout_ms) {
        flare__metrics_timeout(w, FLARE__TO_WRITE);
        flare__conn_close(c, false);
        return;
    }
    bool owes = false;
    for (h2_stream_t *st = h2->streams, *next; st != NULL; st = next) {
        next = st->next;
        if (owes_data(st))
            owes = true;
        /* a stream still in its header block is under the header timeout */
        if (!(st->flags & (ST_DISPATCHED | ST_READY | ST_ENDED_IN)) && st->err_status == 0 &&
            now - st->t_body > cfg->body_timeout_ms &&
            !((h2->flags & H2_IN_HDRS) && st->id == h2->hdrs_sid)) {
            flare__metrics_timeout(w, FLARE__TO_BODY);
            st->err_status = 408;
            st->err_msg = "request body timeout";
            make_ready(h2, st);
        }
    }
    /* a peer that keeps its window shut: no output can move, nothing to poll */
    if (owes && now - h2->t_out > cfg->write_timeout_ms) {
        flare__metrics_timeout(w, FLARE__TO_WRITE);
        flare_log(w, FLARE_LOG_INFO, "http2: flow-control window closed for too long");
        flare__conn_close(c, false);
        return;
    }
    /* a header block left open holds the whole connection (no other frame
     * may come before its end): the header timeout, as for HTTP/1.1's head;
     * CONTINUATION frames trickling in do not extend it */
    if ((h2->flags & (H2_IN_HDRS | H2_CLOSING)) == H2_IN_HDRS &&
        now - h2->t_hdrs > cfg->header_timeout_ms) {
        flare__metrics_timeout(w, FLARE__TO_HEADER);
        flare_log(w, FLARE_LOG_INFO, "http2: header block not completed in time");
        fail(h2, NGHTTP2_NO_ERROR, "header timeout");
    }
    if (h2->nstreams == 0 && !(h2->flags & H2_CLOSING) &&
        now - h2->t_activity > cfg->idle_timeout_ms) {
        flare__metrics_timeout(w, FLARE__TO_IDLE);
        fail(h2, NGHTTP2_NO_ERROR, "idle");
    }
    if (w->draining) {
        if (!(h2->flags & H2_NOTICE)) {
            h2_drain(c);
        } else if (!(h2->flags & H2_GOAWAY)) {
            h2->flags |= H2_GOAWAY;
            nghttp2_submit_goaway(h2->sess, NGHTTP2_FLAG_NONE,
                                  nghttp2_session_get_last_proc_stream_id(h2->sess),
                                  NGHTTP2_NO_ERROR, NULL, 0);
        }
        if (now >= w->drain_deadline) {
            flare__conn_close(c, false);
            return;
        }
    }
    h2->flags |= H2_IN_BATCH;
    dispatch_ready(h2);
    if (flare__conn_dead(c))
        return;
    h2->flags &= ~(uint32_t)H2_IN_BATCH;
    send_flush(h2);
}

/* Graceful shutdown: a shutdown notice now, the GOAWAY with the last
 * stream id at the next sweep; in-flight streams complete, then close. */
static void h2_drain(flare_conn_t *c)
{
    flare_h2_t *h2 = H2(c);
    if (h2 == NULL || (h2->flags & H2_NOTICE))
        return;
    h2->flags |= H2_NOTICE;
    nghttp2_submit_shutdown_notice(h2->sess);
    if (!(h2->flags & H2_IN_BATCH))
        send_flush(h2);
}

/* ops->closed: the streams go (their exchanges orphaned). */
static void h2_closed(flare_conn_t *c)
{
    flare_h2_t *h2 = H2(c);
    while (h2->streams != NULL)
        stream_free(h2, h2->streams);
    h2->ready = NULL;
    h2->ready_tail = &h2->ready;
}

static void h2_free(flare_conn_t *c)
{
    flare_h2_t *h2 = H2(c);
    nghttp2_session_del(h2->sess);
    free(h2);
    free(c);
}

static void h2_stats(const flare_conn_t *c, flare_conn_stats_t *st)
{
    const flare_h2_t *h2 = ((const flare_h2conn_t *)c)->h2;
    st->inflight = h2->nstreams;
    st->active = h2->nstreams > 0;
    st->next_out = NULL;
}

const flare_conn_ops_t flare__h2_conn_ops = {
    .name = "h2",
    .kind = FLARE_CONN_HTTP2,
    .closed = h2_closed,
    .sweep = h2_sweep,
    .drain = h2_drain,
    .free = h2_free,
    .stats = h2_stats,
};
