/* flare_app_*: wires the layers together and runs the lifecycle.
 *
 * main thread: binds the listeners (errors are reported before any thread
 * starts), blocks SIGINT/SIGTERM and waits on a signalfd + stop eventfd,
 * then asks every worker to drain and joins them. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "server.h"

void flare_config_init(flare_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->workers = 0;
    cfg->max_conns = 100000;
    cfg->header_timeout_ms = 10000;
    cfg->body_timeout_ms = 30000;
    cfg->idle_timeout_ms = 60000;
    cfg->write_timeout_ms = 30000;
    cfg->drain_timeout_ms = 10000;
    cfg->max_request_line = 8192;
    cfg->max_head = 32768;
    cfg->max_headers = 100;
    cfg->max_body = 1024 * 1024;
    cfg->job_threads = 4;
    cfg->backlog = 4096;
}

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
    app->stop_fd = -1;
    app->router = flare__router_new();
    if (app->router == NULL) {
        free(app);
        flare__fail(FLARE_ENOMEM, 0, "flare_app_new: out of memory");
        return NULL;
    }
    return app;
}

static int add_route(flare_app_t *app, flare_method_t method, flare_group_t *group,
                     const char *pattern, flare_handler_fn fn, void *ud,
                     const flare_middleware_t *mws, size_t nmws)
{
    const char *prefix = group != NULL ? group->prefix : NULL;
    if (app == NULL || pattern == NULL || fn == NULL)
        return FLARE_EINVAL;
    if (atomic_load(&app->running))
        return FLARE_ESTATE;
    size_t pl = prefix != NULL ? strlen(prefix) : 0;
    size_t l = strlen(pattern);
    char *full = malloc(pl + l + 1);
    if (full == NULL)
        return FLARE_ENOMEM;
    if (pl > 0)
        memcpy(full, prefix, pl);
    memcpy(full + pl, pattern, l + 1);
    /* a group's root: "/api" + "/" registers "/api" */
    size_t fl = pl + l;
    if (pl > 0 && l == 1 && pattern[0] == '/')
        fl = pl;
    if (app->nroutes == app->caproutes) {
        size_t cap = app->caproutes != 0 ? app->caproutes * 2 : 16;
        flare_route_t **r = realloc(app->routes, cap * sizeof(*r));
        if (r == NULL) {
            free(full);
            return FLARE_ENOMEM;
        }
        app->routes = r;
        app->caproutes = cap;
    }
    flare_route_t *route = malloc(sizeof(*route));
    if (route == NULL) {
        free(full);
        return FLARE_ENOMEM;
    }
    memset(route, 0, sizeof(*route));
    route->fn = fn;
    route->ud = ud;
    route->method = method;
    route->group = group;
    int rc = 0;
    for (size_t i = 0; i < nmws && rc == 0; i++)
        rc = flare__mw_list_add(app, &route->own, &mws[i]);
    if (rc == 0)
        rc = flare__router_add(app->router, method, (flare_str_t){ full, fl }, route);
    free(full);
    if (rc != 0) {
        free(route->own.v);
        free(route);
        return rc;
    }
    app->routes[app->nroutes++] = route;
    return 0;
}

int flare_route(flare_app_t *app, flare_method_t method, const char *pattern, flare_handler_fn fn,
                void *ud)
{
    return add_route(app, method, NULL, pattern, fn, ud, NULL, 0);
}

int flare_route_mw(flare_app_t *app, flare_method_t method, const char *pattern,
                   flare_handler_fn fn, void *ud, const flare_middleware_t *mws, size_t nmws)
{
    if (nmws > 0 && mws == NULL)
        return FLARE_EINVAL;
    return add_route(app, method, NULL, pattern, fn, ud, mws, nmws);
}

int flare_use(flare_app_t *app, const flare_middleware_t *mw)
{
    if (app == NULL)
        return FLARE_EINVAL;
    if (atomic_load(&app->running))
        return FLARE_ESTATE;
    return flare__mw_list_add(app, &app->mws, mw);
}

int flare_group_use(flare_group_t *g, const flare_middleware_t *mw)
{
    if (g == NULL)
        return FLARE_EINVAL;
    if (atomic_load(&g->app->running))
        return FLARE_ESTATE;
    return flare__mw_list_add(g->app, &g->mws, mw);
}

