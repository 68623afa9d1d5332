/* The parts of the showcase (examples/showcase), each registering its routes
 * on the app. Everything here uses the public API only, as an application
 * would. */
#ifndef SHOWCASE_H
#define SHOWCASE_H

#include <flare/db.h>
#include <flare/flare.h>
#include <flare/settings.h>

/* The SSE room every page's live feed joins: the clock ticks go to each
 * stream, todo changes are broadcast here. */
#define SHOWCASE_FEED_ROOM "feed"

/* Sends {"error": msg} with status. */
int showcase_json_error(flare_res_t *res, int status, const char *msg);

/* Whether s is a name the showcase accepts for a user or a chat room:
 * 1 to 32 of [A-Za-z0-9_.-]. */
bool showcase_valid_name(flare_str_t s);

/* todos.c: POST/GET/DELETE /api/session (log in with a name), the todo
 * API under /api/todos (each user sees their own), kept in db (the table is
 * created when missing). Its OpenAPI description too. The sessions follow
 * --session-secure (the cookie is Secure over TLS by default) and --sessions
 * (in memory by default, or Redis). */
int showcase_todos(flare_app_t *app, flare_db_t *db, flare_settings_t *st);

/* live.c: GET /events (server-sent events: a clock every second and the
 * feed of todo changes; with --cluster resumable from Last-Event-ID), and
 * showcase_feed_publish for todos.c. */
int showcase_events(flare_app_t *app, const flare_settings_t *st);
void showcase_feed_publish(flare_app_t *app, const char *action, flare_str_t user, int64_t id,
                           flare_str_t title, bool done);

/* live.c: the chat, a WebSocket at /ws?name=NAME&room=ROOM[&since=...],
 * and GET /api/presence?room=ROOM (with --cluster). Browsers may open it
 * from the showcase's own pages only, or from the --ws-origin origins. */
int showcase_chat(flare_app_t *app, const flare_settings_t *st);

#endif
