/* Metrics, internal: each worker's counting block and the hooks the
 * protocols call (bytes, parse errors, timeouts, HTTP/2 frames). A hook is
 * one test of w->metrics (NULL when counting is off) and, when on, plain
 * arithmetic on the worker's own block. Finished exchanges reach metrics.c
 * as an exchange observer (http/exchange.h), not through a hook: their
 * durations are on the loop's cached clock, never a clock read per request.
 *
 * Threads: a block is written only by its worker, with relaxed atomic
 * loads and stores (plain moves on x86: no lock prefix, no read-modify-
 * write); a scrape on any thread reads it with relaxed loads. A scrape may
 * see one counter a moment before another: each is exact on its own. */
#ifndef FLARE_OBS_METRICS_H
#define FLARE_OBS_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "worker.h"
#include "flare/metrics.h"
#include "http2/h2_names.h"

/* Request duration buckets (upper bounds, ns); +Inf is one more bucket. */
#define FLARE__HIST_NB 16
extern const uint64_t flare__hist_bounds_ns[FLARE__HIST_NB];

enum {
    FLARE__TO_HEADER,
    FLARE__TO_BODY,
    FLARE__TO_IDLE,
    FLARE__TO_WRITE,
    FLARE__TO_HANDSHAKE,
    FLARE__TO_KINDS
};

#define FLARE__PARSE_ST_MIN 400
#define FLARE__PARSE_ST_N   200 /* 400..599 */

typedef _Atomic uint64_t flare__ctr_t;

/* HTTP/2 counters (session.c): one cell each, GOAWAYs sent by error code
 * (the last one for a code RFC 9113 does not name), the defences by kind. */
enum {
    FLARE__H2C_CONNS,
    FLARE__H2C_STREAMS,
    FLARE__H2C_RST,
    FLARE__H2C_GOAWAY,
    FLARE__H2C_FLOOD = FLARE__H2C_GOAWAY + FLARE__H2E_COUNT + 1,
    FLARE__H2C_COUNT = FLARE__H2C_FLOOD + FLARE__H2F_COUNT
};

/* Histogram cells of one route: NB + 1 buckets (not cumulative: the scrape
 * adds them up), the sum of durations in ns, then the number of long-lived
 * streams begun (SSE, WebSocket upgrades: flare__ex_long), which
 * are kept out of the buckets. */
#define FLARE__HIST_CELLS  (FLARE__HIST_NB + 3)
#define FLARE__HIST_STREAM (FLARE__HIST_NB + 2)

typedef struct flare_metrics_w {
    flare__ctr_t rx, tx;       /* bytes */
    flare__ctr_t open, active; /* sampled by the sweep, gauges */
    flare__ctr_t ws_open;      /* a gauge, kept by ws/ (flare__metrics_ws_open) */
    flare__ctr_t ws_msgs[2];   /* 0 received, 1 sent */
    flare__ctr_t timeouts[FLARE__TO_KINDS];
    flare__ctr_t parse_err[FLARE__PARSE_ST_N];
    flare__ctr_t dropped; /* request series that found no slot */
    flare__ctr_t h2[FLARE__H2C_COUNT];
    flare__ctr_t h2_open, h2_streams; /* sampled by the sweep, gauges */
    /* requests by (route, method, status): open addressing, never resized
     * (sized for the routes when counting starts); key 0 = empty */
    uint32_t mask;
    flare__ctr_t *keys, *counts;
    flare__ctr_t *hist; /* (nroutes + 1) * FLARE__HIST_CELLS; route 0 = unmatched */
    flare__ctr_t *user; /* the user metrics' cells */
    size_t nuser;
} flare_metrics_w_t;

