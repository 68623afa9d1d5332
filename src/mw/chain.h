/* The middleware pipeline and the route records it hangs on: per route,
 * the handler and its chain (app + groups + route middlewares, flattened
 * when the app starts), and groups. */
#ifndef FLARE_MW_CHAIN_H
#define FLARE_MW_CHAIN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/flare.h"
#include "flare/middleware.h"

struct flare_req;

typedef struct flare_route flare_route_t;

/* A middleware as the request path sees it: hooks + the slot of its
 * statistics. Chains are flattened per route when the app starts, so the
 * request path walks one array. */
typedef struct flare_mw_rt {
    flare_before_fn before;
    flare_after_fn after;
    void *ud;
    unsigned id;
} flare_mw_rt_t;

typedef struct flare_mw_list {
    flare_mw_rt_t *v;
    size_t n, cap;
} flare_mw_list_t;

/* per worker, per middleware; written by the worker, read by anyone */
typedef struct flare_mw_stat {
    _Atomic uint64_t count, total_ns, max_ns;
} flare_mw_stat_t;

struct flare_route {
    flare_handler_fn fn;
    void *ud;
    flare_method_t method;
    struct flare_group *group;
    flare_mw_list_t own;  /* route-level middlewares */
    flare_mw_rt_t *chain; /* app + groups + own, built at start */
    uint32_t nchain;
    bool has_after;
    uint32_t id;   /* 1 + index in app->routes: the metrics' array index */
    char *pattern; /* the full pattern (group prefix included), owned */
};

struct flare_group {
    flare_app_t *app;
    char *prefix; /* owned */
    struct flare_group *next;
    struct flare_group *parent;
    flare_mw_list_t mws;
};

/* mw/chain.c */
int flare__chain_run(struct flare_req *ex);
void flare__chain_after(struct flare_req *ex);
int flare__mw_list_add(flare_app_t *app, flare_mw_list_t *l, const flare_middleware_t *mw,
                       const char *who);
/* Flattens every route's chain when the app starts. `unmatched` is the
 * chain's last step when no route matched (the http layer's automatic
 * answer: 404, 405, OPTIONS), given by the app that wires the layers. */
int flare__chains_build(flare_app_t *app, int (*unmatched)(struct flare_req *ex));
void flare__chains_free(flare_app_t *app);

#endif
