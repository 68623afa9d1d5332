/* Channels: one publish/subscribe layer under WebSocket rooms, SSE rooms
 * and C callbacks (docs/channels.md), local to the process or shared by N
 * instances through Redis (docs/cluster.md).
 *
 *     static void got(flare_channel_sub_t *sub, const flare_channel_msg_t *m, void *ud)
 *     {
 *         ... m->data, valid during the call ...
 *     }
 *     ...
 *     flare_channel_sub_t *sub;          // on a worker (a handler, a task)
 *     flare_channel_subscribe(w, FLARE_STR("prices"),
 *                             &(flare_channel_sub_config_t){ .on_message = got }, &sub);
 *     ...
 *     flare_channel_publish(app, FLARE_STR("prices"),   // any thread
 *                           &(flare_channel_msg_t){ .data = FLARE_STR("42") }, NULL, NULL);
 *
 * A channel is a name (1 to FLARE_CHANNEL_NAME_MAX bytes, any bytes). Its
 * subscribers are of any kind: a WebSocket connection (flare_ws_join: the
 * channel "ws:" ROOM), an SSE stream (flare_sse_join: "sse:" ROOM), a C
 * callback on a worker (flare_channel_subscribe). The WebSocket and SSE
 * room functions are this layer with those prefixes, so that a chat room and
 * an event feed of the same name stay apart, as they always were.
 *
 * Guarantees, per channel:
 *   - every subscriber receives the messages in one order, the same for all
 *     of them: the order in which the channel's sequencer took them (a
 *     worker chosen by the channel's name, or Redis in a cluster); the
 *     messages of one publishing thread keep that thread's order;
 *   - each message at most once while the subscriber stays subscribed, and,
 *     in a cluster, exactly once across reconnects that resume from a
 *     position (flare_channel_pos_t) still in the channel's history;
 *   - nothing is skipped silently: when messages cannot be delivered (the
 *     history no longer reaches back, Redis lost its data) the subscriber
 *     gets a FLARE_CHANNEL_LOST notice;
 *   - a subscriber too slow to keep up is dropped, never buffered without
 *     bound (a WebSocket past its write_limit, an SSE stream past
 *     max_queued: the limits of those layers).
 *
 * Threads: publishing is safe from any thread while the app runs. A
 * subscription belongs to the worker that made it, and its callbacks run on
 * that worker. Fan-out is share-nothing: a message is encoded once and
 * referenced by every worker, each delivering to its own subscribers. */
#ifndef FLARE_CHANNEL_H
#define FLARE_CHANNEL_H

#include <stdbool.h>
#include <stdint.h>

#include "flare/common.h"

