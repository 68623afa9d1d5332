/* Public timers and fd watchers: handles over the loop's embedded timers
 * and io records, owned by a worker (include/flare/loop.h).
 *
 * Every live handle is on one of the worker's lists, so that shutdown can
 * free what its owner did not (flare__handles_dispose). A freed watcher
 * stays on w->dead_watches until the event batch is over: an event for it
 * may already have been collected later in the same batch. */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "core/core.h"
#include "loop/loop.h"
#include "worker.h"

_Static_assert(FLARE_WATCH_READ == FLARE_IO_READ && FLARE_WATCH_WRITE == FLARE_IO_WRITE &&
                   FLARE_WATCH_ERROR == FLARE_IO_ERR && FLARE_WATCH_HUP == FLARE_IO_HUP,
               "the public watch bits are the loop's");

#define WATCH_INTEREST (FLARE_WATCH_READ | FLARE_WATCH_WRITE)

struct flare_timer {
    flare__timer_t t;
    flare_worker_t *w;
    flare_task_fn fn;
    void *ud;
    struct flare_timer *prev, *next; /* w->utimers */
};

struct flare_watch {
    flare_io_t io; /* first: the loop hands us &io */
    flare_worker_t *w;
    flare_watch_fn cb;
    void *ud;
    bool dead;
    struct flare_watch *prev, *next; /* w->watches, or w->dead_watches (next only) */
};

/* ---- timers ---- */

static void timer_fire(void *ud)
{
    flare_timer_t *t = ud;
    t->fn(t->ud); /* may free t: nothing touches it afterwards */
}

int flare_timer_new(flare_worker_t *w, flare_task_fn fn, void *ud, flare_timer_t **out)
{
    if (w == NULL || fn == NULL || out == NULL)
        return FLARE_EINVAL;
    if (!w->handles_open)
        return FLARE_ESTATE;
    flare_timer_t *t = malloc(sizeof(*t));
    if (t == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_timer_new: out of memory");
    flare__timer_init(&t->t, timer_fire, t);
    t->w = w;
    t->fn = fn;
    t->ud = ud;
    t->prev = NULL;
    t->next = w->utimers;
    if (w->utimers != NULL)
        w->utimers->prev = t;
    w->utimers = t;
    *out = t;
    return 0;
}

int flare_timer_start(flare_timer_t *t, uint64_t ms)
{
    if (t == NULL)
        return FLARE_EINVAL;
    flare__timer_start(&t->w->loop, &t->t, ms);
    return 0;
}

void flare_timer_stop(flare_timer_t *t)
{
    if (t != NULL)
        flare__timer_stop(&t->w->loop, &t->t);
}

bool flare_timer_active(const flare_timer_t *t)
{
    return t != NULL && t->t.active;
}

void flare_timer_free(flare_timer_t *t)
{
    if (t == NULL)
        return;
    flare_worker_t *w = t->w;
    flare__timer_stop(&w->loop, &t->t);
    if (t->prev != NULL)
        t->prev->next = t->next;
    else
        w->utimers = t->next;
    if (t->next != NULL)
        t->next->prev = t->prev;
    free(t);
}

/* ---- watchers ---- */

static void watch_io(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    (void)l;
    flare_watch_t *wt = (flare_watch_t *)(void *)io;
    if (wt->dead)
        return; /* freed earlier in this batch */
    events &= io->events | FLARE_IO_ERR | FLARE_IO_HUP;
    if (events != 0)
        wt->cb(wt, events, wt->ud);
}

/* Interest 0 unregisters the fd: a level-triggered HUP or ERR would
 * otherwise be reported on every iteration of a paused watcher. */
static int watch_apply(flare_watch_t *wt, unsigned events)
{
    flare_loop_t *l = &wt->w->loop;
    if (events == wt->io.events)
        return 0;
    if (events == 0) {
        flare__loop_del(l, &wt->io);
        return 0;
    }
    int rc = wt->io.events == 0 ? flare__loop_add(l, &wt->io, events)
                                : flare__loop_mod(l, &wt->io, events);
    if (rc != 0)
        return flare__fail(FLARE_ESYS, errno, "watch fd %d: cannot change its interest", wt->io.fd);
    return 0;
}

int flare_watch_new(flare_worker_t *w, int fd, unsigned events, flare_watch_fn cb, void *ud,
                    flare_watch_t **out)
{
    if (w == NULL || cb == NULL || out == NULL || fd < 0 || (events & ~WATCH_INTEREST) != 0)
        return FLARE_EINVAL;
    if (!w->handles_open)
        return FLARE_ESTATE;
    /* a regular file or a directory is always ready: nothing to wait for.
     * epoll refuses it (EPERM) and io_uring's poll would report it ready
     * forever: both backends refuse it the same way */
    struct stat st;
    if (fstat(fd, &st) != 0)
        return flare__fail(FLARE_ESYS, errno, "watch fd %d", fd);
    if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
        return flare__fail(FLARE_ESYS, EPERM, "watch fd %d: a file is always ready", fd);
    flare_watch_t *wt = calloc(1, sizeof(*wt));
    if (wt == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_watch_new: out of memory");
    wt->io.fd = fd;
    wt->io.cb = watch_io;
    wt->w = w;
    wt->cb = cb;
    wt->ud = ud;
    if (events != 0 && flare__loop_add(&w->loop, &wt->io, events) != 0) {
        int e = errno;
        free(wt);
        return flare__fail(FLARE_ESYS, e, "watch fd %d", fd);
    }
    wt->next = w->watches;
    if (w->watches != NULL)
        w->watches->prev = wt;
    w->watches = wt;
    *out = wt;
    return 0;
}

int flare_watch_set(flare_watch_t *wt, unsigned events)
{
    if (wt == NULL || wt->dead || (events & ~WATCH_INTEREST) != 0)
        return FLARE_EINVAL;
    return watch_apply(wt, events);
}

unsigned flare_watch_events(const flare_watch_t *wt)
{
    return wt != NULL ? wt->io.events : 0;
}

int flare_watch_fd(const flare_watch_t *wt)
{
    return wt != NULL ? wt->io.fd : -1;
}

void flare_watch_free(flare_watch_t *wt)
{
    if (wt == NULL || wt->dead)
        return;
    flare_worker_t *w = wt->w;
    if (wt->io.events != 0)
        flare__loop_del(&w->loop, &wt->io);
    wt->dead = true;
    if (wt->prev != NULL)
        wt->prev->next = wt->next;
    else
        w->watches = wt->next;
    if (wt->next != NULL)
        wt->next->prev = wt->prev;
    wt->prev = NULL;
    wt->next = w->dead_watches;
    w->dead_watches = wt;
    w->loop.deferred = true; /* after_events frees it once the batch is over */
}

void flare__watch_free_dead(flare_worker_t *w)
{
    while (w->dead_watches != NULL) {
        flare_watch_t *wt = w->dead_watches;
        w->dead_watches = wt->next;
        free(wt);
    }
}

void flare__handles_dispose(flare_worker_t *w)
{
    w->handles_open = false; /* tasks run during shutdown cannot make more */
    while (w->utimers != NULL)
        flare_timer_free(w->utimers);
    while (w->watches != NULL)
        flare_watch_free(w->watches);
    flare__watch_free_dead(w);
}
