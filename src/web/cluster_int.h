/* The Redis backplane of the channel layer (flare/cluster.h): what its
 * files share. cluster.c: the settings, the scripts, publishing, reading
 * the history, the wire form of a message, the figures; cluster_recv.c:
 * the receiving worker (the one subscriber connection, the offsets of the
 * channels this instance has subscribers of, gaps, recovery, the
 * heartbeat); cluster_presence.c: presence.
 *
 * In Redis, for a channel NAME and the prefix P:
 *   P m:NAME   hash {e: epoch, o: last offset}      (meta_ttl_s after the last publish)
 *   P h:NAME   stream of {o: offset, m: payload}    (capped: history_size, history_age_ms)
 *   P p:NAME   hash {INSTANCE/CLIENT: info}          (presence)
 *   P i:INSTANCE                                     (alive: presence_ttl_ms, refreshed)
 *   P c:NAME   the pub/sub channel; every instance PSUBSCRIBEs to "P c:*"
 * A pub/sub message is "OFFSET:EPOCH:PAYLOAD" (offset 0, epoch "-": a
 * presence event), PAYLOAD = KIND LEN "," EXCEPT_INSTANCE "," EXCEPT_ID ":"
 * HEAD BODY, KIND 't' text, 'b' binary (HEAD: the SSE event type), 'j' join,
 * 'l' leave (HEAD: the client, BODY: its info); LEN is HEAD's length, the
 * two ids in hexadecimal (0: none). */
#ifndef FLARE_WEB_CLUSTER_INT_H
#define FLARE_WEB_CLUSTER_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "flare/cluster.h"
#include "flare/redis.h"
#include "web/channel.h"

#define FLARE__CL_PREFIX_MAX 64
#define FLARE__CL_KEY_MAX    (FLARE__CL_PREFIX_MAX + 2 + FLARE_CHANNEL_NAME_MAX)
#define FLARE__CL_CLIENT_MAX 256
#define FLARE__CL_INFO_MAX   65536

enum { CL_PUBLISH, CL_HISTORY, CL_PRES_ADD, CL_PRES_DEL, CL_PRES_LIST, CL_SCRIPTS };

/* Per worker figures: one writer each (relaxed load + store). */
typedef struct cl_stats {
    _Atomic uint64_t delivered, lost, recovered, publish_errors, epoch_changes;
    char pad[64];
} cl_stats_t;

typedef struct cl_track cl_track_t;

typedef struct cluster {
    flare_app_t *app;
    flare_redis_t *r;
    flare_cluster_config_t cfg;
    char prefix[FLARE__CL_PREFIX_MAX + 1];
    size_t plen;
    char sha[CL_SCRIPTS][41];
    uint64_t instance;
    char inst[17];            /* the instance id in hex */
    unsigned slot;            /* the module's */
    _Atomic bool up;          /* the subscriber connection: false once known down */
    _Atomic uint64_t refused; /* publishes of non-worker threads refused while down */
    _Atomic bool ever_up;     /* subscribed at least once this run (readiness) */
    cl_stats_t *st;           /* by worker */
    unsigned nst;
    /* the receiving worker's (worker 0) state: its thread only */
    struct cl_recv *rv; /* NULL outside its run */
} cluster_t;

extern const char *const flare__cl_scripts[CL_SCRIPTS];

/* single writer: no locked instruction */
static inline void flare__cl_count(_Atomic uint64_t *v, uint64_t d)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + d,
                          memory_order_relaxed);
}

/* app's cluster (NULL: none). */
cluster_t *flare__cl_of(const flare_app_t *app);

/* This worker's figures (w's thread). */
cl_stats_t *flare__cl_stats(cluster_t *cl, flare_worker_t *w);

/* P KIND ":" NAME into buf (FLARE__CL_KEY_MAX bytes). */
flare_str_t flare__cl_key(const cluster_t *cl, char kind, flare_str_t name, char *buf);

/* Runs script `which` with keys and args on worker w (EVALSHA, EVAL once
 * when Redis does not have it), then cb(err, reply, ud) as flare_redis_cmd.
 * 0 or flare_redis_cmd's codes. */
int flare__cl_eval(cluster_t *cl, flare_worker_t *w, int which, const flare_str_t *keys,
                   size_t nkeys, const flare_str_t *args, size_t nargs, flare_redis_fn cb,
                   void *ud);

/* The message of channel name for a pub/sub or history payload (offset,
 * epoch): a new message, or NULL (malformed, out of memory). */
flare__chan_msg_t *flare__cl_decode(flare_str_t name, uint64_t offset, flare_str_t epoch,
                                    flare_str_t payload);

/* Parses a history script reply: the channel's offset and epoch, and the
 * messages after `since` into *msgs (n of them; the caller unrefs each and
 * frees the array). 0, FLARE_ENOTFOUND (more than the history holds is
 * missing; offset and epoch set), FLARE_EUNAVAIL (not a history reply). */
int flare__cl_history_parse(const flare_redis_reply_t *rep, flare_str_t name, uint64_t *offset,
                            flare_str_t *epoch, flare__chan_msg_t ***msgs, size_t *n);

/* Asks for the history of name after since (since NULL: the position only)
 * on worker w; cb as flare__chan_history_fn. */
int flare__cl_history(cluster_t *cl, flare_worker_t *w, flare_str_t name,
                      const flare_channel_pos_t *since, flare__chan_history_fn cb, void *ud);

/* cluster_recv.c: the receiving worker */
void flare__cl_on_message(flare_str_t pattern, flare_str_t channel, flare_str_t message, void *ud);
void flare__cl_on_sub_state(bool up, void *ud);
void flare__cl_interest(cluster_t *cl, flare_worker_t *w, flare_str_t name, int delta);
int flare__cl_recv_init(cluster_t *cl, flare_worker_t *w0);
void flare__cl_recv_drain(cluster_t *cl);
void flare__cl_recv_dispose(cluster_t *cl);

/* cluster_presence.c: the heartbeat's sweep of channel name's presence */
void flare__cl_presence_sweep(cluster_t *cl, flare_worker_t *w, flare_str_t name);

#endif
