/* WebSocket connections after the hand-off: read -> frames -> messages ->
 * callbacks, sending, the closing handshake, heartbeats and timeouts (the
 * output queue and writing are in out.c).
 *
 * Invariants:
 * - A connection is never freed inside a call that user code made or that
 *   runs inside a user callback: it turns WS_DEAD (socket closed) and goes
 *   on the worker's reap list; a 0 ms timer, which the loop runs after the
 *   current event batch, calls on_close and frees it. So a flare_ws_t stays
 *   valid until on_close returns, whatever the application does meanwhile.
 * - Parse before read, and write after parsing: a read batch parses every
 *   frame it holds; small frames sent meanwhile (echoes, pongs) are queued
 *   and leave in one write at the end of the batch.
 * - An idle connection holds no buffer: the read buffer and queue chunks
 *   come from the worker's FLARE_CONN_BUF pool and go back when empty.
 * - Hub deliveries are queued and every connection they touched gets one
 *   writev after the event batch (flush_dirty), before any reaping.
 * - The socket is closed by us once the closing handshake is done (RFC 6455
 *   7.1.1): write side shut first, then the peer's EOF is awaited (linger)
 *   so our close frame is not lost to a reset. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sys.h"
#include "core/parse.h"
#include "obs/metrics.h"
#include "ws/ws_int.h"

#define KEEP_MSG_BUF 65536 /* reassembly buffers up to this are kept between messages */

_Thread_local ws_worker_t *flare__ws_tls;

static void io_cb(flare_loop_t *l, flare_io_t *io, uint32_t events);
static void sweep_cb(void *ud);
static void reap_cb(void *ud);
static void flush_cb(void *ud);

static inline uint64_t now_ms(const flare_ws_t *ws)
{
    return ws->ww->w->loop.now;
}

/* ---- per-worker state ---- */

ws_worker_t *flare__ws_worker_get(flare_worker_t *w, ws_app_t *wapp)
{
    ws_worker_t *ww = flare__ws_worker(w, wapp);
    if (ww != NULL)
        return ww;
    ww = calloc(1, sizeof(*ww));
    if (ww == NULL)
        return NULL;
    ww->w = w;
    ww->wapp = wapp;
    ww->next_seq = 1;
    flare__timer_init(&ww->sweep_timer, sweep_cb, ww);
    flare__timer_init(&ww->reap_timer, reap_cb, ww);
    flare__timer_init(&ww->flush_timer, flush_cb, ww);
    flare__timer_start(&w->loop, &ww->sweep_timer, wapp->sweep_ms);
    flare__worker_module_set(w, wapp->slot, ww);
    flare__ws_tls = ww;
    return ww;
}

z_stream *flare__ws_shared_deflater(ws_worker_t *ww, unsigned bits, unsigned mem, int level)
{
    if (bits < 9 || bits > 15)
        bits = 15;
    if (ww->sdef[bits] == NULL) {
        z_stream *z = malloc(sizeof(*z));
        if (z == NULL)
            return NULL;
        if (flare__ws_deflate_init(z, level, bits, mem) != 0) {
            free(z);
            return NULL;
        }
        ww->sdef[bits] = z;
    }
    return ww->sdef[bits];
}

static z_stream *shared_inflater(ws_worker_t *ww)
{
    if (ww->sinf == NULL) {
        z_stream *z = malloc(sizeof(*z));
        if (z == NULL)
            return NULL;
        if (flare__ws_inflate_init(z, 15) != 0) {
            free(z);
            return NULL;
        }
        ww->sinf = z;
    }
    return ww->sinf;
}

/* ---- death and reaping ---- */

static void reap_all(ws_worker_t *ww);

static void reap_cb(void *ud)
{
    reap_all(ud);
}

