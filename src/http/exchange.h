/* The protocol-neutral exchange: one request and its response, whatever
 * wire they travel on. src/http/ owns dispatch (route, middleware chain,
 * flare_next, asynchronous completion, orphans) and the response API
 * (validation, after hooks, headers); the wire protocol supplies the
 * operations that put a response on its wire (flare_proto_ops_t) and
 * decides when bytes may leave: HTTP/1.1 keeps responses in request order
 * (its pipelining queue), HTTP/2 will complete exchanges out of order under
 * flow control. Nothing here knows a wire format or a socket. */
#ifndef FLARE_HTTP_EXCHANGE_H
#define FLARE_HTTP_EXCHANGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/buf.h"
#include "flare/flare.h"
#include "http/head.h"
#include "router/match.h"

struct flare_req;
struct flare_conn;
struct flare_stream;
struct flare_worker;
struct flare_route;
struct flare_mw_rt;

/* Protocol switch (101): the new owner of the connection. Called on the
 * worker once the 101 response is flushed, with the connection's stream:
 * the callee moves it into its own (flare__stream_move: the socket, the
 * transport and the bytes the client sent after the upgrade request go
 * along) during the call. Called with s NULL instead when the connection
 * closes before the 101 is out. */
typedef void (*flare_upgrade_fn)(struct flare_worker *w, struct flare_stream *s, void *ud);

/* A borrowed body's release: fn(ud) once it is no longer needed. */
typedef struct flare_release {
    flare_task_fn fn;
    void *ud;
} flare_release_t;

/* What a wire protocol does for the exchange layer. The response calls
 * come after validation and the after hooks; each returns 0 or a negative
 * FLARE_E* code (nothing was queued then). The HEAD and no-body statuses
 * (1xx, 204, 304) are the protocol's to honour (EX_HEAD_ONLY). */
typedef struct flare_proto_ops {
    /* head + body, copied. On success the op also marks the exchange sent
     * (flare__ex_sent). Six register arguments and the last thing
     * flare_res_send does: a tail call on every response's path. */
    int (*respond)(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body);
    /* the same with the body borrowed: ref->fn(ref->ud) once the bytes are
     * out or dropped, on every path, also on failure */
    int (*respond_ref)(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body,
                       const struct flare_release *ref);
    /* head + len bytes of fd from off; takes fd (closed on every path) */
    int (*respond_file)(struct flare_req *ex, int status, flare_str_t ctype, int fd, uint64_t off,
                        uint64_t len);
    /* a body of unknown length: head, pieces, end */
    int (*stream_begin)(struct flare_req *ex, int status, flare_str_t ctype);
    int (*stream_write)(struct flare_req *ex, flare_str_t data);
    int (*stream_end)(struct flare_req *ex);
    /* switch protocols after this response (HTTP/1.1: 101); NULL: refused */
    int (*upgrade)(struct flare_req *ex, flare_str_t token, flare_upgrade_fn fn, void *ud);
    /* the response is complete, or has more output: move it toward the wire */
    void (*complete)(struct flare_req *ex);
    /* what the request arrived on */
    flare_proto_t (*protocol)(const struct flare_req *ex);
    bool (*secure)(const struct flare_req *ex);
    int (*peer)(const struct flare_req *ex, uint8_t addr[16]); /* AF_INET/AF_INET6, 0 */
    /* response bytes queued for the client and not yet written (a stream's
     * backpressure: server-sent events); NULL: not known, taken as 0 */
    size_t (*unsent)(const struct flare_req *ex);
    /* Streaming request bodies (flare/body.h; src/http/body.c). NULL: the
     * protocol has no streaming input; it buffers the body as for any
     * route (flare__ex_body_limit gives the route's limit) and dispatches,
     * and the exchange layer hands the buffered body to the route's
     * callbacks as one chunk + end, so such a protocol works unchanged.
     * Otherwise the protocol sets EX_BODY_STREAM | EX_BODY_OPEN before
     * dispatching a streaming route's head, then feeds the body through
     * flare__ex_body_data and ends it with flare__ex_body_end; this op
     * starts (on: the handler reads; HTTP/1.1 owes its 100 Continue from
     * the first call) or stops (off: no read interest) taking body bytes
     * for ex. */
    void (*body_read)(struct flare_req *ex, bool on);
} flare_proto_ops_t;

