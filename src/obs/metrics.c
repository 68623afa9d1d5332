/* Metrics: the module that gives each worker its counting block, the
 * request counting itself, user metrics and the collector writer. The
 * exposition (the text a scrape gets) is in expose.c.
 *
 * Requests are counted by (route, method, status) in an open-addressed
 * table per worker, sized when counting starts and never resized on the
 * request path: a route is an index given at registration (route->id), so
 * counting is a multiply, a probe and two relaxed stores, and the label
 * strings are only made at scrape. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "module.h"
#include "net/conn.h"
#include "http/exchange.h"
#include "app.h"
#include "obs/metrics_app.h"

const uint64_t flare__hist_bounds_ns[FLARE__HIST_NB] = {
    100000,   250000,    500000,    1000000,   2500000,    5000000,    10000000,   25000000,
    50000000, 100000000, 250000000, 500000000, 1000000000, 2500000000, 5000000000, 10000000000,
};

/* ---- the module ---- */

static int met_init_worker(flare_worker_t *w, void *state);
static void met_dispose_worker(flare_worker_t *w, void *state);
static void met_free_app(flare_app_t *app, void *state);

static const flare_module_t metrics_module = {
    .name = "metrics",
    .init_worker = met_init_worker,
    .dispose_worker = met_dispose_worker,
    .free_app = met_free_app,
};

flare_metrics_app_t *flare__metrics_app(flare_app_t *app, bool make)
{
    flare_metrics_app_t *ma = flare__app_module_state(app, &metrics_module);
    if (ma != NULL || !make)
        return ma;
    if (flare__app_running(app)) {
        flare__fail(FLARE_ESTATE, 0, "metrics: the app is running");
        return NULL;
    }
    ma = calloc(1, sizeof(*ma));
    if (ma == NULL) {
        flare__fail(FLARE_ENOMEM, 0, "metrics: out of memory");
        return NULL;
    }
    ma->app = app;
    ma->start_time = (double)time(NULL);
    unsigned slot;
    int rc = flare__app_module(app, &metrics_module, ma, &slot);
    if (rc != 0) {
        free(ma);
        flare__fail(rc, 0, "metrics: cannot register the module");
        return NULL;
    }
    return ma;
}