void flare__ws_go_dead(flare_ws_t *ws)
{
    if (ws->state == WS_DEAD)
        return;
    ws_worker_t *ww = ws->ww;
    flare_worker_t *w = ww->w;
    /* the read buffer stays until the reap: a callback that caused this may
     * still hold a payload view into it */
    flare__stream_close_socket(&ws->s, ws->state == WS_LINGER);
    ws->state = WS_DEAD;
    if (ws->flags & WF_COUNTED) {
        ws->flags &= ~(uint32_t)WF_COUNTED;
        flare__worker_conn_release(w); /* a draining worker may stop now */
    }
    ws->flags |= WF_REAPING;
    ws->reap_next = ww->reap;
    ww->reap = ws;
    if (!ww->reap_timer.active)
        flare__timer_start(&w->loop, &ww->reap_timer, 0);
}

void flare__ws_abort(flare_ws_t *ws, uint16_t code)
{
    (void)code; /* dropped without a handshake: on_close reports 1006 */
    flare__ws_go_dead(ws);
}

static void release(flare_ws_t *ws)
{
    ws_worker_t *ww = ws->ww;
    flare__ws_leave_all(ws);
    flare__ws_id_remove(ww, ws);
    if (ws->prev != NULL)
        ws->prev->next = ws->next;
    else
        ww->conns = ws->next;
    if (ws->next != NULL)
        ws->next->prev = ws->prev;
    ww->nconns--;
    flare__metrics_ws_open(ww->w, ww->nconns);
    flare__stream_close(&ws->s, false);
    flare__buf_free(&ws->msg);
    flare__buf_free(&ws->zin);
    if (ws->def != NULL) {
        deflateEnd(ws->def);
        free(ws->def);
    }
    if (ws->inf != NULL) {
        inflateEnd(ws->inf);
        free(ws->inf);
    }
    free(ws);
}

/* Writes what hub deliveries queued: every broadcast that reached this
 * worker in one event batch leaves in one writev per connection. */
static void flush_dirty(ws_worker_t *ww)
{
    while (ww->dirty != NULL) {
        flare_ws_t *ws = ww->dirty;
        ww->dirty = ws->dirty_next;
        ws->flags &= ~(uint32_t)WF_DIRTY;
        if ((ws->s.sflags & FLARE_S_ATTACHED) && !(ws->s.sflags & FLARE_S_WANT_WRITE))
            flare__ws_flush(ws);
    }
}

static void flush_cb(void *ud)
{
    flush_dirty(ud);
}

static void reap_all(ws_worker_t *ww)
{
    flush_dirty(ww); /* nothing on the flush list may be freed under it */
    while (ww->reap != NULL) {
        flare_ws_t *ws = ww->reap;
        ww->reap = ws->reap_next;
        if ((ws->flags & WF_OPENED) && ws->route->cfg.on_close != NULL) {
            flare_str_t reason = FLARE_STR_NULL;
            if (ws->flags & WF_CLOSE_RECV)
                reason = (flare_str_t){ ws->msg.data != NULL ? ws->msg.data : "", ws->msg.len };
            ws->route->cfg.on_close(ws, ws->close_code, reason);
        }
        release(ws);
    }
}

/* ---- creation and hand-off ---- */

flare_ws_t *flare__ws_new(ws_worker_t *ww, const ws_route_t *route)
{
    flare_ws_t *ws = calloc(1, sizeof(*ws));
    if (ws == NULL)
        return NULL;
    flare__stream_init_detached(&ws->s, &ww->w->loop, io_cb);
    ws->ww = ww;
    ws->route = route;
    ws->state = WS_PENDING;
    ws->close_code = FLARE_WS_CLOSE_ABNORMAL;
    flare__ws_parser_init(&ws->parser, true, route->cfg.max_message);
    /* a compressed message's wire size: incompressible data grows by a few
     * bytes per 16 KiB stored block */
    uint64_t slack = route->cfg.max_message / 64 + 1024;
    ws->parser.max_compressed = route->cfg.max_message <= UINT64_MAX - slack
                                    ? route->cfg.max_message + slack
                                    : UINT64_MAX; /* a huge max_message must not wrap */
    ws->deadline = 0;
    ws->t_progress = ws->t_ping = ww->w->loop.now;
    if (flare__ws_id_assign(ww, ws) == 0) {
        free(ws);
        return NULL;
    }
    ws->next = ww->conns;
    if (ww->conns != NULL)
        ww->conns->prev = ws;
    ww->conns = ws;
    ww->nconns++;
    flare__metrics_ws_open(ww->w, ww->nconns);
    return ws;
}

