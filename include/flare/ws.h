/* Flare WebSocket (RFC 6455, permessage-deflate RFC 7692) and the hub.
 *
 * A WebSocket route is a GET route whose requests are handshakes: Flare
 * checks them (version 13, key, Upgrade/Connection tokens, Origin policy),
 * negotiates the subprotocol and compression, answers 101 and from then on
 * speaks frames on that connection. The application sees connections
 * (flare_ws_t) and whole messages through callbacks:
 *
 *   static void echo(flare_ws_t *ws, flare_ws_opcode_t op, flare_str_t msg)
 *   {
 *       flare_ws_send(ws, op, msg);
 *   }
 *   ...
 *   flare_ws_route(app, "/ws/echo", &(flare_ws_config_t){ .on_message = echo, .deflate = true });
 *
 * Threads: a connection lives on the worker that accepted it; its callbacks
 * run there and every flare_ws_* function taking a flare_ws_t must be called
 * from that worker (from a callback, a flare_worker_timer/post task of that
 * worker). The hub functions that take the app (flare_ws_send_to,
 * flare_ws_broadcast) are safe from any thread at any time between
 * flare_app_new and flare_app_free: while the workers are up they deliver;
 * before the workers have all started and once they have finished draining
 * they return FLARE_ESTATE (see flare_app_run).
 *
 * Lifetimes: a flare_ws_t is valid from on_open until on_close returns;
 * Flare frees it then (never the application). A message payload is valid
 * during on_message only; copy what you keep. Functions given a payload
 * copy it (or have written it) before they return. */
#ifndef FLARE_WS_H
#define FLARE_WS_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "flare/channel.h"
#include "flare/flare.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A WebSocket connection (opaque). */
typedef struct flare_ws flare_ws_t;

/* The type of a message. */
typedef enum flare_ws_opcode {
    FLARE_WS_TEXT = 1,  /* UTF-8 text (validated on receipt and on send) */
    FLARE_WS_BINARY = 2 /* bytes */
} flare_ws_opcode_t;

/* For heartbeat_ms and the timeouts: never. */
#define FLARE_WS_NEVER UINT_MAX

/* Per-route configuration. Zero fields take the defaults in brackets, so a
 * compound literal with just the callbacks is a complete configuration. */
typedef struct flare_ws_config {
    /* Called during the handshake, before the 101 is sent, with the upgrade
     * request (valid during the call only). Return 0 to accept, or an HTTP
     * status 400-599 to refuse with it (anything else refuses with 403; no
     * on_close follows a refusal). The connection may already send, join
     * rooms and keep data here: the output leaves right after the 101.
     * NULL: accept all. */
    int (*on_open)(flare_ws_t *ws, flare_req_t *req);
    /* A complete message (fragments reassembled, inflated, text validated).
     * payload is valid during the call only. NULL: messages are dropped. */
    void (*on_message)(flare_ws_t *ws, flare_ws_opcode_t op, flare_str_t payload);
    /* The connection is over: code is the peer's close code (1005 when its
     * close frame had none), the code we failed the connection with (1002,
     * 1007, 1009) or 1006 when it ended without a close handshake (network
     * error, timeout, heartbeat, a consumer too slow, shutdown). reason: the
     * peer's close reason, valid during the call. After it returns the
     * handle is gone. Called once for every accepted connection. */
    void (*on_close)(flare_ws_t *ws, int code, flare_str_t reason);
    /* The unsent output fell to half the high-water mark after a send
     * had left it above the mark (flare_ws_backpressured() turns false just
     * before). Called once per such episode. May be NULL. */
    void (*on_drain)(flare_ws_t *ws);
    void *ud; /* returned by flare_ws_route_ud() */

    /* Subprotocols, most preferred first, NULL-terminated (copied). The
     * first one the client also offers is chosen; none: no subprotocol. */
    const char *const *protocols;
    /* Allowed Origin values ("https://app.example.com"), NULL-terminated
     * (copied); "*" allows any. NULL: only the same origin as the Host
     * header (cross-site WebSocket hijacking defence). Requests without an
     * Origin (non-browser clients) are accepted unless origin_required. */
    const char *const *origins;
    bool origin_required;

    size_t max_message; /* bytes after reassembly and inflation; 1009 past it [1 MiB] */

    bool deflate;                  /* offer permessage-deflate [off] */
    bool deflate_context_takeover; /* keep compression context between messages:
                                      better ratio, but a compressor (~256 KiB at
                                      window 15 / mem level 8) and an inflater
                                      (32 KiB) per connection. Off [default]: the
                                      answer carries server_ and
                                      client_no_context_takeover, streams are
                                      shared per worker and broadcasts are
                                      compressed once */
    unsigned deflate_window_bits;  /* 9..15: largest window either side uses [15] */
    unsigned deflate_mem_level;    /* 1..9: zlib memLevel of our compressor [8] */
    int deflate_level;             /* 1..9 [6] */
    size_t deflate_min_size;       /* shorter messages go uncompressed [64] */

    unsigned heartbeat_ms;     /* ping this often; FLARE_WS_NEVER: no heartbeat [30 s] */
    unsigned heartbeat_misses; /* close after this many unanswered pings [2] */
    size_t write_high_water;   /* unsent bytes past which
                                  flare_ws_backpressured() is true [1 MiB] */
    size_t write_limit;        /* unsent bytes past which the connection is
                                  closed (on_close 1006) [16 x high water] */
    unsigned write_timeout_ms; /* unsent output making no progress this long:
                                  closed [the app's write_timeout_ms] */
    unsigned close_timeout_ms; /* wait this long for the peer's close reply,
                                  then drop the connection [5 s] */
} flare_ws_config_t;