int flare_metrics_enable(flare_app_t *app)
{
    if (app == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_metrics_enable: app is NULL");
    flare_metrics_app_t *ma = flare__metrics_app(app, true);
    if (ma == NULL)
        return flare__app_running(app) ? FLARE_ESTATE : FLARE_ENOMEM;
    ma->counting = true;
    return 0;
}

static void block_free(flare_mblock_t *b)
{
    if (b == NULL)
        return;
    free(b->m.keys);
    free(b->m.counts);
    free(b->m.hist);
    free(b->m.user);
    free(b);
}

static size_t table_size(size_t nroutes)
{
    size_t want = (nroutes + 1) * 32, n = 256;
    while (n < want && n < ((size_t)1 << 20))
        n <<= 1;
    return n;
}

/* Grows a cell array from old to n cells, keeping the counts. */
static int grow_cells(flare__ctr_t **v, size_t old, size_t n)
{
    if (n <= old && *v != NULL)
        return 0;
    flare__ctr_t *nv = calloc(n != 0 ? n : 1, sizeof(*nv));
    if (nv == NULL)
        return FLARE_ENOMEM;
    for (size_t i = 0; i < old && *v != NULL; i++)
        atomic_init(&nv[i], flare__ctr_get(&(*v)[i]));
    free(*v);
    *v = nv;
    return 0;
}

/* A worker's block: made by its first run, grown when routes or user
 * metrics were added between runs (on the thread running flare_app_run,
 * before the worker's thread starts), kept until flare_app_free so the
 * counts cover the app's life. */
static int block_ready(flare_metrics_app_t *ma, unsigned id)
{
    flare_app_t *app = ma->app;
    unsigned n = flare_app_workers(app);
    if (ma->nblocks < n) {
        flare_mblock_t **v = realloc(ma->blocks, n * sizeof(*v));
        if (v == NULL)
            return FLARE_ENOMEM;
        for (unsigned i = ma->nblocks; i < n; i++)
            v[i] = NULL;
        ma->blocks = v;
        ma->nblocks = n;
    }
    flare_mblock_t *b = ma->blocks[id];
    if (b == NULL) {
        b = calloc(1, sizeof(*b));
        if (b == NULL)
            return FLARE_ENOMEM;
        size_t ts = table_size(app->nroutes);
        b->m.keys = calloc(ts, sizeof(*b->m.keys));
        b->m.counts = calloc(ts, sizeof(*b->m.counts));
        if (b->m.keys == NULL || b->m.counts == NULL) {
            block_free(b);
            return FLARE_ENOMEM;
        }
        b->m.mask = (uint32_t)(ts - 1);
        ma->blocks[id] = b;
    }
    size_t cells = (app->nroutes + 1) * FLARE__HIST_CELLS;
    if (grow_cells(&b->m.hist, b->nhist, cells) != 0 ||
        grow_cells(&b->m.user, b->m.nuser, ma->nuser_cells) != 0)
        return FLARE_ENOMEM;
    b->nhist = cells > b->nhist ? cells : b->nhist;
    b->m.nuser = ma->nuser_cells > b->m.nuser ? ma->nuser_cells : b->m.nuser;
    return 0;
}

/* Every 250 ms on the worker: the connection gauges. Sampled rather than
 * counted at each transition so that the request path carries no gauge
 * updates at all. */
#define SAMPLE_MS 250

static void sample_timer(void *ud)
{
    flare_mblock_t *b = ud;
    flare__metrics_sample_conns(b->w);
    flare__timer_start(&b->w->loop, &b->timer, SAMPLE_MS);
}

void flare__metrics_sample_conns(flare_worker_t *w)
{
    flare_metrics_w_t *m = w->metrics;
    if (m == NULL)
        return;
    uint64_t open = 0, active = 0, h2_open = 0, h2_streams = 0;
    for (flare_conn_t *c = w->conns; c != NULL; c = c->next) {
        flare_conn_stats_t st;
        c->ops->stats(c, &st);
        open++;
        active += st.active;
        if (c->ops->kind == FLARE_CONN_HTTP2) {
            h2_open++;
            h2_streams += st.inflight;
        }
    }
    atomic_store_explicit(&m->open, open, memory_order_relaxed);
    atomic_store_explicit(&m->active, active, memory_order_relaxed);
    atomic_store_explicit(&m->h2_open, h2_open, memory_order_relaxed);
    atomic_store_explicit(&m->h2_streams, h2_streams, memory_order_relaxed);
}

static void on_ex_done(void *ud, struct flare_req *ex);
static void on_ex_stream(void *ud, struct flare_req *ex);

/* The metrics as an exchange observer (installed only when counting). */
static const flare_ex_observer_t metrics_observer = {
    .stream = on_ex_stream,
    .done = on_ex_done,
};

static int met_init_worker(flare_worker_t *w, void *state)
{
    flare_metrics_app_t *ma = state;
    if (!ma->counting)
        return 0;
    unsigned id = flare_worker_id(w);
    if (block_ready(ma, id) != 0)
        return flare__fail(FLARE_ENOMEM, 0, "metrics: out of memory for worker %u", id);
    flare_mblock_t *b = ma->blocks[id];
    int rc = flare__ex_observe(w, &metrics_observer, &b->m);
    if (rc != 0)
        return flare__fail(rc, 0, "metrics: cannot observe worker %u's exchanges", id);
    b->w = w;
    w->metrics = &b->m;
    flare__timer_init(&b->timer, sample_timer, b);
    flare__timer_start(&w->loop, &b->timer, SAMPLE_MS);
    return 0;
}

static void met_dispose_worker(flare_worker_t *w, void *state)
{
    flare_metrics_app_t *ma = state;
    unsigned id = flare_worker_id(w);
    if (w->metrics == NULL || id >= ma->nblocks || ma->blocks[id] == NULL)
        return;
    flare_mblock_t *b = ma->blocks[id];
    flare__ex_unobserve(w, &metrics_observer);
    flare__timer_stop(&w->loop, &b->timer);
    atomic_store_explicit(&b->m.open, 0, memory_order_relaxed);
    atomic_store_explicit(&b->m.active, 0, memory_order_relaxed);
    atomic_store_explicit(&b->m.ws_open, 0, memory_order_relaxed);
    atomic_store_explicit(&b->m.h2_open, 0, memory_order_relaxed);
    atomic_store_explicit(&b->m.h2_streams, 0, memory_order_relaxed);
    w->metrics = NULL;
}

static void met_free_app(flare_app_t *app, void *state)
{
    (void)app;
    flare_metrics_app_t *ma = state;
    for (unsigned i = 0; i < ma->nblocks; i++)
        block_free(ma->blocks[i]);
    free(ma->blocks);
    while (ma->metrics != NULL) {
        flare_metric_t *m = ma->metrics;
        ma->metrics = m->next;
        free(m->name);
        free(m->help);
        for (size_t i = 0; i < m->nlabels * 2; i++)
            free(m->labels[i]);
        free(m->labels);
        free(m->bounds);
        free(m);
    }
    free(ma->collectors);
    for (size_t i = 0; i < ma->nchecks; i++)
        free(ma->checks[i].name);
    free(ma->checks);
    free(ma->dbs);
    while (ma->status_pages != NULL) {
        flare_status_page_t *p = ma->status_pages;
        ma->status_pages = p->next;
        free(p);
    }
    free(ma);
}

/* ---- counting ---- */

/* The request table's cell of (route, method, status); inlined into the
 * finished exchange's hook (a call measured +5 instructions per request). */
static inline __attribute__((always_inline)) void count_key(flare_metrics_w_t *m, uint32_t route,
                                                            unsigned method, unsigned status)
{
    uint64_t key = ((uint64_t)1 << 63) | ((uint64_t)route << 24) | ((uint64_t)method << 12) |
                   (status & 0xfffu);
    uint32_t i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & m->mask;
    for (uint32_t probes = 0;; probes++) {
        uint64_t k = atomic_load_explicit(&m->keys[i], memory_order_relaxed);
        if (flare__likely(k == key)) {
            flare__ctr_add(&m->counts[i], 1);
            break;
        }
        if (k == 0) {
            /* the count before the key: a scrape that sees the key sees it */
            atomic_store_explicit(&m->counts[i], 1, memory_order_relaxed);
            atomic_store_explicit(&m->keys[i], key, memory_order_release);
            break;
        }
        if (probes == m->mask) {
            flare__ctr_add(&m->dropped, 1);
            break;
        }
        i = (i + 1) & m->mask;
    }
}

void flare__metrics_count(flare_metrics_w_t *m, uint32_t route, unsigned method, unsigned status,
                          uint64_t dur_ns)
{
    count_key(m, route, method, status);
    flare__ctr_t *h = m->hist + (size_t)route * FLARE__HIST_CELLS;
    /* the first bound >= dur_ns (16 bounds: four steps, no loop), 16 = +Inf */
    _Static_assert(FLARE__HIST_NB == 16, "the search below assumes 16 bounds");
    const uint64_t *bd = flare__hist_bounds_ns;
    unsigned b = dur_ns > bd[7] ? 8 : 0;
    b += dur_ns > bd[b + 3] ? 4 : 0;
    b += dur_ns > bd[b + 1] ? 2 : 0;
    b += dur_ns > bd[b] ? 1 : 0;
    b += b == 15 && dur_ns > bd[15];
    flare__ctr_add(&h[b], 1);
    flare__ctr_add(&h[FLARE__HIST_NB + 1], dur_ns);
}

/* One finished exchange: route, method, status, duration. */
static void on_ex_done(void *ud, struct flare_req *ex)
{
    flare_metrics_w_t *m = ud;
    /* a response went out for a request that was read whole; framing
     * errors are counted as parse errors or timeouts instead; a stream
     * is counted without its duration (the same test: no cost here) */
    if (flare__unlikely((ex->flags & (EX_SENT | EX_ERROR | EX_LONG)) != EX_SENT) ||
        ex->res.status == 0) {
        if ((ex->flags & (EX_SENT | EX_ERROR | EX_LONG)) == (EX_SENT | EX_LONG) &&
            ex->res.status != 0)
            count_key(m, ex->route != NULL ? ex->route->id : 0, (unsigned)ex->head.method_id,
                      (unsigned)ex->res.status);
        return;
    }
    /* The duration on the loop's cached clock (monotonic ms, refreshed after
     * each wait), not a clock read per request (-20 instructions per request
     * for the two reads, callgrind): a request answered in the wake-up that
     * routed it takes 0, the first bucket; one answered later (a timer, a
     * job, a database reply) its wake-ups' time, to the coarse clock's few ms. */
    uint64_t now = ex->worker->loop.now, t0 = ex->t_start_ms;
    uint32_t r = ex->route != NULL ? ex->route->id : 0;
    if (flare__likely(now <= t0)) {
        count_key(m, r, (unsigned)ex->head.method_id, (unsigned)ex->res.status);
        flare__ctr_add(&m->hist[(size_t)r * FLARE__HIST_CELLS], 1);
        return;
    }
    flare__metrics_count(m, r, (unsigned)ex->head.method_id, (unsigned)ex->res.status,
                         (now - t0) * 1000000u);
}

const char *flare__metrics_route_name(flare_app_t *app, size_t i)
{
    if (i == 0 || i > app->nroutes || app->routes[i - 1]->pattern == NULL)
        return "";
    return app->routes[i - 1]->pattern;
}

const char *flare__metrics_route_method(flare_app_t *app, size_t i)
{
    if (i == 0 || i > app->nroutes)
        return "";
    flare_str_t m = flare_method_name(app->routes[i - 1]->method);
    return m.ptr != NULL ? m.ptr : "";
}

/* A long-lived stream begins (flare__ex_long): one stream of its route. */
static void on_ex_stream(void *ud, struct flare_req *ex)
{
    flare_metrics_w_t *m = ud;
    uint32_t r = ex->route != NULL ? ex->route->id : 0;
    flare__ctr_add(&m->hist[(size_t)r * FLARE__HIST_CELLS + FLARE__HIST_STREAM], 1);
}

int flare__metrics_totals(flare_app_t *app, flare_metrics_totals_t *t)
{
    memset(t, 0, sizeof(*t));
    flare_metrics_app_t *ma = flare__metrics_app(app, false);
    if (ma == NULL || !ma->counting)
        return FLARE_ESTATE;
    t->nroutes = app->nroutes + 1;
    t->routes = calloc(t->nroutes, sizeof(*t->routes));
    if (t->routes == NULL)
        return FLARE_ENOMEM;
    for (unsigned i = 0; i < ma->nblocks; i++) {
        flare_mblock_t *b = ma->blocks[i];
        if (b == NULL)
            continue;
        flare_metrics_w_t *m = &b->m;
        t->rx += flare__ctr_get(&m->rx);
        t->tx += flare__ctr_get(&m->tx);
        t->open += flare__ctr_get(&m->open);
        t->active += flare__ctr_get(&m->active);
        t->ws_open += flare__ctr_get(&m->ws_open);
        t->h2_open += flare__ctr_get(&m->h2_open);
        t->h2_streams += flare__ctr_get(&m->h2_streams);
        for (unsigned k = 0; k < FLARE__H2C_COUNT; k++)
            t->h2[k] += flare__ctr_get(&m->h2[k]);
        for (uint32_t k = 0; k <= m->mask; k++) {
            uint64_t key = atomic_load_explicit(&m->keys[k], memory_order_acquire);
            if (key == 0)
                continue;
            size_t r = (size_t)(key >> 24) & 0xffffffu;
            uint64_t n = flare__ctr_get(&m->counts[k]);
            if (r < t->nroutes) {
                t->routes[r].requests += n;
                if ((key & 0xfff) >= 500)
                    t->routes[r].errors += n;
            }
        }
        size_t nr = b->nhist / FLARE__HIST_CELLS;
        for (size_t r = 0; r < nr && r < t->nroutes; r++)
            for (unsigned c = 0; c < FLARE__HIST_CELLS; c++)
                t->routes[r].hist[c] += flare__ctr_get(&m->hist[r * FLARE__HIST_CELLS + c]);
    }
    for (size_t r = 0; r < t->nroutes; r++)
        t->requests += t->routes[r].requests;
    return 0;
}

/* ---- names ---- */

bool flare__metrics_name_ok(const char *s)
{
    if (s == NULL || *s == '\0')
        return false;
    for (const char *p = s; *p != '\0'; p++) {
        char c = *p;
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        if (!alpha && !(p != s && c >= '0' && c <= '9'))
            return false;
    }
    return true;
}

bool flare__metrics_label_ok(const char *s)
{
    if (s == NULL || *s == '\0' || strchr(s, ':') != NULL || strncmp(s, "__", 2) == 0)
        return false;
    return flare__metrics_name_ok(s);
}

/* ---- user metrics ---- */

static bool same_labels(const flare_metric_t *m, const char *const *labels, size_t n)
{
    if (m->nlabels != n)
        return false;
    for (size_t i = 0; i < n * 2; i++)
        if (strcmp(m->labels[i], labels[i]) != 0)
            return false;
    return true;
}

static int metric_new(flare_app_t *app, int type, const char *name, const char *help,
                      const char *const *labels, const double *bounds, size_t nb,
                      flare_metric_t **out)
{
    static const char *const what[] = { "counter", "gauge", "histogram" };
    if (out != NULL)
        *out = NULL;
    if (app == NULL || out == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_metrics_%s: app or out is NULL", what[type]);
    if (!flare__metrics_name_ok(name))
        return flare__fail(FLARE_EINVAL, 0, "flare_metrics_%s: invalid metric name \"%s\"",
                           what[type], name != NULL ? name : "(null)");
    if (strncmp(name, "flare_", 6) == 0 || strncmp(name, "process_", 8) == 0)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_metrics_%s: \"%s\": the flare_ and process_ prefixes are "
                           "the built-in series'",
                           what[type], name);
    size_t nl = 0;
    for (; labels != NULL && labels[nl * 2] != NULL; nl++) {
        const char *ln = labels[nl * 2];
        if (!flare__metrics_label_ok(ln) || strcmp(ln, "le") == 0)
            return flare__fail(FLARE_EINVAL, 0, "flare_metrics_%s: %s: invalid label name \"%s\"",
                               what[type], name, ln);
        if (labels[nl * 2 + 1] == NULL)
            return flare__fail(FLARE_EINVAL, 0, "flare_metrics_%s: %s: label %s has no value",
                               what[type], name, ln);
        for (size_t k = 0; k < nl; k++)
            if (strcmp(labels[k * 2], ln) == 0)
                return flare__fail(FLARE_EINVAL, 0, "flare_metrics_%s: %s: label %s twice",
                                   what[type], name, ln);
    }
    if (type == FLARE__M_HISTOGRAM) {
        if (bounds == NULL || nb == 0)
            return flare__fail(FLARE_EINVAL, 0, "flare_metrics_histogram: %s: no bucket bounds",
                               name);
        for (size_t i = 0; i < nb; i++)
            if (!isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1]))
                return flare__fail(FLARE_EINVAL, 0,
                                   "flare_metrics_histogram: %s: bounds must be finite and "
                                   "increasing (bound %zu)",
                                   name, i);
    }
    if (flare__app_running(app))
        return flare__fail(FLARE_ESTATE, 0, "flare_metrics_%s: the app is running", what[type]);
    flare_metrics_app_t *ma = flare__metrics_app(app, true);
    if (ma == NULL)
        return FLARE_ENOMEM;
    help = help != NULL ? help : "";
    for (flare_metric_t *o = ma->metrics; o != NULL; o = o->next) {
        if (strcmp(o->name, name) != 0)
            continue;
        if (o->type != type || strcmp(o->help, help) != 0 || o->nlabels != nl)
            return flare__fail(FLARE_EINVAL, 0,
                               "flare_metrics_%s: %s is already registered with another type, "
                               "help or number of labels",
                               what[type], name);
        if (type == FLARE__M_HISTOGRAM &&
            (o->nbounds != nb || memcmp(o->bounds, bounds, nb * sizeof(*bounds)) != 0))
            return flare__fail(FLARE_EINVAL, 0,
                               "flare_metrics_histogram: %s is already registered with other "
                               "bounds",
                               name);
        if (same_labels(o, labels, nl))
            return flare__fail(FLARE_EEXIST, 0,
                               "flare_metrics_%s: %s with these labels already exists", what[type],
                               name);
    }
    flare_metric_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "metrics: out of memory");
    m->type = type;
    m->name = strdup(name);
    m->help = strdup(help);
    m->labels = calloc(nl * 2 + 1, sizeof(*m->labels));
    bool oom = m->name == NULL || m->help == NULL || m->labels == NULL;
    for (size_t i = 0; !oom && i < nl * 2; i++) {
        m->labels[i] = strdup(labels[i]);
        oom = m->labels[i] == NULL;
    }
    m->nlabels = nl;
    if (!oom && type == FLARE__M_HISTOGRAM) {
        m->bounds = malloc(nb * sizeof(*bounds));
        oom = m->bounds == NULL;
        if (!oom)
            memcpy(m->bounds, bounds, nb * sizeof(*bounds));
        m->nbounds = nb;
    }
    if (oom) {
        free(m->name);
        free(m->help);
        for (size_t i = 0; m->labels != NULL && i < nl * 2; i++)
            free(m->labels[i]);
        free(m->labels);
        free(m->bounds);
        free(m);
        return flare__fail(FLARE_ENOMEM, 0, "metrics: out of memory");
    }
    /* cells: one value; a histogram's nb + 1 buckets and its sum (bits of
     * a double) */
    m->cell = ma->nuser_cells;
    ma->nuser_cells += type == FLARE__M_HISTOGRAM ? nb + 2 : 1;
    flare_metric_t **pp = &ma->metrics;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = m;
    ma->counting = true;
    *out = m;
    return 0;
}