void flare__ws_free_pending(flare_ws_t *ws)
{
    release(ws);
}

static void process(flare_ws_t *ws);

void flare__ws_handoff(flare_worker_t *w, flare_stream_t *s, void *ud)
{
    flare_ws_t *ws = ud;
    if (ws->state != WS_PENDING)
        return; /* the HTTP connection closes its stream */
    if (s == NULL || flare__stream_move(&ws->s, s) != 0) {
        flare__ws_go_dead(ws); /* the client left before the 101 was out */
        return;
    }
    ws->state = WS_OPEN;
    ws->flags |= WF_COUNTED;
    flare__worker_conn_hold(w);
    ws->t_progress = ws->t_ping = w->loop.now;
    if (ws->flags & WF_CLOSE_SENT) /* on_open closed: the reply clock starts now */
        ws->deadline = ws->route->cfg.close_timeout_ms != 0
                           ? w->loop.now + ws->route->cfg.close_timeout_ms
                           : 0;
    if (flare__stream_has_output(&ws->s))
        flare__ws_flush(ws); /* what on_open sent (and broadcasts since) */
    /* bytes the client sent after the upgrade request came along */
    flare_stream_t *st = &ws->s;
    if (st->rbuf != NULL && st->rpos > 0) {
        memmove(st->rbuf, st->rbuf + st->rpos, st->rlen - st->rpos);
        st->rlen -= st->rpos;
        st->rpos = 0;
    }
    if (st->rlen > 0 && ws->state == WS_OPEN)
        process(ws);
    /* TLS: frames OpenSSL already holds wake no poller */
    if (ws->state == WS_OPEN && flare__stream_has_pending(st))
        flare__loop_ready(st->loop, &st->io);
    if (w->draining && ws->state == WS_OPEN)
        flare_ws_close(ws, FLARE_WS_CLOSE_GOING_AWAY, FLARE_STR("server shutting down"));
}

/* ---- writing ---- */

static int after_send(flare_ws_t *ws, int rc)
{
    if (rc != 0)
        return rc;
    const flare_ws_config_t *c = &ws->route->cfg;
    size_t queued = flare__stream_unsent(&ws->s);
    if (queued > c->write_limit) {
        flare__ws_go_dead(ws); /* a consumer that does not read is dropped, not buffered */
        return FLARE_ETOOBIG;
    }
    if (queued > c->write_high_water)
        ws->flags |= WF_BACKPRESSED; /* queued all the same: flare_ws_backpressured says so */
    return 0;
}

static int send_control(flare_ws_t *ws, uint8_t op, const void *p, size_t n)
{
    uint8_t hdr[FLARE_WS_MAX_HEADER];
    size_t hl = flare__ws_frame_header(hdr, op, true, false, n, NULL);
    return flare__ws_emit(ws, hdr, hl, p, n, NULL);
}

static z_stream *compressor(flare_ws_t *ws)
{
    const flare_ws_config_t *c = &ws->route->cfg;
    if (ws->pmd.server_nct)
        return flare__ws_shared_deflater(ws->ww, ws->pmd.server_bits, c->deflate_mem_level,
                                         c->deflate_level);
    if (ws->def == NULL) {
        z_stream *z = malloc(sizeof(*z));
        if (z == NULL)
            return NULL;
        if (flare__ws_deflate_init(z, c->deflate_level, ws->pmd.server_bits,
                                   c->deflate_mem_level) != 0) {
            free(z);
            return NULL;
        }
        ws->def = z;
    }
    return ws->def;
}

