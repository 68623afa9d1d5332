/* Server-sent events (text/event-stream, WHATWG HTML "Server-sent events").
 *
 * A route registered with flare_sse_route answers with a stream: its
 * handler calls flare_sse_start, keeps the handle and returns FLARE_ASYNC;
 * events then go out with flare_sse_send (from a timer, a watcher, a task
 * posted to the worker, or a broadcast) until one side ends the stream.
 *
 *   static int feed(flare_req_t *req, flare_res_t *res, void *ud)
 *   {
 *       flare_sse_t *s;
 *       flare_sse_config_t cfg = { .on_close = feed_closed, .ud = state };
 *       int rc = flare_sse_start(req, res, &cfg, &s);
 *       if (rc != 0)
 *           return rc;
 *       flare_sse_join(s, FLARE_STR("news"));
 *       return FLARE_ASYNC;
 *   }
 *   ...
 *   flare_sse_broadcast(app, FLARE_STR("news"), &(flare_sse_event_t){
 *                           .event = FLARE_STR("headline"), .data = text });
 *
 * Lifetime of a flare_sse_t: from flare_sse_start until its on_close
 * callback returns. on_close is called exactly once per stream, always from
 * the worker's loop (never from inside another flare_sse_* call, so a
 * caller's loop over sends never sees the handle vanish), with the reason:
 *   0               the application ended it (flare_sse_end);
 *   FLARE_ECLOSED   the client went away (noticed at the next send or
 *                   heartbeat, whichever comes first);
 *   FLARE_ETOOBIG   the client reads too slowly: more than max_queued bytes
 *                   were waiting for it, so the stream was dropped;
 *   FLARE_EUNAVAIL  the server is shutting down (drain), or the worker
 *                   stopped;
 *   FLARE_ENOMEM    an event could not be queued.
 * Between the end of the stream and on_close every call on the handle
 * fails with FLARE_ECLOSED. A handle belongs to the worker that started it
 * and is used on that worker's thread only; flare_sse_broadcast is the
 * thread-safe way to reach streams. The request and response handles given
 * to the handler must not be used once flare_sse_start succeeded.
 *
 * Backpressure, the idiom shared with WebSocket and streamed responses
 * (flare/common.h): sends queue and return 0; once more than high_water
 * bytes wait for the client, flare_sse_backpressured is true until they
 * have fallen to half of it, when on_drain is called (once, from the
 * worker's loop). A producer that can wait pauses in between. Past
 * max_queued the stream is dropped instead: the send that would exceed it
 * fails with FLARE_ETOOBIG (and on_close follows with the same reason),
 * and the connection is closed once what is queued is written or the
 * write timeout passes. Broadcasts do not wait: a slow recipient is
 * dropped at max_queued. */
#ifndef FLARE_SSE_H
#define FLARE_SSE_H

#include <limits.h>
#include <stdbool.h>

#include "flare/channel.h"
#include "flare/flare.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An event stream to one client (opaque). */
typedef struct flare_sse flare_sse_t;

/* One event. A field whose .ptr is NULL is left out; a zeroed struct is an
 * empty event (a lone blank line). */
typedef struct flare_sse_event {
    flare_str_t id;    /* "id:" (no CR, LF or NUL: FLARE_EINVAL) */
    flare_str_t event; /* "event:" the type (no CR or LF: FLARE_EINVAL) */
    /* "data:" lines: split at every CRLF, lone CR and lone LF, so the
     * client reassembles exactly these bytes (lines joined by LF). .ptr
     * non-NULL with len 0 is one empty "data:" line. */
    flare_str_t data;
    unsigned retry_ms; /* > 0: a "retry:" line (the client's reconnection delay) */
} flare_sse_event_t;

/* Writes the wire form of ev into out (cap bytes) and its length into
 * *len. 0; FLARE_ETOOBIG when cap is too small (*len is then the size
 * needed: call with cap 0 to size a buffer); FLARE_EINVAL for a NULL ev or
 * len, or CR/LF in id or event (NUL too in id). Pure: no allocation. */
FLARE_API int flare_sse_format(const flare_sse_event_t *ev, char *out, size_t cap, size_t *len);

/* The same (into out, cap bytes, length in *len) for a comment line
 * ": text\n" (ignored by clients; keeps
 * proxies from timing the stream out). FLARE_EINVAL for CR or LF in text. */
FLARE_API int flare_sse_format_comment(flare_str_t text, char *out, size_t cap, size_t *len);

/* flare_sse_config_t.heartbeat_ms: no heartbeat. */
#define FLARE_SSE_HEARTBEAT_OFF UINT_MAX

/* on_close: called exactly once per stream, when it has ended (reason:
 * see above). */
typedef void (*flare_sse_close_fn)(flare_sse_t *s, int reason, void *ud);

/* on_drain: the stream was backpressured and its queue has fallen to half
 * of high_water (flare_sse_backpressured is false again). */
typedef void (*flare_sse_drain_fn)(flare_sse_t *s, void *ud);

