/* The channel layer's inside (include/flare/channel.h): what its subscriber
 * kinds (WebSocket connections in ws/, SSE streams in web/sse.c, C
 * callbacks) and its backplane (the Redis cluster, web/cluster*.c) see.
 *
 * The model:
 * - a message (flare__chan_msg_t) is made once, immutable from then on, and
 *   shared by reference between workers; each kind in use gets its own
 *   shared form of it (an encoded WebSocket frame, an SSE event) made once
 *   by the sequencer before the fan-out;
 * - one sequencer orders every channel's messages: without a backplane,
 *   worker 0 (publishers post to it); with one, the backplane's receiving
 *   worker, in the order Redis gave. The sequencer posts each message to
 *   every worker (itself included), and a queue keeps the order of what one
 *   thread posted;
 * - each worker keeps its own channels (its own subscribers) and delivers
 *   to them; nothing is shared between workers but the messages. */
#ifndef FLARE_WEB_CHANNEL_H
#define FLARE_WEB_CHANNEL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "flare/flare.h"
#include "flare/channel.h"

/* Subscriber kinds: the index of each one's shared form in a message. */
enum { FLARE__CHAN_WS, FLARE__CHAN_SSE, FLARE__CHAN_FN, FLARE__CHAN_KINDS };

/* Message types: data, and the notices that travel in order with it. */
enum {
    FLARE__CHAN_DATA = 0,
    FLARE__CHAN_NLOST,   /* the channel's messages before offset are lost */
    FLARE__CHAN_NDOWN,   /* backplane down: every channel of the app */
    FLARE__CHAN_NUP,     /* backplane up again: every channel */
    FLARE__CHAN_NJOIN,   /* presence: client joined (data: info) */
    FLARE__CHAN_NLEAVE,  /* presence: client left */
    FLARE__CHAN_NCLOSED, /* the subscription ends: its worker stops */
};

typedef struct flare__chan_msg {
    _Atomic unsigned refs;
    uint8_t type;
    bool binary;
    uint8_t epoch_len;
    uint8_t all_kind;     /* k + 1: to every subscriber-owner of kind k (room "") */
    const char *reason;   /* NLOST: a static word */
    uint64_t hash;        /* of the name */
    uint64_t offset;      /* 0: none */
    uint64_t except_inst; /* the publishing instance, for except_id */
    uint64_t except_id;   /* a WebSocket id that is not a recipient (0: none) */
    /* each kind's shared form, made by the sequencer when that kind has
     * subscribers (a worker missing one makes its own for the delivery);
     * released with the message */
    void *rep[FLARE__CHAN_KINDS];
    char epoch[FLARE_CHANNEL_EPOCH_MAX];
    size_t name_len, event_len, data_len, client_len;
    char *name, *event, *data, *client; /* into bytes[] */
    char bytes[];
} flare__chan_msg_t;

/* A message with copies of these bytes (refs 1); NULL when out of memory. */
flare__chan_msg_t *flare__chan_msg_new(int type, flare_str_t name, flare_str_t event,
                                       flare_str_t data, bool binary);
void flare__chan_msg_ref(flare__chan_msg_t *m);
void flare__chan_msg_unref(flare__chan_msg_t *m);
/* The public view of m (views into it). */
flare_channel_msg_t flare__chan_msg_view(const flare__chan_msg_t *m);

typedef struct flare_channel_sub flare__chan_sub_t;

/* What a kind of subscriber does with messages. */
typedef struct flare__chan_kind {
    int id; /* FLARE__CHAN_WS... */
    /* m's shared form for this kind (positions: some subscriber of the kind
     * wants positions in it), made on a worker thread; NULL when there is
     * none (then deliver gets NULL) */
    void *(*prepare)(flare_app_t *app, const flare__chan_msg_t *m, bool positions);
    void (*release)(void *rep);
    /* m (data) to s, with rep its shared form (NULL, or made without the
     * positions s wants: make what is needed for this delivery). May
     * end the owner (a slow consumer) but never frees s or the owner. */
    void (*deliver)(flare__chan_sub_t *s, const flare__chan_msg_t *m, void *rep);
    /* a notice (m's type is not DATA) to s; same rules */
    void (*notice)(flare__chan_sub_t *s, const flare__chan_msg_t *m);
    /* m to every owner of this kind on worker w (its thread), whether in a
     * channel or not (the rooms' "" broadcast); NULL: none */
    void (*all)(flare_worker_t *w, const flare__chan_msg_t *m, void *rep);
} flare__chan_kind_t;

/* subscriber flags */
enum {
    FLARE__SUB_POSITIONS = 1u << 0,  /* wants positions (WebSocket envelopes) */
    FLARE__SUB_RECOVERING = 1u << 1, /* reading its history: live messages wait */
    FLARE__SUB_DEAD = 1u << 2,       /* left during a delivery: freed after it */
    FLARE__SUB_LOST_SENT = 1u << 3,
};

typedef struct flare__chan_pending flare__chan_pending_t;
typedef struct flare__chan_recovery flare__chan_recovery_t;

struct flare_channel_sub {
    const flare__chan_kind_t *kind;
    struct flare__chan *ch;
    struct flare_channel_sub *prev, *next; /* in ch */
    struct flare_channel_sub *onext;       /* in the owner's list */
    void *owner;                           /* the flare_ws_t, flare_sse_t... */
    uint64_t last;                         /* offset of the last message delivered */
    uint32_t flags;
    flare__chan_pending_t *phead, **ptail; /* live messages waiting for the history */
    unsigned npending;
    flare__chan_recovery_t *rec; /* the history read in flight */
    struct chan_worker *cw;      /* the worker's channel state */
    flare_channel_pos_t since;
    /* C subscribers */
    flare_channel_sub_config_t cfg;
};