static int send_data(flare_ws_t *ws, uint8_t op, const void *p, size_t n)
{
    uint8_t hdr[FLARE_WS_MAX_HEADER];
    flare__metrics_ws_msg(ws->ww->w, 1);
    if (ws->pmd_on && n >= ws->route->cfg.deflate_min_size) {
        flare_buf_t *out = &ws->ww->scratch;
        z_stream *z = compressor(ws);
        if (z == NULL)
            return FLARE_ENOMEM;
        out->len = 0;
        int rc = flare__ws_deflate_message(z, p, n, ws->pmd.server_nct, out);
        if (rc != 0) {
            /* the compression context is now unknown: a shared stream starts
             * over, this connection ends */
            if (ws->pmd.server_nct)
                deflateReset(z);
            flare__ws_go_dead(ws);
            return rc;
        }
        size_t hl = flare__ws_frame_header(hdr, op, true, true, out->len, NULL);
        rc = flare__ws_emit(ws, hdr, hl, out->data, out->len, NULL);
        if (out->cap > (4u << 20))
            flare__buf_free(out);
        return after_send(ws, rc);
    }
    size_t hl = flare__ws_frame_header(hdr, op, true, false, n, NULL);
    return after_send(ws, flare__ws_emit(ws, hdr, hl, p, n, NULL));
}

int flare__ws_send_shared(flare_ws_t *ws, ws_shared_t *plain, ws_shared_t *packed)
{
    if (ws->state == WS_DEAD || ws->state == WS_LINGER || (ws->flags & WF_CLOSE_SENT))
        return FLARE_ECLOSED;
    /* queue (small frames by reference, no syscall) and write after the
     * event batch, together with any other broadcast that arrives in it */
    uint32_t batch = ws->flags & WF_BATCH;
    ws->flags |= WF_BATCH;
    flare__metrics_ws_msg(ws->ww->w, 1);
    int rc;
    size_t plen = plain->len - plain->plain_off;
    if (ws->pmd_on && plen >= ws->route->cfg.deflate_min_size) {
        const ws_app_t *wa = ws->ww->wapp;
        if (packed != NULL && ws->pmd.server_nct && ws->pmd.server_bits >= wa->bcast_bits)
            rc = after_send(ws, flare__ws_emit(ws, NULL, 0, packed->data, packed->len, packed));
        else
            rc = send_data(ws, plain->opcode, plain->data + plain->plain_off, plen);
    } else {
        rc = after_send(ws, flare__ws_emit(ws, NULL, 0, plain->data, plain->len, plain));
    }
    ws->flags = (ws->flags & ~(uint32_t)WF_BATCH) | batch;
    ws_worker_t *ww = ws->ww;
    if (flare__stream_has_output(&ws->s) && (ws->s.sflags & FLARE_S_ATTACHED) &&
        !(ws->flags & WF_DIRTY) && !(ws->s.sflags & FLARE_S_WANT_WRITE)) {
        ws->flags |= WF_DIRTY;
        ws->dirty_next = ww->dirty;
        ww->dirty = ws;
        if (!ww->flush_timer.active)
            flare__timer_start(&ww->w->loop, &ww->flush_timer, 0);
    }
    return rc;
}

/* ---- closing ---- */

static void begin_close(flare_ws_t *ws, uint16_t code, flare_str_t reason, bool failed)
{
    if (failed) {
        ws->flags |= WF_FAILED;
        ws->close_code = code;
    }
    if (ws->flags & WF_CLOSE_SENT)
        return;
    uint8_t pl[FLARE_WS_MAX_CONTROL];
    size_t n = flare__ws_close_payload(pl, code, reason);
    ws->flags |= WF_CLOSE_SENT;
    unsigned t = ws->route->cfg.close_timeout_ms;
    ws->deadline = t != 0 ? now_ms(ws) + t : 0;
    send_control(ws, FLARE_WS_OP_CLOSE, pl, n);
}

static void fail(flare_ws_t *ws, uint16_t code)
{
    begin_close(ws, code, FLARE_STR_NULL, true);
}

/* ---- reading ---- */

static void deliver(flare_ws_t *ws, uint8_t op, const char *p, size_t n)
{
    void (*fn)(flare_ws_t *, flare_ws_opcode_t, flare_str_t) = ws->route->cfg.on_message;
    flare__metrics_ws_msg(ws->ww->w, 0);
    if (fn != NULL && !(ws->flags & WF_FAILED))
        fn(ws, (flare_ws_opcode_t)op, (flare_str_t){ p != NULL ? p : "", n });
}