int flare_metrics_counter(flare_app_t *app, const char *name, const char *help,
                          const char *const *labels, flare_metric_t **out)
{
    return metric_new(app, FLARE__M_COUNTER, name, help, labels, NULL, 0, out);
}

int flare_metrics_gauge(flare_app_t *app, const char *name, const char *help,
                        const char *const *labels, flare_metric_t **out)
{
    return metric_new(app, FLARE__M_GAUGE, name, help, labels, NULL, 0, out);
}

int flare_metrics_histogram(flare_app_t *app, const char *name, const char *help,
                            const char *const *labels, const double *bounds, size_t nbounds,
                            flare_metric_t **out)
{
    return metric_new(app, FLARE__M_HISTOGRAM, name, help, labels, bounds, nbounds, out);
}

static flare__ctr_t *user_cells(flare_worker_t *w, flare_metric_t *m, int type)
{
    if (w == NULL || m == NULL || m->type != type || w->metrics == NULL)
        return NULL;
    size_t need = m->cell + (type == FLARE__M_HISTOGRAM ? m->nbounds + 2 : 1);
    return need <= w->metrics->nuser ? w->metrics->user + m->cell : NULL;
}

void flare_counter_add(flare_worker_t *w, flare_metric_t *m, uint64_t n)
{
    flare__ctr_t *c = user_cells(w, m, FLARE__M_COUNTER);
    if (c != NULL)
        flare__ctr_add(c, n);
}

