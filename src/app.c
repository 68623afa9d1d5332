/* flare_app_*: wires the layers together and runs the lifecycle.
 *
 * main thread: binds the listeners (errors are reported before any thread
 * starts), blocks SIGINT/SIGTERM/SIGUSR2 and waits on a signalfd + stop
 * eventfd (running an upgrade on SIGUSR2, upgrade.c, and systemd's watchdog
 * meanwhile), then asks every worker to drain and joins them. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <sched.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "flare/tls.h"
#include "app.h"
#include "http1/conn.h"
#include "http2/h2.h"
#include "sd.h"
#include "upgrade.h"

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
    cfg->max_conn_body = 0; /* 4 x max_body, whatever max_body becomes (flare_app_new) */
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

int flare_app_port(const flare_app_t *app)
{
    return atomic_load(&app->port);
}

/* ---- the gate: when other threads may reach the workers ---- */

#define GATE_OPEN ((uint64_t)1 << 63)

int flare__app_enter(flare_app_t *app)
{
    uint64_t v = atomic_fetch_add_explicit(&app->gate, 1, memory_order_acquire);
    if (v & GATE_OPEN)
        return 0;
    atomic_fetch_sub_explicit(&app->gate, 1, memory_order_release);
    return FLARE_ESTATE;
}

void flare__app_leave(flare_app_t *app)
{
    atomic_fetch_sub_explicit(&app->gate, 1, memory_order_release);
}

/* After every worker has started: what they are is now visible to whoever
 * enters (the release pairs with enter's acquire). */
static void gate_open(flare_app_t *app)
{
    atomic_fetch_or_explicit(&app->gate, GATE_OPEN, memory_order_release);
}

/* No caller enters from now on; waits for those inside (each holds it for a
 * post or a sum of counters: microseconds) before anything is freed. */
static void gate_close(flare_app_t *app)
{
    atomic_fetch_and_explicit(&app->gate, ~GATE_OPEN, memory_order_acq_rel);
    while ((atomic_load_explicit(&app->gate, memory_order_acquire) & ~GATE_OPEN) != 0)
        sched_yield();
}

/* ---- workers ---- */

/* The periodic sweep. It is re-armed first, on an embedded timer, so that
 * nothing it does (closing connections, running their callbacks) can keep
 * the next sweep from happening: a lost re-arm would end all timeouts. */
/* After a burst the caches hold what its peak needed: each sweep frees
 * the free exchanges and connection buffers past what the connections
 * still open may need at once (TRIM_EX_PER_CONN exchanges and
 * TRIM_BUFS_PER_CONN buffers each, a small floor at the least), and asks
 * malloc to give the pages back when that was a lot (it keeps freed memory
 * of a thread's arena otherwise). The bound follows the open connections,
 * not a low-water mark of the lists: such a mark costs a compare at every
 * take, 12 instructions per HTTP/1.1 keep-alive request (1,246 -> 1,258 in
 * bench/guard.sh), for a bound that differs only while more exchanges per
 * connection are in flight than the per-connection allowance (HTTP/2
 * streams, deep pipelining): those are freed at a sweep and allocated
 * again when needed. The HTTP/2 block lists keep their low-water marks
 * (src/http2/mem.c): HTTP/1.1 never takes from them. */
#define TRIM_KEEP_EX       16
#define TRIM_KEEP_BUFS     16
#define TRIM_EX_PER_CONN   4
#define TRIM_BUFS_PER_CONN 2
#define TRIM_RELEASE       (1u << 20)

static size_t ex_free(struct flare_req *ex)
{
    size_t n = sizeof(*ex) + ex->bodybuf.cap + ex->out.cap;
    flare__arena_dispose(&ex->arena);
    flare__buf_free(&ex->bodybuf);
    flare__buf_free(&ex->out);
    free(ex->headers);
    free(ex);
    return n;
}