static void msg_reset(flare_ws_t *ws)
{
    ws->flags &= ~(uint32_t)WF_IN_MESSAGE;
    ws->msg.len = 0;
    ws->zin.len = 0;
    if (ws->msg.cap > KEEP_MSG_BUF)
        flare__buf_free(&ws->msg);
    if (ws->zin.cap > KEEP_MSG_BUF)
        flare__buf_free(&ws->zin);
}

static int inflate_into_msg(flare_ws_t *ws, z_stream *z, const void *p, size_t n, bool last,
                            bool reset)
{
    size_t before = ws->msg.len;
    int rc = flare__ws_inflate_piece(z, p, n, last, reset, ws->route->cfg.max_message, &ws->msg,
                                     &ws->inflate_ended);
    if (rc == FLARE_ETOOBIG)
        return FLARE_WS_CLOSE_TOO_BIG;
    if (rc == FLARE_EINVAL)
        return FLARE_WS_CLOSE_INVALID_DATA;
    if (rc != 0)
        return FLARE_WS_CLOSE_INTERNAL;
    if (ws->msg_op == FLARE_WS_OP_TEXT) {
        ws->msg_utf8 = flare__utf8_step(ws->msg_utf8, (const uint8_t *)ws->msg.data + before,
                                        ws->msg.len - before);
        if (ws->msg_utf8 == FLARE_UTF8_REJECT || (last && ws->msg_utf8 != FLARE_UTF8_ACCEPT))
            return FLARE_WS_CLOSE_INVALID_DATA;
    }
    return 0;
}

static void on_compressed(flare_ws_t *ws, const flare_ws_event_t *ev)
{
    if (ev->first) {
        ws->msg_op = ev->opcode;
        ws->msg.len = 0;
        ws->zin.len = 0;
        ws->msg_utf8 = FLARE_UTF8_ACCEPT;
        ws->inflate_ended = false;
        ws->flags |= WF_IN_MESSAGE;
    }
    int code = 0;
    if (ws->pmd.client_nct) {
        /* the worker's inflater serves every connection: a message goes
         * through it whole, so split ones are gathered first */
        z_stream *z = shared_inflater(ws->ww);
        if (z == NULL) {
            code = FLARE_WS_CLOSE_INTERNAL;
        } else if (ev->first && ev->fin) {
            code = inflate_into_msg(ws, z, ev->data, ev->len, true, true);
        } else if (flare__buf_append(&ws->zin, ev->data, ev->len) != 0) {
            code = FLARE_WS_CLOSE_INTERNAL;
        } else if (ev->fin) {
            code = inflate_into_msg(ws, z, ws->zin.data, ws->zin.len, true, true);
        }
        if (code != 0 && z != NULL)
            inflateReset(z); /* the next message starts clean */
    } else {
        if (ws->inf == NULL) {
            ws->inf = malloc(sizeof(*ws->inf));
            if (ws->inf != NULL && flare__ws_inflate_init(ws->inf, ws->pmd.inflate_bits) != 0) {
                free(ws->inf);
                ws->inf = NULL;
            }
        }
        code = ws->inf == NULL ? FLARE_WS_CLOSE_INTERNAL
                               : inflate_into_msg(ws, ws->inf, ev->data, ev->len, ev->fin, false);
    }
    if (code != 0) {
        fail(ws, (uint16_t)code);
        return;
    }
    if (ev->fin) {
        deliver(ws, ws->msg_op, ws->msg.data, ws->msg.len);
        msg_reset(ws);
    }
}