/* Registers a WebSocket route at pattern (a GET route, in group g for
 * flare_ws_group_route; path parameters work as usual:
 * read them in on_open with flare_req_param). cfg and the strings it points
 * to are copied. Before flare_app_run only. Returns 0 or FLARE_EINVAL,
 * FLARE_EPATTERN, FLARE_EEXIST, FLARE_ENOMEM, FLARE_ESTATE. */
FLARE_API int flare_ws_route(flare_app_t *app, const char *pattern, const flare_ws_config_t *cfg);
FLARE_API int flare_ws_group_route(flare_group_t *g, const char *pattern,
                                   const flare_ws_config_t *cfg);

/* ---- one connection (call on its worker) ---------------------------------- */

/* Sends a message: payload with opcode op, text as a text message, data as
 * a binary one (join and leave: see rooms below). The payload is copied or written before the call
 * returns. Text must be valid UTF-8 (FLARE_EINVAL otherwise). Returns 0 (queued: when the output
 * is now past the high-water mark, flare_ws_backpressured() says so until on_drain), or
 * FLARE_ECLOSED (closing or closed: nothing sent), FLARE_ETOOBIG (the output passed the write
 * limit: the connection is being dropped), FLARE_ENOMEM. */
FLARE_API int flare_ws_send(flare_ws_t *ws, flare_ws_opcode_t op, flare_str_t payload);
FLARE_API int flare_ws_send_text(flare_ws_t *ws, flare_str_t text);
FLARE_API int flare_ws_send_binary(flare_ws_t *ws, flare_str_t data);

/* Sends a ping (payload at most 125 bytes, else FLARE_EINVAL). Pongs are
 * answered automatically and count for the heartbeat. */
FLARE_API int flare_ws_ping(flare_ws_t *ws, flare_str_t payload);

/* Starts the closing handshake: sends a close frame (code 1000-1003,
 * 1007-1014 or 3000-4999, else FLARE_EINVAL; 0 sends none; reason cut to 123
 * bytes at a character boundary, must be UTF-8), sends nothing more, waits
 * up to close_timeout_ms for the peer's reply, then closes; on_close
 * follows. Calling it again is a no-op returning 0. */
FLARE_API int flare_ws_close(flare_ws_t *ws, int code, flare_str_t reason);

/* Bytes queued and not yet written to the socket. */
FLARE_API size_t flare_ws_buffered(const flare_ws_t *ws);

