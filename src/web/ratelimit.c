/* Token-bucket rate limiting per client address, in memory (the Redis
 * store, shared by several instances, is ratelimit_redis.c).
 *
 * One table for the whole app, so a client spread over several workers (by
 * SO_REUSEPORT) still gets one budget. It is split into 64 shards, each a
 * small open-addressing table behind its own mutex held for a few dozen
 * instructions: the one lock on the request path, paid only by routes that
 * use this middleware. When a shard is full, the least recently seen entry
 * of the probe window is replaced. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "flare/middleware.h"
#include "app_svc.h"
#include "web/ratelimit_int.h"

#define SHARDS      64
#define PROBE       8
#define MAX_CLIENTS (1u << 24) /* tables of 64 x 512 Ki buckets at most (~1.3 GB) */

typedef struct bucket {
    uint8_t addr[16];
    uint8_t used;
    double tokens;
    uint64_t last_ns;
} bucket_t;

typedef struct shard {
    pthread_mutex_t mu;
    bucket_t *slots;
    size_t mask;
    char pad[64];
} shard_t;

typedef struct rl {
    double rate;
    double burst;
    shard_t shards[SHARDS];
} rl_t;

static void rl_free(void *p)
{
    rl_t *r = p;
    for (int i = 0; i < SHARDS; i++) {
        pthread_mutex_destroy(&r->shards[i].mu);
        free(r->shards[i].slots);
    }
    free(r);
}

static uint64_t hash16(const uint8_t a[16])
{
    uint64_t x, y;
    memcpy(&x, a, 8);
    memcpy(&y, a + 8, 8);
    uint64_t h = (x ^ (y * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Returns 0 when allowed, else the seconds to wait. */
static unsigned take(rl_t *r, const uint8_t addr[16])
{
    uint64_t h = hash16(addr);
    shard_t *s = &r->shards[h % SHARDS];
    uint64_t now = mono_ns();
    unsigned wait = 0;
    pthread_mutex_lock(&s->mu);
    size_t i = (size_t)(h / SHARDS) & s->mask, victim = i;
    bucket_t *b = NULL;
    for (size_t k = 0; k < PROBE; k++) {
        bucket_t *x = &s->slots[(i + k) & s->mask];
        if (x->used && memcmp(x->addr, addr, 16) == 0) {
            b = x;
            break;
        }
        if (!x->used) {
            victim = (i + k) & s->mask;
            break;
        }
        if (x->last_ns < s->slots[victim].last_ns)
            victim = (i + k) & s->mask;
    }
    if (b == NULL) {
        b = &s->slots[victim];
        memcpy(b->addr, addr, 16);
        b->used = 1;
        b->tokens = r->burst;
        b->last_ns = now;
    }
    double elapsed = (double)(now - b->last_ns) / 1e9;
    b->tokens = fmin(r->burst, b->tokens + elapsed * r->rate);
    b->last_ns = now;
    if (b->tokens >= 1.0)
        b->tokens -= 1.0;
    else
        wait = (unsigned)ceil((1.0 - b->tokens) / r->rate);
    pthread_mutex_unlock(&s->mu);
    return wait;
}

int flare__ratelimit_deny(flare_res_t *res, uint64_t wait)
{
    char v[24];
    size_t n = flare__u64toa(v, wait == 0 ? 1 : wait);
    flare_res_header(res, FLARE_STR("Retry-After"), (flare_str_t){ v, n });
    return flare_res_send(res, 429, FLARE_STR("text/plain"),
                          FLARE_STR("rate limit exceeded: retry later\n"));
}

double flare__ratelimit_burst(const flare_ratelimit_config_t *cfg)
{
    /* default: one second's worth of requests, at least one */
    return cfg->burst != 0 ? cfg->burst : fmax(1.0, ceil(cfg->rate));
}

static int rl_before(flare_req_t *req, flare_res_t *res, void *ud)
{
    uint8_t addr[16] = { 0 };
    flare_req_peer_raw(req, addr);
    unsigned wait = take(ud, addr);
    if (wait == 0)
        return 0;
    return flare__ratelimit_deny(res, wait);
}

int flare_ratelimit(flare_app_t *app, const flare_ratelimit_config_t *cfg, flare_middleware_t *out)
{
    if (app == NULL || cfg == NULL || out == NULL)
        return FLARE_EINVAL;
    memset(out, 0, sizeof(*out));
    if (!(cfg->rate > 0)) /* NaN too */
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_ratelimit_config_t.rate: %g is not a positive rate", cfg->rate);
    if (cfg->max_clients > MAX_CLIENTS)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_ratelimit_config_t.max_clients: %u is more than %u",
                           cfg->max_clients, MAX_CLIENTS);
    if (cfg->redis != NULL)
        return flare__ratelimit_redis(app, cfg, out);
    rl_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return FLARE_ENOMEM;
    r->rate = cfg->rate;
    r->burst = flare__ratelimit_burst(cfg);
    size_t per = (cfg->max_clients != 0 ? cfg->max_clients : 65536) / SHARDS + 1, cap = PROBE;
    while (cap < per)
        cap *= 2;
    for (int i = 0; i < SHARDS; i++) {
        pthread_mutex_init(&r->shards[i].mu, NULL);
        r->shards[i].mask = cap - 1;
        r->shards[i].slots = calloc(cap, sizeof(bucket_t));
        if (r->shards[i].slots == NULL) {
            rl_free(r);
            return FLARE_ENOMEM;
        }
    }
    int rc = flare__app_own(app, r, rl_free);
    if (rc != 0)
        return rc;
    *out = (flare_middleware_t){ "ratelimit", rl_before, NULL, r };
    return 0;
}
