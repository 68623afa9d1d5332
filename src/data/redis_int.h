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

#endif
