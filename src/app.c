/* The app object: flare_app_new and flare_app_free, what is registered on
 * it before it runs (routes, groups, middlewares and their statistics,
 * reload hooks) and the objects it owns. The other parts of the app:
 * listeners.c (its listening addresses), worker.c (the workers), run.c
 * (flare_app_run: signals, the wait for a stop, the drain). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "app.h"
#include "app_svc.h"
#include "config.h"
#include "http/svc.h"
#include "worker.h"
#include "module.h"
#include "mw/chain.h"
#include "net/tls.h"
#include "router/router.h"
#include "run_int.h"

flare_app_t *flare_app_new(const flare_config_t *cfg)
{
    flare_config_t resolved;
    if (flare__config_resolve(&resolved, cfg) != 0)
        return NULL;
    flare_app_t *app = calloc(1, sizeof(*app));
    if (app == NULL) {
        flare__fail(FLARE_ENOMEM, 0, "flare_app_new: out of memory");
        return NULL;
    }
    app->cfg = resolved;
    app->limits.max_request_line = app->cfg.max_request_line;
    app->limits.max_head = app->cfg.max_head;
    app->limits.max_headers = app->cfg.max_headers;
    app->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (app->stop_fd < 0) {
        flare__fail(FLARE_ESYS, errno, "eventfd (stop)");
        free(app);
        return NULL;
    }
    app->router = flare__router_new();
    if (app->router == NULL) {
        flare__fail(FLARE_ENOMEM, 0, "flare_app_new: out of memory");
        close(app->stop_fd);
        free(app);
        return NULL;
    }
    return app;
}

/* `who` names the public call in flare_last_error() ("flare_group_route"). */
static int add_route(const char *who, flare_app_t *app, flare_method_t method, flare_group_t *group,
                     const char *pattern, flare_handler_fn fn, void *ud,
                     const flare_middleware_t *mws, size_t nmws)
{
    const char *prefix = group != NULL ? group->prefix : NULL;
    if (app == NULL || pattern == NULL || fn == NULL)
        return flare__fail(FLARE_EINVAL, 0, "%s: %s is NULL", who,
                           app == NULL       ? "app"
                           : pattern == NULL ? "pattern"
                                             : "handler");
    if (atomic_load(&app->running))
        return flare__fail(FLARE_ESTATE, 0, "%s %s: the app is running (register routes first)",
                           who, pattern);
    size_t pl = prefix != NULL ? strlen(prefix) : 0;
    size_t l = strlen(pattern);
    /* a group's root, "" or "/", is the group's prefix itself: "/api" + ""
     * registers "/api"; in the root group (prefix "") it is "/" */
    if (group != NULL && (l == 0 || (l == 1 && pattern[0] == '/'))) {
        pattern = pl > 0 ? "" : "/";
        l = pl > 0 ? 0 : 1;
    }
    char *full = malloc(pl + l + 1);
    if (full == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "%s: out of memory", who);
    if (pl > 0)
        memcpy(full, prefix, pl);
    memcpy(full + pl, pattern, l + 1);
    size_t fl = pl + l;
    if (app->nroutes == app->caproutes) {
        size_t cap = app->caproutes != 0 ? app->caproutes * 2 : 16;
        flare_route_t **r = realloc(app->routes, cap * sizeof(*r));
        if (r == NULL) {
            free(full);
            return flare__fail(FLARE_ENOMEM, 0, "%s: out of memory", who);
        }
        app->routes = r;
        app->caproutes = cap;
    }
    flare_route_t *route = malloc(sizeof(*route));
    if (route == NULL) {
        free(full);
        return flare__fail(FLARE_ENOMEM, 0, "%s: out of memory", who);
    }
    memset(route, 0, sizeof(*route));
    route->fn = fn;
    route->ud = ud;
    route->method = method;
    route->group = group;
    int rc = 0;
    for (size_t i = 0; i < nmws && rc == 0; i++)
        rc = flare__mw_list_add(app, &route->own, &mws[i], who);
    if (rc == 0)
        rc = flare__router_add(app->router, method, (flare_str_t){ full, fl }, route);
    if (rc != 0) {
        /* the router said what (naming the full pattern); add who asked */
        if (rc != FLARE_ENOMEM) {
            char why[256];
            snprintf(why, sizeof(why), "%s", flare_last_error());
            flare__fail(rc, 0, "%s: %s", who, why);
        }
        free(full);
        free(route->own.v);
        free(route);
        return rc;
    }
    full[fl] = '\0';
    route->pattern = full; /* the label metrics report */
    route->id = (uint32_t)app->nroutes + 1;
    app->routes[app->nroutes++] = route;
    return 0;
}

flare_app_t *flare__group_app(const flare_group_t *g)
{
    return g->app;
}

bool flare__app_has_route(const flare_app_t *app, flare_method_t method, const char *pattern)
{
    for (size_t i = 0; i < app->nroutes; i++) {
        if (app->routes[i]->method == method && strcmp(app->routes[i]->pattern, pattern) == 0)
            return true;
    }
    return false;
}

