/* The app and its workers: what app.c (the app object), listeners.c,
 * worker.c and run.c (the lifecycle) wire together (the listeners, the
 * module table, the job pool) and what every layer reaches through a
 * worker (its loop, buffer pool, recycled exchanges). */
#ifndef FLARE_APP_H
#define FLARE_APP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "core/clock.h"
#include "core/core.h"
#include "flare/flare.h"
#include "http/exchange.h"
#include "loop/loop.h"
#include "module.h"
#include "mw/chain.h"
#include "net/listen.h"
#include "net/stream.h"
#include "net/tls.h"
#include "router/router.h"

typedef struct flare_conn flare_conn_t;

typedef struct flare_job_pool flare_job_pool_t;

typedef struct flare_owned {
    struct flare_owned *next;
    void *ptr;
    void (*free_fn)(void *ptr);
} flare_owned_t;

/* Hands ptr to the app: free_fn(ptr) runs in flare_app_free. On failure
 * (out of memory) free_fn(ptr) runs at once and FLARE_ENOMEM is returned. */
int flare__app_own(flare_app_t *app, void *ptr, void (*free_fn)(void *ptr));

struct flare_app {
    flare_config_t cfg;
    flare_http_limits_t limits;
    flare_router_t *router;
    flare_route_t **routes; /* owned route records */
    size_t nroutes, caproutes;
    struct flare_group *groups;
    struct flare_worker *workers; /* made by the first run, freed with the app */
    unsigned nworkers;
    flare_listener_t *listeners; /* added by flare_app_listen (owned) */
    unsigned nlisteners;
    flare_listener_t run_listener; /* the address flare_app_run was given */
    bool has_admin;                /* one of listeners is an admin listener */
    _Atomic bool run_addr_used;    /* this run has it (listener 0) */
    flare_listener_t **active;     /* this run's listeners, run_listener first if used */
    unsigned nactive;
    _Atomic int port;     /* 0 until the listeners of the current run are bound */
    _Atomic bool running; /* flare_app_run is between its start and its return */
    /* set (relaxed) before the drain is posted to the workers: a stop or an
     * upgrade's hand-over has begun */
    _Atomic bool stopping;
    /* Other threads reach the workers only through flare__app_enter/leave:
     * the top bit says the workers are up (from the moment every worker has
     * started until all of them have been joined), the rest counts callers
     * inside. Closing it waits for them to leave before anything is freed. */
    _Atomic uint64_t gate;
    int stop_fd; /* eventfd, from flare_app_new to flare_app_free: stop -> run */
    flare_job_pool_t *jobs;
    flare_mw_list_t mws; /* app-level middlewares (also the chain of unmatched requests) */
    bool mws_have_after;
    char **mw_names; /* by middleware id */
    /* the modules (module.h: WebSocket, ...) in registration order, with
     * their app-wide state; written only while the app is not running */
    struct flare_module_reg {
        const flare_module_t *m;
        void *state;
    } modules[FLARE__MODULES_MAX];
    unsigned nmodules;
    struct flare_owned *owned; /* objects freed with the app (middleware state) */
    unsigned nmw;
    /* flare_app_on_reload: run on SIGHUP by the thread in flare_app_run,
     * in registration order; written only while the app is not running */
    struct flare_reload_hook *reload_hooks; /* defined in app.c */
    struct flare_reload_hook **reload_tail;
};