/* The channel of one worker: its subscribers there. */
typedef struct flare__chan {
    struct flare__chan *next; /* hash chain */
    uint64_t hash;
    flare__chan_sub_t *subs;
    size_t nsubs; /* live ones */
    size_t nlen;
    char name[];
} flare__chan_t;

/* ---- for the kinds ---- */

/* Registers kind k for app (before flare_app_run): its messages get k's
 * shared form. Makes the app's channel layer if needed. 0 or FLARE_ENOMEM,
 * FLARE_ESTATE. */
int flare__chan_use(flare_app_t *app, const flare__chan_kind_t *k);

/* Subscribes owner (a subscriber of kind k) to channel name on worker w
 * (w's thread), with flags FLARE__SUB_POSITIONS. *out: the subscription, to
 * leave with flare__chan_leave. 0, FLARE_EINVAL (bad name), FLARE_ESTATE (no
 * channel layer, or the worker is stopping), FLARE_ENOMEM. */
int flare__chan_join(flare_worker_t *w, const flare__chan_kind_t *k, void *owner, flare_str_t name,
                     unsigned flags, flare__chan_sub_t **out);

/* Starts s once its owner is set up: a DOWN notice when the backplane is
 * down now; and with a position since (NULL: none), in a cluster, its
 * history is read and delivered first, live messages waiting meanwhile; a
 * position that cannot be served gets a LOST notice (possibly during the
 * call). Outside a cluster a position is ignored (no history). */
void flare__chan_resume(flare__chan_sub_t *s, const flare_channel_pos_t *since);

/* Ends s (on its worker): freed now, or after the delivery in progress. */
void flare__chan_leave(flare__chan_sub_t *s);

/* Whether s is a subscription to the channel called name. */
bool flare__chan_sub_is(const flare__chan_sub_t *s, flare_str_t name);

/* Hands m (its reference) to the sequencer, or in a cluster to the
 * backplane (see flare_channel_publish; a message with all_kind stays in
 * the instance). 0 or an error (m is released either way). */
int flare__chan_submit(flare_app_t *app, flare__chan_msg_t *m, flare_channel_published_fn cb,
                       void *ud);

/* Publishes on app's channel name (see flare_channel_publish), with
 * except_id a WebSocket id to skip (0: none). */
int flare__chan_publish(flare_app_t *app, flare_str_t name, const flare_channel_msg_t *msg,
                        uint64_t except_id, flare_channel_published_fn cb, void *ud);

/* The hash of a channel name (the workers' tables, the backplane's). */
uint64_t flare__chan_hash(flare_str_t name);

/* Whether name is a valid channel name. */
bool flare__chan_name_ok(flare_str_t name);

/* "ws:" room, "sse:" room into buf (FLARE_CHANNEL_NAME_MAX bytes); the name. */
flare_str_t flare__chan_prefixed(char *buf, const char *prefix, flare_str_t room);

/* The app's instance id (random, per app; except_inst). */
uint64_t flare__chan_instance(const flare_app_t *app);

/* ---- for a backplane ---- */

/* A history entry list for flare__chan_backplane_t.history. */
typedef void (*flare__chan_history_fn)(int err, uint64_t offset, flare_str_t epoch,
                                       flare__chan_msg_t **msgs, size_t n, void *ud);

/* A backplane: what makes channels span instances. Every call on a worker
 * thread of the app. */
typedef struct flare__chan_backplane {
    /* sends m (name, payload) out, then cb(err, offset, epoch, ud) on w;
     * 0 or an error (cb will not run): FLARE_EUNAVAIL at once while the
     * backplane is known to be down */
    int (*publish)(void *bp, flare_worker_t *w, flare__chan_msg_t *m, flare_channel_published_fn cb,
                   void *ud);
    /* the first subscriber of a channel on worker w came / the last left */
    void (*subscribe)(void *bp, flare_worker_t *w, flare_str_t name);
    void (*unsubscribe)(void *bp, flare_worker_t *w, flare_str_t name);
    /* the messages of channel name after since (at most limit), then
     * cb(err, the channel's position now, the messages, ud) on w: err
     * FLARE_ENOTFOUND when the history does not reach back to since */
    int (*history)(void *bp, flare_worker_t *w, flare_str_t name, const flare_channel_pos_t *since,
                   flare__chan_history_fn cb, void *ud);
    /* whether publishing can work now (any thread); refusing: a publish
     * is refused for it (counted) */
    bool (*up)(void *bp, bool refusing);
} flare__chan_backplane_t;

/* The kinds (ws/route.c, web/sse.c). */
extern const flare__chan_kind_t flare__ws_chan_kind, flare__sse_chan_kind, flare__fn_chan_kind;

/* Installs backplane ops with its state bp (before flare_app_run). 0,
 * FLARE_EEXIST (one is installed), FLARE_ENOMEM, FLARE_ESTATE. */
int flare__chan_backplane_set(flare_app_t *app, const flare__chan_backplane_t *ops, void *bp);

/* On the backplane's receiving worker (worker 0, the sequencer): delivers m (a message with its
 * offset, or a notice) everywhere in the app, in the order of the calls.
 * Takes the reference the caller holds. */
void flare__chan_sequenced(flare_app_t *app, flare__chan_msg_t *m);

/* Builds m's shared forms for the kinds in use (any thread; a form
 * already there is kept). */
void flare__chan_prepare(flare_app_t *app, flare__chan_msg_t *m);

#endif
