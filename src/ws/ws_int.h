/* WebSocket runtime internals shared by the ws/ sources: routes, per-worker
 * state, connections, the output queue and the hub. */
#ifndef FLARE_WS_INT_H
#define FLARE_WS_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <zlib.h>

#include "flare/ws.h"
#include "module.h"
#include "net/stream.h"
#include "web/channel.h"
#include "ws/deflate.h"
#include "ws/frame.h"
#include "ws/handshake.h"

typedef struct ws_app ws_app_t;
typedef struct ws_worker ws_worker_t;

/* A route's configuration, defaults applied, strings owned. */
typedef struct ws_route {
    flare_ws_config_t cfg;
    flare_ws_hs_policy_t hs;
    flare_ws_pmd_policy_t pmd;
    flare_str_t *protocols; /* owned array; the bytes live in `strings` */
    flare_str_t *origins;
    char *strings;
    ws_app_t *wapp;
    struct ws_route *next;
} ws_route_t;

/* App-wide state: the WebSocket module's (flare__ws_app_state). Read-only
 * once the app runs. */
struct ws_app {
    flare_app_t *app;
    unsigned slot; /* of the per-worker state (flare__ws_worker) */
    ws_route_t *routes;
    unsigned sweep_ms; /* per-worker timer period: heartbeats, timeouts */
    /* broadcasts are compressed once with these when some route shares
     * compression streams (deflate without context takeover) */
    bool shared_deflate;
    unsigned bcast_bits, bcast_mem;
    int bcast_level;
    size_t bcast_min;
    uint64_t instance;       /* the channel layer's (flare__chan_instance) */
    struct ws_app *reg_next; /* the registry (see route.c) */
};

/* A frame encoded once and shared by reference (broadcasts): the bytes are
 * header + payload; plain_off is where the payload starts. */
typedef struct ws_shared {
    _Atomic unsigned refs;
    uint8_t opcode;
    size_t len, plain_off;
    char data[];
} ws_shared_t;

ws_shared_t *flare__ws_shared_new(uint8_t opcode, bool rsv1, const void *payload, size_t len);
void flare__ws_shared_ref(ws_shared_t *s);
void flare__ws_shared_unref(ws_shared_t *s);

/* connection states */
enum {
    WS_PENDING = 0, /* handshake answered; the HTTP layer has not handed the socket over */
    WS_OPEN,
    WS_LINGER, /* close handshake done (or failed): write side shut, reading until EOF */
    WS_DEAD,   /* socket closed; on_close and free pending (reap list) */
};

/* connection flags */
enum {
    WF_CLOSE_SENT = 1u << 0,
    WF_CLOSE_RECV = 1u << 1,
    WF_FAILED = 1u << 2, /* protocol error: discard all further input */
    WF_BATCH = 1u << 4,  /* inside read processing: queue, flush at the end */
    WF_BACKPRESSED = 1u << 5,
    WF_OPENED = 1u << 6,      /* on_open accepted: on_close is owed */
    WF_PING_OUT = 1u << 7,    /* a heartbeat ping awaits its pong */
    WF_COUNTED = 1u << 8,     /* held: flare__worker_conn_hold */
    WF_REAPING = 1u << 9,     /* on the reap list */
    WF_IN_MESSAGE = 1u << 10, /* a split/fragmented message is being assembled in msg */
    WF_DIRTY = 1u << 11       /* on the worker's flush list (hub deliveries) */
};

struct flare_ws {
    flare_stream_t s; /* first: the loop hands us &s.io. Detached until the hand-off */
    uint8_t state;
    uint8_t msg_op;
    uint16_t close_code; /* what on_close will report */
    uint32_t flags;
    ws_worker_t *ww;
    const ws_route_t *route;
    uint64_t id;
    void *data;
    flare_str_t protocol;
    flare_ws_parser_t parser;

    /* input: s.rbuf[0, s.rlen) (s.rpos stays 0), a pool buffer while bytes
     * are held, none when idle */
    flare_buf_t msg; /* reassembly / inflate output; the close reason at the end */
    flare_buf_t zin; /* compressed bytes of a split message (shared inflater) */
    uint32_t msg_utf8;
    bool inflate_ended;

