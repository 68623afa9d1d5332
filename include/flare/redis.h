/* Redis on the worker loops (hiredis's asynchronous API, bound to each
 * worker's event loop by Flare's own adapter: the socket is a flare_watch,
 * the timeouts a flare_timer; see docs/redis.md).
 *
 *     flare_redis_t *r;
 *     flare_redis_open(app, "redis://127.0.0.1:6379/0", NULL, &r);
 *     ...
 *     static void got(int err, const flare_redis_reply_t *rep, void *ud)
 *     {
 *         flare_res_t *res = ud;
 *         if (err != 0) {                       // FLARE_EUNAVAIL, FLARE_ETIMEDOUT
 *             flare_res_send(res, 503, FLARE_STR("text/plain"), FLARE_STR("redis down\n"));
 *             return;
 *         }
 *         if (rep->type == FLARE_REDIS_STRING)
 *             flare_res_send(res, 200, FLARE_STR("text/plain"), rep->str);
 *         else
 *             flare_res_send(res, 404, FLARE_STR("text/plain"), FLARE_STR("no such key\n"));
 *     }
 *     static int h_get(flare_req_t *req, flare_res_t *res, void *ud)
 *     {
 *         flare_str_t args[] = { FLARE_STR("GET"), flare_req_param(req, "key") };
 *         int rc = flare_redis_cmd_str(ud, flare_req_worker(req), args, 2, got, res);
 *         return rc == 0 ? FLARE_ASYNC : rc;
 *     }
 *
 * Threads: a flare_redis_t is opened once per app, before flare_app_run,
 * and lives until flare_app_free. Each worker has its own connections
 * (cfg.conns, one by default): commands are issued on a worker's thread,
 * for that worker, and their callbacks run on that same thread. Nothing is
 * shared between workers on the command path.
 *
 * Pipelining: every command is written at once; any number may be in
 * flight on one connection (up to cfg.max_in_flight), and their replies
 * come back in order.
 *
 * Callbacks: when a command call returns 0, its callback runs exactly once,
 * later, on the same worker, never from inside the call: with the reply
 * (err 0), or with an error and no reply:
 *   FLARE_EUNAVAIL  no connection could take it (Redis is down or being
 *                   reconnected to, max_in_flight reached), the connection
 *                   was lost before the reply came, or the worker is
 *                   shutting down;
 *   FLARE_ETIMEDOUT no reply within cfg.command_timeout_ms.
 * A reply from the server that is an error ("WRONGTYPE ...") is not an err:
 * it comes with err 0 as a reply of type FLARE_REDIS_ERROR. A non-zero
 * return from a command call means the callback will not run.
 *
 * Reconnecting: a connection lost (or never made) is made again after a
 * delay that starts at reconnect_min_ms and doubles up to reconnect_max_ms
 * while attempts fail; meanwhile commands fail at once (FLARE_EUNAVAIL),
 * they are not queued. A command that times out drops its connection (a
 * reply may never come, and every command behind it would wait for it:
 * Redis answers in order); the commands in flight behind it fail with
 * FLARE_ETIMEDOUT too (whether they ran is unknown) and the connection is
 * made again at once.
 *
 * Names: no name resolution happens on a worker. A numeric host
 * (127.0.0.1, [::1]) is connected to directly; a host name is resolved on
 * the job pool (flare_worker_job) before each connection attempt. */
#ifndef FLARE_REDIS_H
#define FLARE_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/flare.h"
#include "flare/session.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Redis opened for the app's workers (opaque; the app owns it). */
typedef struct flare_redis flare_redis_t;

/* ---- opening ---------------------------------------------------------------- */

/* Zero fields mean their default (in brackets); values past the bound after
 * "<=" are refused by flare_redis_open with FLARE_EINVAL. */
typedef struct flare_redis_config {
    unsigned conns;              /* connections per worker [1], <= 64 */
    unsigned max_in_flight;      /* commands awaiting a reply per connection [65536], <= 1 Mi */
    unsigned command_timeout_ms; /* [5000], <= INT_MAX */
    unsigned connect_timeout_ms; /* [2000], <= INT_MAX */
    unsigned reconnect_min_ms;   /* first retry after a failure [100], <= INT_MAX */
    unsigned reconnect_max_ms;   /* the doubling stops there [5000], <= INT_MAX */
} flare_redis_config_t;

