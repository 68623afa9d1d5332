/* The rate limiter's Redis store (flare_ratelimit_config_t.redis): the
 * token bucket of ratelimit.c kept in Redis, so every instance that uses
 * the same Redis and key prefix enforces one limit per client.
 *
 * One round trip per decision: EVALSHA of the script below with the
 * bucket's key, the rate and the burst. The script reads the bucket,
 * refills it by the time passed on Redis's own clock (TIME: the instances'
 * clocks never enter), takes a token or answers the seconds to wait, and
 * writes the bucket back with an expiry at the moment it would be full
 * again: a full bucket and no bucket are the same state, so an idle
 * client's key goes away exactly when it stops mattering. A script runs
 * atomically, so instances deciding for one client at once see each
 * other's writes. A refused request writes nothing (the refill is linear
 * below the cap, so skipping the write changes no later decision).
 * NOSCRIPT (Redis restarted, flushed, or new): the same call once more as
 * EVAL, which also caches the script for the next EVALSHA.
 *
 * The request waits for the answer (the before hook returns FLARE_ASYNC;
 * the callback resumes the chain or answers 429); the decision's record
 * lives in the request's arena, so a decision allocates nothing of its
 * own. When Redis cannot decide (down, a timeout, an error reply) the
 * request goes through (fail open, the default) or gets 503 (fail_closed);
 * either way it waited at most the handle's command_timeout_ms (a Redis
 * that is down fails at once, see flare/redis.h). Errors are counted per
 * worker (flare_ratelimit_decisions_total{result="error"}) and logged when
 * a worker's store starts failing and when it answers again, not per
 * request. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/evp.h>

#include "core/core.h"
#include "flare/redis.h"
#include "module.h"
#include "web/ratelimit_int.h"

#define PREFIX_DEFAULT "flare:rl:"
#define PREFIX_MAX     200

/* KEYS[1] the bucket; ARGV[1] the rate (tokens a second), ARGV[2] the
 * burst. Returns 0 (a token taken) or the seconds to wait (>= 1). The
 * bucket is a hash: tokens left, and when (Redis microseconds) it was
 * last refilled. Numbers go back to Redis through %.17g (exact for a
 * double) and the expiry through %.0f (never an exponent). */
static const char script[] =
    "local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])\n"
    "local t = redis.call('TIME')\n"
    "local now = t[1] * 1000000 + t[2]\n"
    "local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')\n"
    "local tokens, ts = tonumber(b[1]), tonumber(b[2])\n"
    "if tokens == nil or ts == nil then\n"
    "  tokens, ts = burst, now\n"
    "elseif now > ts then\n"
    "  tokens = math.min(burst, tokens + (now - ts) * rate / 1000000)\n"
    "  ts = now\n"
    "end\n"
    "if tokens < 1 then\n"
    "  return math.ceil((1 - tokens) / rate)\n"
    "end\n"
    "tokens = tokens - 1\n"
    "redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens),\n"
    "           'ts', string.format('%.17g', ts))\n"
    "redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.ceil((burst - tokens) / rate * "
    "1000)))\n"
    "return 0\n";

/* One worker's figures: written by that worker only (relaxed load and
 * store, no locked instruction), summed at scrape. */
typedef struct wstat {
    _Atomic uint64_t allowed, limited, errors;
    bool failing; /* the last decision was an error: logged once */
    char pad[64];
} wstat_t;

typedef struct rrl {
    struct rrl *next; /* the app's Redis limiters, for the metrics */
    flare_redis_t *redis;
    bool fail_closed;
    unsigned nworkers;
    wstat_t *st;
    char sha[40];
    char rate[32], burst[24];
    flare_str_t rate_s, burst_s;
    size_t plen;
    char prefix[];
} rrl_t;

typedef struct rl_app {
    rrl_t *list;
} rl_app_t;

/* A decision in flight: in the request's arena, valid until the response
 * completes (the exchange is kept while the chain is paused, also when the
 * client leaves). */
typedef struct op {
    rrl_t *rl;
    flare_req_t *req;
    flare_res_t *res;
    flare_str_t key;
    bool eval; /* NOSCRIPT came back: sent again as EVAL */
} op_t;

static void rl_app_free(flare_app_t *app, void *state)
{
    (void)app;
    rl_app_t *ra = state;
    while (ra->list != NULL) {
        rrl_t *r = ra->list;
        ra->list = r->next;
        free(r->st);
        free(r);
    }
    free(ra);
}

static const flare_module_t rl_module = { "ratelimit", NULL, NULL, NULL, rl_app_free };

static inline void stat_add(_Atomic uint64_t *v)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

static wstat_t *wstat(const op_t *op)
{
    unsigned id = flare_worker_id(flare_req_worker(op->req));
    return id < op->rl->nworkers ? &op->rl->st[id] : NULL;
}

static int issue(op_t *op);