static void on_data(flare_ws_t *ws, const flare_ws_event_t *ev)
{
    if (ev->compressed) {
        on_compressed(ws, ev);
        return;
    }
    if (ev->first && ev->fin) { /* whole in the read buffer: no copy */
        deliver(ws, ev->opcode, (const char *)ev->data, ev->len);
        return;
    }
    if (ev->first) {
        ws->msg_op = ev->opcode;
        ws->msg.len = 0;
        ws->flags |= WF_IN_MESSAGE;
    }
    if (flare__buf_append(&ws->msg, ev->data, ev->len) != 0) {
        fail(ws, FLARE_WS_CLOSE_INTERNAL);
        return;
    }
    if (ev->fin) {
        deliver(ws, ws->msg_op, ws->msg.data, ws->msg.len);
        msg_reset(ws);
    }
}

static void on_control(flare_ws_t *ws, const flare_ws_event_t *ev)
{
    switch (ev->opcode) {
    case FLARE_WS_OP_PING:
        if (!(ws->flags & WF_CLOSE_SENT))
            send_control(ws, FLARE_WS_OP_PONG, ev->data, ev->len);
        break;
    case FLARE_WS_OP_PONG:
        ws->flags &= ~(uint32_t)WF_PING_OUT;
        ws->missed = 0;
        break;
    case FLARE_WS_OP_CLOSE:
        ws->flags |= WF_CLOSE_RECV;
        ws->close_code = ev->close_code != 0 ? ev->close_code : FLARE_WS_CLOSE_NO_STATUS;
        /* keep the reason for on_close: the message buffer is free now */
        ws->msg.len = 0;
        ws->flags &= ~(uint32_t)WF_IN_MESSAGE;
        if (flare__buf_append(&ws->msg, ev->reason.ptr, ev->reason.len) != 0)
            ws->msg.len = 0;
        /* echo the status code (RFC 6455 5.5.1) */
        begin_close(ws, ev->close_code, FLARE_STR_NULL, false);
        break;
    default:
        break;
    }
}

/* Parses what the read buffer holds. */
static void process(flare_ws_t *ws)
{
    size_t pos = 0;
    ws->flags |= WF_BATCH;
    flare_stream_t *s = &ws->s;
    while (pos < s->rlen && ws->state == WS_OPEN && !(ws->flags & (WF_CLOSE_RECV | WF_FAILED))) {
        flare_ws_event_t ev;
        int rc = flare__ws_parse(&ws->parser, (uint8_t *)s->rbuf + pos, s->rlen - pos, &ev);
        if (rc == FLARE_PARSE_PARTIAL)
            break;
        if (rc == FLARE_PARSE_ERROR) {
            fail(ws, ws->parser.error);
            break;
        }
        pos += (size_t)rc;
        if (ev.type == FLARE_WS_EV_DATA)
            on_data(ws, &ev);
        else if (ev.type == FLARE_WS_EV_CONTROL)
            on_control(ws, &ev);
    }
    ws->flags &= ~(uint32_t)WF_BATCH;
    if (ws->state == WS_DEAD)
        return;
    if (ws->flags & (WF_CLOSE_RECV | WF_FAILED))
        pos = s->rlen; /* nothing after a close frame, or a failure, counts */
    /* at most a header or a control frame (< 140 bytes) is left */
    if (pos < s->rlen)
        memmove(s->rbuf, s->rbuf + pos, s->rlen - pos);
    s->rlen -= (uint32_t)pos;
    s->rpos = 0;
    flare__stream_idle(s);
    if ((s->sflags & FLARE_S_ATTACHED) && !(s->sflags & FLARE_S_WANT_WRITE))
        flare__ws_flush(ws);
}

static void on_readable(flare_ws_t *ws)
{
    flare_stream_t *s = &ws->s;
    if (ws->state == WS_LINGER || (ws->flags & (WF_CLOSE_RECV | WF_FAILED))) {
        /* only waiting for EOF: read and drop */
        if (flare__stream_linger_read(s))
            flare__ws_go_dead(ws);
        return;
    }
    do {
        ssize_t r = flare__stream_read(s, FLARE_CONN_BUF);
        if (r == -EAGAIN)
            return;
        if (r <= 0) {
            flare__ws_go_dead(ws); /* EOF or error without a close frame: 1006 */
            return;
        }
        process(ws);
        /* TLS: records OpenSSL already holds are not seen by the poller */
    } while (flare__unlikely(flare__stream_has_pending(s)) && ws->state == WS_OPEN &&
             !(ws->flags & (WF_CLOSE_RECV | WF_FAILED)));
}