/* Opens Redis for every worker of app, from a URL (url):
 *   redis://HOST:PORT[/DB]        PORT defaults to 6379, DB to 0
 *   redis://:PASSWORD@HOST:PORT   AUTH PASSWORD on each connection
 *   redis://USER:PASSWORD@...     AUTH USER PASSWORD (Redis 6 ACLs)
 * HOST is an IPv4 address, [IPv6] or a name (resolved on the job pool).
 * cfg may be NULL (all defaults); it is copied. Before flare_app_run (or
 * between runs) only. The connections are made as the workers start (and
 * remade whenever lost), so an unreachable server does not fail the open:
 * commands fail with FLARE_EUNAVAIL until it is reachable.
 * The app owns the handle: it is closed by flare_app_free. *out is set on
 * success. 0, or FLARE_EINVAL (NULL argument, bad URL or config value;
 * flare_last_error() says which), FLARE_ESTATE (app running),
 * FLARE_ENOMEM. */
FLARE_API int flare_redis_open(flare_app_t *app, const char *url, const flare_redis_config_t *cfg,
                               flare_redis_t **out);

/* ---- replies ------------------------------------------------------------------ */

/* RESP types. The hiredis Debian ships (0.14) speaks RESP2, where Redis
 * sends maps and sets as arrays, doubles as strings and booleans as
 * integers; the RESP3 types are produced when hiredis 1.x is used. */
typedef enum flare_redis_type {
    FLARE_REDIS_NIL = 0,
    FLARE_REDIS_INT,    /* .integer */
    FLARE_REDIS_STRING, /* .str: bulk string, binary-safe */
    FLARE_REDIS_STATUS, /* .str: "OK", "PONG", "QUEUED"... */
    FLARE_REDIS_ERROR,  /* .str: "WRONGTYPE Operation against..." */
    FLARE_REDIS_ARRAY,  /* .elem[0 .. n) */
    FLARE_REDIS_MAP,    /* .elem[0 .. n): key, value, key, value... (n even) */
    FLARE_REDIS_SET,    /* .elem[0 .. n) */
    FLARE_REDIS_PUSH,   /* .elem[0 .. n) */
    FLARE_REDIS_DOUBLE, /* .dval, and .str as sent */
    FLARE_REDIS_BOOL,   /* .integer 0 or 1 */
    FLARE_REDIS_BIGNUM, /* .str: the digits */
    FLARE_REDIS_VERB,   /* .str: verbatim string (the "txt:" prefix removed) */
} flare_redis_type_t;

/* A reply as a typed tree: an open struct, valid only during the callback
 * it is given to (copy what you keep). Fields that do not apply to .type are
 * zero (.str {NULL, 0}, .elem NULL). */
typedef struct flare_redis_reply {
    flare_redis_type_t type;              /* which fields apply (flare_redis_type_t says) */
    int64_t integer;                      /* INT; BOOL: 0 or 1 */
    double dval;                          /* DOUBLE */
    flare_str_t str;                      /* STRING, STATUS, ERROR, DOUBLE, BIGNUM, VERB */
    size_t n;                             /* ARRAY, MAP, SET, PUSH: entries in elem[] */
    const struct flare_redis_reply *elem; /* ARRAY, MAP, SET, PUSH: the elements */
} flare_redis_reply_t;

/* err 0 and reply non-NULL, or err FLARE_EUNAVAIL / FLARE_ETIMEDOUT and
 * reply NULL (see the top of this file). */
typedef void (*flare_redis_fn)(int err, const flare_redis_reply_t *reply, void *ud);

/* The name of type t ("nil", "int", "string", ...), static. */
FLARE_API const char *flare_redis_type_name(flare_redis_type_t t);

/* ---- commands ------------------------------------------------------------------ */