static void store_ok(op_t *op)
{
    wstat_t *st = wstat(op);
    if (st != NULL && st->failing) {
        st->failing = false;
        flare_log(flare_req_worker(op->req), FLARE_LOG_WARN,
                  "ratelimit: the Redis store (keys %s*) decides again", op->rl->prefix);
    }
}

/* Redis could not decide: counted, logged when it starts, and the request
 * let through (returns 0: the chain goes on) or answered 503. */
static int store_failed(op_t *op, int err, flare_str_t why)
{
    wstat_t *st = wstat(op);
    rrl_t *rl = op->rl;
    if (st != NULL) {
        stat_add(&st->errors);
        if (!st->failing) {
            st->failing = true;
            if (why.len > 200)
                why.len = 200;
            flare_log(flare_req_worker(op->req), FLARE_LOG_WARN,
                      "ratelimit: the Redis store (keys %s*) cannot decide: %s%s%.*s; failing "
                      "%s until it answers",
                      rl->prefix, flare_strerror(err), why.len != 0 ? ": " : "", (int)why.len,
                      why.ptr != NULL ? why.ptr : "",
                      rl->fail_closed ? "closed (503)" : "open (requests let through)");
        }
    }
    if (!rl->fail_closed)
        return 0;
    flare_res_header(op->res, FLARE_STR("Retry-After"), FLARE_STR("1"));
    return flare_res_send(op->res, 503, FLARE_STR("text/plain"),
                          FLARE_STR("rate limit unavailable: retry later\n"));
}

static void got(int err, const flare_redis_reply_t *rep, void *ud)
{
    op_t *op = ud;
    flare_str_t why = FLARE_STR_NULL;
    if (err == 0 && rep->type == FLARE_REDIS_INT) {
        wstat_t *st = wstat(op);
        store_ok(op);
        if (rep->integer <= 0) {
            if (st != NULL)
                stat_add(&st->allowed);
            flare_next(op->req); /* op may be gone after this */
        } else {
            if (st != NULL)
                stat_add(&st->limited);
            flare__ratelimit_deny(op->res, (uint64_t)rep->integer);
        }
        return;
    }
    if (err == 0) {
        if (rep->type == FLARE_REDIS_ERROR && !op->eval && rep->str.len >= 8 &&
            memcmp(rep->str.ptr, "NOSCRIPT", 8) == 0) {
            op->eval = true;
            if ((err = issue(op)) == 0)
                return;
        } else {
            err = FLARE_EUNAVAIL; /* an error reply (OOM, READONLY...) or not a number */
            why = rep->type == FLARE_REDIS_ERROR ? rep->str : FLARE_STR("unexpected reply");
        }
    }
    /* read before: a 503 sent to a client that left frees the exchange, op with it */
    bool closed = op->rl->fail_closed;
    flare_req_t *req = op->req;
    store_failed(op, err, why);
    if (!closed)
        flare_next(req);
}

static int issue(op_t *op)
{
    rrl_t *rl = op->rl;
    flare_str_t args[] = {
        op->eval ? FLARE_STR("EVAL") : FLARE_STR("EVALSHA"),
        op->eval ? (flare_str_t){ script, sizeof(script) - 1 } : (flare_str_t){ rl->sha, 40 },
        FLARE_STR("1"),
        op->key,
        rl->rate_s,
        rl->burst_s,
    };
    return flare_redis_cmd_str(rl->redis, flare_req_worker(op->req), args, 6, got, op);
}

/* The client's address as text into out (ADDR_TEXT_MAX bytes at most),
 * its length returned: IPv4 dotted, IPv6 as eight groups of lower-case hex
 * without leading zeros, "::" never used (2001:db8:0:0:0:0:0:1). Not
 * inet_ntop: glibc formats with sprintf, 1,670 of the 11,300 instructions
 * a decision took. */
#define ADDR_TEXT_MAX 40
static size_t addr_text(int fam, const uint8_t a[16], char *out)
{
    char *p = out;
    if (fam == AF_INET) {
        for (int i = 0; i < 4; i++) {
            unsigned v = a[i];
            if (v >= 100)
                *p++ = (char)('0' + v / 100);
            if (v >= 10)
                *p++ = (char)('0' + v / 10 % 10);
            *p++ = (char)('0' + v % 10);
            *p++ = '.';
        }
    } else {
        static const char hex[] = "0123456789abcdef";
        for (int i = 0; i < 16; i += 2) {
            unsigned v = (unsigned)a[i] << 8 | a[i + 1];
            bool lead = true;
            for (int shift = 12; shift >= 0; shift -= 4) {
                unsigned d = v >> shift & 15;
                if (d == 0 && lead && shift != 0)
                    continue;
                lead = false;
                *p++ = hex[d];
            }
            *p++ = ':';
        }
    }
    return (size_t)(p - out) - 1; /* the last separator */
}