static void io_cb(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    (void)l;
    flare_ws_t *ws = (flare_ws_t *)(void *)io;
    if (ws->state == WS_DEAD)
        return;
    events = flare__stream_ready(&ws->s, events);
    if (events & FLARE_IO_WRITE)
        flare__ws_flush(ws);
    if (ws->state != WS_DEAD && (events & (FLARE_IO_READ | FLARE_IO_HUP | FLARE_IO_ERR)))
        on_readable(ws);
    if (ws->state == WS_OPEN && (ws->flags & WF_BACKPRESSED) &&
        flare__stream_unsent(&ws->s) <= ws->route->cfg.write_high_water / 2) {
        ws->flags &= ~(uint32_t)WF_BACKPRESSED;
        if (ws->route->cfg.on_drain != NULL && !(ws->flags & WF_CLOSE_SENT))
            ws->route->cfg.on_drain(ws);
    }
}

/* ---- the per-worker sweep: heartbeats and timeouts ---- */

static void sweep_one(flare_ws_t *ws, uint64_t now)
{
    const flare_ws_config_t *c = &ws->route->cfg;
    switch (ws->state) {
    case WS_PENDING:
        /* nothing to time: the HTTP connection hands the stream over, or
         * reports with none that it closed first (flare__ws_handoff), once */
        break;
    case WS_OPEN:
        if ((ws->flags & WF_CLOSE_SENT) && ws->deadline != 0 && now >= ws->deadline) {
            flare__ws_go_dead(ws); /* no close reply */
            break;
        }
        if (flare__stream_has_output(&ws->s) && c->write_timeout_ms != 0 &&
            now - ws->t_progress >= c->write_timeout_ms) {
            flare__ws_go_dead(ws); /* the peer stopped reading */
            break;
        }
        if (c->heartbeat_ms != 0 && !(ws->flags & WF_CLOSE_SENT) &&
            now - ws->t_ping >= c->heartbeat_ms) {
            if ((ws->flags & WF_PING_OUT) && ++ws->missed >= c->heartbeat_misses) {
                flare__ws_go_dead(ws);
                break;
            }
            ws->t_ping = now;
            ws->flags |= WF_PING_OUT;
            send_control(ws, FLARE_WS_OP_PING, NULL, 0);
        }
        break;
    case WS_LINGER:
        if (now >= ws->deadline)
            flare__ws_go_dead(ws);
        break;
    default:
        break;
    }
}

static void sweep_cb(void *ud)
{
    ws_worker_t *ww = ud;
    flare_worker_t *w = ww->w;
    /* re-armed first: nothing below can keep the next sweep from happening */
    flare__timer_start(&w->loop, &ww->sweep_timer, ww->wapp->sweep_ms);
    uint64_t now = w->loop.now;
    for (flare_ws_t *ws = ww->conns; ws != NULL; ws = ws->next)
        sweep_one(ws, now);
    reap_all(ww);
}

/* ---- shutdown ---- */

void flare__ws_drain(flare_worker_t *w, void *wapp)
{
    ws_worker_t *ww = flare__ws_worker(w, wapp);
    if (ww == NULL)
        return;
    for (flare_ws_t *ws = ww->conns; ws != NULL; ws = ws->next) {
        if (ws->state == WS_OPEN)
            flare_ws_close(ws, FLARE_WS_CLOSE_GOING_AWAY, FLARE_STR("server shutting down"));
    }
}