static void worker_trim(flare_worker_t *w)
{
    size_t freed = 0;
    unsigned conns = w->nconns + w->nmodule_conns;
    unsigned keep =
        conns * TRIM_EX_PER_CONN > TRIM_KEEP_EX ? conns * TRIM_EX_PER_CONN : TRIM_KEEP_EX;
    unsigned drop = w->nfree_ex > keep ? w->nfree_ex - keep : 0;
    for (unsigned i = 0; i < drop; i++) {
        struct flare_req *ex = w->free_ex;
        w->free_ex = ex->next;
        freed += ex_free(ex);
    }
    w->nfree_ex -= drop;
    keep =
        conns * TRIM_BUFS_PER_CONN > TRIM_KEEP_BUFS ? conns * TRIM_BUFS_PER_CONN : TRIM_KEEP_BUFS;
    freed += flare__bufpool_trim(&w->pool, keep);
    freed += flare__h2_mem_trim(w);
    w->trimmed += freed;
    if (w->trimmed >= TRIM_RELEASE) {
        w->trimmed = 0;
#ifndef FLARE__SANITIZED
        malloc_trim(0);
#endif
    }
}

static void sweep_timer(void *ud)
{
    flare_worker_t *w = ud;
    flare__timer_start(&w->loop, &w->sweep_timer, w->draining ? 100 : 1000);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    flare__worker_update_date(w, ts.tv_sec);
    flare__conn_sweep(w);
    worker_trim(w);
    if (w->draining &&
        ((w->nconns == 0 && w->nmodule_conns == 0) || w->loop.now >= w->drain_deadline)) {
        w->loop.stop = true; /* past the deadline, worker_main closes the rest */
        return;
    }
    w->loop.deferred = true;
}

static void after_events(void *ud)
{
    flare_worker_t *w = ud;
    flare__conn_free_dead(w);
    if (w->dead_watches != NULL)
        flare__watch_free_dead(w);
    if (w->draining && w->nconns == 0 && w->nmodule_conns == 0)
        w->loop.stop = true;
}

static void worker_stop_task(void *ud)
{
    flare_worker_t *w = ud;
    if (w->draining)
        return;
    w->draining = true;
    w->drain_deadline = w->loop.now + w->app->cfg.drain_timeout_ms;
    for (unsigned i = 0; w->lios != NULL && i < w->nlios; i++) {
        if (w->lios[i].io.fd >= 0) {
            flare__loop_del(&w->loop, &w->lios[i].io);
            close(w->lios[i].io.fd);
            w->lios[i].io.fd = -1;
        }
    }
    flare__conn_drain(w);
    flare__modules_drain_worker(w);
    flare__timer_start(&w->loop, &w->sweep_timer, 100); /* check progress often */
    if (w->nconns == 0 && w->nmodule_conns == 0)
        w->loop.stop = true;
}

_Thread_local flare_worker_t *flare__worker_self;

bool flare__worker_on_thread(const flare_worker_t *w)
{
    return w == flare__worker_self;
}

static void *worker_main(void *arg)
{
    flare_worker_t *w = arg;
    flare__worker_self = w;
    sweep_timer(w);
    flare__loop_run(&w->loop);
    /* drain deadline passed or all done: close whatever is left */
    while (w->conns != NULL)
        flare__conn_close(w->conns);
    flare__conn_free_dead(w);
    flare__modules_dispose_worker(w);
    flare__handles_dispose(w); /* what the user left: stopped, freed, not called */
    flare__worker_self = NULL;
    return NULL;
}

/* Resets the per-run part of a worker (everything after mw_stats). */
static void worker_reset(flare_worker_t *w)
{
    size_t off = offsetof(flare_worker_t, loop);
    memset((char *)w + off, 0, sizeof(*w) - off);
    w->reserve_fd = -1;
}

