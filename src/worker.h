/* A worker: one thread, its loop and what lives on it (connections,
 * buffer pool, recycled exchanges, timers, the modules' per-worker state),
 * and the worker services every layer calls. Only core/ and loop/ below it:
 * the layers above are named by forward declaration. worker.c runs it,
 * app.h ties the workers to their app. */
#ifndef FLARE_WORKER_H
#define FLARE_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "core/bufpool.h"
#include "core/clock.h"
#include "core/core.h"
#include "flare/flare.h"
#include "loop/loop.h"

/* Modules an app can have (module.h). */
#define FLARE__MODULES_MAX 16

typedef struct flare_conn flare_conn_t;
struct flare_req;
struct flare_h2_mem;
struct flare_listen_io;
struct flare_metrics_w;
struct flare_mw_stat;
struct flare_timer;
struct flare_watch;

/* Per-worker TLS counters (net/tls.c counts them), written only by their
 * worker (plain loads from other threads are fine for statistics: relaxed
 * atomics). */
typedef struct flare_tls_counters {
    _Atomic unsigned long long handshakes, resumed, handshake_errors, handshake_timeouts,
        plaintext_http;
} flare_tls_counters_t;

struct flare_worker {
    /* set once, when the app first runs, and kept until flare_app_free: a
     * worker pointer held by another thread stays readable (its calls
     * then fail with FLARE_ESTATE instead of touching freed memory) */
    flare_app_t *app;
    unsigned id;
    struct flare_mw_stat *mw_stats;    /* app->nmw entries, counted since the app was made */
    flare_tls_counters_t tls_counters; /* since the app was made */
    /* everything from here on is reset for each run */
    flare_loop_t loop;
    pthread_t thread;
    flare__timer_t sweep_timer;   /* timeouts, Date line, drain progress */
    flare__timer_t resume_timer;  /* listener paused by the EMFILE guard */
    flare_post_node_t stop_node;  /* the drain request: posting it cannot fail */
    struct flare_listen_io *lios; /* its listening sockets (net/listen.c: flare__worker_listen) */
    unsigned nlios;
    int reserve_fd; /* EMFILE guard */
    unsigned nconns;
    bool draining;
    uint64_t drain_deadline;
    flare_conn_t *conns;        /* all live connections (sweep list) */
    flare_conn_t *dead;         /* closed this iteration, freed after the batch */
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
    /* the exchange observers (src/http/exchange.h: the access log, the
     * metrics), NULL while none is installed, which is all the plain path
     * pays: one test per event. Modules install theirs in init_worker. */
    struct flare_ex_observers *ex_obs;
};

/* worker.c: the worker whose thread this is, NULL on every other thread (set
 * once when the worker's thread starts, cleared when it ends: no cost per
 * request). An API documented "call on w's thread" compares it with w to
 * refuse a call from elsewhere instead of touching that worker's state
 * from a thread it does not own. */
extern _Thread_local flare_worker_t *flare__worker_self;

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

#endif
