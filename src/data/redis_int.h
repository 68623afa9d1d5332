/* The Redis client's inside: the reply-tree conversion (redis_reply.c),
 * separate from the connections (redis.c) so that it can be tested without
 * a server. */
#ifndef FLARE_DATA_REDIS_INT_H
#define FLARE_DATA_REDIS_INT_H

#include <hiredis/hiredis.h>

#include "flare/redis.h"

/* Converts hiredis's reply r into Flare's tree. The root is written to
 * *root; the nodes below it, when there are any, go to one allocation
 * returned in *heap (free it after the callback; NULL when r has no
 * elements). Views point into r, so r must outlive the tree. 0, or
 * FLARE_ENOMEM (nothing to free then), FLARE_EINVAL (a reply type this
 * build does not know). */
int flare__redis_reply_build(const redisReply *r, flare_redis_reply_t *root,
                             flare_redis_reply_t **heap);

/* Tells fn(up, ud), on the worker of the pub/sub connection, when it has
 * subscribed (up: its first confirmation after a connect) and when it is
 * lost or an attempt to make it failed (down; said again at each failed
 * attempt). One per handle; before flare_app_run. 0 or FLARE_ESTATE. */
typedef void (*flare__redis_sub_state_fn)(bool up, void *ud);
int flare__redis_sub_state(flare_redis_t *r, flare__redis_sub_state_fn fn, void *ud);

#endif