/* Closes what a run opened for w; `inited`: its loop exists. */
static void worker_dispose(flare_worker_t *w, bool inited)
{
    for (unsigned i = 0; w->lios != NULL && i < w->nlios; i++) {
        if (w->lios[i].io.fd >= 0)
            close(w->lios[i].io.fd);
    }
    free(w->lios);
    w->lios = NULL;
    if (w->reserve_fd >= 0) {
        close(w->reserve_fd);
        w->reserve_fd = -1;
    }
    if (!inited)
        return;
    flare__timer_stop(&w->loop, &w->sweep_timer);
    flare__timer_stop(&w->loop, &w->resume_timer);
    /* again, for a worker whose thread never ran */
    flare__modules_dispose_worker(w);
    flare__handles_dispose(w);
    flare__loop_dispose(&w->loop);
    flare__worker_free_memory(w);
}

/* Exchanges orphaned by connections closed at shutdown and still owed a
 * response: the timer or watcher that would have completed them was
 * cancelled, so they are released here (their cleanups run). Then the
 * recycled ones, the HTTP/2 block lists and the connection buffers. */
void flare__worker_free_memory(flare_worker_t *w)
{
    while (w->orphans != NULL) {
        struct flare_req *ex = w->orphans;
        ex->flags |= EX_SENT;
        flare__ex_put(w, ex);
    }
    while (w->free_ex != NULL) {
        struct flare_req *ex = w->free_ex;
        w->free_ex = ex->next;
        ex_free(ex);
    }
    w->nfree_ex = 0;
    flare__h2_mem_dispose(w);
    flare__bufpool_dispose(&w->pool);
}

static unsigned cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

/* The first run makes the workers; later runs reuse them (same count), so a
 * worker pointer stays valid until flare_app_free. */
static int workers_alloc(flare_app_t *app)
{
    if (app->workers != NULL)
        return 0;
    unsigned n = flare_app_workers(app);
    flare_worker_t *ws = calloc(n, sizeof(*ws));
    if (ws == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_app_run: out of memory for %u workers", n);
    for (unsigned i = 0; i < n; i++) {
        ws[i].app = app;
        ws[i].id = i;
        ws[i].reserve_fd = -1; /* a run that fails before worker_setup closes no fd 0 */
        if (app->cfg.mw_stats && app->nmw > 0) {
            ws[i].mw_stats = calloc(app->nmw, sizeof(*ws[i].mw_stats));
            if (ws[i].mw_stats == NULL) {
                for (unsigned k = 0; k < i; k++)
                    free(ws[k].mw_stats);
                free(ws);
                return flare__fail(FLARE_ENOMEM, 0, "flare_app_run: out of memory");
            }
        }
    }
    app->workers = ws;
    app->nworkers = n;
    return 0;
}

/* One run's worker: listeners, loop, timers, EMFILE reserve. */
static int worker_setup(flare_worker_t *w, bool *inited)
{
    worker_reset(w);
    int rc = flare__worker_listen(w); /* bound, or adopted (socket activation, upgrade) */
    if (rc != 0)
        return rc;
    rc = flare__loop_init(&w->loop);
    if (rc != 0)
        return rc;
    *inited = true;
    w->handles_open = true;
    w->loop.after_events = after_events;
    w->loop.after_events_ud = w;
    flare__timer_init(&w->sweep_timer, sweep_timer, w);
    flare__timer_init(&w->resume_timer, flare__listener_resume, w);
    w->stop_node.fn = worker_stop_task;
    w->stop_node.ud = w;
    w->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (w->reserve_fd < 0)
        return flare__fail(FLARE_ESYS, errno, "open /dev/null (descriptor reserve)");
    for (unsigned i = 0; i < w->nlios; i++) {
        if (flare__loop_add(&w->loop, &w->lios[i].io, FLARE_IO_READ) != 0)
            return flare__fail(FLARE_ESYS, errno, "watching the listener");
    }
    return flare__modules_init_worker(w);
}

/* ---- signals ----
 *
 * SIGINT and SIGTERM stop the app. They are blocked in the thread that runs
 * the app before any thread starts, so every worker and job thread inherits
 * the mask and only the signalfd sees them. A thread the user started
 * earlier may not block them; the kernel may deliver the signal there, so a
 * handler is installed too, for the whole process: it wakes the same stop
 * eventfd. One running app owns the handler at a time. */

static _Atomic int signal_stop_fd = -1;

/* SIGUSR2 caught by the handler (a thread that does not block it): the
 * stop eventfd gets this instead of 1, and the waiting loop tells the two
 * apart by the counter's high half. */
#define STOP_FD_UPGRADE ((uint64_t)1 << 32)

static void on_stop_signal(int sig)
{
    int saved = errno;
    int fd = atomic_load(&signal_stop_fd);
    if (fd >= 0) {
        uint64_t one = sig == SIGUSR2 ? STOP_FD_UPGRADE : 1;
        ssize_t r = write(fd, &one, sizeof(one));
        (void)r;
    }
    errno = saved;
}

/* SIGHUP delivered to a thread that does not block it: the same path as
 * one read from the signalfd (the run loop reads this eventfd too). */
static _Atomic int signal_hup_fd = -1;

static void on_hup_signal(int sig)
{
    (void)sig;
    int saved = errno;
    int fd = atomic_load(&signal_hup_fd);
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t r = write(fd, &one, sizeof(one));
        (void)r;
    }
    errno = saved;
}

