/* The showcase's live parts: server-sent events and a WebSocket chat.
 *
 * GET /events (text/event-stream): a "clock" event every second (the
 * server's time, ISO 8601 UTC) and a "todo" event for each change of any
 * user's todos ({"action":"added"|"completed"|"reopened"|"deleted",
 * "user":..,"id":..,"title":..,"done":..}), broadcast to every stream on
 * every worker. With --cluster the todo events carry "id: OFFSET:EPOCH"
 * and a stream that comes back with Last-Event-ID (EventSource does it by
 * itself) gets the events it missed first, or a "flare.lost" event.
 *
 * GET /ws?name=NAME&room=ROOM[&since=[OFFSET:EPOCH]] (WebSocket): what a
 * client sends is a message for its room; the server sends JSON events
 * {"type":"join"|"leave"|"msg","name":..,"room":..[,"text":..]} to the
 * room, and {"type":"error","error":..} to a sender whose message could
 * not be published. Rooms span every worker, and with --cluster every
 * instance. With `since` the client gets every event of the room in a
 * positioned envelope {"type":"flare.msg","offset":N,"epoch":E,"data":
 * EVENT} (flare_ws_join_at); since=N:E resumes after that position.
 *
 * GET /api/presence?room=ROOM (--cluster): who is in a chat room, on every
 * instance: {"room":..,"members":[{"client":..,"info":{"name":..}}]}. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <flare/cluster.h>
#include <flare/flare.h>
#include <flare/loop.h>
#include <flare/sse.h>
#include <flare/ws.h>

#include "showcase.h"

/* ---- server-sent events ---- */

/* One stream: its handle and its clock. Freed in on_close, which stops
 * the clock first, so a tick never sees a stream that is gone. */
typedef struct feed {
    flare_sse_t *sse;
    flare_timer_t *clock;
} feed_t;

static void tick(void *ud)
{
    feed_t *f = ud;
    char now[32];
    time_t t = time(NULL);
    struct tm tm;
    size_t n = strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    flare_sse_event_t ev = { .event = FLARE_STR("clock"), .data = { now, n } };
    /* a send that fails means the stream is ending: on_close is on its way */
    if (flare_sse_send(f->sse, &ev) == 0)
        flare_timer_start(f->clock, 1000);
}

static void feed_closed(flare_sse_t *s, int reason, void *ud)
{
    (void)s;
    (void)reason;
    feed_t *f = ud;
    flare_timer_free(f->clock);
    free(f);
}

static int events(flare_req_t *req, flare_res_t *res, void *ud)
{
    bool cluster = ud != NULL;
    /* in a cluster the todo events carry their position as their id: a
     * stream that comes back says where it was */
    flare_channel_pos_t since;
    flare_str_t last = flare_req_header(req, "Last-Event-ID");
    bool resume = cluster && last.len > 0;
    if (resume && flare_channel_pos_parse(last, &since) != 0)
        return flare_res_send(res, 400, FLARE_STR("text/plain"),
                              FLARE_STR("bad Last-Event-ID: expected OFFSET:EPOCH\n"));
    feed_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return FLARE_ENOMEM;
    int rc = flare_timer_new(flare_req_worker(req), tick, f, &f->clock);
    if (rc != 0) {
        free(f);
        return rc;
    }
    flare_sse_config_t cfg = { .retry_ms = 2000, .on_close = feed_closed, .ud = f };
    rc = flare_sse_start(req, res, &cfg, &f->sse);
    if (rc != 0) {
        flare_timer_free(f->clock);
        free(f);
        if (rc == FLARE_EUNAVAIL)
            return flare_res_send(res, 503, FLARE_STR("text/plain"), FLARE_STR("shutting down\n"));
        return rc;
    }
    /* from here on the stream owns f (feed_closed frees it) */
    if (flare_sse_join_at(f->sse, FLARE_STR(SHOWCASE_FEED_ROOM), resume ? &since : NULL) == 0)
        tick(f);
    return FLARE_ASYNC;
}

void showcase_feed_publish(flare_app_t *app, const char *action, flare_str_t user, int64_t id,
                           flare_str_t title, bool done)
{
    char buf[1536]; /* a title is at most 200 bytes, 6 when escaped: fits */
    flare_json_t j;
    flare_json_init(&j, buf, sizeof(buf));
    flare_json_object_begin(&j);
    flare_json_kv_cstr(&j, "action", action);
    flare_json_kv_str(&j, "user", user);
    flare_json_kv_int(&j, "id", id);
    flare_json_kv_str(&j, "title", title);
    flare_json_kv_bool(&j, "done", done);
    flare_json_object_end(&j);
    if (flare_json_finish(&j) != 0)
        return;
    flare_sse_event_t ev = { .event = FLARE_STR("todo"), .data = flare_json_output(&j) };
    /* best effort: a feed that misses an event (out of memory) is still a feed */
    (void)flare_sse_broadcast(app, FLARE_STR(SHOWCASE_FEED_ROOM), &ev);
}