size_t flare_app_mw_stats(flare_app_t *app, flare_mw_stats_t *out, size_t max)
{
    if (app == NULL)
        return 0;
    for (unsigned i = 0; i < app->nmw && i < max; i++) {
        flare_mw_stats_t st = { app->mw_names[i], 0, 0, 0 };
        for (unsigned k = 0; k < app->nworkers; k++) {
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

static flare_group_t *group_new(flare_app_t *app, flare_group_t *parent, const char *prefix)
{
    const char *base = parent != NULL ? parent->prefix : NULL;
    if (app == NULL || prefix == NULL || prefix[0] != '/')
        return NULL;
    size_t bl = base != NULL ? strlen(base) : 0, pl = strlen(prefix);
    while (pl > 1 && prefix[pl - 1] == '/')
        pl--; /* "/api/" and "/api" are the same group */
    flare_group_t *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    g->prefix = malloc(bl + pl + 1);
    if (g->prefix == NULL) {
        free(g);
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
    return group_new(app, NULL, prefix);
}

flare_group_t *flare_group_sub(flare_group_t *parent, const char *prefix)
{
    if (parent == NULL)
        return NULL;
    return group_new(parent->app, parent, prefix);
}

int flare_group_route(flare_group_t *g, flare_method_t method, const char *pattern,
                      flare_handler_fn fn, void *ud)
{
    if (g == NULL || pattern == NULL || pattern[0] != '/')
        return FLARE_EINVAL;
    return add_route(g->app, method, g, pattern, fn, ud, NULL, 0);
}

int flare_app_port(const flare_app_t *app)
{
    return app->port;
}

/* ---- workers ---- */

static void sweep_timer(void *ud)
{
    flare_worker_t *w = ud;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    flare__worker_update_date(w, ts.tv_sec);
    flare__conn_sweep(w);
    if (w->draining && ((w->nconns == 0 && w->nextra == 0) || w->loop.now >= w->drain_deadline)) {
        w->loop.stop = true; /* past the deadline, worker_main closes the rest */
        return;
    }
    w->loop.deferred = true;
    flare__loop_timer(&w->loop, w->draining ? 100 : 1000, sweep_timer, w);
}

static void after_events(void *ud)
{
    flare_worker_t *w = ud;
    flare__conn_free_dead(w);
    if (w->draining && w->nconns == 0 && w->nextra == 0)
        w->loop.stop = true;
}

static void worker_stop_task(void *ud)
{
    flare_worker_t *w = ud;
    if (w->draining)
        return;
    w->draining = true;
    w->drain_deadline = w->loop.now + w->app->cfg.drain_timeout_ms;
    if (w->listen_io.fd >= 0) {
        flare__loop_del(&w->loop, &w->listen_io);
        close(w->listen_io.fd);
        w->listen_io.fd = -1;
    }
    flare__conn_drain(w);
    if (w->app->ws_drain != NULL)
        w->app->ws_drain(w);
    if (w->nconns == 0 && w->nextra == 0)
        w->loop.stop = true;
}

static void *worker_main(void *arg)
{
    flare_worker_t *w = arg;
    sweep_timer(w);
    flare__loop_run(&w->loop);
    /* drain deadline passed or all done: close whatever is left */
    while (w->conns != NULL)
        flare__conn_close(w->conns);
    flare__conn_free_dead(w);
    if (w->app->ws_dispose != NULL)
        w->app->ws_dispose(w);
    return NULL;
}

static void worker_dispose(flare_worker_t *w)
{
    if (w->listen_io.fd >= 0)
        close(w->listen_io.fd);
    if (w->reserve_fd >= 0)
        close(w->reserve_fd);
    flare__loop_dispose(&w->loop);
    /* exchanges orphaned by connections closed at shutdown and never
     * completed by their handler are the handler's leak; recycled ones: */
    while (w->free_ex != NULL) {
        struct flare_req *ex = w->free_ex;
        w->free_ex = ex->next;
        flare__arena_dispose(&ex->arena);
        flare__buf_free(&ex->bodybuf);
        flare__buf_free(&ex->out);
        free(ex->headers);
        free(ex);
    }
    while (w->bufs != NULL) {
        flare_pool_buf_t *b = w->bufs;
        w->bufs = b->next;
        free(b);
    }
}

static unsigned cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

int flare_app_run(flare_app_t *app, const char *listen_addr)
{
    if (app == NULL)
        return FLARE_EINVAL;
    bool expected = false;
    if (!atomic_compare_exchange_strong(&app->running, &expected, true))
        return FLARE_ESTATE;
    int rc = 0;
    unsigned n = app->cfg.workers != 0 ? app->cfg.workers : cpu_count();
    sigset_t mask, old;
    int sfd = -1;
    unsigned started = 0, inited = 0;
    bool masked = false;

    rc = flare__chains_build(app);
    if (rc != 0)
        goto out;
    app->workers = calloc(n, sizeof(*app->workers));
    if (app->workers == NULL) {
        rc = FLARE_ENOMEM;
        goto out;
    }
    app->nworkers = n;
    for (unsigned i = 0; i < n; i++) {
        flare_worker_t *w = &app->workers[i];
        w->listen_io.fd = -1;
        w->reserve_fd = -1;
    }
    /* listeners first: a bad address or a taken port fails before threads */
    int port = -1;
    rc = flare__listen_probe(listen_addr, &port);
    if (rc != 0)
        goto out;
    for (unsigned i = 0; i < n; i++) {
        int fd = flare__listen_socket(listen_addr, port, app->cfg.backlog, &port);
        if (fd < 0) {
            rc = fd;
            goto out;
        }
        app->workers[i].listen_io.fd = fd;
    }
    app->port = port;
    for (unsigned i = 0; i < n; i++) {
        flare_worker_t *w = &app->workers[i];
        w->app = app;
        w->id = i;
        if (flare__loop_init(&w->loop) != 0) {
            rc = FLARE_ESYS;
            goto out;
        }
        inited++;
        w->loop.after_events = after_events;
        w->loop.after_events_ud = w;
        w->listen_io.cb = flare__worker_accept_cb;
        if (app->cfg.mw_stats && app->nmw > 0) {
            w->mw_stats = calloc(app->nmw, sizeof(*w->mw_stats));
            if (w->mw_stats == NULL) {
                rc = FLARE_ENOMEM;
                goto out;
            }
        }
        w->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (flare__loop_add(&w->loop, &w->listen_io, EPOLLIN) != 0) {
            rc = FLARE_ESYS;
            goto out;
        }
    }
    app->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (app->stop_fd < 0) {
        rc = FLARE_ESYS;
        goto out;
    }
    /* Every thread we start (workers, job pool) inherits a mask with
     * SIGINT/SIGTERM blocked, so only the signalfd below sees them. SIGPIPE
     * is ignored process-wide (writes to a closed socket return EPIPE). */
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &mask, &old);
    masked = true;
    sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    rc = flare__jobs_start(app);
    if (rc != 0)
        goto out;
    for (unsigned i = 0; i < n; i++) {
        if (pthread_create(&app->workers[i].thread, NULL, worker_main, &app->workers[i]) != 0) {
            rc = FLARE_ETHREAD;
            break;
        }
        started++;
    }

    if (rc == 0) {
        struct pollfd pfd[2] = { { sfd, POLLIN, 0 }, { app->stop_fd, POLLIN, 0 } };
        for (;;) {
            int pr = poll(pfd, sfd >= 0 ? 2 : 1, -1);
            if (pr < 0 && errno != EINTR)
                break;
            if (pr > 0)
                break;
        }
    }
    for (unsigned i = 0; i < started; i++)
        flare__loop_post(&app->workers[i].loop, worker_stop_task, &app->workers[i]);
    for (unsigned i = 0; i < started; i++)
        pthread_join(app->workers[i].thread, NULL);
    flare__jobs_stop(app);
out:
    if (sfd >= 0) {
        /* consume the signal so it does not fire when unblocked */
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof(si)) > 0) {
        }
        close(sfd);
    }
    if (masked)
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (app->workers != NULL) {
        for (unsigned i = 0; i < app->nworkers; i++) {
            flare_worker_t *w = &app->workers[i];
            free(w->mw_stats);
            if (i < inited) {
                worker_dispose(w);
            } else {
                if (w->listen_io.fd >= 0)
                    close(w->listen_io.fd);
                if (w->reserve_fd >= 0)
                    close(w->reserve_fd);
            }
        }
        free(app->workers);
        app->workers = NULL;
        app->nworkers = 0;
    }
    if (app->stop_fd >= 0) {
        close(app->stop_fd);
        app->stop_fd = -1;
    }
    atomic_store(&app->running, false);
    return rc;
}

void flare_app_stop(flare_app_t *app)
{
    if (app == NULL || app->stop_fd < 0)
        return;
    uint64_t one = 1;
    ssize_t r = write(app->stop_fd, &one, sizeof(one));
    (void)r;
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
    if (app->ws_free != NULL)
        app->ws_free(app);
    flare__router_free(app->router);
    flare__chains_free(app);
    for (size_t i = 0; i < app->nroutes; i++)
        free(app->routes[i]);
    free(app->routes);
    while (app->groups != NULL) {
        flare_group_t *g = app->groups;
        app->groups = g->next;
        free(g->prefix);
        free(g->mws.v);
        free(g);
    }
    free(app);
}

/* ---- worker services ---- */

int flare_worker_timer(flare_worker_t *w, uint64_t ms, flare_task_fn fn, void *ud)
{
    if (w == NULL || fn == NULL)
        return FLARE_EINVAL;
    return flare__loop_timer(&w->loop, ms, fn, ud);
}

int flare_worker_post(flare_worker_t *w, flare_task_fn fn, void *ud)
{
    if (w == NULL || fn == NULL)
        return FLARE_EINVAL;
    return flare__loop_post(&w->loop, fn, ud);
}

unsigned flare_worker_id(const flare_worker_t *w)
{
    return w->id;
}