typedef struct run_signals {
    sigset_t old_mask;
    struct sigaction old_hup; /* reload */
    int hup_fd;               /* reload: eventfd woken by on_hup_signal */
    struct sigaction old_int, old_term, old_pipe;
    struct sigaction old_usr2; /* upgrade */
    bool masked, handlers, pipe;
    int sfd;
} run_signals_t;

static int signals_take(flare_app_t *app, run_signals_t *rs)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);  /* reload: see run_reload_hooks */
    sigaddset(&mask, SIGUSR2); /* upgrade (upgrade.c) */
    /* writes to a closed socket return EPIPE instead of killing the process */
    struct sigaction ign = { .sa_handler = SIG_IGN };
    sigemptyset(&ign.sa_mask);
    if (sigaction(SIGPIPE, &ign, &rs->old_pipe) != 0)
        return flare__fail(FLARE_ESYS, errno, "sigaction(SIGPIPE)");
    rs->pipe = true;
    int rc = pthread_sigmask(SIG_BLOCK, &mask, &rs->old_mask);
    if (rc != 0)
        return flare__fail(FLARE_ESYS, rc, "pthread_sigmask");
    rs->masked = true;
    rs->sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (rs->sfd < 0)
        return flare__fail(FLARE_ESYS, errno, "signalfd");
    int expected = -1;
    if (atomic_compare_exchange_strong(&signal_stop_fd, &expected, app->stop_fd)) {
        struct sigaction sa = { .sa_handler = on_stop_signal, .sa_flags = SA_RESTART };
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGINT, &sa, &rs->old_int) != 0) {
            atomic_store(&signal_stop_fd, -1);
            return flare__fail(FLARE_ESYS, errno, "sigaction(SIGINT)");
        }
        if (sigaction(SIGTERM, &sa, &rs->old_term) != 0) {
            int e = errno;
            sigaction(SIGINT, &rs->old_int, NULL);
            atomic_store(&signal_stop_fd, -1);
            return flare__fail(FLARE_ESYS, e, "sigaction(SIGTERM)");
        }
        if (sigaction(SIGUSR2, &sa, &rs->old_usr2) != 0) {
            int e = errno;
            sigaction(SIGINT, &rs->old_int, NULL);
            sigaction(SIGTERM, &rs->old_term, NULL);
            atomic_store(&signal_stop_fd, -1);
            return flare__fail(FLARE_ESYS, e, "sigaction(SIGUSR2)");
        }
        /* reload: a SIGHUP reaching a thread that does not block it would
         * otherwise end the process */
        rs->hup_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        struct sigaction hup = { .sa_handler = on_hup_signal, .sa_flags = SA_RESTART };
        sigemptyset(&hup.sa_mask);
        if (rs->hup_fd < 0 || sigaction(SIGHUP, &hup, &rs->old_hup) != 0) {
            int e = errno;
            sigaction(SIGINT, &rs->old_int, NULL);
            sigaction(SIGTERM, &rs->old_term, NULL);
            sigaction(SIGUSR2, &rs->old_usr2, NULL);
            atomic_store(&signal_stop_fd, -1);
            return flare__fail(FLARE_ESYS, e, "sigaction(SIGHUP)");
        }
        atomic_store(&signal_hup_fd, rs->hup_fd);
        rs->handlers = true;
    }
    return 0;
}