int showcase_events(flare_app_t *app, const flare_settings_t *st)
{
    /* ud: non-NULL in a cluster */
    return flare_sse_route(app, "/events", events, st->cluster != NULL ? app : NULL);
}

/* ---- chat ---- */

#define TEXT_MAX 2000

typedef struct member {
    char name[33];
    char room[33];
    bool positioned; /* joined with ?since: gets envelopes, its own events too */
    char client[64]; /* its presence id (cluster): NAME#PROCESS.ID */
} member_t;

/* {"type":type,"name":..,"room":..[,"text":..]} into j. */
static int chat_json(flare_json_t *j, char *buf, size_t cap, const member_t *m, const char *type,
                     const flare_str_t *text)
{
    flare_json_init(j, buf, cap);
    flare_json_object_begin(j);
    flare_json_kv_cstr(j, "type", type);
    flare_json_kv_cstr(j, "name", m->name);
    flare_json_kv_cstr(j, "room", m->room);
    if (text != NULL)
        flare_json_kv_str(j, "text", *text);
    flare_json_object_end(j);
    return flare_json_finish(j);
}

/* Sends the event to the member's room but the connection `except` (0:
 * none), and with `self` to ws itself directly: a broadcast skips
 * connections still in their handshake, as ws is during on_open. */
static void chat_event(flare_ws_t *ws, const member_t *m, const char *type, const flare_str_t *text,
                       uint64_t except, bool self)
{
    char buf[256 + 6 * TEXT_MAX];
    flare_json_t j;
    if (chat_json(&j, buf, sizeof(buf), m, type, text) != 0)
        return;
    if (self)
        flare_ws_send_text(ws, flare_json_output(&j));
    flare_ws_broadcast(flare_ws_app(ws), flare_str(m->room), FLARE_WS_TEXT, flare_json_output(&j),
                       except);
}

/* A message's publication failed (Redis unreachable, timed out): its
 * sender is told, by id (the connection may be gone by now). */
typedef struct sent {
    flare_app_t *app;
    uint64_t id;
} sent_t;

static void tell_error(flare_app_t *app, uint64_t id, int err)
{
    char buf[160];
    flare_json_t j;
    flare_json_init(&j, buf, sizeof(buf));
    flare_json_object_begin(&j);
    flare_json_kv_cstr(&j, "type", "error");
    flare_json_kv_cstr(&j, "error",
                       err == FLARE_EUNAVAIL    ? "not sent: the cluster is unavailable"
                       : err == FLARE_ETIMEDOUT ? "not sure it was sent: timed out"
                                                : "not sent");
    flare_json_object_end(&j);
    if (flare_json_finish(&j) == 0)
        flare_ws_send_to(app, id, FLARE_WS_TEXT, flare_json_output(&j));
}

static void chat_published(int err, uint64_t offset, flare_str_t epoch, void *ud)
{
    (void)offset;
    (void)epoch;
    sent_t *s = ud;
    if (err != 0)
        tell_error(s->app, s->id, err);
    free(s);
}

static void presence(flare_ws_t *ws, member_t *m, bool add)
{
    char chan[40];
    int n = snprintf(chan, sizeof(chan), "ws:%s", m->room);
    flare_str_t channel = { chan, (size_t)n };
    flare_worker_t *w = flare_ws_worker(ws);
    if (!add) {
        flare_channel_presence_remove(w, channel, flare_str(m->client));
        return;
    }
    /* NAME#PROCESS.CONNECTION: connection ids are per instance, the
     * process part keeps two instances' members apart */
    static _Atomic unsigned proc;
    unsigned p = atomic_load_explicit(&proc, memory_order_relaxed);
    if (p == 0) {
        p = ((unsigned)getpid() * 2654435761u) ^ (unsigned)time(NULL);
        atomic_store_explicit(&proc, p != 0 ? p : 1, memory_order_relaxed);
    }
    snprintf(m->client, sizeof(m->client), "%s#%x.%llx", m->name, p,
             (unsigned long long)flare_ws_id(ws));
    char info[96];
    int k = snprintf(info, sizeof(info), "{\"name\":\"%s\"}", m->name); /* names need no escape */
    /* without a cluster (FLARE_ESTATE), or Redis down: no presence, the chat goes on */
    (void)flare_channel_presence_add(w, channel, flare_str(m->client),
                                     (flare_str_t){ info, (size_t)k });
}