/* An exchange: one request and its response. Recycled through the worker. */
enum {
    EX_SENT = 1u << 0, /* response complete (all bytes queued somewhere) */
    EX_IN_HANDLER = 1u << 1,
    EX_HEAD_ONLY = 1u << 2,      /* HEAD: headers only */
    EX_CLOSE = 1u << 3,          /* close the connection after this response */
    EX_STREAM = 1u << 4,         /* chunked streaming begun */
    EX_DETACHED = 1u << 5,       /* views point into ex-owned memory */
    EX_ERROR = 1u << 6,          /* framing error response: stop parsing */
    EX_ORPHAN = 1u << 7,         /* connection gone: sends are no-ops */
    EX_NEED_CONTINUE = 1u << 8,  /* owes "100 Continue" once it is the queue head */
    EX_AFTER_DONE = 1u << 9,     /* after hooks have run */
    EX_HAS_AFTER = 1u << 10,     /* the chain has after hooks */
    EX_HELD = 1u << 11,          /* an after hook holds the response (flare__res_hold) */
    EX_BEGINNING = 1u << 12,     /* after hooks run for flare_res_begin: cannot be held */
    EX_BODY_STREAM = 1u << 13,   /* a streaming route fed by the protocol (flare/body.h) */
    EX_BODY_OPEN = 1u << 14,     /* ... still being read: a response now closes the conn */
    EX_BODY_PAUSED = 1u << 15,   /* the handler paused the body */
    EX_BODY_READING = 1u << 16,  /* the handler has started reading (100 Continue owed) */
    EX_BODY_ENDING = 1u << 17,   /* buffered delivery: on_end waits for a resume */
    EX_BODY_LIVE = 1u << 18,     /* a streaming route's body has not ended (either way) */
    EX_TRAILERS = 1u << 19,      /* trailers/ntrailers hold this request's trailer fields */
    EX_LONG = 1u << 20,          /* a long-lived stream (SSE, a protocol upgrade): counted as a
                                    stream by the metrics, not timed (flare__ex_long) */
    EX_BACKPRESSURED = 1u << 21, /* streamed output past its high-water mark, not yet drained
                                    (flare_res_backpressured; flare__res_drain_check) */
    EX_DRAIN_CB = 1u << 22,      /* ex->drain holds flare_res_on_drain's settings */
};

struct flare_res_hold;

typedef struct flare_res_hdr {
    struct flare_res_hdr *next;
    flare_str_t name, value;
} flare_res_hdr_t;

typedef struct flare_attr {
    struct flare_attr *next;
    const char *key;
    const char *type; /* NULL: string, FLARE__ATTR_INT: integer, else pointer tag */
    flare_str_t str;
    int64_t num;
    void *ptr;
} flare_attr_t;

typedef struct flare_cleanup {
    struct flare_cleanup *next;
    flare_task_fn fn; /* NULL: an abort hook that ran */
    void *ud;
    bool abort; /* flare_req_on_abort: runs when the exchange is orphaned, not at its end */
} flare_cleanup_t;

/* The response half of an exchange: what flare_res_t points to. Embedded
 * first in struct flare_req, so the two handles are distinct types for the
 * compiler while converting one into the other costs nothing at run time
 * (flare__res_ex: an offset of 0). */
struct flare_res {
    int status; /* status being produced (after hooks), 0 before */
    flare_res_hdr_t *hdrs, **hdrs_tail;
};

