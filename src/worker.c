/* The workers: each one's thread and loop (flare__worker_main), the periodic
 * sweep (timeouts, the Date line, drain progress) and the trimming of its
 * caches, the drain request, each run's set-up and tear-down of a worker,
 * and the worker services of flare.h (posts, timers, ids). */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app.h"
#include "app_svc.h"
#include "http/svc.h" /* the recycled exchanges: trim, dispose */
#include "worker.h"
#include "module.h"
#include "net/listen.h"
#include "net/stream.h"
#include "net/conn.h"
#include "http2/h2.h" /* the HTTP/2 block lists: trim, dispose */
#include "run_int.h"

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

static void worker_trim(flare_worker_t *w)
{
    size_t freed = 0;
    unsigned conns = w->nconns + w->nmodule_conns;
    unsigned keep =
        conns * TRIM_EX_PER_CONN > TRIM_KEEP_EX ? conns * TRIM_EX_PER_CONN : TRIM_KEEP_EX;
    freed += flare__ex_trim(w, keep);
    keep =
        conns * TRIM_BUFS_PER_CONN > TRIM_KEEP_BUFS ? conns * TRIM_BUFS_PER_CONN : TRIM_KEEP_BUFS;
    freed += flare__bufpool_trim(&w->loop.pool, keep);
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
    flare__conn_sweep_all(w);
    worker_trim(w);
    if (w->draining &&
        ((w->nconns == 0 && w->nmodule_conns == 0) || w->loop.now >= w->drain_deadline)) {
        w->loop.stop = true; /* past the deadline, flare__worker_main closes the rest */
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
    flare__conn_drain_all(w);
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

void *flare__worker_main(void *arg)
{
    flare_worker_t *w = arg;
    flare__worker_self = w;
    sweep_timer(w);
    flare__loop_run(&w->loop);
    /* drain deadline passed or all done: close whatever is left */
    flare__conn_close_all(w);
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
void flare__worker_dispose(flare_worker_t *w, bool inited)
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
    flare__ex_dispose_all(w);
    flare__h2_mem_dispose(w);
    flare__bufpool_dispose(&w->loop.pool);
}

static unsigned cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

/* The first run makes the workers; later runs reuse them (same count), so a
 * worker pointer stays valid until flare_app_free. */
int flare__workers_alloc(flare_app_t *app)
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
        ws[i].reserve_fd = -1; /* a run that fails before flare__worker_setup closes no fd 0 */
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
int flare__worker_setup(flare_worker_t *w, bool *inited)
{
    worker_reset(w);
    int rc = flare__worker_listen(w); /* bound, or adopted (socket activation, upgrade) */
    if (rc != 0)
        return rc;
    rc = flare__loop_init(&w->loop, w->app->io_backend);
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
