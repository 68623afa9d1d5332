/* What the rate limiter's two stores share (ratelimit.c: in memory;
 * ratelimit_redis.c: in Redis). */
#ifndef FLARE_WEB_RATELIMIT_INT_H
#define FLARE_WEB_RATELIMIT_INT_H

#include "flare/middleware.h"

/* The bucket size cfg asks for: burst, or one second's worth of requests
 * (at least one). */
double flare__ratelimit_burst(const flare_ratelimit_config_t *cfg);

/* The answer past the limit: 429, Retry-After: wait seconds (at least 1),
 * a text body. What flare_res_send returns. */
int flare__ratelimit_deny(flare_res_t *res, uint64_t wait);

/* flare_ratelimit with cfg->redis set (cfg checked: rate positive): the
 * middleware into *out, its state owned by app. 0, FLARE_EINVAL,
 * FLARE_ENOMEM. */
int flare__ratelimit_redis(flare_app_t *app, const flare_ratelimit_config_t *cfg,
                           flare_middleware_t *out);

#endif