/* Per stream. Zero fields take their defaults. */
typedef struct flare_sse_config {
    /* ": ping" comment every heartbeat_ms [15000]; FLARE_SSE_HEARTBEAT_OFF:
     * none (a client that goes away is then noticed only at the next send) */
    unsigned heartbeat_ms;
    size_t max_queued; /* bytes waiting for the client before the stream is dropped [256 KiB] */
    unsigned retry_ms; /* > 0: "retry:" sent first */
    flare_sse_close_fn on_close; /* may be NULL */
    void *ud;                    /* given to on_close and on_drain */
    /* bytes waiting for the client past which flare_sse_backpressured is
     * true [max_queued / 4; at most max_queued] */
    size_t high_water;
    flare_sse_drain_fn on_drain; /* may be NULL */
} flare_sse_config_t;

/* Registers a GET route (pattern as for flare_route) whose handler fn (given ud) starts
 * event streams, and the SSE support of the app (its drain and shutdown
 * hooks, the broadcast). Before flare_app_run. 0 or the flare_route codes. */
FLARE_API int flare_sse_route(flare_app_t *app, const char *pattern, flare_handler_fn fn, void *ud);

/* Starts the stream of this request through its response res: 200, Content-Type text/event-stream,
 * Cache-Control: no-cache, chunked; *cfg is copied (NULL: defaults). The
 * handler then returns FLARE_ASYNC (or 0: both mean the stream goes on).
 * For HEAD only the head goes out and the stream is ended at once (on_close
 * follows with 0). *out is set on success. 0, or FLARE_EINVAL (NULL
 * argument), FLARE_ESTATE (the app has no flare_sse_route, or a response
 * was already begun), FLARE_EUNAVAIL (the worker is draining: answer
 * 503 yourself), FLARE_ENOMEM, FLARE_ECLOSED (the client is gone already). */
FLARE_API int flare_sse_start(flare_req_t *req, flare_res_t *res, const flare_sse_config_t *cfg,
                              flare_sse_t **out);

/* The request's Last-Event-ID header as the client sent it (empty: none),
 * copied: valid as long as the handle. */
FLARE_API flare_str_t flare_sse_last_event_id(const flare_sse_t *s);

/* Sends one event ev (flare_sse_format's rules) / a comment text. 0 (queued;
 * check flare_sse_backpressured to pace a producer), FLARE_EINVAL,
 * FLARE_ECLOSED (the stream has ended: on_close is on its way),
 * FLARE_ETOOBIG (past max_queued: dropped, see above), FLARE_ENOMEM. */
FLARE_API int flare_sse_send(flare_sse_t *s, const flare_sse_event_t *ev);
FLARE_API int flare_sse_comment(flare_sse_t *s, flare_str_t text);

/* Bytes queued for the client and not yet written (0 once ended). */
FLARE_API size_t flare_sse_queued(const flare_sse_t *s);

/* True while the stream is backpressured: more than high_water bytes were
 * waiting after a send and on_drain has not come yet (see above). */
FLARE_API bool flare_sse_backpressured(const flare_sse_t *s);

/* Whether the stream is still open (not ended, client not known gone). */
FLARE_API bool flare_sse_open(const flare_sse_t *s);

/* The worker the stream belongs to. */
FLARE_API flare_worker_t *flare_sse_worker(const flare_sse_t *s);

/* Ends the stream cleanly (the chunked body's last chunk); on_close(s, 0)
 * follows from the loop. A no-op on a stream already ended. */
FLARE_API void flare_sse_end(flare_sse_t *s);

/* Rooms: a name (room: 1 to 255 bytes, copied) groups streams for broadcasts.
 * join: 0 (also when already in it), FLARE_EINVAL, FLARE_ECLOSED,
 * FLARE_ENOMEM. leave: 0, FLARE_EINVAL, FLARE_ENOTFOUND. A stream leaves
 * its rooms when it ends. */
FLARE_API int flare_sse_join(flare_sse_t *s, flare_str_t room);
FLARE_API int flare_sse_leave(flare_sse_t *s, flare_str_t room);

/* Joins room as flare_sse_join does, resuming after position since (in a
 * cluster the stream first gets what it missed, each event with its
 * position "OFFSET:EPOCH" as its id, or a "flare.lost" event when that is
 * gone; outside a cluster the position is ignored). Parse the position from
 * flare_sse_last_event_id with flare_channel_pos_parse. NULL: from now on.
 * Returns as flare_sse_join. */
FLARE_API int flare_sse_join_at(flare_sse_t *s, flare_str_t room, const flare_channel_pos_t *since);

/* Sends ev to every open stream in `room` (len 0: every stream of the
 * app) on every worker. Any thread, while the app runs. The event is
 * encoded once and shared; each worker delivers to its own streams in a
 * task posted to it (also the calling worker's, so it arrives after the
 * caller returns). A recipient that is too slow is dropped as for
 * flare_sse_send. 0, FLARE_EINVAL, FLARE_ESTATE (no flare_sse_route, or
 * not running), FLARE_ENOMEM (some workers may have missed it). */
FLARE_API int flare_sse_broadcast(flare_app_t *app, flare_str_t room, const flare_sse_event_t *ev);

#ifdef __cplusplus
}
#endif

#endif