int flare_route(flare_app_t *app, flare_method_t method, const char *pattern, flare_handler_fn fn,
                void *ud)
{
    return add_route("flare_route", app, method, NULL, pattern, fn, ud, NULL, 0);
}

int flare_route_mw(flare_app_t *app, flare_method_t method, const char *pattern,
                   flare_handler_fn fn, void *ud, const flare_middleware_t *mws, size_t nmws)
{
    if (nmws > 0 && mws == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_route_mw: mws is NULL and nmws is %zu", nmws);
    return add_route("flare_route_mw", app, method, NULL, pattern, fn, ud, mws, nmws);
}

/* A streaming route (flare/body.h) is an ordinary route whose handler is
 * the http layer's flare__body_handler and whose ud is the record it makes;
 * the app owns the record. */
static int add_stream(flare_app_t *app, flare_group_t *g, flare_method_t method,
                      const char *pattern, const flare_body_route_t *r, void *ud)
{
    if (app == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_route_stream: app is NULL");
    void *br;
    int rc = flare__body_route_new("flare_route_stream", r, ud, &br);
    if (rc != 0)
        return rc;
    rc = g != NULL ? flare_group_route(g, method, pattern, flare__body_handler, br)
                   : flare_route(app, method, pattern, flare__body_handler, br);
    if (rc != 0) {
        free(br);
        return rc;
    }
    return flare__app_own(app, br, free);
}

int flare_route_stream(flare_app_t *app, flare_method_t method, const char *pattern,
                       const flare_body_route_t *r, void *ud)
{
    return add_stream(app, NULL, method, pattern, r, ud);
}

int flare_group_route_stream(flare_group_t *g, flare_method_t method, const char *pattern,
                             const flare_body_route_t *r, void *ud)
{
    if (g == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_group_route_stream: group is NULL");
    return add_stream(g->app, g, method, pattern, r, ud);
}

int flare_use(flare_app_t *app, const flare_middleware_t *mw)
{
    if (app == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_use: app is NULL");
    if (atomic_load(&app->running))
        return flare__fail(FLARE_ESTATE, 0, "flare_use: the app is running");
    return flare__mw_list_add(app, &app->mws, mw, "flare_use");
}

int flare_group_use(flare_group_t *g, const flare_middleware_t *mw)
{
    if (g == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_group_use: group is NULL");
    if (atomic_load(&g->app->running))
        return flare__fail(FLARE_ESTATE, 0, "flare_group_use: the app is running");
    return flare__mw_list_add(g->app, &g->mws, mw, "flare_group_use");
}

size_t flare_app_mw_stats(flare_app_t *app, flare_mw_stats_t *out, size_t max)
{
    if (app == NULL)
        return 0;
    /* the workers exist only inside the gate; outside it the counts are 0 */
    bool in = flare__app_enter(app) == 0;
    for (unsigned i = 0; i < app->nmw && i < max; i++) {
        flare_mw_stats_t st = { app->mw_names[i], 0, 0, 0 };
        for (unsigned k = 0; in && k < app->nworkers; k++) {
            flare_mw_stat_t *ws = app->workers[k].mw_stats;
            if (ws == NULL)
                continue;
            st.count += atomic_load_explicit(&ws[i].count, memory_order_relaxed);
            st.total_ns += atomic_load_explicit(&ws[i].total_ns, memory_order_relaxed);
            uint64_t m = atomic_load_explicit(&ws[i].max_ns, memory_order_relaxed);
            if (m > st.max_ns)
                st.max_ns = m;
        }
        out[i] = st;
    }
    if (in)
        flare__app_leave(app);
    return app->nmw;
}

int flare_get(flare_app_t *app, const char *pattern, flare_handler_fn fn, void *ud)
{
    return flare_route(app, FLARE_METHOD_GET, pattern, fn, ud);
}

int flare_post(flare_app_t *app, const char *pattern, flare_handler_fn fn, void *ud)
{
    return flare_route(app, FLARE_METHOD_POST, pattern, fn, ud);
}

int flare_put(flare_app_t *app, const char *pattern, flare_handler_fn fn, void *ud)
{
    return flare_route(app, FLARE_METHOD_PUT, pattern, fn, ud);
}

int flare_patch(flare_app_t *app, const char *pattern, flare_handler_fn fn, void *ud)
{
    return flare_route(app, FLARE_METHOD_PATCH, pattern, fn, ud);
}

int flare_delete(flare_app_t *app, const char *pattern, flare_handler_fn fn, void *ud)
{
    return flare_route(app, FLARE_METHOD_DELETE, pattern, fn, ud);
}

static flare_group_t *group_new(const char *who, flare_app_t *app, flare_group_t *parent,
                                const char *prefix)
{
    const char *base = parent != NULL ? parent->prefix : NULL;
    if (app == NULL || prefix == NULL) {
        flare__fail(FLARE_EINVAL, 0, "%s: %s is NULL", who, app == NULL ? "app" : "prefix");
        return NULL;
    }
    if (prefix[0] != '/') {
        flare__fail(FLARE_EINVAL, 0, "%s \"%s\": a prefix starts with '/'", who, prefix);
        return NULL;
    }
    size_t bl = base != NULL ? strlen(base) : 0, pl = strlen(prefix);
    while (pl > 1 && prefix[pl - 1] == '/')
        pl--; /* "/api/" and "/api" are the same group */
    flare_group_t *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        flare__fail(FLARE_ENOMEM, 0, "%s: out of memory", who);
        return NULL;
    }
    g->prefix = malloc(bl + pl + 1);
    if (g->prefix == NULL) {
        free(g);
        flare__fail(FLARE_ENOMEM, 0, "%s: out of memory", who);
        return NULL;
    }
    if (bl > 0)
        memcpy(g->prefix, base, bl);
    memcpy(g->prefix + bl, prefix, pl);
    g->prefix[bl + pl] = '\0';
    if (strcmp(g->prefix, "/") == 0)
        g->prefix[0] = '\0';
    g->app = app;
    g->parent = parent;
    g->next = app->groups;
    app->groups = g;
    return g;
}

flare_group_t *flare_group_new(flare_app_t *app, const char *prefix)
{
    return group_new("flare_group_new", app, NULL, prefix);
}

flare_group_t *flare_group_sub(flare_group_t *parent, const char *prefix)
{
    if (parent == NULL) {
        flare__fail(FLARE_EINVAL, 0, "flare_group_sub: parent is NULL");
        return NULL;
    }
    return group_new("flare_group_sub", parent->app, parent, prefix);
}

int flare_group_route(flare_group_t *g, flare_method_t method, const char *pattern,
                      flare_handler_fn fn, void *ud)
{
    if (g == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_group_route: group is NULL");
    if (pattern != NULL && pattern[0] != '/' && pattern[0] != '\0')
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_group_route \"%s\": a pattern starts with '/' (\"\" or \"/\" "
                           "is the group's root)",
                           pattern);
    return add_route("flare_group_route", g->app, method, g, pattern, fn, ud, NULL, 0);
}

/* ---- reload hooks: run.c runs them on SIGHUP ---- */

struct flare_reload_hook {
    struct flare_reload_hook *next;
    flare_task_fn fn;
    void *ud;
};

int flare_app_on_reload(flare_app_t *app, flare_task_fn fn, void *ud)
{
    if (app == NULL || fn == NULL)
        return FLARE_EINVAL;
    if (atomic_load(&app->running))
        return flare__fail(FLARE_ESTATE, 0, "flare_app_on_reload: the app is running");
    struct flare_reload_hook *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return FLARE_ENOMEM;
    h->fn = fn;
    h->ud = ud;
    if (app->reload_tail == NULL)
        app->reload_tail = &app->reload_hooks;
    *app->reload_tail = h;
    app->reload_tail = &h->next;
    return 0;
}

void flare__app_reload_hooks_run(flare_app_t *app)
{
    for (struct flare_reload_hook *h = app->reload_hooks; h != NULL; h = h->next)
        h->fn(h->ud);
}

static void reload_hooks_free(flare_app_t *app)
{
    while (app->reload_hooks != NULL) {
        struct flare_reload_hook *h = app->reload_hooks;
        app->reload_hooks = h->next;
        free(h);
    }
    app->reload_tail = NULL;
}

int flare__app_own(flare_app_t *app, void *ptr, void (*free_fn)(void *ptr))
{
    flare_owned_t *o = malloc(sizeof(*o));
    if (o == NULL) {
        free_fn(ptr);
        return FLARE_ENOMEM;
    }
    o->ptr = ptr;
    o->free_fn = free_fn;
    o->next = app->owned;
    app->owned = o;
    return 0;
}

void flare_app_free(flare_app_t *app)
{
    if (app == NULL)
        return;
    while (app->owned != NULL) {
        flare_owned_t *o = app->owned;
        app->owned = o->next;
        o->free_fn(o->ptr);
        free(o);
    }
    flare__modules_free_app(app);
    reload_hooks_free(app);
    flare__router_free(app->router);
    flare__chains_free(app);
    for (unsigned i = 0; i < app->nlisteners; i++) {
        free(app->listeners[i].addr);
        if (app->listeners[i].tls != NULL)
            flare__tls_free(app->listeners[i].tls);
    }
    free(app->listeners);
    for (size_t i = 0; i < app->nroutes; i++) {
        free(app->routes[i]->pattern);
        free(app->routes[i]);
    }
    free(app->routes);
    while (app->groups != NULL) {
        flare_group_t *g = app->groups;
        app->groups = g->next;
        free(g->prefix);
        free(g->mws.v);
        free(g);
    }
    for (unsigned i = 0; app->workers != NULL && i < app->nworkers; i++)
        free(app->workers[i].mw_stats);
    free(app->workers);
    if (app->stop_fd >= 0)
        close(app->stop_fd);
    free(app);
}
