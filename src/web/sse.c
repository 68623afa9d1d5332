/* Server-sent events (flare/sse.h) on top of the streamed response.
 *
 * A stream is an exchange whose chunked response never ends by itself: the
 * handler returns with the response begun, so the protocol keeps the
 * connection (no idle timeout while a response is owed) and every event is
 * one chunk. What this file adds:
 * - the encoding (pure: flare_sse_format);
 * - per worker, the list of its streams and its rooms (a module: module.h),
 *   nothing shared between workers; a broadcast is encoded once into a
 *   refcounted buffer and posted to every worker, as the WebSocket hub does;
 * - one embedded loop timer per stream: the heartbeat, and the deferred
 *   close notification (on_close always runs from the loop, so no caller
 *   sees its handle freed under it);
 * - the backpressure bound (the protocol's `unsent` op);
 * - drain: every stream is ended when the worker starts draining, and each
 *   is held (flare__worker_conn_hold) until its on_close has run, so the
 *   worker does not stop before the application heard of it.
 *
 * A client that goes away leaves an orphaned exchange (the protocol cannot
 * tell us: it only marks the exchange): the next send or heartbeat sees it
 * (flare_req_connected) and ends the stream, which frees the exchange. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "flare/sse.h"
#include "http/exchange.h"
#include "http/svc.h"
#include "worker.h"
#include "module.h"
#include "web/channel.h"

#define ROOM_NAME_MAX      255
#define HEARTBEAT_DEFAULT  15000u
#define MAX_QUEUED_DEFAULT (256u * 1024u)
#define FORMAT_STACK       512 /* events up to this size are encoded on the stack */

/* ---- encoding ---- */

static bool has_crlf(flare_str_t s, bool nul)
{
    for (size_t i = 0; i < s.len; i++) {
        char c = s.ptr[i];
        if (c == '\r' || c == '\n' || (nul && c == '\0'))
            return true;
    }
    return false;
}

typedef struct emit {
    char *p;
    size_t cap, len;
} emit_t;

static void put(emit_t *e, const char *s, size_t n)
{
    if (e->len + n <= e->cap && n > 0)
        memcpy(e->p + e->len, s, n);
    e->len += n;
}

static void put_field(emit_t *e, const char *name, size_t nlen, const char *v, size_t vlen)
{
    put(e, name, nlen);
    put(e, v, vlen);
    put(e, "\n", 1);
}