struct flare_worker {
    /* set once, when the app first runs, and kept until flare_app_free: a
     * worker pointer held by another thread stays readable (its calls
     * then fail with FLARE_ESTATE instead of touching freed memory) */
    flare_app_t *app;
    unsigned id;
    flare_mw_stat_t *mw_stats;         /* app->nmw entries, counted since the app was made */
    flare_tls_counters_t tls_counters; /* since the app was made */
    /* everything from here on is reset for each run */
    flare_loop_t loop;
    pthread_t thread;
    flare__timer_t sweep_timer;  /* timeouts, Date line, drain progress */
    flare__timer_t resume_timer; /* listener paused by the EMFILE guard */
    flare_post_node_t stop_node; /* the drain request: posting it cannot fail */
    flare_listen_io_t *lios;     /* its listening sockets (net/listen.c: flare__worker_listen) */
    unsigned nlios;
    int reserve_fd; /* EMFILE guard */
    unsigned nconns;
    bool draining;
    uint64_t drain_deadline;
    flare_conn_t *conns;        /* all live connections (sweep list) */
    flare_conn_t *dead;         /* closed this iteration, freed after the batch */
    flare_bufpool_t pool;       /* free FLARE_CONN_BUF-byte buffers */
    struct flare_req *free_ex;  /* recycled exchanges */
    struct flare_h2_mem *h2mem; /* HTTP/2 sessions' blocks (http2/mem.c) */
    /* exchanges whose connection closed while a handler still owed the
     * response (linked by next/oprev): the handler's late send frees one;
     * those never completed are freed at worker shutdown, since the timers
     * that would have completed them are cancelled then, not fired */
    struct flare_req *orphans;
    unsigned nfree_ex;
    size_t trimmed; /* bytes the sweeps freed since malloc last gave pages back */
    time_t date_sec;
    char date_line[FLARE_DATE_LINE_LEN];
    /* connections a module holds (flare__worker_conn_hold: an upgraded
     * WebSocket...): draining waits for them too */
    unsigned nmodule_conns;
    unsigned nmodules_up; /* modules whose init_worker ran this run (dispose is owed) */
    void *module_state[FLARE__MODULES_MAX]; /* by module slot */
    /* public handles (src/watch.c): every live one, for shutdown to free */
    struct flare_timer *utimers;
    struct flare_watch *watches;
    struct flare_watch *dead_watches; /* freed after the event batch */
    bool handles_open;                /* the loop runs: handles can be made */
    /* systemd's watchdog (upgrade.c): the run thread posts ping_node and
     * counts; the worker counts what it ran. Every WATCHDOG_USEC/2, not per
     * request: no cache line of its own. */
    flare_post_node_t ping_node;
    unsigned long ping_posted;        /* run thread only */
    _Atomic unsigned long ping_acked; /* written by the worker only */
    /* src/obs/metrics.c: this worker's counting block, NULL when counting
     * is off (the request path's hooks test only this) */
    struct flare_metrics_w *metrics;
    /* "exchange finished" observer (the access log): called by the response
     * API on the worker when a complete response is handed to the protocol
     * (status, body bytes), before it is queued; NULL when nothing is
     * installed, which is all the plain path pays (a test where the exchange
     * is taken, src/http/exchange.c, and one where it is answered,
     * src/http/response.c). A module sets it in init_worker and clears it in
     * dispose_worker. */
    void (*ex_done)(void *ud, struct flare_req *ex, int status, uint64_t bytes);
    void *ex_done_ud;
};

/* worker.c: the worker whose thread this is, NULL on every other thread (set
 * once when the worker's thread starts, cleared when it ends: no cost per
 * request). An API documented "call on w's thread" compares it with w to
 * refuse a call from elsewhere instead of touching that worker's state
 * from a thread it does not own. */
extern _Thread_local flare_worker_t *flare__worker_self;

/* run.c: the window in which other threads may reach the workers (see
 * flare_app_t.gate). enter: 0, or FLARE_ESTATE when the workers are not up
 * (not started yet, or stopped); every 0 is paired with one leave. */
int flare__app_enter(flare_app_t *app);
void flare__app_leave(flare_app_t *app);

/* config.c: *out = *in (NULL: the defaults) with every zero field set to
 * its default, then checked. 0, or FLARE_EINVAL with flare_last_error()
 * naming the field and its bound. */
int flare__config_resolve(flare_config_t *out, const flare_config_t *in);

/* src/watch.c: frees the watchers freed during this batch; at shutdown,
 * stops and frees every timer and watcher their owner left (no callback)
 * and refuses new ones. */
void flare__watch_free_dead(flare_worker_t *w);
void flare__handles_dispose(flare_worker_t *w);
/* A stopped worker's exchanges (orphaned ones completed), HTTP/2 block
 * lists and buffers: after its connections and loop are gone. */
void flare__worker_free_memory(flare_worker_t *w);

static inline void flare__worker_update_date(flare_worker_t *w, time_t now)
{
    if (now != w->date_sec) {
        w->date_sec = now;
        flare__format_date_line(w->date_line, now);
    }
}

/* job pool */
int flare__jobs_start(flare_app_t *app);
void flare__jobs_stop(flare_app_t *app);
/* jobs waiting for a thread (metrics), on a worker while the pool runs */
size_t flare__jobs_queued(flare_app_t *app);

#endif