void flare_gauge_add(flare_worker_t *w, flare_metric_t *m, int64_t delta)
{
    flare__ctr_t *c = user_cells(w, m, FLARE__M_GAUGE);
    if (c != NULL)
        flare__ctr_add(c, (uint64_t)delta); /* two's complement: summed as int64 */
}

void flare_histogram_observe(flare_worker_t *w, flare_metric_t *m, double v)
{
    flare__ctr_t *c = user_cells(w, m, FLARE__M_HISTOGRAM);
    if (c == NULL || isnan(v))
        return;
    size_t b = 0;
    while (b < m->nbounds && v > m->bounds[b])
        b++;
    flare__ctr_add(&c[b], 1);
    uint64_t bits = flare__ctr_get(&c[m->nbounds + 1]);
    double sum;
    memcpy(&sum, &bits, sizeof(sum));
    sum += v;
    memcpy(&bits, &sum, sizeof(bits));
    atomic_store_explicit(&c[m->nbounds + 1], bits, memory_order_relaxed);
}

/* ---- collectors ---- */

int flare_metrics_collector(flare_app_t *app, flare_metrics_collect_fn fn, void *ud)
{
    if (app == NULL || fn == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_metrics_collector: app or fn is NULL");
    flare_metrics_app_t *ma = flare__metrics_app(app, true);
    if (ma == NULL)
        return flare__app_running(app) ? FLARE_ESTATE : FLARE_ENOMEM;
    if (flare__app_running(app))
        return flare__fail(FLARE_ESTATE, 0, "flare_metrics_collector: the app is running");
    flare_metrics_collector_t *v =
        realloc(ma->collectors, (ma->ncollectors + 1) * sizeof(*ma->collectors));
    if (v == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "metrics: out of memory");
    v[ma->ncollectors++] = (flare_metrics_collector_t){ fn, ud };
    ma->collectors = v;
    return 0;
}