static void signals_give_back(run_signals_t *rs)
{
    if (rs->sfd >= 0) {
        /* consume the signal so it does not fire when unblocked */
        struct signalfd_siginfo si;
        while (read(rs->sfd, &si, sizeof(si)) > 0) {
        }
        close(rs->sfd);
    }
    if (rs->handlers) {
        sigaction(SIGINT, &rs->old_int, NULL);
        sigaction(SIGTERM, &rs->old_term, NULL);
        sigaction(SIGUSR2, &rs->old_usr2, NULL);
        atomic_store(&signal_stop_fd, -1);
        /* reload */
        sigaction(SIGHUP, &rs->old_hup, NULL);
        atomic_store(&signal_hup_fd, -1);
    }
    if (rs->hup_fd >= 0)
        close(rs->hup_fd);
    if (rs->masked)
        pthread_sigmask(SIG_SETMASK, &rs->old_mask, NULL);
    if (rs->pipe)
        sigaction(SIGPIPE, &rs->old_pipe, NULL);
}

/* ---- reload (SIGHUP) ---- */

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

static void run_reload_hooks(flare_app_t *app)
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

/* Waits for a stop: SIGINT/SIGTERM, flare_app_stop, or the hand-over of
 * an upgrade (SIGUSR2, then the new process's READY=1: *handover is set).
 * Meanwhile it runs the upgrade and systemd's watchdog (upgrade.c), and a
 * SIGHUP (from the signalfd, or through hup_fd when another thread took it)
 * runs the reload hooks here and goes on waiting. 0, or FLARE_ESYS when
 * poll itself fails (the app then stops too: it cannot be stopped later). */