static size_t utoa(char *out, unsigned v)
{
    char tmp[12];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

int flare_sse_format(const flare_sse_event_t *ev, char *out, size_t cap, size_t *len)
{
    if (ev == NULL || len == NULL || (out == NULL && cap > 0))
        return FLARE_EINVAL;
    if ((ev->id.len > 0 && ev->id.ptr == NULL) || (ev->event.len > 0 && ev->event.ptr == NULL) ||
        (ev->data.len > 0 && ev->data.ptr == NULL))
        return FLARE_EINVAL;
    if ((ev->id.ptr != NULL && has_crlf(ev->id, true)) ||
        (ev->event.ptr != NULL && has_crlf(ev->event, false)))
        return FLARE_EINVAL;
    emit_t e = { out, cap, 0 };
    if (ev->event.ptr != NULL)
        put_field(&e, "event: ", 7, ev->event.ptr, ev->event.len);
    if (ev->id.ptr != NULL)
        put_field(&e, "id: ", 4, ev->id.ptr, ev->id.len);
    if (ev->retry_ms > 0) {
        char num[12];
        put_field(&e, "retry: ", 7, num, utoa(num, ev->retry_ms));
    }
    if (ev->data.ptr != NULL) {
        /* one "data:" line per line of the data: CRLF, CR and LF all end a
         * line (the client's parser splits on each of them) */
        const char *p = ev->data.ptr, *end = p + ev->data.len;
        for (;;) {
            const char *q = p;
            while (q < end && *q != '\r' && *q != '\n')
                q++;
            put_field(&e, "data: ", 6, p, (size_t)(q - p));
            if (q == end)
                break;
            p = q + 1;
            if (*q == '\r' && p < end && *p == '\n')
                p++;
        }
    }
    put(&e, "\n", 1);
    *len = e.len;
    return e.len <= cap ? 0 : FLARE_ETOOBIG;
}

int flare_sse_format_comment(flare_str_t text, char *out, size_t cap, size_t *len)
{
    if (len == NULL || (out == NULL && cap > 0) || (text.len > 0 && text.ptr == NULL) ||
        has_crlf(text, false))
        return FLARE_EINVAL;
    emit_t e = { out, cap, 0 };
    put_field(&e, ": ", 2, text.ptr, text.len);
    *len = e.len;
    return e.len <= cap ? 0 : FLARE_ETOOBIG;
}

/* ---- state ---- */

typedef struct sse_app {
    unsigned slot;
} sse_app_t;

typedef struct sse_worker {
    flare_worker_t *w;
    flare_sse_t *streams; /* every stream of the worker, open or closing */
} sse_worker_t;

enum { SSE_OPEN, SSE_CLOSING };

struct flare_sse {
    flare_sse_t *prev, *next; /* in sw->streams */
    sse_worker_t *sw;
    flare_req_t *req; /* NULL once the response has ended: never touched again */
    flare__timer_t timer;
    int state;
    int reason; /* for on_close */
    unsigned heartbeat_ms;
    size_t max_queued;
    flare_sse_close_fn on_close;
    flare_sse_drain_fn on_drain;
    void *ud;
    flare__chan_sub_t *rooms; /* its channel subscriptions (linked by onext) */
    size_t idlen;
    char last_id[];
};

static void sse_drain(flare_worker_t *w, void *state);
static void sse_dispose(flare_worker_t *w, void *state);
static void sse_app_free(flare_app_t *app, void *state);

static const flare_module_t sse_module = {
    .name = "sse",
    .drain_worker = sse_drain,
    .dispose_worker = sse_dispose,
    .free_app = sse_app_free,
};

static void sse_app_free(flare_app_t *app, void *state)
{
    (void)app;
    free(state);
}

/* The worker's state, made at its first stream (a worker that never
 * streams pays nothing). On w's thread. */
static sse_worker_t *worker_state(flare_worker_t *w, const sse_app_t *sa, bool make)
{
    sse_worker_t *sw = flare__worker_module_state(w, sa->slot);
    if (sw != NULL || !make)
        return sw;
    sw = calloc(1, sizeof(*sw));
    if (sw == NULL)
        return NULL;
    sw->w = w;
    flare__worker_module_set(w, sa->slot, sw);
    return sw;
}

int flare_sse_route(flare_app_t *app, const char *pattern, flare_handler_fn fn, void *ud)
{
    if (app == NULL)
        return FLARE_EINVAL;
    if (flare__app_module_state(app, &sse_module) == NULL) {
        sse_app_t *sa = calloc(1, sizeof(*sa));
        if (sa == NULL)
            return FLARE_ENOMEM;
        /* the channel layer first: it is disposed after the streams left it */
        int rc = flare__chan_use(app, &flare__sse_chan_kind);
        if (rc == 0)
            rc = flare__app_module(app, &sse_module, sa, &sa->slot);
        if (rc != 0) {
            free(sa);
            return rc;
        }
    }
    return flare_get(app, pattern, fn, ud);
}

/* ---- rooms: channels "sse:" ROOM of the channel layer ---- */

static bool room_name_ok(flare_str_t room)
{
    return room.ptr != NULL && room.len > 0 && room.len <= ROOM_NAME_MAX;
}

static int join(flare_sse_t *s, flare_str_t room, const flare_channel_pos_t *since)
{
    if (s == NULL || !room_name_ok(room))
        return FLARE_EINVAL;
    if (s->state != SSE_OPEN)
        return FLARE_ECLOSED;
    char buf[FLARE_CHANNEL_NAME_MAX];
    flare_str_t name = flare__chan_prefixed(buf, "sse:", room);
    for (flare__chan_sub_t *m = s->rooms; m != NULL; m = m->onext) {
        if (flare__chan_sub_is(m, name))
            return 0;
    }
    flare__chan_sub_t *m;
    int rc = flare__chan_join(s->sw->w, &flare__sse_chan_kind, s, name, 0, &m);
    if (rc != 0)
        return rc == FLARE_ESTATE ? FLARE_ECLOSED : rc;
    m->onext = s->rooms;
    s->rooms = m;
    flare__chan_resume(m, since);
    return 0;
}

int flare_sse_join(flare_sse_t *s, flare_str_t room)
{
    return join(s, room, NULL);
}

int flare_sse_join_at(flare_sse_t *s, flare_str_t room, const flare_channel_pos_t *since)
{
    return join(s, room, since);
}

int flare_sse_leave(flare_sse_t *s, flare_str_t room)
{
    if (s == NULL || !room_name_ok(room))
        return FLARE_EINVAL;
    char buf[FLARE_CHANNEL_NAME_MAX];
    flare_str_t name = flare__chan_prefixed(buf, "sse:", room);
    for (flare__chan_sub_t **p = &s->rooms; *p != NULL; p = &(*p)->onext) {
        flare__chan_sub_t *m = *p;
        if (flare__chan_sub_is(m, name)) {
            *p = m->onext;
            flare__chan_leave(m);
            return 0;
        }
    }
    return FLARE_ENOTFOUND;
}

/* ---- streams ---- */

/* Ends the response (the exchange is freed by it, now or once it reaches
 * the head of its connection's queue) and schedules on_close. Rooms are
 * left only in finish(): a broadcast walking a room may end a stream. */
static void stream_close(flare_sse_t *s, int reason)
{
    if (s->state != SSE_OPEN)
        return;
    s->state = SSE_CLOSING;
    s->reason = reason;
    flare_req_t *req = s->req;
    s->req = NULL;
    if (req != NULL) {
        flare_res_t *res = &req->res;
        if (reason != 0 && reason != FLARE_EUNAVAIL)
            flare_res_close(res); /* dropped: this connection carries nothing more */
        if (flare_res_end(res) == FLARE_ENOMEM) {
            /* out of memory for the last chunk: the body cannot be
             * terminated, so the connection has to go */
            flare_res_close(res);
            req->flags |= EX_SENT;
            flare__ex_complete(req);
        }
    }
    flare__timer_start(&s->sw->w->loop, &s->timer, 0);
}

/* The stream is over: tell the application, free it. */
static void finish(flare_sse_t *s)
{
    sse_worker_t *sw = s->sw;
    flare__timer_stop(&sw->w->loop, &s->timer);
    while (s->rooms != NULL) {
        flare__chan_sub_t *m = s->rooms;
        s->rooms = m->onext;
        flare__chan_leave(m);
    }
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        sw->streams = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    if (s->on_close != NULL)
        s->on_close(s, s->reason, s->ud);
    flare_worker_t *w = sw->w;
    free(s);
    flare__worker_conn_release(w);
}

static int stream_write(flare_sse_t *s, const char *p, size_t n)
{
    if (s->state != SSE_OPEN)
        return FLARE_ECLOSED;
    flare_req_t *req = s->req;
    if (!flare_req_connected(req)) {
        stream_close(s, FLARE_ECLOSED);
        return FLARE_ECLOSED;
    }
    size_t queued = req->ops->unsent != NULL ? req->ops->unsent(req) : 0;
    if (queued + n > s->max_queued) {
        stream_close(s, FLARE_ETOOBIG);
        return FLARE_ETOOBIG;
    }
    int rc = flare_res_write(&req->res, (flare_str_t){ p, n });
    if (rc != 0) {
        stream_close(s, rc);
        return rc;
    }
    return 0;
}

/* The response drained to half the high-water mark (from the worker's loop). */
static void stream_drained(flare_res_t *res, void *ud)
{
    (void)res;
    flare_sse_t *s = ud;
    if (s->state == SSE_OPEN && s->on_drain != NULL)
        s->on_drain(s, s->ud);
}

static void on_timer(void *ud)
{
    flare_sse_t *s = ud;
    if (s->state != SSE_OPEN) {
        finish(s);
        return;
    }
    static const char ping[] = ": ping\n";
    if (stream_write(s, ping, sizeof(ping) - 1) == 0)
        flare__timer_start(&s->sw->w->loop, &s->timer, s->heartbeat_ms);
}

int flare_sse_start(flare_req_t *req, flare_res_t *res, const flare_sse_config_t *cfg,
                    flare_sse_t **out)
{
    if (req == NULL || res == NULL || out == NULL || flare__res_ex(res) != req)
        return FLARE_EINVAL;
    flare_worker_t *w = req->worker;
    const sse_app_t *sa = flare__app_module_state(w->app, &sse_module);
    if (sa == NULL || (req->flags & (EX_SENT | EX_STREAM)))
        return FLARE_ESTATE;
    if (!flare_req_connected(req))
        return FLARE_ECLOSED;
    if (w->draining)
        return FLARE_EUNAVAIL;
    flare_sse_config_t c = cfg != NULL ? *cfg : (flare_sse_config_t){ 0 };
    sse_worker_t *sw = worker_state(w, sa, true);
    if (sw == NULL)
        return FLARE_ENOMEM;
    flare_str_t last = flare_req_header(req, "Last-Event-ID");
    flare_sse_t *s = calloc(1, sizeof(*s) + last.len + 1);
    if (s == NULL)
        return FLARE_ENOMEM;
    if (last.len > 0)
        memcpy(s->last_id, last.ptr, last.len);
    s->idlen = last.len;
    s->sw = sw;
    s->req = req;
    s->heartbeat_ms = c.heartbeat_ms != 0 ? c.heartbeat_ms : HEARTBEAT_DEFAULT;
    s->max_queued = c.max_queued != 0 ? c.max_queued : MAX_QUEUED_DEFAULT;
    s->on_close = c.on_close;
    s->on_drain = c.on_drain;
    s->ud = c.ud;
    flare__timer_init(&s->timer, on_timer, s);
    /* backpressure: the response's own (flare_res_on_drain), below the drop */
    size_t high_water = c.high_water != 0 ? c.high_water : s->max_queued / 4;
    if (high_water > s->max_queued)
        high_water = s->max_queued;

    int rc;
    if ((rc = flare_res_on_drain(res, high_water, stream_drained, s)) != 0 ||
        (rc = flare_res_header(res, FLARE_STR("Cache-Control"), FLARE_STR("no-cache"))) != 0 ||
        (rc = flare_res_header(res, FLARE_STR("X-Accel-Buffering"), FLARE_STR("no"))) != 0 ||
        (rc = flare_res_begin(res, 200, FLARE_STR("text/event-stream"))) != 0) {
        flare_res_on_drain(res, 0, NULL, NULL); /* s is going */
        free(s);
        return rc;
    }
    /* an after hook may have answered instead, or the client left */
    if (!(req->flags & EX_STREAM) || (req->flags & EX_SENT) || !flare_req_connected(req)) {
        flare_res_on_drain(res, 0, NULL, NULL);
        free(s);
        return FLARE_ECLOSED;
    }
    s->next = sw->streams;
    if (sw->streams != NULL)
        sw->streams->prev = s;
    sw->streams = s;
    flare__worker_conn_hold(w);
    flare__ex_long(req); /* a stream, not a request to time */
    *out = s;
    if (req->flags & EX_HEAD_ONLY) {
        stream_close(s, 0);
        return 0;
    }
    if (c.retry_ms > 0) {
        char buf[32];
        size_t n;
        flare_sse_format(&(flare_sse_event_t){ .retry_ms = c.retry_ms }, buf, sizeof(buf), &n);
        if (stream_write(s, buf, n) != 0)
            return 0; /* closing: on_close tells */
    }
    if (s->heartbeat_ms != FLARE_SSE_HEARTBEAT_OFF)
        flare__timer_start(&w->loop, &s->timer, s->heartbeat_ms);
    return 0;
}

flare_str_t flare_sse_last_event_id(const flare_sse_t *s)
{
    return (flare_str_t){ s->last_id, s->idlen };
}

/* Encodes on the stack when it fits, else in a heap buffer for the call. */
static int send_formatted(flare_sse_t *s, const flare_sse_event_t *ev, flare_str_t comment,
                          bool is_comment)
{
    char stack[FORMAT_STACK];
    size_t n = 0;
    int rc = is_comment ? flare_sse_format_comment(comment, stack, sizeof(stack), &n)
                        : flare_sse_format(ev, stack, sizeof(stack), &n);
    if (rc == 0)
        return stream_write(s, stack, n);
    if (rc != FLARE_ETOOBIG)
        return rc;
    char *heap = malloc(n);
    if (heap == NULL)
        return FLARE_ENOMEM;
    size_t m;
    rc = is_comment ? flare_sse_format_comment(comment, heap, n, &m)
                    : flare_sse_format(ev, heap, n, &m);
    if (rc == 0)
        rc = stream_write(s, heap, m);
    free(heap);
    return rc;
}

int flare_sse_send(flare_sse_t *s, const flare_sse_event_t *ev)
{
    if (s == NULL || ev == NULL)
        return FLARE_EINVAL;
    if (s->state != SSE_OPEN)
        return FLARE_ECLOSED;
    return send_formatted(s, ev, FLARE_STR_NULL, false);
}

int flare_sse_comment(flare_sse_t *s, flare_str_t text)
{
    if (s == NULL)
        return FLARE_EINVAL;
    if (s->state != SSE_OPEN)
        return FLARE_ECLOSED;
    return send_formatted(s, NULL, text, true);
}

size_t flare_sse_queued(const flare_sse_t *s)
{
    const flare_req_t *req = s->req;
    if (s->state != SSE_OPEN || req == NULL || req->ops->unsent == NULL)
        return 0;
    return req->ops->unsent(req);
}

bool flare_sse_backpressured(const flare_sse_t *s)
{
    return s->state == SSE_OPEN && s->req != NULL && flare_res_backpressured(&s->req->res);
}

bool flare_sse_open(const flare_sse_t *s)
{
    return s->state == SSE_OPEN && flare_req_connected(s->req);
}

flare_worker_t *flare_sse_worker(const flare_sse_t *s)
{
    return s->sw->w;
}

void flare_sse_end(flare_sse_t *s)
{
    if (s != NULL)
        stream_close(s, 0);
}

/* ---- drain and shutdown ---- */

static void sse_drain(flare_worker_t *w, void *state)
{
    sse_worker_t *sw = worker_state(w, state, false);
    if (sw == NULL)
        return;
    /* ended now, freed when their timers fire (the holds keep the loop
     * running until then) */
    for (flare_sse_t *s = sw->streams; s != NULL; s = s->next)
        stream_close(s, FLARE_EUNAVAIL);
}

static void sse_dispose(flare_worker_t *w, void *state)
{
    const sse_app_t *sa = state;
    sse_worker_t *sw = worker_state(w, sa, false);
    if (sw == NULL)
        return;
    /* the loop has ended: what is left (a drain cut short by its deadline,
     * streams begun during the drain) is ended and reported here; their
     * exchanges are orphans by now, so ending one frees it */
    while (sw->streams != NULL) {
        flare_sse_t *s = sw->streams;
        stream_close(s, FLARE_EUNAVAIL);
        finish(s);
    }
    flare__worker_module_set(w, sa->slot, NULL);
    free(sw);
}

/* ---- the SSE subscriber kind of the channel layer ---- */

/* A message's SSE form: the event, encoded once for every stream. */
typedef struct sse_rep {
    size_t len;
    char data[];
} sse_rep_t;

/* Encodes ev into a new rep (NULL: out of memory or invalid). */
static sse_rep_t *rep_of(const flare_sse_event_t *ev)
{
    size_t n;
    int rc = flare_sse_format(ev, NULL, 0, &n);
    if (rc != 0 && rc != FLARE_ETOOBIG)
        return NULL;
    sse_rep_t *r = malloc(sizeof(*r) + n);
    if (r != NULL)
        flare_sse_format(ev, r->data, n, &r->len);
    return r;
}

/* The event of a channel message: its event type, its position as the id
 * ("OFFSET:EPOCH", what Last-Event-ID brings back), its data. */
static sse_rep_t *rep_of_msg(const flare__chan_msg_t *m)
{
    if (m->binary)
        return NULL; /* no binary in SSE */
    char id[FLARE_CHANNEL_POS_MAX + 1];
    size_t idlen = 0;
    if (m->offset != 0) {
        flare_channel_pos_t pos = { .offset = m->offset, .epoch_len = m->epoch_len };
        memcpy(pos.epoch, m->epoch, m->epoch_len);
        idlen = flare_channel_pos_format(&pos, id, sizeof(id));
    }
    flare_sse_event_t ev = {
        .id = idlen > 0 ? (flare_str_t){ id, idlen } : FLARE_STR_NULL,
        .event = m->event_len > 0 ? (flare_str_t){ m->event, m->event_len } : FLARE_STR_NULL,
        .data = { m->data, m->data_len },
    };
    return rep_of(&ev);
}

static void *sse_rep_prepare(flare_app_t *app, const flare__chan_msg_t *m, bool positions)
{
    (void)app;
    (void)positions; /* every SSE event of a cluster carries its position */
    return rep_of_msg(m);
}

static void sse_rep_release(void *rep)
{
    free(rep);
}

static void sse_deliver(flare__chan_sub_t *sub, const flare__chan_msg_t *m, void *rep)
{
    flare_sse_t *s = sub->owner;
    if (s->state != SSE_OPEN || m->binary)
        return;
    sse_rep_t *r = rep != NULL ? rep : rep_of_msg(m);
    if (r != NULL)
        stream_write(s, r->data, r->len); /* may end it: never frees it */
    if (r != rep)
        free(r);
}

/* Notices as events "flare.lost" (with the channel's position now as the
 * id, so a reconnection resumes from there), "flare.down", "flare.up";
 * data: {"channel":..[,"offset":..,"epoch":..,"reason":..]}. */
static void sse_notice(flare__chan_sub_t *sub, const flare__chan_msg_t *m)
{
    flare_sse_t *s = sub->owner;
    const char *type = m->type == FLARE__CHAN_NLOST   ? "flare.lost"
                       : m->type == FLARE__CHAN_NDOWN ? "flare.down"
                       : m->type == FLARE__CHAN_NUP   ? "flare.up"
                                                      : NULL;
    if (type == NULL || s->state != SSE_OPEN)
        return;
    char buf[FLARE_CHANNEL_NAME_MAX * 6 + 256];
    flare_json_t j;
    flare_json_init(&j, buf, sizeof(buf));
    flare_json_object_begin(&j);
    flare_json_kv_str(&j, "channel", flare_channel_sub_name(sub));
    char id[FLARE_CHANNEL_POS_MAX + 1];
    size_t idlen = 0;
    if (m->type == FLARE__CHAN_NLOST) {
        flare_json_kv_int(&j, "offset", (int64_t)m->offset);
        flare_json_kv_str(&j, "epoch", (flare_str_t){ m->epoch, m->epoch_len });
        flare_json_kv_cstr(&j, "reason", m->reason != NULL ? m->reason : "");
        if (m->epoch_len > 0) {
            flare_channel_pos_t pos = { .offset = m->offset, .epoch_len = m->epoch_len };
            memcpy(pos.epoch, m->epoch, m->epoch_len);
            idlen = flare_channel_pos_format(&pos, id, sizeof(id));
        }
    }
    flare_json_object_end(&j);
    if (flare_json_finish(&j) != 0)
        return;
    flare_sse_event_t ev = { .id = idlen > 0 ? (flare_str_t){ id, idlen } : FLARE_STR_NULL,
                             .event = flare_str(type),
                             .data = flare_json_output(&j) };
    send_formatted(s, &ev, FLARE_STR_NULL, false);
}

/* The rooms' "" broadcast: every stream of worker w. */
static void sse_all(flare_worker_t *w, const flare__chan_msg_t *m, void *rep)
{
    const sse_app_t *sa = flare__app_module_state(w->app, &sse_module);
    sse_worker_t *sw = sa != NULL ? worker_state(w, sa, false) : NULL;
    const sse_rep_t *r = rep;
    (void)m;
    if (sw == NULL || r == NULL)
        return;
    /* a write may end a stream, never free it (that waits for its timer),
     * so the list holds still while we walk it */
    for (flare_sse_t *s = sw->streams; s != NULL; s = s->next)
        stream_write(s, r->data, r->len);
}

const flare__chan_kind_t flare__sse_chan_kind = {
    .id = FLARE__CHAN_SSE,
    .prepare = sse_rep_prepare,
    .release = sse_rep_release,
    .deliver = sse_deliver,
    .notice = sse_notice,
    .all = sse_all,
};

int flare_sse_broadcast(flare_app_t *app, flare_str_t room, const flare_sse_event_t *ev)
{
    if (app == NULL || ev == NULL || room.len > ROOM_NAME_MAX || (room.len > 0 && room.ptr == NULL))
        return FLARE_EINVAL;
    size_t n;
    int rc = flare_sse_format(ev, NULL, 0, &n);
    if (rc != 0 && rc != FLARE_ETOOBIG)
        return rc;
    if (flare__app_module_state(app, &sse_module) == NULL)
        return FLARE_ESTATE;
    char buf[FLARE_CHANNEL_NAME_MAX];
    flare_str_t name = flare__chan_prefixed(buf, "sse:", room);
    flare__chan_msg_t *m = flare__chan_msg_new(FLARE__CHAN_DATA, name, ev->event, ev->data, false);
    if (m == NULL)
        return FLARE_ENOMEM;
    /* encoded as given (its id and retry too) for the streams here; in a
     * cluster the event goes through Redis and its id becomes its position */
    if ((m->rep[FLARE__CHAN_SSE] = rep_of(ev)) == NULL) {
        flare__chan_msg_unref(m);
        return FLARE_ENOMEM;
    }
    if (room.len == 0)
        m->all_kind = FLARE__CHAN_SSE + 1;
    return flare__chan_submit(app, m, NULL, NULL);
}
