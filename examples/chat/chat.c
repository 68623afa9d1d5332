/* A room chat served by Flare: static assets (an HTML page with a little
 * JavaScript) and a WebSocket at /ws. Open http://HOST:PORT/ in two browser
 * tabs, pick a name and the same room, talk.
 *
 *   chat --listen HOST:PORT --workers N [--static DIR]
 *
 * Protocol: the page connects to /ws?name=NAME&room=ROOM; what it sends is
 * the text of a message ("/join ROOM" switches rooms); the server sends JSON
 * events: {"type":"welcome","id":..,"name":..,"room":..},
 * {"type":"join"|"leave","id":..,"name":..,"room":..} and
 * {"type":"msg","id":..,"name":..,"room":..,"text":..}. Rooms span every
 * worker thread: flare_ws_broadcast fans each event out to all of them.
 *
 * Everything uses the public API exactly as an application would. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <flare/flare.h>
#include <flare/settings.h>
#include <flare/ws.h>

#ifndef CHAT_STATIC_DIR
#define CHAT_STATIC_DIR "examples/chat/static"
#endif

#define NAME_MAX_LEN 32
#define TEXT_MAX_LEN 2000

static const char *static_dir = CHAT_STATIC_DIR;

/* ---- the page ---- */

/* "/" is the page itself; its assets are under /static/ (flare_static:
 * validators, 304s, ranges, safe paths). */
static int index_page(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    char path[512];
    snprintf(path, sizeof(path), "%s/index.html", static_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return flare_res_send(res, 404, FLARE_STR("text/plain"), FLARE_STR("not found\n"));
    }
    flare_res_header(res, FLARE_STR("Cache-Control"), FLARE_STR("no-cache"));
    return flare_res_sendfile(res, 200, FLARE_STR("text/html; charset=utf-8"), fd, 0,
                              (uint64_t)st.st_size);
}

/* ---- chat ---- */

typedef struct member {
    char name[NAME_MAX_LEN + 1];
    char room[NAME_MAX_LEN + 1];
} member_t;

static bool valid_name(flare_str_t s)
{
    if (s.len == 0 || s.len > NAME_MAX_LEN)
        return false;
    for (size_t i = 0; i < s.len; i++) {
        char c = s.ptr[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return false;
    }
    return true;
}

/* Appends s as a JSON string; out must hold 6 * s.len + 2 more bytes. */
static size_t json_str(char *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    char *p = out;
    *p++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            *p++ = '\\';
            *p++ = (char)c;
        } else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
            memcpy(p, "\\u00", 4);
            p[4] = hex[c >> 4];
            p[5] = hex[c & 15];
            p += 6;
        } else {
            *p++ = (char)c;
        }
    }
    *p++ = '"';
    return (size_t)(p - out);
}

/* Sends {"type":..,"id":..,"name":..,"room":..[,"text":..]} to the room
 * (or, with `only`, to that connection alone). */
static void event(flare_ws_t *ws, const char *type, const char *text, size_t tlen, bool only)
{
    const member_t *m = flare_ws_data(ws);
    char buf[64 + 2 * 6 * NAME_MAX_LEN + 6 * TEXT_MAX_LEN + 64];
    int n = snprintf(buf, sizeof(buf), "{\"type\":\"%s\",\"id\":%llu,\"name\":", type,
                     (unsigned long long)flare_ws_id(ws));
    size_t len = (size_t)n;
    len += json_str(buf + len, m->name, strlen(m->name));
    memcpy(buf + len, ",\"room\":", 8);
    len += 8;
    len += json_str(buf + len, m->room, strlen(m->room));
    if (text != NULL) {
        memcpy(buf + len, ",\"text\":", 8);
        len += 8;
        len += json_str(buf + len, text, tlen);
    }
    buf[len++] = '}';
    flare_str_t msg = { buf, len };
    if (only)
        flare_ws_send_text(ws, msg);
    else
        flare_ws_broadcast(flare_ws_app(ws), flare_str(m->room), FLARE_WS_TEXT, msg, 0);
}

static int chat_open(flare_ws_t *ws, flare_req_t *req)
{
    flare_str_t name = flare_req_query_param(req, "name");
    flare_str_t room = flare_req_query_param(req, "room");
    if (!valid_name(name) || !valid_name(room))
        return 400;
    member_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return 503;
    memcpy(m->name, name.ptr, name.len);
    memcpy(m->room, room.ptr, room.len);
    flare_ws_set_data(ws, m);
    if (flare_ws_join(ws, room) != 0) {
        free(m);
        return 503;
    }
    event(ws, "welcome", NULL, 0, true);
    event(ws, "join", NULL, 0, false);
    return 0;
}