/* Sends the command argv[0 .. argc) on one of worker w's connections, then
 * cb(err, reply, ud) on w. Arguments are binary-safe: argv[i] is argvlen[i]
 * bytes (may hold NUL, CR, LF); argvlen NULL means every argv[i] is a
 * NUL-terminated string. Nothing is formatted with printf. The arguments
 * are copied during the call. Call on w's thread (a handler: w =
 * flare_req_worker(req)). 0 (cb will run), or FLARE_EINVAL (NULL r, w, cb
 * or argv, argc < 1, called on another thread than w's), FLARE_ESTATE (w
 * not running, or shutting down), FLARE_ENOMEM. Redis being down is not an
 * error here: cb gets FLARE_EUNAVAIL. (P)SUBSCRIBE and MONITOR are refused
 * (FLARE_EINVAL): use flare_redis_subscribe. */
FLARE_API int flare_redis_cmd(flare_redis_t *r, flare_worker_t *w, int argc,
                              const char *const *argv, const size_t *argvlen, flare_redis_fn cb,
                              void *ud);

/* The same (on worker w, then cb(err, reply, ud)) with flare_str_t
 * arguments: args[0 .. nargs), nargs <= 4096. */
FLARE_API int flare_redis_cmd_str(flare_redis_t *r, flare_worker_t *w, const flare_str_t *args,
                                  size_t nargs, flare_redis_fn cb, void *ud);

/* ---- pub/sub ------------------------------------------------------------------- */

/* A message: pattern is {NULL, 0} for a plain SUBSCRIBE. Views valid during
 * the call. */
typedef void (*flare_redis_msg_fn)(flare_str_t pattern, flare_str_t channel, flare_str_t message,
                                   void *ud);

/* Delivers every message published on `channel` (as_pattern: every channel
 * matching the glob pattern, PSUBSCRIBE) to cb on worker `worker`, over a
 * connection of that worker's own (one per worker, whatever the number of
 * subscriptions), subscribed again after every reconnect (messages
 * published while it was down are lost: that is Redis pub/sub). Before
 * flare_app_run only; channel is copied (binary-safe). 0, or FLARE_EINVAL
 * (bad argument, worker out of range), FLARE_ESTATE (running),
 * FLARE_ENOMEM. Publish with flare_redis_cmd (PUBLISH channel message). */
FLARE_API int flare_redis_subscribe(flare_redis_t *r, unsigned worker, flare_str_t channel,
                                    bool as_pattern, flare_redis_msg_fn cb, void *ud);

/* ---- statistics ----------------------------------------------------------------- */

/* A Redis handle's figures (flare_redis_stats). */
typedef struct flare_redis_stats {
    uint64_t conns_open; /* connections up now (command and pub/sub ones) */
    uint64_t in_flight;  /* commands sent and awaiting their reply now */
    uint64_t commands;   /* commands completed, whatever the outcome */
    uint64_t errors;     /* of those, with err != 0 or an error reply */
    uint64_t timeouts;   /* of those, FLARE_ETIMEDOUT */
    uint64_t rejected;   /* of those, FLARE_EUNAVAIL */
    uint64_t reconnects; /* connections made again after one was lost */
    uint64_t messages;   /* pub/sub messages delivered */
} flare_redis_stats_t;

/* Worker `worker`'s figures, into *out (UINT32_MAX: summed over all). Safe from any
 * thread (another worker's figures may be a moment old); zero before the
 * first run. 0, or FLARE_EINVAL. */
FLARE_API int flare_redis_stats(const flare_redis_t *r, unsigned worker, flare_redis_stats_t *out);

/* ---- the session store ------------------------------------------------------------ */

/* A session store (flare/session.h) on r: a session is the key
 * prefix + id (prefix NULL: "flare:sess:"), written with SET key value EX
 * ttl, read with GETEX key EX ttl (the idle time slides; Redis 6.2 or
 * later), deleted with DEL. Every call completes later on the worker, so the
 * session middleware holds the response until Redis has acknowledged a
 * save (and answers 503 when it could not). Session ids never appear in
 * errors or statistics. *out is set on success. r must outlive the store (both belong to the app:
 * fine). 0, or FLARE_EINVAL, FLARE_ENOMEM. */
FLARE_API int flare_session_redis_store(flare_redis_t *r, const char *prefix,
                                        flare_session_store_t *out);

#ifdef __cplusplus
}
#endif

#endif