static int rrl_before(flare_req_t *req, flare_res_t *res, void *ud)
{
    rrl_t *rl = ud;
    op_t *op = flare_req_alloc(req, sizeof(*op) + rl->plen + ADDR_TEXT_MAX);
    if (op == NULL)
        return FLARE_ENOMEM;
    char *key = (char *)(op + 1);
    memcpy(key, rl->prefix, rl->plen);
    uint8_t a[16];
    int fam = flare_req_peer_raw(req, a);
    size_t n;
    if (fam == AF_INET || fam == AF_INET6) {
        n = addr_text(fam, a, key + rl->plen);
    } else { /* a unix socket's clients are one client, as in memory (and one that has
                gone, whose answer nobody reads) */
        memcpy(key + rl->plen, "unix:", 5);
        n = 5;
    }
    *op = (op_t){ rl, req, res, { key, rl->plen + n }, false };
    int rc = issue(op);
    if (rc == 0)
        return FLARE_ASYNC;
    /* refused at once (the worker is stopping, out of memory) */
    return store_failed(op, rc, FLARE_STR_NULL);
}

static void collect(flare_metrics_writer_t *mw, void *ud)
{
    rl_app_t *ra = ud;
    flare_metrics_family(mw, "flare_ratelimit_decisions_total", "counter",
                         "Rate-limit decisions made in Redis, by outcome (error: Redis could not "
                         "decide, the request went through or got 503 as configured)");
    for (const rrl_t *r = ra->list; r != NULL; r = r->next) {
        uint64_t v[3] = { 0, 0, 0 };
        for (unsigned i = 0; i < r->nworkers; i++) {
            v[0] += atomic_load_explicit(&r->st[i].allowed, memory_order_relaxed);
            v[1] += atomic_load_explicit(&r->st[i].limited, memory_order_relaxed);
            v[2] += atomic_load_explicit(&r->st[i].errors, memory_order_relaxed);
        }
        static const char *const results[] = { "allowed", "limited", "error" };
        for (int k = 0; k < 3; k++) {
            const char *labels[] = { "prefix", r->prefix, "result", results[k], NULL };
            flare_metrics_sample(mw, "flare_ratelimit_decisions_total", labels, (double)v[k]);
        }
    }
}

/* The app's list of Redis limiters, made (with the metrics collector) on
 * the first one. */
static rl_app_t *rl_app(flare_app_t *app)
{
    rl_app_t *ra = flare__app_module_state(app, &rl_module);
    if (ra != NULL)
        return ra;
    if ((ra = calloc(1, sizeof(*ra))) == NULL)
        return NULL;
    unsigned slot;
    if (flare__app_module(app, &rl_module, ra, &slot) != 0) {
        free(ra);
        return NULL;
    }
    /* at scrape only: no cost per request, and none without a scraper */
    if (flare_metrics_collector(app, collect, ra) != 0)
        return NULL; /* ra stays with the module, freed with the app */
    return ra;
}

static void sha1_hex(const char *s, size_t n, char out[40])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    static const char hex[] = "0123456789abcdef";
    memset(out, '0', 40);
    if (EVP_Digest(s, n, md, &mdlen, EVP_sha1(), NULL) != 1 || mdlen != 20)
        return; /* a SHA that matches nothing: NOSCRIPT, then EVAL */
    for (unsigned i = 0; i < 20; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
}

int flare__ratelimit_redis(flare_app_t *app, const flare_ratelimit_config_t *cfg,
                           flare_middleware_t *out)
{
    const char *prefix = cfg->redis_prefix != NULL ? cfg->redis_prefix : PREFIX_DEFAULT;
    size_t plen = strlen(prefix);
    if (plen > PREFIX_MAX)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_ratelimit_config_t.redis_prefix: %zu bytes, more than %d", plen,
                           PREFIX_MAX);
    if (flare__app_running(app))
        return flare__fail(FLARE_ESTATE, 0, "flare_ratelimit: the app is running");
    rl_app_t *ra = rl_app(app);
    if (ra == NULL)
        return FLARE_ENOMEM;
    rrl_t *r = calloc(1, sizeof(*r) + plen + 1);
    unsigned nw = flare_app_workers(app);
    if (r == NULL || (r->st = calloc(nw != 0 ? nw : 1, sizeof(wstat_t))) == NULL) {
        free(r);
        return FLARE_ENOMEM;
    }
    r->redis = cfg->redis;
    r->fail_closed = cfg->fail_closed;
    r->nworkers = nw;
    sha1_hex(script, sizeof(script) - 1, r->sha);
    /* the arguments as text once, not per request */
    int n = snprintf(r->rate, sizeof(r->rate), "%.17g", cfg->rate);
    r->rate_s = (flare_str_t){ r->rate, (size_t)n };
    n = snprintf(r->burst, sizeof(r->burst), "%.17g", flare__ratelimit_burst(cfg));
    r->burst_s = (flare_str_t){ r->burst, (size_t)n };
    r->plen = plen;
    memcpy(r->prefix, prefix, plen + 1);
    r->next = ra->list;
    ra->list = r;
    *out = (flare_middleware_t){ "ratelimit", rrl_before, NULL, r };
    return 0;
}