static void chat_message(flare_ws_t *ws, flare_ws_opcode_t op, flare_str_t text)
{
    member_t *m = flare_ws_data(ws);
    if (op != FLARE_WS_TEXT || text.len == 0)
        return;
    if (text.len > TEXT_MAX_LEN) {
        flare_ws_close(ws, 1009, FLARE_STR("message too long"));
        return;
    }
    if (text.len > 6 && memcmp(text.ptr, "/join ", 6) == 0) {
        flare_str_t room = { text.ptr + 6, text.len - 6 };
        if (!valid_name(room))
            return;
        event(ws, "leave", NULL, 0, false);
        flare_ws_leave(ws, flare_str(m->room));
        memcpy(m->room, room.ptr, room.len);
        m->room[room.len] = '\0';
        flare_ws_join(ws, room);
        event(ws, "welcome", NULL, 0, true);
        event(ws, "join", NULL, 0, false);
        return;
    }
    event(ws, "msg", text.ptr, text.len, false);
}

static void chat_close(flare_ws_t *ws, int code, flare_str_t reason)
{
    (void)code;
    (void)reason;
    member_t *m = flare_ws_data(ws);
    if (m == NULL)
        return;
    /* the others hear about it; this connection is gone already */
    char buf[64 + 2 * 6 * NAME_MAX_LEN];
    int n =
        snprintf(buf, sizeof(buf),
                 "{\"type\":\"leave\",\"id\":%llu,\"name\":", (unsigned long long)flare_ws_id(ws));
    size_t len = (size_t)n;
    len += json_str(buf + len, m->name, strlen(m->name));
    memcpy(buf + len, ",\"room\":", 8);
    len += 8;
    len += json_str(buf + len, m->room, strlen(m->room));
    buf[len++] = '}';
    flare_ws_broadcast(flare_ws_app(ws), flare_str(m->room), FLARE_WS_TEXT,
                       (flare_str_t){ buf, len }, flare_ws_id(ws));
    free(m);
}

int main(int argc, char **argv)
{
    /* --config FILE, FLARE_*, then the flags (flare/settings.h): --listen,
     * --workers, --static DIR (the page and its scripts) */
    flare_settings_t st;
    int rc;
    if (flare_settings_main(&st, argc, argv, NULL, 0, &rc) != 0)
        return rc;
    if (st.nstatics > 0)
        static_dir = st.statics[0];
    /* the app with the logs, the listeners, SIGHUP (static is mounted
     * below, with this page's options) */
    flare_app_t *app;
    if ((rc = flare_settings_app_new(&st, &(flare_settings_setup_opts_t){ .no_static = true },
                                     &app)) != 0) {
        fprintf(stderr, "chat: %s\n", flare_settings_error(&st));
        flare_settings_free(&st);
        return 1;
    }
    flare_static_opts_t so;
    flare_static_opts_init(&so);
    so.cache_control = "no-cache"; /* revalidate each time: ETag makes it a 304 */
    flare_ws_config_t ws_cfg = {
        .on_open = chat_open,
        .on_message = chat_message,
        .on_close = chat_close,
        .deflate = true,
        .max_message = 64 * 1024,
    };
    flare_settings_ws_config(&st, &ws_cfg); /* --ws-origin: [the page's own origin only] */
    if ((rc = flare_get(app, "/", index_page, NULL)) != 0 ||
        (rc = flare_static(app, "/static", static_dir, &so)) != 0 ||
        (rc = flare_ws_route(app, "/ws", &ws_cfg)) != 0) {
        fprintf(stderr, "chat: route: %s\n", flare_strerror(rc));
        flare_app_free(app);
        flare_settings_free(&st);
        return 1;
    }
    fprintf(stderr, "chat: http://%s/ (static files from %s)\n", st.listeners[0].addr, static_dir);
    if ((rc = flare_app_run(app, NULL)) != 0)
        fprintf(stderr, "chat: %s: %s\n", flare_strerror(rc), flare_last_error());
    flare_app_free(app);
    flare_settings_free(&st);
    return rc != 0;
}
