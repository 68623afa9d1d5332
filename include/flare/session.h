/* Sessions: a cookie carrying a 128-bit random id, data kept in a store.
 *
 * flare_sessions() builds the middleware. Before the handler it loads the
 * session named by the cookie (asynchronously when the store is remote:
 * the chain resumes on the same worker); after the handler it saves what
 * changed (holding the response until the store has acknowledged it) and
 * sets or clears the cookie. Handlers use flare_session_*.
 * Expiry: an idle timeout (sliding, refreshed on each load) and an
 * absolute timeout from creation; an expired session reads as empty. */
#ifndef FLARE_SESSION_H
#define FLARE_SESSION_H

#include <stdbool.h>

#include "flare/cookie.h"
#include "flare/flare.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The end of a save or a removal: rc 0, or a negative FLARE_E* code (the
 * store could not do it: Redis down, out of memory...). */
typedef void (*flare_session_done_fn)(void *ctx, int rc);

/* A store. Calls happen on the request's worker thread; a store shared by
 * workers synchronizes itself. Every call completes through its callback,
 * exactly once, either before returning (an in-memory store) or later on
 * worker w (a remote one: from a callback of its client on w's loop, or
 * through flare_worker_post), so no call ever blocks a worker.
 * - load: done(ctx, rc, data) with rc 0 and the saved bytes (valid during
 *   the call), FLARE_ENOTFOUND, or another error (the store is unreachable:
 *   the request is answered 503). A successful load refreshes the idle
 *   time-to-live to ttl_seconds.
 * - save: stores data under id for ttl_seconds, then done(ctx, rc).
 * - remove: deletes id (a missing one is not an error), then done(ctx, rc).
 * For save and remove, done may be NULL: nobody waits for the outcome
 * (then ctx is NULL too). The session middleware waits: a response that
 * saves or removes a session leaves only once the store has answered, and
 * is replaced by a 503 when it failed (see flare_sessions). */
typedef struct flare_session_store {
    /* Looks up session id, then done(ctx, rc, data) (see above). */
    void (*load)(void *self, flare_worker_t *w, flare_str_t id, unsigned ttl_seconds,
                 void (*done)(void *ctx, int rc, flare_str_t data), void *ctx);
    /* Stores data under id for ttl_seconds, then done(ctx, rc). */
    void (*save)(void *self, flare_worker_t *w, flare_str_t id, flare_str_t data,
                 unsigned ttl_seconds, flare_session_done_fn done, void *ctx);
    /* Deletes id, then done(ctx, rc). */
    void (*remove)(void *self, flare_worker_t *w, flare_str_t id, flare_session_done_fn done,
                   void *ctx);
    void (*destroy)(void *self); /* called by flare_app_free */
    void *self;                  /* given to every callback as self */
} flare_session_store_t;

/* Fills *out with the in-memory store: sharded, read-mostly locking, safe across workers.
 * max_sessions bounds memory (0: 100,000; at most 16,777,216, else
 * FLARE_EINVAL). Expired sessions are swept a few at a time by each save;
 * a save into a full shard frees an expired session or, when the ones it
 * examines (a fixed number) are all alive, the one of them closest to
 * expiry. No call does more than a fixed amount of work under a lock. */
FLARE_API int flare_session_memory_store(size_t max_sessions, flare_session_store_t *out);

/* When the session cookie carries Secure (the browser then sends it back
 * over https only). The zero value is the default. */
typedef enum flare_session_secure {
    FLARE_SESSION_SECURE_AUTO = 0,   /* on responses to requests that came over TLS
                                        (flare_req_secure), not over plain HTTP */
    FLARE_SESSION_SECURE_ALWAYS = 1, /* on every response: TLS ends at a proxy in front */
    FLARE_SESSION_SECURE_NEVER = 2   /* never (a SameSite=None cookie still gets it) */
} flare_session_secure_t;

/* Zero fields take the defaults: a zeroed struct (or NULL) is a complete
 * configuration. */
typedef struct flare_session_config {
    const char *cookie_name;       /* default "flare_sid" */
    unsigned idle_timeout;         /* seconds, default 1800 */
    unsigned absolute_timeout;     /* seconds, default 86400 */
    flare_session_secure_t secure; /* cookie Secure [AUTO: when the request came over TLS];
                                      `true` is ALWAYS */
    flare_same_site_t same_site;   /* default Lax */
    const char *path;              /* cookie Path, default "/" */
    flare_session_store_t store;   /* .load == NULL: a new in-memory store */
} flare_session_config_t;

/* Fills *out with the session middleware configured by cfg; its state (and the store) belong
 * to the app. FLARE_EINVAL for an invalid cookie name or path
 * (flare_last_error() says which).
 *
 * Saving is asynchronous and never silent: when a response changes the
 * session (set, unset, regenerate, destroy), the middleware's after hook
 * asks the store and holds the response until the store has answered. On
 * success the response goes out as the handler made it, with its
 * Set-Cookie; when the store failed (Redis down, timed out), the client
 * gets "503 session store unavailable" instead, with no cookie, so no
 * client is ever handed a session that was not stored. The same 503
 * answers a request whose session cannot be loaded. A streamed response
 * (flare_res_begin) cannot be held: its save is sent without waiting and
 * its cookie goes out with the head (a failure then only shows in the
 * store's statistics). */
FLARE_API int flare_sessions(flare_app_t *app, const flare_session_config_t *cfg,
                             flare_middleware_t *out);

/* Value of key in the request's session; .ptr == NULL when absent (or no
 * session middleware ran). Valid until the response completes. */
FLARE_API flare_str_t flare_session_get(flare_req_t *req, const char *key);
/* Sets key to value (copied). The session is created and its cookie set
 * when the response goes out. FLARE_ESTATE without the middleware,
 * FLARE_ETOOBIG when key and value together pass SIZE_MAX, FLARE_ENOMEM. */
FLARE_API int flare_session_set(flare_req_t *req, const char *key, flare_str_t value);
FLARE_API int flare_session_unset(flare_req_t *req, const char *key);
/* True when the request came with a valid, unexpired session. */
FLARE_API bool flare_session_exists(flare_req_t *req);
/* A new id for the same data, the old one deleted: call on every privilege
 * change (login) against session fixation. */
FLARE_API int flare_session_regenerate(flare_req_t *req);
/* Deletes the session and clears the cookie (logout). */
FLARE_API int flare_session_destroy(flare_req_t *req);

#ifdef __cplusplus
}
#endif
#endif
