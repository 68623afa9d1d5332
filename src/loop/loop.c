#include "loop/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/core.h"
#include "core/sys.h"

#define LOOP_MAX_EVENTS 256

static void wake_cb(flare_loop_t *l, flare_io_t *io, uint32_t events);

int flare__loop_init(flare_loop_t *l)
{
    memset(l, 0, sizeof(*l));
    atomic_init(&l->posts, NULL);
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0)
        return FLARE_ESYS;
    l->wake_io.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (l->wake_io.fd < 0) {
        close(l->epfd);
        return FLARE_ESYS;
    }
    l->wake_io.cb = wake_cb;
    if (flare__loop_add(l, &l->wake_io, EPOLLIN) != 0) {
        close(l->wake_io.fd);
        close(l->epfd);
        return FLARE_ESYS;
    }
    l->now = flare__now_ms();
    return 0;
}

static void run_posts(flare_loop_t *l)
{
    flare_post_node_t *n = atomic_exchange_explicit(&l->posts, NULL, memory_order_acquire);
    /* the stack is newest-first; reverse to run in posting order */
    flare_post_node_t *rev = NULL;
    while (n != NULL) {
        flare_post_node_t *next = n->next;
        n->next = rev;
        rev = n;
        n = next;
    }
    while (rev != NULL) {
        flare_post_node_t *next = rev->next;
        flare_loop_task_fn fn = rev->fn;
        void *ud = rev->ud;
        free(rev);
        fn(ud);
        rev = next;
    }
}

int flare__loop_add(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    struct epoll_event ev = { .events = events, .data.ptr = io };
    if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, io->fd, &ev) != 0)
        return FLARE_ESYS;
    io->events = events;
    return 0;
}

int flare__loop_mod(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    if (io->events == events)
        return 0;
    struct epoll_event ev = { .events = events, .data.ptr = io };
    if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, io->fd, &ev) != 0)
        return FLARE_ESYS;
    io->events = events;
    return 0;
}

void flare__loop_del(flare_loop_t *l, flare_io_t *io)
{
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, io->fd, NULL);
    io->events = 0;
}

/* ---- timers: binary min-heap on (when, seq) ---- */

static bool timer_less(const flare_timer_entry_t *a, const flare_timer_entry_t *b)
{
    return a->when < b->when || (a->when == b->when && a->seq < b->seq);
}

int flare__loop_timer(flare_loop_t *l, uint64_t ms, flare_loop_task_fn fn, void *ud)
{
    if (l->ntimers == l->captimers) {
        size_t cap = l->captimers != 0 ? l->captimers * 2 : 64;
        flare_timer_entry_t *t = realloc(l->timers, cap * sizeof(*t));
        if (t == NULL)
            return FLARE_ENOMEM;
        l->timers = t;
        l->captimers = cap;
    }
    flare_timer_entry_t e = { l->now + ms, l->timer_seq++, fn, ud };
    size_t i = l->ntimers++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!timer_less(&e, &l->timers[parent]))
            break;
        l->timers[i] = l->timers[parent];
        i = parent;
    }
    l->timers[i] = e;
    return 0;
}

static void timer_pop(flare_loop_t *l)
{
    flare_timer_entry_t last = l->timers[--l->ntimers];
    size_t i = 0, n = l->ntimers;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && timer_less(&l->timers[c + 1], &l->timers[c]))
            c++;
        if (!timer_less(&l->timers[c], &last))
            break;
        l->timers[i] = l->timers[c];
        i = c;
    }
    if (n > 0)
        l->timers[i] = last;
}

static void run_timers(flare_loop_t *l)
{
    while (l->ntimers > 0 && l->timers[0].when <= l->now) {
        flare_timer_entry_t e = l->timers[0];
        timer_pop(l);
        e.fn(e.ud);
    }
}

/* ---- cross-thread posting: lock-free stack + eventfd ---- */

int flare__loop_post(flare_loop_t *l, flare_loop_task_fn fn, void *ud)
{
    flare_post_node_t *n = malloc(sizeof(*n));
    if (n == NULL)
        return FLARE_ENOMEM;
    n->fn = fn;
    n->ud = ud;
    flare_post_node_t *head = atomic_load_explicit(&l->posts, memory_order_relaxed);
    do {
        n->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&l->posts, &head, n, memory_order_release,
                                                    memory_order_relaxed));
    /* only the post that finds the stack empty pays for the wakeup */
    if (head == NULL)
        flare__loop_wake(l);
    return 0;
}

void flare__loop_wake(flare_loop_t *l)
{
    uint64_t one = 1;
    ssize_t rc;
    do {
        rc = write(l->wake_io.fd, &one, sizeof(one));
    } while (rc < 0 && errno == EINTR);
}

static void wake_cb(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    (void)events;
    uint64_t v;
    while (read(io->fd, &v, sizeof(v)) < 0 && errno == EINTR) {
    }
    run_posts(l);
}

void flare__loop_run(flare_loop_t *l)
{
    struct epoll_event events[LOOP_MAX_EVENTS];
    while (!l->stop) {
        int timeout = -1;
        if (l->ntimers > 0) {
            uint64_t when = l->timers[0].when;
            timeout = when <= l->now ? 0 : (int)(when - l->now < 60000 ? when - l->now : 60000);
        }
        int n = flare__epoll_wait(l->epfd, events, LOOP_MAX_EVENTS, timeout);
        l->now = flare__now_ms();
        for (int i = 0; i < n; i++) {
            flare_io_t *io = events[i].data.ptr;
            io->cb(l, io, events[i].events);
        }
        if (l->ntimers > 0)
            run_timers(l);
        if (l->deferred) {
            l->deferred = false;
            l->after_events(l->after_events_ud);
        }
    }
}

void flare__loop_dispose(flare_loop_t *l)
{
    /* Nothing queued may leak: posted tasks run, and timers still pending
     * fire now, early, so whatever they hold is released. Timers they add
     * are dropped. */
    l->stop = true;
    run_posts(l);
    size_t pending = l->ntimers;
    while (pending-- > 0 && l->ntimers > 0) {
        flare_timer_entry_t e = l->timers[0];
        timer_pop(l);
        e.fn(e.ud);
    }
    run_posts(l);
    if (l->wake_io.fd >= 0)
        close(l->wake_io.fd);
    if (l->epfd >= 0)
        close(l->epfd);
    free(l->timers);
    l->timers = NULL;
    l->ntimers = l->captimers = 0;
}
