/* Many instances, one service: the channel layer (flare/channel.h) shared
 * by every instance through Redis (docs/cluster.md).
 *
 *     flare_app_cluster(app, "redis://10.0.0.5:6379", NULL);
 *
 * From then on every channel (WebSocket rooms, SSE rooms, C subscribers)
 * spans the instances that name the same Redis. The model is Centrifugo's:
 *   - a publish is one Lua call in Redis that gives the message the next
 *     offset of its channel, appends it to the channel's history (a stream
 *     capped by count and age) and publishes "OFFSET:EPOCH:PAYLOAD" to
 *     every instance; the epoch names one life of the channel's history (a
 *     Redis that lost its data makes a new one);
 *   - each instance has one subscriber connection (on worker 0), tracks the
 *     last offset of each channel it has subscribers of, and fills a gap
 *     from the history (or reports it lost: FLARE_CHANNEL_LOST);
 *   - a subscriber that comes back with its position (SSE Last-Event-ID, a
 *     WebSocket ?since=) gets what it missed, in order, or is told its
 *     state was lost;
 *   - Redis unreachable: publishing fails at once (FLARE_EUNAVAIL),
 *     subscribers get FLARE_CHANNEL_DOWN, the instance serves everything
 *     else, reconnects with backoff and on recovery delivers what was
 *     published meanwhile (or reports it lost), then FLARE_CHANNEL_UP.
 * Presence (who is in a channel, across instances) lives in a Redis hash
 * per channel; the entries of an instance that died are ignored after at
 * most presence_ttl_ms and removed (with a leave event) by the next
 * heartbeat of a live instance. */
#ifndef FLARE_CLUSTER_H
#define FLARE_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "flare/channel.h"

#ifdef __cplusplus
extern "C" {
#endif

struct flare_app;
struct flare_worker;

/* A cluster's settings. Zero fields take the defaults in brackets; values
 * past the bound after "<=" are refused by flare_app_cluster. */
typedef struct flare_cluster_config {
    unsigned history_size;       /* messages kept per channel [1000], <= 1000000 */
    unsigned history_age_ms;     /* and not older than this [300000: 5 min] */
    unsigned meta_ttl_s;         /* an idle channel's offset and epoch live this long [86400] */
    unsigned presence_ttl_ms;    /* a dead instance's presence expires within this [15000];
                                    the heartbeat runs every third of it, >= 300 */
    unsigned command_timeout_ms; /* a publish unanswered this long fails [2000] */
    /* put before every Redis key and pub/sub channel name ["flare:"]: 1 to 64
     * bytes of [A-Za-z0-9:_.-] (instances of one service share it) */
    const char *prefix;
} flare_cluster_config_t;

/* Makes app's channels cluster-wide through the Redis at url
 * (redis://[[USER]:PASSWORD@]HOST[:PORT][/DB], flare_redis_open's form),
 * with cfg (copied; NULL: defaults). Before flare_app_run. The connections
 * are made as the workers start and again whenever lost: an unreachable
 * Redis does not fail this call, publishes fail until it is reachable. 0,
 * or FLARE_EINVAL (bad URL or setting: flare_last_error() says which),
 * FLARE_EEXIST (already a cluster), FLARE_ESTATE (running), FLARE_ENOMEM. */
FLARE_API int flare_app_cluster(struct flare_app *app, const char *url,
                                const flare_cluster_config_t *cfg);

/* One member of a channel (flare_channel_presence): views valid during the
 * callback. */
typedef struct flare_channel_member {
    flare_str_t client; /* the id given to flare_channel_presence_add */
    flare_str_t info;   /* the app's info about it (JSON, text...) */
} flare_channel_member_t;

/* The members of a channel: err 0 and members[0 .. n), or err
 * FLARE_EUNAVAIL / FLARE_ETIMEDOUT and none; ud: the call's. */
typedef void (*flare_channel_presence_fn)(int err, const flare_channel_member_t *members, size_t n,
                                          void *ud);

/* Adds client (1 to 256 bytes) with info (at most 64 KiB; copied) to the
 * members of channel, as a member of this instance, and publishes a join
 * event (FLARE_CHANNEL_JOIN to the channel's C subscribers). Adding it again
 * replaces its info. On worker w's thread. 0 (sent), or FLARE_EINVAL,
 * FLARE_ESTATE (no cluster, or not running), FLARE_EUNAVAIL (Redis down),
 * FLARE_ENOMEM. */
FLARE_API int flare_channel_presence_add(struct flare_worker *w, flare_str_t channel,
                                         flare_str_t client, flare_str_t info);

/* Removes client from the members of channel (added by this instance) and
 * publishes a leave event. On worker w's thread. Returns as
 * flare_channel_presence_add. */
FLARE_API int flare_channel_presence_remove(struct flare_worker *w, flare_str_t channel,
                                            flare_str_t client);

/* Reads the members of channel, then cb(err, members, n, ud) on worker w
 * (never inside this call). Members of instances that stopped sending
 * heartbeats are left out (and removed). On w's thread. 0 (cb will run), or
 * FLARE_EINVAL, FLARE_ESTATE, FLARE_ENOMEM. */
FLARE_API int flare_channel_presence(struct flare_worker *w, flare_str_t channel,
                                     flare_channel_presence_fn cb, void *ud);

/* A cluster's figures, summed over the workers (flare_cluster_stats). */
typedef struct flare_cluster_stats {
    uint64_t delivered;      /* messages the instance received in order and delivered */
    uint64_t lost;           /* messages reported lost (missing offsets) */
    uint64_t recovered;      /* of delivered, those read back from the history */
    uint64_t publish_errors; /* publishes that failed (unreachable, timed out) */
    uint64_t epoch_changes;  /* channels whose history was found lost */
    bool up;                 /* the subscriber connection is up */
} flare_cluster_stats_t;

/* app's cluster figures into *out (any thread; a moment old). 0, or
 * FLARE_EINVAL (NULL), FLARE_ESTATE (no cluster). flare_metrics_route
 * exports them too (docs/cluster.md names the series). */
FLARE_API int flare_cluster_stats(const struct flare_app *app, flare_cluster_stats_t *out);

#ifdef __cplusplus
}
#endif

#endif