struct flare_req {
    struct flare_res res; /* handlers get &ex->res */
    const flare_proto_ops_t *ops;
    struct flare_conn *conn; /* the protocol's connection; NULL once it is gone */
    void *pstream;           /* the protocol's per-exchange state (HTTP/2: its stream) */
    struct flare_worker *worker;
    struct flare_req *next;  /* connection queue / free list / w->orphans */
    struct flare_req *oprev; /* w->orphans only */
    const struct flare_route *route;
    uint32_t flags;
    flare_http_head_t head;
    flare_str_t body;
    const char *raw; /* start of the head in the read buffer */
    size_t raw_len;
    flare_route_match_t match;       /* route, params, allowed */
    const struct flare_mw_rt *chain; /* middlewares of this request */
    uint32_t nchain, mw_pos;         /* next before hook to run */
    /* HTTP/1.1's per-exchange state (body decoding, out-of-order output) */
    flare_chunked_t chunked;
    uint64_t body_need;  /* Content-Length still to receive */
    flare_buf_t bodybuf; /* body that spans reads; kept for reuse */
    flare_buf_t out;     /* serialized response when not at the queue head */
    size_t out_head_end; /* offset in out where the head's blank line starts */
    flare_cleanup_t *cleanups;
    struct flare_attr *attrs;
    flare_arena_t arena;
    flare_header_t *headers; /* capacity app->limits.max_headers */
    /* a file body waiting for this exchange to reach the queue head (owned;
     * -1 when none: a cleanup hook closes it if it never goes out) */
    int file_fd;
    uint64_t file_off, file_len;
    struct flare_res_hold *hold;   /* read only while EX_HELD is set */
    struct flare_res_drain *drain; /* read only while EX_DRAIN_CB is set */
    /* while observers are installed (worker.ex_obs): the loop's clock (ms)
     * when the exchange was taken up, the start of the metrics' duration */
    uint64_t t_start_ms;
    /* for the access log (src/obs/log.c, an exchange observer): when the
     * head was taken up for parsing (CLOCK_REALTIME ns, set by its start
     * hook), the streamed body bytes, and the log's request id (0: none
     * made yet) */
    uint64_t t_log_ns;
    uint64_t stream_bytes;
    uint64_t log_id;
    uint64_t body_rx; /* streaming body: bytes delivered to on_chunk */
    /* Request trailers, apart from the head (flare_req_trailer): valid only
     * while EX_TRAILERS is set (flags start at 0 for every exchange, so the
     * common request resets nothing); the array and the views are in the
     * arena (flare__ex_trailer_add). */
    flare_header_t *trailers;
    uint32_t ntrailers, ctrailers;
    /* HTTP/1.1: the raw trailer section as it arrives across reads (arena;
     * valid while the chunked body is being decoded, reset with it) */
    char *traw;
    uint32_t traw_len, traw_cap;
};

/* flare__res_ex (http/svc.h) turns a response into its exchange by a cast:
 * right only while the response comes first. */
_Static_assert(offsetof(struct flare_req, res) == 0, "flare__res_ex (http/svc.h) casts");

/* ---- exchange observers (src/http/exchange.c) ---- */

/* What the exchange layer tells the layers above it about each exchange
 * (the access log, the metrics) without calling them by name: a module
 * installs its observer on a worker in init_worker (flare__ex_observe) and
 * removes it in dispose_worker. Every hook may be NULL; each runs on the
 * worker, in installation order. While a worker has no observer, an event
 * costs the request path one test (worker.ex_obs). */
typedef struct flare_ex_observer {
    /* the exchange is taken up: its head is in a buffer, about to be parsed */
    void (*start)(void *ud, struct flare_req *ex);
    /* a complete response is handed to the protocol (its status and body
     * bytes), before it is queued: the exchange may be recycled after */
    void (*answered)(void *ud, struct flare_req *ex, int status, uint64_t bytes);
    /* a long-lived stream begins on it (SSE, a protocol switch): EX_LONG */
    void (*stream)(void *ud, struct flare_req *ex);
    /* the exchange is finished, about to be recycled (flare__ex_put) */
    void (*done)(void *ud, struct flare_req *ex);
} flare_ex_observer_t;

#define FLARE__EX_OBSERVERS_MAX 4

/* A worker's observers (worker.ex_obs; NULL while there is none), and
 * each event's hooks in a list of its own, rebuilt when one is installed
 * or removed: an event calls exactly the hooks it has. */
typedef struct flare_ex_observers {
    unsigned n;
    struct {
        const flare_ex_observer_t *o;
        void *ud;
    } e[FLARE__EX_OBSERVERS_MAX];
    unsigned nstart, nanswered, nstream, ndone;
    struct {
        void (*fn)(void *ud, struct flare_req *ex);
        void *ud;
    } start[FLARE__EX_OBSERVERS_MAX], stream[FLARE__EX_OBSERVERS_MAX],
        done[FLARE__EX_OBSERVERS_MAX];
    struct {
        void (*fn)(void *ud, struct flare_req *ex, int status, uint64_t bytes);
        void *ud;
    } answered[FLARE__EX_OBSERVERS_MAX];
} flare_ex_observers_t;

/* Installs o (not copied: a static const) with ud on worker w, before its
 * thread starts or on it. 0, FLARE_ENOMEM, FLARE_ETOOBIG (more than
 * FLARE__EX_OBSERVERS_MAX), FLARE_EEXIST (o is installed already). */
int flare__ex_observe(struct flare_worker *w, const flare_ex_observer_t *o, void *ud);
/* Removes o from w (nothing when it is not installed). */
void flare__ex_unobserve(struct flare_worker *w, const flare_ex_observer_t *o);

/* The answered hooks (the caller tests that there is one). */
void flare__ex_observe_answered(struct flare_req *ex, int status, uint64_t bytes);