static inline void flare__ctr_add(flare__ctr_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

static inline uint64_t flare__ctr_get(flare__ctr_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* Counts one request into block m: exported for the unit tests. */
void flare__metrics_count(flare_metrics_w_t *m, uint32_t route, unsigned method, unsigned status,
                          uint64_t dur_ns);
/* The sweep's sample of the worker's connections (on its thread). */
void flare__metrics_sample_conns(flare_worker_t *w);

/* ---- hooks ---- */

/* A read batch: bytes in. */
static inline void flare__metrics_rx(flare_worker_t *w, size_t n)
{
    flare_metrics_w_t *m = w->metrics;
    if (flare__unlikely(m != NULL))
        flare__ctr_add(&m->rx, n);
}

static inline void flare__metrics_tx(flare_worker_t *w, size_t n)
{
    flare__ctr_add(&w->metrics->tx, n);
}

static inline void flare__metrics_parse_error(flare_worker_t *w, int status)
{
    flare_metrics_w_t *m = w->metrics;
    if (flare__unlikely(m != NULL) && (unsigned)(status - FLARE__PARSE_ST_MIN) < FLARE__PARSE_ST_N)
        flare__ctr_add(&m->parse_err[status - FLARE__PARSE_ST_MIN], 1);
}

static inline void flare__metrics_timeout(flare_worker_t *w, unsigned kind)
{
    flare_metrics_w_t *m = w->metrics;
    if (flare__unlikely(m != NULL))
        flare__ctr_add(&m->timeouts[kind], 1);
}

static inline void flare__metrics_ws_msg(flare_worker_t *w, unsigned dir)
{
    flare_metrics_w_t *m = w->metrics;
    if (flare__unlikely(m != NULL))
        flare__ctr_add(&m->ws_msgs[dir], 1);
}

/* The worker's open WebSocket connections changed to n (a gauge the
 * WebSocket layer keeps: the metrics do not reach into it). */
static inline void flare__metrics_ws_open(flare_worker_t *w, unsigned n)
{
    flare_metrics_w_t *m = w->metrics;
    if (flare__unlikely(m != NULL))
        atomic_store_explicit(&m->ws_open, n, memory_order_relaxed);
}

/* HTTP/2: one cell of FLARE__H2C_* (a frame sent, a stream or connection
 * begun, a defence fired). */
static inline void flare__metrics_h2(flare_worker_t *w, unsigned cell)
{
    flare_metrics_w_t *m = w->metrics;
    if (flare__unlikely(m != NULL))
        flare__ctr_add(&m->h2[cell], 1);
}

static inline unsigned flare__metrics_h2_goaway(uint32_t code)
{
    return FLARE__H2C_GOAWAY + (code < FLARE__H2E_COUNT ? code : FLARE__H2E_COUNT);
}

/* ---- health.c ---- */

/* Whether the app is ready, as seen from worker w; when not, *why names
 * the reason ("draining", "not listening", or a failing check's name). */
bool flare__health_ready(flare_worker_t *w, const char **why);

/* ---- metrics.c, for status.c ---- */

typedef struct flare_metrics_app flare_metrics_app_t;
flare_metrics_app_t *flare__metrics_app(flare_app_t *app, bool make);
/* Sums every worker's requests and histograms: per route (index 0 =
 * unmatched) the request count and the FLARE__HIST_CELLS cells. */
typedef struct flare_metrics_route_sum {
    uint64_t requests, errors; /* errors: status >= 500 */
    uint64_t hist[FLARE__HIST_CELLS];
} flare_metrics_route_sum_t;
typedef struct flare_metrics_totals {
    uint64_t rx, tx, open, active, ws_open, requests;
    uint64_t h2_open, h2_streams;
    uint64_t h2[FLARE__H2C_COUNT];
    size_t nroutes; /* app->nroutes + 1 entries in routes */
    flare_metrics_route_sum_t *routes;
} flare_metrics_totals_t;
int flare__metrics_totals(flare_app_t *app, flare_metrics_totals_t *t); /* free t->routes */
/* Route i's (0: unmatched) pattern ("" for 0) and method ("" for 0). */
const char *flare__metrics_route_name(flare_app_t *app, size_t i);
const char *flare__metrics_route_method(flare_app_t *app, size_t i);

#endif
