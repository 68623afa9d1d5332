/* The showcase's live parts: server-sent events and a WebSocket chat.
 *
 * GET /events (text/event-stream): a "clock" event every second (the
 * server's time, ISO 8601 UTC) and a "todo" event for each change of any
 * user's todos ({"action":"added"|"completed"|"reopened"|"deleted",
 * "user":..,"id":..,"title":..,"done":..}), broadcast to every stream on
 * every worker.
 *
 * GET /ws?name=NAME&room=ROOM (WebSocket): what a client sends is a
 * message for its room; the server sends JSON events
 * {"type":"join"|"leave"|"msg","name":..,"room":..[,"text":..]} to the
 * room. Rooms span every worker (flare_ws_broadcast). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    (void)ud;
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
    if (flare_sse_join(f->sse, FLARE_STR(SHOWCASE_FEED_ROOM)) == 0)
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

int showcase_events(flare_app_t *app)
{
    return flare_sse_route(app, "/events", events, NULL);
}

/* ---- chat ---- */

#define TEXT_MAX 2000

typedef struct member {
    char name[33];
    char room[33];
} member_t;

/* Sends {"type":type,"name":..,"room":..[,"text":..]} to the member's room
 * but the connection `except` (0: none), and with `self` to ws itself
 * directly: a broadcast skips connections still in their handshake, as ws
 * is during on_open. */
static void chat_event(flare_ws_t *ws, const member_t *m, const char *type, const flare_str_t *text,
                       uint64_t except, bool self)
{
    char buf[256 + 6 * TEXT_MAX];
    flare_json_t j;
    flare_json_init(&j, buf, sizeof(buf));
    flare_json_object_begin(&j);
    flare_json_kv_cstr(&j, "type", type);
    flare_json_kv_cstr(&j, "name", m->name);
    flare_json_kv_cstr(&j, "room", m->room);
    if (text != NULL)
        flare_json_kv_str(&j, "text", *text);
    flare_json_object_end(&j);
    if (flare_json_finish(&j) != 0)
        return;
    if (self)
        flare_ws_send_text(ws, flare_json_output(&j));
    flare_ws_broadcast(flare_ws_app(ws), flare_str(m->room), FLARE_WS_TEXT, flare_json_output(&j),
                       except);
}

static int chat_open(flare_ws_t *ws, flare_req_t *req)
{
    flare_str_t name = flare_req_query_param(req, "name");
    flare_str_t room = flare_req_query_param(req, "room");
    if (!showcase_valid_name(name) || !showcase_valid_name(room))
        return 400;
    member_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return 503;
    memcpy(m->name, name.ptr, name.len);
    memcpy(m->room, room.ptr, room.len);
    if (flare_ws_join(ws, room) != 0) {
        free(m);
        return 503;
    }
    flare_ws_set_data(ws, m);
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
    chat_event(ws, m, "msg", &text, 0, false);
}

static void chat_close(flare_ws_t *ws, int code, flare_str_t reason)
{
    (void)code;
    (void)reason;
    member_t *m = flare_ws_data(ws);
    if (m == NULL)
        return;
    chat_event(ws, m, "leave", NULL, flare_ws_id(ws), false); /* this one is gone already */
    free(m);
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
    return flare_ws_route(app, "/ws", &cfg);
}
