/* The hub: connection ids, rooms, and the WebSocket subscriber kind of the
 * channel layer (web/channel.h).
 *
 * Nothing here is shared between workers: each worker keeps its own id
 * table, and its connections' rooms are channel subscriptions on it ("ws:"
 * ROOM). Sending to an id on another worker posts a task to it; a broadcast
 * is a channel message, delivered by each worker to its own connections. A
 * broadcast is encoded once into a refcounted frame (and compressed once
 * when connections share compression parameters); workers and slow
 * recipients hold references, never copies. */
#include <stdlib.h>
#include <string.h>

#include "app_svc.h"
#include "worker.h"
#include "ws/ws_int.h"

#define ROOM_NAME_MAX 255
#define WORKER_BITS   16

static inline size_t id_slot(uint64_t id, size_t cap)
{
    return (size_t)(((id >> WORKER_BITS) * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

/* ---- ids ---- */

static int ids_grow(ws_worker_t *ww)
{
    size_t cap = ww->idcap != 0 ? ww->idcap * 2 : 64;
    flare_ws_t **t = calloc(cap, sizeof(*t));
    if (t == NULL)
        return FLARE_ENOMEM;
    for (size_t i = 0; i < ww->idcap; i++) {
        flare_ws_t *ws = ww->ids[i];
        while (ws != NULL) {
            flare_ws_t *next = ws->id_next;
            size_t s = id_slot(ws->id, cap);
            ws->id_next = t[s];
            t[s] = ws;
            ws = next;
        }
    }
    free(ww->ids);
    ww->ids = t;
    ww->idcap = cap;
    return 0;
}

uint64_t flare__ws_id_assign(ws_worker_t *ww, flare_ws_t *ws)
{
    if (ww->nids + 1 > ww->idcap && ids_grow(ww) != 0)
        return 0;
    uint64_t id = ww->next_seq++ << WORKER_BITS | (ww->w->id & ((1u << WORKER_BITS) - 1));
    ws->id = id;
    size_t s = id_slot(id, ww->idcap);
    ws->id_next = ww->ids[s];
    ww->ids[s] = ws;
    ww->nids++;
    return id;
}

void flare__ws_id_remove(ws_worker_t *ww, flare_ws_t *ws)
{
    if (ww->idcap == 0)
        return;
    for (flare_ws_t **p = &ww->ids[id_slot(ws->id, ww->idcap)]; *p != NULL; p = &(*p)->id_next) {
        if (*p == ws) {
            *p = ws->id_next;
            ww->nids--;
            return;
        }
    }
}

static flare_ws_t *id_find(ws_worker_t *ww, uint64_t id)
{
    if (ww->idcap == 0)
        return NULL;
    for (flare_ws_t *ws = ww->ids[id_slot(id, ww->idcap)]; ws != NULL; ws = ws->id_next) {
        if (ws->id == id)
            return ws;
    }
    return NULL;
}

/* ---- rooms: channels "ws:" ROOM of the channel layer ---- */

static bool room_name_ok(flare_str_t room)
{
    return room.len > 0 && room.len <= ROOM_NAME_MAX && room.ptr != NULL;
}

static int join(flare_ws_t *ws, flare_str_t room, unsigned flags, const flare_channel_pos_t *since)
{
    if (ws == NULL || !room_name_ok(room))
        return FLARE_EINVAL;
    if (ws->state == WS_DEAD)
        return FLARE_ECLOSED;
    char buf[FLARE_CHANNEL_NAME_MAX];
    flare_str_t name = flare__chan_prefixed(buf, "ws:", room);
    for (flare__chan_sub_t *m = ws->rooms; m != NULL; m = m->onext) {
        if (flare__chan_sub_is(m, name))
            return 0;
    }
    flare__chan_sub_t *m;
    int rc = flare__chan_join(ws->ww->w, &flare__ws_chan_kind, ws, name, flags, &m);
    if (rc != 0)
        return rc == FLARE_ESTATE ? FLARE_ECLOSED : rc;
    m->onext = ws->rooms;
    ws->rooms = m;
    flare__chan_resume(m, since);
    return 0;
}

int flare_ws_join(flare_ws_t *ws, flare_str_t room)
{
    return join(ws, room, 0, NULL);
}

int flare_ws_join_at(flare_ws_t *ws, flare_str_t room, const flare_channel_pos_t *since)
{
    return join(ws, room, FLARE__SUB_POSITIONS, since);
}

int flare_ws_leave(flare_ws_t *ws, flare_str_t room)
{
    if (ws == NULL || !room_name_ok(room))
        return FLARE_EINVAL;
    char buf[FLARE_CHANNEL_NAME_MAX];
    flare_str_t name = flare__chan_prefixed(buf, "ws:", room);
    for (flare__chan_sub_t **p = &ws->rooms; *p != NULL; p = &(*p)->onext) {
        flare__chan_sub_t *m = *p;
        if (flare__chan_sub_is(m, name)) {
            *p = m->onext;
            flare__chan_leave(m);
            return 0;
        }
    }
    return FLARE_ENOTFOUND;
}

void flare__ws_leave_all(flare_ws_t *ws)
{
    while (ws->rooms != NULL) {
        flare__chan_sub_t *m = ws->rooms;
        ws->rooms = m->onext;
        flare__chan_leave(m);
    }
}

void flare__ws_hub_dispose(ws_worker_t *ww)
{
    /* every connection has left its rooms by now; free the id table */
    free(ww->ids);
    ww->ids = NULL;
    ww->idcap = ww->nids = 0;
}

/* ---- delivery ---- */

static ws_worker_t *local_worker(flare_app_t *app)
{
    ws_worker_t *ww = flare__ws_tls;
    return ww != NULL && ww->w->app == app ? ww : NULL;
}

/* Compresses a broadcast once, for every connection that shares
 * compression parameters with it (no context takeover, same window). */
static ws_shared_t *pack(ws_app_t *wa, ws_worker_t *local, uint8_t op, flare_str_t payload)
{
    z_stream tmp, *z;
    bool own = false;
    flare_buf_t out = { 0 };
    if (local != NULL) {
        z = flare__ws_shared_deflater(local, wa->bcast_bits, wa->bcast_mem, wa->bcast_level);
        if (z == NULL)
            return NULL;
    } else {
        /* not on a worker: a stream for this call */
        if (flare__ws_deflate_init(&tmp, wa->bcast_level, wa->bcast_bits, wa->bcast_mem) != 0)
            return NULL;
        z = &tmp;
        own = true;
    }
    ws_shared_t *s = NULL;
    if (flare__ws_deflate_message(z, payload.ptr, payload.len, true, &out) == 0)
        s = flare__ws_shared_new(op, true, out.data, out.len);
    else if (!own)
        deflateReset(z);
    if (own)
        deflateEnd(&tmp);
    flare__buf_free(&out);
    return s;
}

int flare_ws_broadcast(flare_app_t *app, flare_str_t room, flare_ws_opcode_t op,
                       flare_str_t payload, uint64_t except)
{
    if (app == NULL || (op != FLARE_WS_TEXT && op != FLARE_WS_BINARY) || room.len > ROOM_NAME_MAX ||
        (room.len > 0 && room.ptr == NULL) || (payload.len > 0 && payload.ptr == NULL))
        return FLARE_EINVAL;
    if (op == FLARE_WS_TEXT && !flare__utf8_valid(payload.ptr, payload.len))
        return FLARE_EINVAL;
    if (flare__ws_app_state(app) == NULL)
        return FLARE_ESTATE;
    /* a room is the channel "ws:" ROOM; room "" is every connection of the
     * app, through the same sequencer (so in order with the rest) but never
     * across instances */
    char buf[FLARE_CHANNEL_NAME_MAX];
    flare__chan_msg_t *m =
        flare__chan_msg_new(FLARE__CHAN_DATA, flare__chan_prefixed(buf, "ws:", room),
                            FLARE_STR_NULL, payload, op == FLARE_WS_BINARY);
    if (m == NULL)
        return FLARE_ENOMEM;
    m->except_id = except;
    if (room.len == 0)
        m->all_kind = FLARE__CHAN_WS + 1;
    return flare__chan_submit(app, m, NULL, NULL);
}

typedef struct sendto_task {
    flare_worker_t *w;
    const ws_app_t *wa;
    uint64_t id;
    flare_ws_opcode_t op;
    size_t len;
    char data[];
} sendto_task_t;

static void sendto_run(void *ud)
{
    sendto_task_t *t = ud;
    ws_worker_t *ww = flare__ws_worker(t->w, t->wa);
    flare_ws_t *ws = ww != NULL ? id_find(ww, t->id) : NULL;
    if (ws != NULL && (ws->flags & WF_OPENED))
        flare_ws_send(ws, t->op, (flare_str_t){ t->data, t->len });
    free(t);
}

static int send_to(flare_app_t *app, const ws_app_t *wa, uint64_t id, flare_ws_opcode_t op,
                   flare_str_t payload);

int flare_ws_send_to(flare_app_t *app, uint64_t id, flare_ws_opcode_t op, flare_str_t payload)
{
    if (app == NULL || (op != FLARE_WS_TEXT && op != FLARE_WS_BINARY) ||
        (payload.len > 0 && payload.ptr == NULL))
        return FLARE_EINVAL;
    if (op == FLARE_WS_TEXT && !flare__utf8_valid(payload.ptr, payload.len))
        return FLARE_EINVAL;
    const ws_app_t *wa = flare__ws_app_state(app);
    if (wa == NULL)
        return FLARE_ESTATE;
    int rc = flare__app_enter(app); /* the workers stay while we are inside */
    if (rc != 0)
        return rc;
    rc = send_to(app, wa, id, op, payload);
    flare__app_leave(app);
    return rc;
}

static int send_to(flare_app_t *app, const ws_app_t *wa, uint64_t id, flare_ws_opcode_t op,
                   flare_str_t payload)
{
    unsigned wid = (unsigned)(id & ((1u << WORKER_BITS) - 1));
    flare_worker_t *w = flare_app_worker(app, wid);
    if ((id >> WORKER_BITS) == 0 || w == NULL)
        return FLARE_ENOTFOUND;
    ws_worker_t *local = local_worker(app);
    if (local != NULL && local->w == w) {
        flare_ws_t *ws = id_find(local, id);
        if (ws == NULL || !(ws->flags & WF_OPENED))
            return FLARE_ENOTFOUND;
        return flare_ws_send(ws, op, payload);
    }
    sendto_task_t *t = malloc(sizeof(*t) + payload.len);
    if (t == NULL)
        return FLARE_ENOMEM;
    t->w = w;
    t->wa = wa;
    t->id = id;
    t->op = op;
    t->len = payload.len;
    if (payload.len > 0)
        memcpy(t->data, payload.ptr, payload.len);
    if (flare__loop_post(&w->loop, sendto_run, t) != 0) {
        free(t);
        return FLARE_ENOMEM;
    }
    return 0;
}

/* ---- the WebSocket subscriber kind of the channel layer ---- */

/* A channel message's shared forms for WebSocket connections: the frame,
 * compressed once for the connections that share compression parameters,
 * and the positioned envelope (flare_ws_join_at). */
typedef struct ws_rep {
    ws_shared_t *plain, *packed, *env;
} ws_rep_t;

/* {"type":"flare.msg","channel":..,"offset":..,"epoch":..,"data":<the
 * payload as it is, when it is JSON>} or ..,"text":"<the payload>"}. */
static ws_shared_t *envelope(const flare__chan_msg_t *m)
{
    flare_json_t j;
    flare_json_init_heap(&j, m->data_len + m->name_len + 128);
    flare_json_object_begin(&j);
    flare_json_kv_cstr(&j, "type", "flare.msg");
    flare_json_kv_str(&j, "channel", (flare_str_t){ m->name, m->name_len });
    flare_json_kv_int(&j, "offset", (int64_t)m->offset);
    flare_json_kv_str(&j, "epoch", (flare_str_t){ m->epoch, m->epoch_len });
    flare_json_doc_t *doc = NULL;
    if (flare_json_parse(m->data, m->data_len, &doc, NULL) == 0) {
        flare_json_doc_free(doc);
        flare_json_key(&j, FLARE_STR("data"));
        flare_json_raw(&j, (flare_str_t){ m->data, m->data_len });
    } else {
        flare_json_kv_str(&j, "text", (flare_str_t){ m->data, m->data_len });
    }
    flare_json_object_end(&j);
    ws_shared_t *sh = NULL;
    if (flare_json_finish(&j) == 0) {
        flare_str_t out = flare_json_output(&j);
        sh = flare__ws_shared_new(FLARE_WS_TEXT, false, out.ptr, out.len);
    }
    flare_json_dispose(&j);
    return sh;
}

static void ws_rep_release(void *p)
{
    ws_rep_t *r = p;
    if (r == NULL)
        return;
    flare__ws_shared_unref(r->plain);
    flare__ws_shared_unref(r->packed);
    flare__ws_shared_unref(r->env);
    free(r);
}

static void *ws_rep_prepare(flare_app_t *app, const flare__chan_msg_t *m, bool positions)
{
    ws_app_t *wa = flare__ws_app_state(app);
    ws_rep_t *r = calloc(1, sizeof(*r));
    if (wa == NULL || r == NULL) {
        free(r);
        return NULL;
    }
    uint8_t op = m->binary ? FLARE_WS_BINARY : FLARE_WS_TEXT;
    r->plain = flare__ws_shared_new(op, false, m->data, m->data_len);
    if (wa->shared_deflate && m->data_len >= wa->bcast_min)
        r->packed = pack(wa, local_worker(app), op, (flare_str_t){ m->data, m->data_len });
    if (positions && !m->binary)
        r->env = envelope(m);
    return r;
}

static void ws_deliver(flare__chan_sub_t *s, const flare__chan_msg_t *m, void *rep)
{
    flare_ws_t *ws = s->owner;
    /* a connection inside its on_open may still be refused: not yet */
    if (!(ws->flags & WF_OPENED))
        return;
    if (m->except_id != 0 && ws->id == m->except_id && m->except_inst == ws->ww->wapp->instance)
        return;
    ws_rep_t *r = rep, tmp = { 0 };
    if ((s->flags & FLARE__SUB_POSITIONS) && !m->binary) {
        ws_shared_t *env = r != NULL && r->env != NULL ? r->env : (tmp.env = envelope(m));
        if (env != NULL)
            flare__ws_send_shared(ws, env, NULL);
    } else {
        uint8_t op = m->binary ? FLARE_WS_BINARY : FLARE_WS_TEXT;
        ws_shared_t *plain =
            r != NULL && r->plain != NULL
                ? r->plain
                : (tmp.plain = flare__ws_shared_new(op, false, m->data, m->data_len));
        if (plain != NULL)
            flare__ws_send_shared(ws, plain, r != NULL ? r->packed : NULL);
    }
    flare__ws_shared_unref(tmp.plain);
    flare__ws_shared_unref(tmp.env);
}

/* Notices as text messages {"type":"flare.lost"|"flare.down"|"flare.up",
 * "channel":..[,"offset":..,"epoch":..,"reason":..]} (docs/cluster.md). */
static void ws_notice(flare__chan_sub_t *s, const flare__chan_msg_t *m)
{
    flare_ws_t *ws = s->owner;
    const char *type = m->type == FLARE__CHAN_NLOST   ? "flare.lost"
                       : m->type == FLARE__CHAN_NDOWN ? "flare.down"
                       : m->type == FLARE__CHAN_NUP   ? "flare.up"
                                                      : NULL;
    if (type == NULL || ws->state == WS_DEAD)
        return; /* presence is for C subscribers */
    char buf[FLARE_CHANNEL_NAME_MAX * 6 + 256];
    flare_json_t j;
    flare_json_init(&j, buf, sizeof(buf));
    flare_json_object_begin(&j);
    flare_json_kv_cstr(&j, "type", type);
    flare_json_kv_str(&j, "channel", flare_channel_sub_name(s));
    if (m->type == FLARE__CHAN_NLOST) {
        flare_json_kv_int(&j, "offset", (int64_t)m->offset);
        flare_json_kv_str(&j, "epoch", (flare_str_t){ m->epoch, m->epoch_len });
        flare_json_kv_cstr(&j, "reason", m->reason != NULL ? m->reason : "");
    }
    flare_json_object_end(&j);
    if (flare_json_finish(&j) == 0)
        flare_ws_send_text(ws, flare_json_output(&j));
}

/* Every open connection of worker w (a broadcast to room ""). */
static void ws_all(flare_worker_t *w, const flare__chan_msg_t *m, void *rep)
{
    ws_app_t *wa = flare__ws_app_state(w->app);
    ws_worker_t *ww = wa != NULL ? flare__ws_worker(w, wa) : NULL;
    ws_rep_t *r = rep;
    if (ww == NULL || r == NULL || r->plain == NULL)
        return;
    /* sends never free a connection (that waits for the reap), so the list
     * holds still while we walk it */
    for (flare_ws_t *ws = ww->conns; ws != NULL; ws = ws->next) {
        if (ws->id != m->except_id && (ws->flags & WF_OPENED))
            flare__ws_send_shared(ws, r->plain, r->packed);
    }
}

const flare__chan_kind_t flare__ws_chan_kind = {
    .id = FLARE__CHAN_WS,
    .prepare = ws_rep_prepare,
    .release = ws_rep_release,
    .deliver = ws_deliver,
    .notice = ws_notice,
    .all = ws_all,
};