static int chat_open(flare_ws_t *ws, flare_req_t *req)
{
    flare_str_t name = flare_req_query_param(req, "name");
    flare_str_t room = flare_req_query_param(req, "room");
    flare_str_t since = flare_req_query_param(req, "since");
    if (!showcase_valid_name(name) || !showcase_valid_name(room))
        return 400;
    flare_channel_pos_t pos;
    if (since.len > 0 && flare_channel_pos_parse(since, &pos) != 0)
        return 400; /* not OFFSET:EPOCH */
    member_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return 503;
    memcpy(m->name, name.ptr, name.len);
    memcpy(m->room, room.ptr, room.len);
    m->positioned = since.ptr != NULL;
    int rc = m->positioned ? flare_ws_join_at(ws, room, since.len > 0 ? &pos : NULL)
                           : flare_ws_join(ws, room);
    if (rc != 0) {
        free(m);
        return 503;
    }
    flare_ws_set_data(ws, m);
    presence(ws, m, true);
    /* a positioned member gets its own join through the room, with its
     * position; the others directly, before the room's */
    if (m->positioned)
        chat_event(ws, m, "join", NULL, 0, false);
    else
        chat_event(ws, m, "join", NULL, flare_ws_id(ws), true);
    return 0;
}

static void chat_message(flare_ws_t *ws, flare_ws_opcode_t op, flare_str_t text)
{
    const member_t *m = flare_ws_data(ws);
    if (op != FLARE_WS_TEXT || text.len == 0)
        return;
    if (text.len > TEXT_MAX) {
        flare_ws_close(ws, 1009, FLARE_STR("message too long"));
        return;
    }
    char buf[256 + 6 * TEXT_MAX];
    flare_json_t j;
    if (chat_json(&j, buf, sizeof(buf), m, "msg", &text) != 0)
        return;
    /* published with a completion, so that a failure reaches the sender */
    char chan[40];
    int n = snprintf(chan, sizeof(chan), "ws:%s", m->room);
    sent_t *s = malloc(sizeof(*s));
    if (s == NULL)
        return;
    *s = (sent_t){ flare_ws_app(ws), flare_ws_id(ws) };
    int rc = flare_channel_publish(s->app, (flare_str_t){ chan, (size_t)n },
                                   &(flare_channel_msg_t){ .data = flare_json_output(&j) },
                                   chat_published, s);
    if (rc != 0) {
        free(s);
        tell_error(flare_ws_app(ws), flare_ws_id(ws), rc); /* failing fast */
    }
}

static void chat_close(flare_ws_t *ws, int code, flare_str_t reason)
{
    (void)code;
    (void)reason;
    member_t *m = flare_ws_data(ws);
    if (m == NULL)
        return;
    presence(ws, m, false);
    chat_event(ws, m, "leave", NULL, flare_ws_id(ws), false); /* this one is gone already */
    free(m);
}

/* ---- presence ---- */

typedef struct listing {
    flare_res_t *res;
    char room[33];
} listing_t;

static void members_listed(int err, const flare_channel_member_t *members, size_t n, void *ud)
{
    listing_t *l = ud;
    flare_res_t *res = l->res;
    if (err != 0) {
        showcase_json_error(res, 503, "the cluster is unavailable");
        return;
    }
    flare_json_t *j = flare_res_json(res, 200);
    if (j == NULL)
        return;
    flare_json_object_begin(j);
    flare_json_kv_cstr(j, "room", l->room);
    flare_json_kv_array(j, "members");
    for (size_t i = 0; i < n; i++) {
        flare_json_object_begin(j);
        flare_json_kv_str(j, "client", members[i].client);
        flare_json_key(j, FLARE_STR("info"));
        flare_json_raw(j, members[i].info); /* the showcase wrote it: JSON */
        flare_json_object_end(j);
    }
    flare_json_array_end(j);
    flare_json_object_end(j);
    flare_json_end(j);
}

static int presence_get(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t room = flare_req_query_param(req, "room");
    if (!showcase_valid_name(room))
        return showcase_json_error(res, 400, "room: 1 to 32 of [A-Za-z0-9_.-]");
    char chan[40];
    int n = snprintf(chan, sizeof(chan), "ws:%.*s", (int)room.len, room.ptr);
    /* in the request's arena: valid until the response completes */
    listing_t *l = flare_req_alloc(req, sizeof(*l));
    if (l == NULL)
        return FLARE_ENOMEM;
    l->res = res;
    memcpy(l->room, room.ptr, room.len);
    l->room[room.len] = '\0';
    int rc = flare_channel_presence(flare_req_worker(req), (flare_str_t){ chan, (size_t)n },
                                    members_listed, l);
    if (rc == FLARE_ESTATE)
        return showcase_json_error(res, 404, "presence needs --cluster");
    return rc == 0 ? FLARE_ASYNC : rc;
}

int showcase_chat(flare_app_t *app, const flare_settings_t *st)
{
    flare_ws_config_t cfg = {
        .on_open = chat_open,
        .on_message = chat_message,
        .on_close = chat_close,
        .deflate = true,
        .max_message = 16 * 1024,
    };
    /* cross-site WebSocket hijacking: a page elsewhere cannot open the chat
     * with the visitor's cookies; only the showcase's own origin (the
     * default) or the --ws-origin list */
    flare_settings_ws_config(st, &cfg);
    int rc = flare_ws_route(app, "/ws", &cfg);
    if (rc == 0)
        rc = flare_get(app, "/api/presence", presence_get, NULL);
    return rc;
}