static int wait_for_stop(flare_app_t *app, int sfd, int hup_fd, flare_upgrade_t *up, bool *handover)
{
    for (;;) {
        struct pollfd pfd[4] = { { app->stop_fd, POLLIN, 0 },
                                 { sfd, POLLIN, 0 },
                                 { flare__upgrade_fd(up), POLLIN, 0 },
                                 { hup_fd, POLLIN, 0 } };
        int pr = poll(pfd, 4, flare__upgrade_timeout(up));
        if (pr < 0 && errno != EINTR)
            return flare__fail(FLARE_ESYS, errno, "poll (waiting for a stop)");
        bool reload = false;
        if (pr > 0 && (pfd[0].revents & POLLIN)) {
            uint64_t v = 0;
            if (read(app->stop_fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
                v = 1;
            if (v >= STOP_FD_UPGRADE)
                flare__upgrade_start(up, app);
            if ((v & (STOP_FD_UPGRADE - 1)) != 0)
                return 0;
        }
        if (pr > 0 && (pfd[3].revents & POLLIN)) {
            uint64_t v;
            while (read(hup_fd, &v, sizeof(v)) > 0) {
            }
            reload = true;
        }
        if (pr > 0 && (pfd[1].revents & POLLIN)) {
            struct signalfd_siginfo si;
            ssize_t n = read(sfd, &si, sizeof(si));
            if (n == (ssize_t)sizeof(si) && si.ssi_signo == SIGUSR2)
                flare__upgrade_start(up, app);
            else if (n == (ssize_t)sizeof(si) && si.ssi_signo == SIGHUP)
                reload = true;
            else if (n == (ssize_t)sizeof(si))
                return 0; /* SIGINT, SIGTERM */
        }
        if (reload) {
            flare__sd_reloading();
            run_reload_hooks(app);
            flare__sd_ready();
        }
        if (flare__upgrade_poll(up, app)) {
            *handover = true;
            return 0;
        }
    }
}

/* This run's listeners: the run's own address first (when given), then
 * those added with flare_app_listen; each probed, so a bad address or a
 * taken port fails before any thread starts, and port 0 becomes the port
 * every worker binds. */
static int listeners_begin(flare_app_t *app, const char *listen_addr)
{
    app->active = calloc(app->nlisteners + 1, sizeof(*app->active));
    if (app->active == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_app_run: out of memory");
    app->nactive = 0;
    if (listen_addr != NULL) {
        app->run_listener.name = listen_addr;
        app->run_listener.tls = NULL;
        app->active[app->nactive++] = &app->run_listener;
        atomic_store(&app->run_addr_used, true);
    }
    for (unsigned i = 0; i < app->nlisteners; i++)
        app->active[app->nactive++] = &app->listeners[i];
    if (app->nactive == 0)
        return flare__fail(FLARE_EADDR, 0,
                           "flare_app_run: no listen address (pass one, or call flare_app_listen)");
    /* sockets inherited from systemd or from the process we upgrade */
    int rc = flare__listen_adopt(app->active, app->nactive);
    if (rc != 0)
        return rc;
    for (unsigned i = 0; i < app->nactive; i++) {
        flare_listener_t *l = app->active[i];
        l->on_accept = flare__conn_open; /* every listener speaks HTTP/1.1 */
        int port = -1;
        if (l->nfds > 0) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof(ss);
            if (getsockname(l->fds[0], (struct sockaddr *)&ss, &sl) == 0)
                port = ss.ss_family == AF_UNIX
                           ? 0
                           : ntohs(((struct sockaddr_in *)&ss)->sin_port); /* same place in v6 */
        } else if (flare__listen_is_unix(l->name)) {
            /* one socket for every worker, bound now (no SO_REUSEPORT for AF_UNIX) */
            if ((rc = flare__listen_unix(l, app->cfg.backlog)) != 0)
                return rc;
            port = 0;
        } else if ((rc = flare__listen_probe(l->name, &port)) != 0)
            return rc;
        atomic_store(&l->port, port);
    }
    return 0;
}

/* `handover`: an upgrade's new process holds the sockets now, and the unix
 * socket files stay; `served`: this run's workers ran (an inherited file is
 * removed only then: a new process that failed leaves the old one on it). */
static void listeners_end(flare_app_t *app, bool handover, bool served)
{
    flare__listen_adopt_end(app->active, app->nactive);
    if (!handover)
        flare__listen_unlink(app->active, app->nactive, served);
    for (unsigned i = 0; i < app->nactive; i++)
        atomic_store(&app->active[i]->port, 0);
    atomic_store(&app->run_addr_used, false);
    app->run_listener.name = NULL;
    free(app->active);
    app->active = NULL;
    app->nactive = 0;
}

static int add_listener(flare_app_t *app, const char *addr, const flare_tls_config_t *tls,
                        bool admin)
{
    const char *fn = admin ? "flare_app_admin_listen" : "flare_app_listen";
    if (app == NULL || addr == NULL)
        return flare__fail(FLARE_EINVAL, 0, "%s: %s is NULL", fn, app == NULL ? "app" : "addr");
    if (atomic_load(&app->running))
        return flare__fail(FLARE_ESTATE, 0, "%s: the app is running", fn);
    if (admin && app->has_admin)
        return flare__fail(FLARE_EEXIST, 0, "%s: the app has an admin listener already", fn);
    int port;
    int rc = flare__listen_addr_check(addr, &port);
    if (rc != 0)
        return rc;
    flare_listener_t *v = realloc(app->listeners, (app->nlisteners + 1) * sizeof(*v));
    if (v == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "%s: out of memory", fn);
    app->listeners = v;
    flare_listener_t *l = &v[app->nlisteners];
    memset(l, 0, sizeof(*l));
    l->addr = strdup(addr);
    if (l->addr == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "%s: out of memory", fn);
    l->name = l->addr;
    if (tls != NULL && (rc = flare__tls_new(&l->tls, tls)) != 0) {
        free(l->addr);
        return rc;
    }
    l->admin = admin;
    app->has_admin |= admin;
    app->nlisteners++;
    return 0;
}

int flare_app_listen(flare_app_t *app, const char *addr, const flare_tls_config_t *tls)
{
    return add_listener(app, addr, tls, false);
}

int flare_app_admin_listen(flare_app_t *app, const char *addr)
{
    return add_listener(app, addr, NULL, true);
}

int flare_app_admin_port(const flare_app_t *app)
{
    for (unsigned i = 0; app != NULL && i < app->nlisteners; i++) {
        if (app->listeners[i].admin)
            return atomic_load(&app->listeners[i].port);
    }
    return 0;
}

int flare_app_listener_port(const flare_app_t *app, unsigned i)
{
    if (app == NULL)
        return 0;
    if (atomic_load(&((flare_app_t *)app)->run_addr_used)) {
        if (i == 0)
            return atomic_load(&((flare_app_t *)app)->run_listener.port);
        i--;
    }
    return i < app->nlisteners ? atomic_load(&app->listeners[i].port) : 0;
}

int flare_app_tls_reload(flare_app_t *app)
{
    if (app == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_app_tls_reload: app is NULL");
    int rc = 0;
    for (unsigned i = 0; i < app->nlisteners && rc == 0; i++) {
        if (app->listeners[i].tls != NULL)
            rc = flare__tls_reload(app->listeners[i].tls);
    }
    return rc;
}

int flare_app_tls_stats(flare_app_t *app, flare_tls_stats_t *out)
{
    if (app == NULL || out == NULL)
        return FLARE_EINVAL;
    memset(out, 0, sizeof(*out));
    /* the worker array lives until flare_app_free once made */
    for (unsigned i = 0; app->workers != NULL && i < app->nworkers; i++) {
        const flare_tls_counters_t *c = &app->workers[i].tls_counters;
        out->handshakes += atomic_load_explicit(&c->handshakes, memory_order_relaxed);
        out->resumed += atomic_load_explicit(&c->resumed, memory_order_relaxed);
        out->handshake_errors += atomic_load_explicit(&c->handshake_errors, memory_order_relaxed);
        out->handshake_timeouts +=
            atomic_load_explicit(&c->handshake_timeouts, memory_order_relaxed);
        out->plaintext_http += atomic_load_explicit(&c->plaintext_http, memory_order_relaxed);
    }
    return 0;
}

int flare_app_run(flare_app_t *app, const char *listen_addr)
{
    if (app == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_app_run: app is NULL");
    bool expected = false;
    if (!atomic_compare_exchange_strong(&app->running, &expected, true))
        return flare__fail(FLARE_ESTATE, 0, "flare_app_run: the app is already running");
    unsigned started = 0, inited = 0;
    bool handover = false, served = false;
    run_signals_t rs = { .sfd = -1, .hup_fd = -1 };
    atomic_store(&app->port, 0);
    atomic_store_explicit(&app->stopping, false, memory_order_relaxed);
    flare__upgrade_capture(); /* the path and argv an upgrade starts again */

    int rc = flare__sd_init(); /* NOTIFY_SOCKET, WATCHDOG_*, LISTEN_* */
    if (rc != 0)
        goto out;
    rc = flare__chains_build(app);
    if (rc != 0)
        goto out;
    rc = workers_alloc(app);
    if (rc != 0)
        goto out;
    /* signals before listeners: once the port accepts, a SIGTERM must stop
     * the app cleanly, and the module threads worker_setup may start
     * inherit the blocked mask */
    rc = signals_take(app, &rs);
    if (rc != 0)
        goto out;
    /* listeners first: a bad address or a taken port fails before threads */
    rc = listeners_begin(app, listen_addr);
    if (rc != 0)
        goto out;
    for (unsigned i = 0; i < app->nworkers; i++) {
        bool ok = false;
        rc = worker_setup(&app->workers[i], &ok);
        inited += ok;
        if (rc != 0)
            goto out;
    }
    atomic_store(&app->port, atomic_load(&app->active[0]->port));
    rc = flare__jobs_start(app);
    if (rc != 0)
        goto out;
    for (unsigned i = 0; i < app->nworkers; i++) {
        int e = pthread_create(&app->workers[i].thread, NULL, worker_main, &app->workers[i]);
        if (e != 0) {
            rc =
                flare__fail(FLARE_ETHREAD, e, "pthread_create (worker %u of %u)", i, app->nworkers);
            break;
        }
        started++;
    }
    flare_upgrade_t up;
    flare__upgrade_init(&up);
    if (rc == 0) {
        gate_open(app);
        flare__sd_ready(); /* every worker runs: systemd (or the old process) may go on */
        served = true;
        rc = wait_for_stop(app, rs.sfd, rs.hup_fd, &up, &handover);
        if (!handover)
            flare__sd_notify("STOPPING=1"); /* not after a hand-over: the new one is main */
    }
    flare__upgrade_dispose(&up);
    /* /readyz answers 503 from here on, before any worker has seen the drain */
    atomic_store_explicit(&app->stopping, true, memory_order_relaxed);
    /* the stop nodes are embedded: asking a worker to drain cannot fail */
    for (unsigned i = 0; i < started; i++)
        flare__loop_post_node(&app->workers[i].loop, &app->workers[i].stop_node);
    for (unsigned i = 0; i < started; i++)
        pthread_join(app->workers[i].thread, NULL);
    flare__jobs_stop(app);
out:
    /* From here no other thread reaches a worker: what they posted before
     * is run by the loops' dispose. */
    gate_close(app);
    signals_give_back(&rs);
    if (app->workers != NULL) {
        for (unsigned i = 0; i < app->nworkers; i++)
            worker_dispose(&app->workers[i], i < inited);
    }
    listeners_end(app, handover, served);
    /* a stop that arrived during this run does not carry to the next */
    uint64_t v;
    while (read(app->stop_fd, &v, sizeof(v)) > 0) {
    }
    atomic_store(&app->running, false);
    return rc;
}

void flare_app_stop(flare_app_t *app)
{
    if (app == NULL)
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

/* ---- worker services ---- */

int flare_worker_timer(flare_worker_t *w, uint64_t ms, flare_task_fn fn, void *ud)
{
    if (w == NULL || fn == NULL)
        return FLARE_EINVAL;
    return flare__loop_timer(&w->loop, ms, fn, ud);
}

flare_worker_t *flare_app_worker(flare_app_t *app, unsigned i)
{
    if (app == NULL || app->workers == NULL || i >= app->nworkers)
        return NULL;
    return &app->workers[i];
}

int flare_worker_post(flare_worker_t *w, flare_task_fn fn, void *ud)
{
    if (w == NULL || fn == NULL)
        return FLARE_EINVAL;
    int rc = flare__app_enter(w->app);
    if (rc != 0)
        return rc;
    rc = flare__loop_post(&w->loop, fn, ud);
    flare__app_leave(w->app);
    return rc;
}

int flare_app_post(flare_app_t *app, unsigned worker, flare_task_fn fn, void *ud)
{
    if (app == NULL || fn == NULL)
        return FLARE_EINVAL;
    int rc = flare__app_enter(app);
    if (rc != 0)
        return rc;
    if (worker < app->nworkers)
        rc = flare__loop_post(&app->workers[worker].loop, fn, ud);
    else
        rc = FLARE_EINVAL;
    flare__app_leave(app);
    return rc;
}

unsigned flare_app_workers(const flare_app_t *app)
{
    return app->cfg.workers != 0 ? app->cfg.workers : cpu_count();
}

unsigned flare_worker_id(const flare_worker_t *w)
{
    return w->id;
}