    uint64_t t_progress; /* last time output moved (or the queue was empty) */

    /* timers (ms, loop clock) */
    uint64_t t_ping;   /* last heartbeat ping */
    uint64_t deadline; /* close reply / linger / pending hand-off */
    unsigned missed;

    /* permessage-deflate */
    bool pmd_on;
    flare_ws_pmd_t pmd;
    z_stream *def, *inf; /* own streams (context takeover), lazily made */

    /* hub: the rooms (channel subscriptions, linked by onext) */
    flare__chan_sub_t *rooms;
    struct flare_ws *id_next;

    struct flare_ws *prev, *next; /* all of the worker's connections */
    struct flare_ws *reap_next;
    struct flare_ws *dirty_next;
};

/* Per-worker state (flare__ws_worker), made on the first WebSocket handshake. */
struct ws_worker {
    flare_worker_t *w;
    ws_app_t *wapp;
    flare_ws_t *conns;
    unsigned nconns;
    uint64_t next_seq;
    flare_ws_t **ids; /* id -> connection, chained; power-of-two size */
    size_t idcap, nids;
    flare_ws_t *reap;
    flare_ws_t *dirty; /* queued hub deliveries, written once after the event batch */
    /* embedded: arming them cannot fail (a lost re-arm would stop
     * heartbeats and timeouts for good); stopped in flare__ws_dispose */
    flare__timer_t sweep_timer, reap_timer, flush_timer;
    z_stream *sdef[16]; /* shared compressors by window bits (no context takeover) */
    int sdef_level[16];
    z_stream *sinf;      /* shared inflater (client_no_context_takeover) */
    flare_buf_t scratch; /* compressed output of one message */
};

/* out.c */
/* Writes (or queues) a frame: hdr then payload; sh: payload is that shared
 * frame's bytes (referenced, not copied, if queued). 0 or FLARE_ECLOSED /
 * FLARE_ENOMEM (the connection is then dead). */
int flare__ws_emit(flare_ws_t *ws, const void *hdr, size_t hlen, const void *pl, size_t plen,
                   ws_shared_t *sh);
void flare__ws_flush(flare_ws_t *ws);

/* conn.c */
void flare__ws_go_dead(flare_ws_t *ws); /* closes the socket; reaped after the batch */
ws_worker_t *flare__ws_worker_get(flare_worker_t *w, ws_app_t *wapp);
flare_ws_t *flare__ws_new(ws_worker_t *ww, const ws_route_t *route);
void flare__ws_free_pending(flare_ws_t *ws); /* refused in on_open: no on_close */
void flare__ws_handoff(flare_worker_t *w, flare_stream_t *s, void *ud);
void flare__ws_abort(flare_ws_t *ws, uint16_t code);
int flare__ws_send_shared(flare_ws_t *ws, ws_shared_t *plain, ws_shared_t *packed);
void flare__ws_drain(flare_worker_t *w, void *wapp);   /* the module's drain_worker */
void flare__ws_dispose(flare_worker_t *w, void *wapp); /* the module's dispose_worker */
z_stream *flare__ws_shared_deflater(ws_worker_t *ww, unsigned bits, unsigned mem, int level);

/* hub.c */
uint64_t flare__ws_id_assign(ws_worker_t *ww, flare_ws_t *ws);
void flare__ws_id_remove(ws_worker_t *ww, flare_ws_t *ws);
void flare__ws_leave_all(flare_ws_t *ws);
void flare__ws_hub_dispose(ws_worker_t *ww);

/* the calling thread's worker state, if it is a worker with WebSocket state */
extern _Thread_local ws_worker_t *flare__ws_tls;

/* route.c: the WebSocket module (module.h), registered by the first route */
extern const flare_module_t flare__ws_module;

/* The app's WebSocket state, NULL when it has no WebSocket route. */
static inline ws_app_t *flare__ws_app_state(const flare_app_t *app)
{
    return flare__app_module_state(app, &flare__ws_module);
}

/* Worker w's WebSocket state, NULL before its first handshake (and after
 * it ended). On w's thread. */
static inline ws_worker_t *flare__ws_worker(const flare_worker_t *w, const ws_app_t *wa)
{
    return flare__worker_module_state(w, wa->slot);
}

#endif
