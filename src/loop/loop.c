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
    l->wake_io.fd = -1;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0)
        return flare__fail(FLARE_ESYS, errno, "epoll_create1");
    l->wake_io.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (l->wake_io.fd < 0) {
        int e = errno;
        close(l->epfd);
        return flare__fail(FLARE_ESYS, e, "eventfd (loop wakeup)");
    }
    l->wake_io.cb = wake_cb;
    if (flare__loop_add(l, &l->wake_io, EPOLLIN) != 0) {
        int e = errno;
        close(l->wake_io.fd);
        close(l->epfd);
        return flare__fail(FLARE_ESYS, e, "epoll_ctl (loop wakeup)");
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
        if (rev->heap)
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

/* ---- timers: a pairing heap of embedded nodes ----
 *
 * Insertion is O(1) and never allocates; taking the earliest is amortized
 * O(log n); stopping any timer unlinks it in place. */

static bool timer_less(const flare_timer_t *a, const flare_timer_t *b)
{
    return a->when < b->when || (a->when == b->when && a->seq < b->seq);
}

/* a and b are roots (prev and next NULL) or NULL: the root of their union. */
static flare_timer_t *meld(flare_timer_t *a, flare_timer_t *b)
{
    if (a == NULL)
        return b;
    if (b == NULL)
        return a;
    if (timer_less(b, a)) {
        flare_timer_t *t = a;
        a = b;
        b = t;
    }
    b->prev = a;
    b->next = a->child;
    if (a->child != NULL)
        a->child->prev = b;
    a->child = b;
    return a;
}

/* Melds a list of siblings into one tree: pairs left to right, then the
 * pairs right to left (the pass that keeps delete-min logarithmic). */
static flare_timer_t *merge_pairs(flare_timer_t *first)
{
    flare_timer_t *stack = NULL; /* melded pairs, newest first, linked by next */
    while (first != NULL) {
        flare_timer_t *a = first, *b = a->next;
        first = b != NULL ? b->next : NULL;
        a->next = a->prev = NULL;
        if (b != NULL)
            b->next = b->prev = NULL;
        flare_timer_t *m = meld(a, b);
        m->next = stack;
        stack = m;
    }
    flare_timer_t *root = NULL;
    while (stack != NULL) {
        flare_timer_t *m = stack;
        stack = m->next;
        m->next = NULL;
        root = meld(root, m);
    }
    return root;
}

void flare__timer_stop(flare_loop_t *l, flare_timer_t *t)
{
    if (!t->active)
        return;
    if (t == l->timers) {
        l->timers = merge_pairs(t->child);
    } else {
        if (t->prev->child == t) /* first child: prev is the parent */
            t->prev->child = t->next;
        else
            t->prev->next = t->next;
        if (t->next != NULL)
            t->next->prev = t->prev;
        l->timers = meld(l->timers, merge_pairs(t->child));
    }
    t->child = t->next = t->prev = NULL;
    t->active = false;
    l->ntimers--;
}

void flare__timer_start(flare_loop_t *l, flare_timer_t *t, uint64_t ms)
{
    flare__timer_stop(l, t);
    t->when = ms < UINT64_MAX - l->now ? l->now + ms : UINT64_MAX; /* never wraps to "now" */
    t->seq = l->timer_seq++;
    t->child = t->next = t->prev = NULL;
    t->active = true;
    l->timers = meld(l->timers, t);
    l->ntimers++;
}

/* flare__loop_timer's node: freed before the callback runs. */
typedef struct heap_timer {
    flare_timer_t t;
    flare_loop_task_fn fn;
    void *ud;
} heap_timer_t;

static void heap_timer_fire(void *ud)
{
    heap_timer_t *h = ud;
    flare_loop_task_fn fn = h->fn;
    void *fud = h->ud;
    free(h);
    fn(fud);
}

int flare__loop_timer(flare_loop_t *l, uint64_t ms, flare_loop_task_fn fn, void *ud)
{
    heap_timer_t *h = malloc(sizeof(*h));
    if (h == NULL)
        return FLARE_ENOMEM;
    h->fn = fn;
    h->ud = ud;
    flare__timer_init(&h->t, heap_timer_fire, h);
    flare__timer_start(l, &h->t, ms);
    return 0;
}

static void run_timers(flare_loop_t *l)
{
    while (l->timers != NULL && l->timers->when <= l->now) {
        flare_timer_t *t = l->timers;
        flare__timer_stop(l, t);
        t->fn(t->ud);
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
    n->heap = true;
    flare__loop_post_node(l, n);
    return 0;
}

void flare__loop_post_node(flare_loop_t *l, flare_post_node_t *n)
{
    flare_post_node_t *head = atomic_load_explicit(&l->posts, memory_order_relaxed);
    do {
        n->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&l->posts, &head, n, memory_order_release,
                                                    memory_order_relaxed));
    /* only the post that finds the stack empty pays for the wakeup */
    if (head == NULL)
        flare__loop_wake(l);
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
        if (l->timers != NULL) {
            uint64_t when = l->timers->when;
            timeout = when <= l->now ? 0 : (int)(when - l->now < 60000 ? when - l->now : 60000);
        }
        int n = flare__epoll_wait(l->epfd, events, LOOP_MAX_EVENTS, timeout);
        l->now = flare__now_ms();
        for (int i = 0; i < n; i++) {
            flare_io_t *io = events[i].data.ptr;
            io->cb(l, io, events[i].events);
        }
        if (l->timers != NULL)
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
    while (pending-- > 0 && l->timers != NULL) {
        flare_timer_t *t = l->timers;
        flare__timer_stop(l, t);
        t->fn(t->ud);
    }
    run_posts(l);
    while (l->timers != NULL) {
        flare_timer_t *t = l->timers;
        flare__timer_stop(l, t);
        if (t->fn == heap_timer_fire)
            free(t->ud);
    }
    if (l->wake_io.fd >= 0)
        close(l->wake_io.fd);
    if (l->epfd >= 0)
        close(l->epfd);
}