void flare__ws_dispose(flare_worker_t *w, void *wapp)
{
    const ws_app_t *wa = wapp;
    ws_worker_t *ww = flare__ws_worker(w, wa);
    if (ww == NULL)
        return;
    for (flare_ws_t *ws = ww->conns; ws != NULL; ws = ws->next)
        flare__ws_go_dead(ws);
    reap_all(ww);
    flare__ws_hub_dispose(ww);
    for (size_t i = 0; i < FLARE__ARRAY_SIZE(ww->sdef); i++) {
        if (ww->sdef[i] != NULL) {
            deflateEnd(ww->sdef[i]);
            free(ww->sdef[i]);
        }
    }
    if (ww->sinf != NULL) {
        inflateEnd(ww->sinf);
        free(ww->sinf);
    }
    flare__buf_free(&ww->scratch);
    flare__timer_stop(&w->loop, &ww->sweep_timer);
    flare__timer_stop(&w->loop, &ww->reap_timer);
    flare__timer_stop(&w->loop, &ww->flush_timer);
    free(ww);
    flare__worker_module_set(w, wa->slot, NULL);
    if (flare__ws_tls == ww)
        flare__ws_tls = NULL;
}

/* ---- public: one connection ---- */

int flare_ws_send(flare_ws_t *ws, flare_ws_opcode_t op, flare_str_t payload)
{
    if (ws == NULL || (op != FLARE_WS_TEXT && op != FLARE_WS_BINARY) ||
        (payload.len > 0 && payload.ptr == NULL))
        return FLARE_EINVAL;
    if (ws->state == WS_DEAD || ws->state == WS_LINGER || (ws->flags & WF_CLOSE_SENT))
        return FLARE_ECLOSED;
    if (op == FLARE_WS_TEXT && !flare__utf8_valid(payload.ptr, payload.len))
        return FLARE_EINVAL;
    return send_data(ws, (uint8_t)op, payload.ptr, payload.len);
}

int flare_ws_send_text(flare_ws_t *ws, flare_str_t text)
{
    return flare_ws_send(ws, FLARE_WS_TEXT, text);
}

int flare_ws_send_binary(flare_ws_t *ws, flare_str_t data)
{
    return flare_ws_send(ws, FLARE_WS_BINARY, data);
}

int flare_ws_ping(flare_ws_t *ws, flare_str_t payload)
{
    if (ws == NULL || payload.len > FLARE_WS_MAX_CONTROL ||
        (payload.len > 0 && payload.ptr == NULL))
        return FLARE_EINVAL;
    if (ws->state == WS_DEAD || ws->state == WS_LINGER || (ws->flags & WF_CLOSE_SENT))
        return FLARE_ECLOSED;
    return after_send(ws, send_control(ws, FLARE_WS_OP_PING, payload.ptr, payload.len));
}

int flare_ws_close(flare_ws_t *ws, int code, flare_str_t reason)
{
    if (ws == NULL)
        return FLARE_EINVAL;
    if (code != 0 && !flare__ws_close_code_valid((unsigned)code))
        return FLARE_EINVAL;
    if (reason.len > 0 &&
        (code == 0 || reason.ptr == NULL || !flare__utf8_valid(reason.ptr, reason.len)))
        return FLARE_EINVAL;
    if (ws->state == WS_DEAD || ws->state == WS_LINGER || (ws->flags & WF_CLOSE_SENT))
        return 0;
    begin_close(ws, (uint16_t)code, reason, false);
    return 0;
}

size_t flare_ws_buffered(const flare_ws_t *ws)
{
    return flare__stream_unsent(&ws->s);
}

bool flare_ws_backpressured(const flare_ws_t *ws)
{
    return (ws->flags & WF_BACKPRESSED) != 0;
}

void flare_ws_set_data(flare_ws_t *ws, void *data)
{
    ws->data = data;
}

void *flare_ws_data(const flare_ws_t *ws)
{
    return ws->data;
}

void *flare_ws_route_ud(const flare_ws_t *ws)
{
    return ws->route->cfg.ud;
}

flare_str_t flare_ws_protocol(const flare_ws_t *ws)
{
    return ws->protocol;
}

flare_worker_t *flare_ws_worker(const flare_ws_t *ws)
{
    return ws->ww->w;
}

flare_app_t *flare_ws_app(const flare_ws_t *ws)
{
    return ws->ww->w->app;
}

bool flare_ws_compressed(const flare_ws_t *ws)
{
    return ws->pmd_on;
}

uint64_t flare_ws_id(const flare_ws_t *ws)
{
    return ws->id;
}