#ifdef __cplusplus
extern "C" {
#endif

struct flare_app;
struct flare_worker;

/* The longest channel name, in bytes. */
#define FLARE_CHANNEL_NAME_MAX  512
/* The longest epoch, in bytes (a cluster's epochs are 16 hex digits). */
#define FLARE_CHANNEL_EPOCH_MAX 32
/* The longest position token "OFFSET:EPOCH" (without a NUL). */
#define FLARE_CHANNEL_POS_MAX   (20 + 1 + FLARE_CHANNEL_EPOCH_MAX)

/* A position in a channel: the offset of the last message seen and the
 * channel's epoch then. Offsets count a channel's messages from 1; the epoch
 * names one life of the channel's history (a new epoch: the history was
 * lost, the offsets started again). Outside a cluster channels have no
 * positions (offset 0, empty epoch). Its text form, the token a client
 * sends back to resume (SSE id, WebSocket `since`), is "OFFSET:EPOCH". */
typedef struct flare_channel_pos {
    uint64_t offset;                     /* last offset seen (0: none yet) */
    uint8_t epoch_len;                   /* bytes of epoch used */
    char epoch[FLARE_CHANNEL_EPOCH_MAX]; /* not NUL-terminated */
} flare_channel_pos_t;

/* Parses token "OFFSET:EPOCH" (OFFSET decimal, at most 2^53; EPOCH 1 to
 * FLARE_CHANNEL_EPOCH_MAX bytes of [0-9A-Za-z_-]) into *out. 0, or
 * FLARE_EINVAL (malformed: *out is zeroed). */
FLARE_API int flare_channel_pos_parse(flare_str_t token, flare_channel_pos_t *out);

/* Writes pos's token into out (cap bytes, NUL-terminated when it fits) and
 * returns its length without the NUL (FLARE_CHANNEL_POS_MAX at most); the
 * result is cut when cap is too small (size the buffer
 * FLARE_CHANNEL_POS_MAX + 1). */
FLARE_API size_t flare_channel_pos_format(const flare_channel_pos_t *pos, char *out, size_t cap);

/* A message, as published and as delivered. Published: channel is ignored,
 * offset and epoch too; event, data and binary are copied. Delivered: views
 * valid during the callback only. */
typedef struct flare_channel_msg {
    flare_str_t channel; /* the channel's name */
    /* the SSE event type (an SSE subscriber's "event:" line; no CR or LF);
     * empty: none. WebSocket subscribers ignore it. */
    flare_str_t event;
    flare_str_t data;  /* the payload: text (UTF-8) unless binary */
    bool binary;       /* a WebSocket binary message (SSE subscribers drop it) */
    uint64_t offset;   /* its offset in the channel (cluster), 0 otherwise */
    flare_str_t epoch; /* the channel's epoch (cluster), empty otherwise */
} flare_channel_msg_t;

/* What a notice says (flare_channel_notice_t.kind). */
typedef enum flare_channel_notice_kind {
    /* Messages of the channel could not be delivered and never will be:
     * resuming from a position no longer in the history, a gap the history
     * could not fill, or an epoch change (Redis lost its data). offset and
     * epoch are the channel's position now: deliveries go on from there. */
    FLARE_CHANNEL_LOST = 1,
    /* The backplane (Redis) is unreachable: publishing fails, deliveries
     * wait. Positions are kept; FLARE_CHANNEL_UP follows on recovery. */
    FLARE_CHANNEL_DOWN,
    /* The backplane is back; what was published meanwhile is being
     * delivered (or reported lost). */
    FLARE_CHANNEL_UP,
    /* Presence: a member joined / left the channel (client, info). */
    FLARE_CHANNEL_JOIN,
    FLARE_CHANNEL_LEAVE,
    /* The subscription is over (its worker is stopping): the handle is
     * freed once on_notice returns. */
    FLARE_CHANNEL_CLOSED
} flare_channel_notice_kind_t;

/* A notice to a subscriber; views valid during the callback. */
typedef struct flare_channel_notice {
    flare_channel_notice_kind_t kind; /* what happened */
    flare_str_t channel;              /* the channel's name */
    uint64_t offset;                  /* LOST: the channel's offset now */
    flare_str_t epoch;                /* LOST: the channel's epoch now */
    /* LOST: why, one word: "history" (the position is older than the
     * history), "epoch" (the channel's history was lost), "gap" (messages
     * missed by the instance and gone from the history), "overflow" (too
     * many messages arrived while resuming), "unavailable" (the history
     * could not be read) */
    const char *reason;
    flare_str_t client; /* JOIN, LEAVE: the member's id */
    flare_str_t info;   /* JOIN: the member's info (LEAVE: empty) */
} flare_channel_notice_t;

/* A C subscriber (opaque): valid from flare_channel_subscribe until
 * flare_channel_unsubscribe, or until the FLARE_CHANNEL_CLOSED notice
 * returns. */
typedef struct flare_channel_sub flare_channel_sub_t;

/* A message m for subscription sub (ud: the config's); views valid during the call. */
typedef void (*flare_channel_msg_fn)(flare_channel_sub_t *sub, const flare_channel_msg_t *m,
                                     void *ud);
/* A notice n for subscription sub (ud: the config's); views valid during the call. */
typedef void (*flare_channel_notice_fn)(flare_channel_sub_t *sub, const flare_channel_notice_t *n,
                                        void *ud);

/* A C subscription. A zeroed struct but on_message is complete. */
typedef struct flare_channel_sub_config {
    flare_channel_msg_fn on_message;   /* required */
    flare_channel_notice_fn on_notice; /* may be NULL (notices are then dropped) */
    /* resume: deliver first what followed this position (a cluster keeps
     * the history; outside a cluster the position is ignored). NULL: from
     * now on. Copied. */
    const flare_channel_pos_t *since;
    void *ud; /* given to the callbacks */
} flare_channel_sub_config_t;

/* Gives app its channel layer (an app with a WebSocket or SSE route, or a
 * cluster, has it already). Before flare_app_run. 0, FLARE_EINVAL,
 * FLARE_ESTATE (running), FLARE_ENOMEM. Idempotent. */
FLARE_API int flare_channel_enable(struct flare_app *app);

/* Subscribes a callback on worker w (call on w's thread: a handler, a
 * timer, a task) to channel, with cfg (copied). Messages published from
 * now on (or after cfg->since) are delivered to cfg->on_message on w. *out
 * is the handle. 0, or FLARE_EINVAL (bad name, NULL callback, not on w's
 * thread), FLARE_ESTATE (no channel layer, or w is not running),
 * FLARE_ENOMEM. */
FLARE_API int flare_channel_subscribe(struct flare_worker *w, flare_str_t channel,
                                      const flare_channel_sub_config_t *cfg,
                                      flare_channel_sub_t **out);

/* Ends subscription sub (on its worker's thread, also from inside its own
 * callbacks); the handle is invalid after the call. 0 or FLARE_EINVAL. */
FLARE_API int flare_channel_unsubscribe(flare_channel_sub_t *sub);

/* The channel's name of subscription sub (valid as long as the handle). */
FLARE_API flare_str_t flare_channel_sub_name(const flare_channel_sub_t *sub);

/* Called once a publish has been taken by the channel's sequencer: err 0
 * with the message's offset and epoch (a cluster; 0 and empty otherwise),
 * or the error (FLARE_EUNAVAIL: Redis unreachable; FLARE_ETIMEDOUT: no answer
 * in time, the message may or may not have been published). ud: the
 * publish call's. On the publishing worker (a publish from another thread:
 * on a worker of the app). */
typedef void (*flare_channel_published_fn)(int err, uint64_t offset, flare_str_t epoch, void *ud);

/* Publishes msg (its event, data and binary: copied) on channel, from any
 * thread while the app runs. Outside a cluster the message goes to the
 * channel's sequencer worker, which delivers it on every worker; in a
 * cluster it goes to Redis, which gives it its offset and sends it to every
 * instance. cb (may be NULL) reports the outcome with ud (see above; it never runs inside
 * this call). 0 (cb will run), or FLARE_EINVAL (bad name, text that is not
 * UTF-8, an event with CR or LF), FLARE_ESTATE (no channel layer, or not
 * running), FLARE_EUNAVAIL (a cluster whose Redis is known to be down:
 * failing fast), FLARE_ENOMEM. */
FLARE_API int flare_channel_publish(struct flare_app *app, flare_str_t channel,
                                    const flare_channel_msg_t *msg, flare_channel_published_fn cb,
                                    void *ud);

#ifdef __cplusplus
}
#endif

#endif