/* A long-lived stream begins on ex (an SSE stream, a protocol switch):
 * EX_LONG, and the observers hear it (the metrics count a stream of its
 * route, and later the request, but not its duration). */
void flare__ex_long(struct flare_req *ex);

/* ---- src/http/exchange.c ---- */

/* A fresh exchange for a request arriving over ops (recycled through the
 * worker's free list); NULL when out of memory. */
struct flare_req *flare__ex_get(struct flare_worker *w);
/* Runs the cleanups, resets the arena, recycles it. */
void flare__ex_put(struct flare_worker *w, struct flare_req *ex);
/* Its connection or stream is gone while a handler still owes (or is
 * streaming) the response: it leaves the protocol for the worker's orphan
 * list, where a late send (or the worker's end) completes and frees it.
 * The one way an exchange becomes an orphan. */
void flare__ex_orphan(struct flare_worker *w, struct flare_req *ex);

/* Routes a parsed head: the route (HEAD falls back to GET), the path
 * parameters, the middleware chain (for 404/405 and automatic OPTIONS too). */
void flare__http_route(flare_app_t *app, struct flare_req *ex);

/* Runs the chain and the handler (or the automatic answer) and settles the
 * outcome: answered, asynchronous (the head is detached from protocol
 * buffers), or a 500. */
void flare__http_dispatch(struct flare_req *ex);

/* Copies the head (and a body still in a protocol buffer) into the
 * exchange's arena so it outlives the buffer. 0 or FLARE_ENOMEM. */
int flare__ex_detach(struct flare_req *ex);

static inline void flare__ex_complete(struct flare_req *ex)
{
    ex->ops->complete(ex);
}

/* The response is complete: inside the handler, dispatch completes the
 * exchange when it returns; outside, now. */
static inline void flare__ex_sent(struct flare_req *ex)
{
    ex->flags |= EX_SENT;
    if (!(ex->flags & EX_IN_HANDLER))
        flare__ex_complete(ex);
}

/* ---- src/http/response.c: backpressure of streamed responses ---- */

/* A streamed response's output moved toward its client while it was
 * backpressured (EX_BACKPRESSURED): when what still waits for the client
 * (ops->unsent) is at most half the high-water mark, the flag is cleared
 * and the flare_res_on_drain callback runs. The protocols call it from
 * their I/O callbacks only (never inside a call of the application, so
 * the callback is never nested in a flare_res_write), for the exchanges
 * that carry the flag; the callback may write, end the response or close.
 * Returns true when the flag was cleared: ex may be gone then (the callback
 * ended the response), touch it no more. */
bool flare__res_drain_check(struct flare_req *ex);

/* ---- src/http/body.c: streaming request bodies ---- */

/* Whether ex's route streams its body, and the body limit that applies to
 * it: the streaming route's own, else app_limit (the app's max_body). */
bool flare__ex_body_route(const struct flare_req *ex);
uint64_t flare__ex_body_limit(const struct flare_req *ex, uint64_t app_limit);

/* A piece of the body (a view valid during the call). Returns 0 to go on
 * (check EX_BODY_PAUSED), or 1: the handler answered or failed, the
 * protocol stops reading this body, closes the connection after the
 * response and calls flare__ex_complete(ex) itself. */
int flare__ex_body_data(struct flare_req *ex, flare_str_t data);
/* The body ended: err 0 (complete: on_end, then the exchange is settled and
 * may be freed: do not touch ex after) or a negative code (on_end(err);
 * then, when the callback did not answer, the protocol answers: returns
 * false; true when it answered or the exchange is an orphan, freed). */
bool flare__ex_body_end(struct flare_req *ex, int err);

/* ---- src/http/response.c ---- */

/* Switches protocols after this response (HTTP/1.1: 101 Switching
 * Protocols, Upgrade: <token>, Connection: Upgrade, plus headers added with
 * flare_res_header); once everything before it is out, fn gets the stream.
 * On 0, fn is called exactly once: with the stream, or with NULL when the
 * connection closes first. FLARE_ECLOSED: the client is gone already. */
int flare__res_upgrade(flare_res_t *res, flare_str_t token, flare_upgrade_fn fn, void *ud);

/* An exchange whose connection is gone: the send is a no-op that frees it. */
int flare__res_orphan_done(struct flare_req *ex);

/* ---- src/http/request.c ---- */

/* Adds a request trailer field (the protocols, once the body has ended;
 * never to the header fields). name and value must live as long as the
 * exchange (the arena): they are not copied. 0 or FLARE_ENOMEM. */
int flare__ex_trailer_add(struct flare_req *ex, flare_str_t name, flare_str_t value);

#endif