/* Backpressure (the idiom shared with flare_sse_backpressured and
 * flare_res_backpressured): true from the send that left more than
 * write_high_water bytes queued until the output has fallen to half of it,
 * when on_drain is called. Sends still queue while it is true (up to
 * write_limit); a producer that can wait pauses until on_drain. */
FLARE_API bool flare_ws_backpressured(const flare_ws_t *ws);

/* Per-connection application data (NULL until set). */
FLARE_API void flare_ws_set_data(flare_ws_t *ws, void *data);
FLARE_API void *flare_ws_data(const flare_ws_t *ws);

/* The route's cfg->ud, the chosen subprotocol (len 0: none; valid while the
 * app exists), the worker and the app. */
FLARE_API void *flare_ws_route_ud(const flare_ws_t *ws);
FLARE_API flare_str_t flare_ws_protocol(const flare_ws_t *ws);
FLARE_API flare_worker_t *flare_ws_worker(const flare_ws_t *ws);
FLARE_API flare_app_t *flare_ws_app(const flare_ws_t *ws);
/* True when permessage-deflate was negotiated on this connection. */
FLARE_API bool flare_ws_compressed(const flare_ws_t *ws);

/* ---- hub: ids, rooms, fan-out across workers ------------------------------ */

/* The connection's id: unique among the app's open connections (it names
 * the worker that owns it), never 0. */
FLARE_API uint64_t flare_ws_id(const flare_ws_t *ws);

/* Joins / leaves a room (the name is copied; any bytes, at most 255).
 * A room is the channel "ws:" ROOM of the channel layer (flare/channel.h):
 * its messages come in one order for every member, and in a cluster
 * (flare_app_cluster) from every instance. Joining twice is a no-op.
 * Connections leave all rooms when they close. Returns 0, FLARE_EINVAL,
 * FLARE_ENOMEM; leave: FLARE_ENOTFOUND if not in it. */
FLARE_API int flare_ws_join(flare_ws_t *ws, flare_str_t room);
FLARE_API int flare_ws_leave(flare_ws_t *ws, flare_str_t room);

/* Joins room as flare_ws_join does, with positions: every message of the
 * room reaches this connection as a text envelope
 *   {"type":"flare.msg","channel":"ws:ROOM","offset":N,"epoch":"E","data":<the
 *    message, when it is JSON>}   (or "text":"<the message>" when it is not)
 * whose offset and epoch make the token "N:E" a client sends back to resume
 * (docs/cluster.md: the showcase takes it as ?since=N:E). since: resume
 * after that position (in a cluster: what the connection missed comes
 * first, or a {"type":"flare.lost",...} message when it is gone); NULL:
 * from now on. Binary messages are sent as they are, without a position.
 * Returns as flare_ws_join. */
FLARE_API int flare_ws_join_at(flare_ws_t *ws, flare_str_t room, const flare_channel_pos_t *since);

/* Sends a message (op, payload) to the connection with this id, wherever it
 * lives. Safe
 * from any thread while the app runs; delivery to another worker happens
 * soon after on that worker (the payload is copied). Returns 0 (sent or
 * handed to the owning worker), FLARE_ENOTFOUND (on the calling worker's
 * own connections, or a bad id), or a send error for a local connection. */
FLARE_API int flare_ws_send_to(flare_app_t *app, uint64_t id, flare_ws_opcode_t op,
                               flare_str_t payload);

/* Sends a message (op, payload) to every connection in `room` (room.len 0: every
 * connection of the app), on all workers, except the connection `except`
 * (0: none). The frame is encoded once (and compressed once for the
 * connections whose negotiated parameters allow sharing) and shared by
 * reference between recipients; each worker delivers to its own
 * connections. Safe from any thread while the app runs. Slow recipients
 * follow the usual write limits. A connection still inside its on_open is
 * not a recipient yet (it may still be refused): to greet it as well, send
 * to it directly from on_open. Returns 0, FLARE_EINVAL, FLARE_ENOMEM,
 * FLARE_ESTATE (not running). */
FLARE_API int flare_ws_broadcast(flare_app_t *app, flare_str_t room, flare_ws_opcode_t op,
                                 flare_str_t payload, uint64_t except);

#ifdef __cplusplus
}
#endif
#endif
