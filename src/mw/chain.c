/* The middleware pipeline: before hooks in order, the handler, after hooks
 * in reverse order. Registration builds lists; flare_app_run flattens them
 * into one array per route (app, outer group .. inner group, route), so a
 * request walks one array: ten pass-through middlewares cost a loop of ten
 * indirect calls, no allocation. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "http/exchange.h"
#include "worker.h"
#include "mw/chain.h"

int flare__mw_list_add(flare_app_t *app, flare_mw_list_t *l, const flare_middleware_t *mw,
                       const char *who)
{
    if (mw == NULL)
        return flare__fail(FLARE_EINVAL, 0, "%s: middleware is NULL", who);
    const char *name = mw->name != NULL ? mw->name : "(unnamed)";
    if (mw->before == NULL && mw->after == NULL)
        return flare__fail(FLARE_EINVAL, 0, "%s: middleware \"%s\" has neither before nor after",
                           who, name);
    if (l->n == l->cap) {
        size_t cap = l->cap != 0 ? l->cap * 2 : 4;
        flare_mw_rt_t *v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL)
            return flare__fail(FLARE_ENOMEM, 0, "%s: out of memory", who);
        l->v = v;
        l->cap = cap;
    }
    char **names = realloc(app->mw_names, (app->nmw + 1) * sizeof(*names));
    if (names == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "%s: out of memory", who);
    app->mw_names = names;
    names[app->nmw] = strdup(name);
    if (names[app->nmw] == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "%s: out of memory", who);
    l->v[l->n++] = (flare_mw_rt_t){ mw->before, mw->after, mw->ud, app->nmw++ };
    return 0;
}

static size_t group_depth_count(const struct flare_group *g)
{
    size_t n = 0;
    for (; g != NULL; g = g->parent)
        n += g->mws.n;
    return n;
}

static void append_group(flare_mw_rt_t *out, size_t *k, const struct flare_group *g)
{
    if (g == NULL)
        return;
    append_group(out, k, g->parent); /* outer groups first */
    if (g->mws.n > 0)
        memcpy(out + *k, g->mws.v, g->mws.n * sizeof(*out));
    *k += g->mws.n;
}

static bool any_after(const flare_mw_rt_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (v[i].after != NULL)
            return true;
    }
    return false;
}

int flare__chains_build(flare_app_t *app, int (*unmatched)(struct flare_req *ex))
{
    app->unmatched = unmatched;
    app->mws_have_after = any_after(app->mws.v, app->mws.n);
    for (size_t i = 0; i < app->nroutes; i++) {
        flare_route_t *r = app->routes[i];
        free(r->chain);
        r->chain = NULL;
        size_t n = app->mws.n + group_depth_count(r->group) + r->own.n;
        r->nchain = (uint32_t)n;
        r->has_after = false;
        if (n == 0)
            continue;
        r->chain = malloc(n * sizeof(*r->chain));
        if (r->chain == NULL)
            return FLARE_ENOMEM;
        size_t k = 0;
        if (app->mws.n > 0)
            memcpy(r->chain, app->mws.v, app->mws.n * sizeof(*r->chain));
        k = app->mws.n;
        append_group(r->chain, &k, r->group);
        if (r->own.n > 0)
            memcpy(r->chain + k, r->own.v, r->own.n * sizeof(*r->chain));
        r->has_after = any_after(r->chain, n);
    }
    return 0;
}

void flare__chains_free(flare_app_t *app)
{
    for (size_t i = 0; i < app->nroutes; i++) {
        free(app->routes[i]->chain);
        app->routes[i]->chain = NULL;
        free(app->routes[i]->own.v);
    }
    free(app->mws.v);
    for (unsigned i = 0; i < app->nmw; i++)
        free(app->mw_names[i]);
    free(app->mw_names);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void account(flare_worker_t *w, unsigned id, uint64_t t0)
{
    uint64_t d = now_ns() - t0;
    flare_mw_stat_t *st = &w->mw_stats[id];
    /* single writer (this worker): relaxed load + store, no RMW needed */
    atomic_store_explicit(&st->count, atomic_load_explicit(&st->count, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    atomic_store_explicit(&st->total_ns,
                          atomic_load_explicit(&st->total_ns, memory_order_relaxed) + d,
                          memory_order_relaxed);
    if (d > atomic_load_explicit(&st->max_ns, memory_order_relaxed))
        atomic_store_explicit(&st->max_ns, d, memory_order_relaxed);
}

/* Runs the remaining before hooks, then the handler. Returns what the last
 * one called returned: 0, FLARE_ASYNC, or a negative code. */
int flare__chain_run(struct flare_req *ex)
{
    if (ex->nchain == 0 && ex->route != NULL)
        return ex->route->fn(ex, &ex->res, ex->route->ud);
    flare_worker_t *w = ex->worker;
    bool stats = w->mw_stats != NULL;
    while (ex->mw_pos < ex->nchain) {
        const flare_mw_rt_t *m = &ex->chain[ex->mw_pos++];
        if (m->before == NULL)
            continue;
        int rc;
        if (flare__unlikely(stats)) {
            uint64_t t0 = now_ns();
            rc = m->before(ex, &ex->res, m->ud);
            account(w, m->id, t0);
        } else {
            rc = m->before(ex, &ex->res, m->ud);
        }
        if (rc != 0 || (ex->flags & (EX_SENT | EX_STREAM | EX_ORPHAN)))
            return rc; /* answered, paused or failed: the chain stops here */
    }
    if (ex->route != NULL)
        return ex->route->fn(ex, &ex->res, ex->route->ud);
    return w->app->unmatched(ex);
}

void flare__chain_after(struct flare_req *ex)
{
    flare_worker_t *w = ex->worker;
    bool stats = w->mw_stats != NULL;
    for (uint32_t i = ex->mw_pos; i-- > 0;) {
        const flare_mw_rt_t *m = &ex->chain[i];
        if (m->after == NULL)
            continue;
        if (flare__unlikely(stats)) {
            uint64_t t0 = now_ns();
            m->after(ex, &ex->res, m->ud);
            account(w, m->id, t0);
        } else {
            m->after(ex, &ex->res, m->ud);
        }
    }
}
