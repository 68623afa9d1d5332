#include "loop/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/core.h"

static void wake_cb(flare_loop_t *l, flare_io_t *io, uint32_t events);

static int backend_init(flare_loop_t *l)
{
    return l->backend == FLARE__LOOP_URING ? flare__uring_init(l) : flare__epoll_init(l);
}

static void backend_dispose(flare_loop_t *l)
{
    if (l->backend == FLARE__LOOP_URING)
        flare__uring_dispose(l);
    else
        flare__epoll_dispose(l);
}

int flare__loop_init(flare_loop_t *l, unsigned backend)
{
    memset(l, 0, sizeof(*l));
    atomic_init(&l->posts, NULL);
    l->wake_io.fd = -1;
    l->backend_fd = -1;
    l->backend = backend == FLARE__LOOP_URING ? FLARE__LOOP_URING : FLARE__LOOP_EPOLL;
    const char *recv = getenv("FLARE_URING_RECV");
    l->recv_streams = recv != NULL && strcmp(recv, "1") == 0;
    int rc = backend_init(l);
    if (rc != 0)
        return rc;
    l->wake_io.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (l->wake_io.fd < 0) {
        int e = errno;
        backend_dispose(l);
        return flare__fail(FLARE_ESYS, e, "eventfd (loop wakeup)");
    }
    l->wake_io.cb = wake_cb;
    if (flare__loop_add(l, &l->wake_io, FLARE_IO_READ) != 0) {
        int e = errno;
        close(l->wake_io.fd);
        backend_dispose(l);
        return flare__fail(FLARE_ESYS, e, "watching the loop wakeup eventfd");
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

/* ---- timers: a pairing heap of embedded nodes ----
 *
 * Insertion is O(1) and never allocates; taking the earliest is amortized
 * O(log n); stopping any timer unlinks it in place. */

static bool timer_less(const flare__timer_t *a, const flare__timer_t *b)
{
    return a->when < b->when || (a->when == b->when && a->seq < b->seq);
}

/* a and b are roots (prev and next NULL) or NULL: the root of their union. */
static flare__timer_t *meld(flare__timer_t *a, flare__timer_t *b)
{
    if (a == NULL)
        return b;
    if (b == NULL)
        return a;
    if (timer_less(b, a)) {
        flare__timer_t *t = a;
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
static flare__timer_t *merge_pairs(flare__timer_t *first)
{
    flare__timer_t *stack = NULL; /* melded pairs, newest first, linked by next */
    while (first != NULL) {
        flare__timer_t *a = first, *b = a->next;
        first = b != NULL ? b->next : NULL;
        a->next = a->prev = NULL;
        if (b != NULL)
            b->next = b->prev = NULL;
        flare__timer_t *m = meld(a, b);
        m->next = stack;
        stack = m;
    }
    flare__timer_t *root = NULL;
    while (stack != NULL) {
        flare__timer_t *m = stack;
        stack = m->next;
        m->next = NULL;
        root = meld(root, m);
    }
    return root;
}

void flare__timer_stop(flare_loop_t *l, flare__timer_t *t)
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

void flare__timer_start(flare_loop_t *l, flare__timer_t *t, uint64_t ms)
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
    flare__timer_t t;
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
        flare__timer_t *t = l->timers;
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

static void run_ready(flare_loop_t *l)
{
    while (l->ready != NULL) {
        flare_io_t *io = l->ready;
        l->ready = NULL;
        while (io != FLARE__IO_READY_END) {
            flare_io_t *next = io->ready_next;
            io->ready_next = NULL;
            io->cb(l, io, FLARE_IO_READ);
            io = next;
        }
    }
}

void flare__loop_run(flare_loop_t *l)
{
    run_ready(l); /* marked before the loop ran */
    while (!l->stop) {
        int timeout = -1;
        if (l->timers != NULL) {
            uint64_t when = l->timers->when;
            timeout = when <= l->now ? 0 : (int)(when - l->now < 60000 ? when - l->now : 60000);
        }
        flare__backend_poll(l, timeout);
        if (l->timers != NULL)
            run_timers(l);
        /* what events and timers marked ready runs now, until none is left:
         * nothing is on the list when the next wait starts (after_events
         * marks nothing), and nothing on it has been freed yet */
        if (flare__unlikely(l->ready != NULL))
            run_ready(l);
        if (l->deferred) {
            l->deferred = false;
            l->after_events(l->after_events_ud);
        }
    }
    if (l->backend == FLARE__LOOP_URING)
        flare__uring_submit(l); /* what the last turn removed is let go now */
}

void flare__loop_dispose(flare_loop_t *l)
{
    /* Nothing queued may leak: posted tasks run (a post that returned 0
     * runs exactly once). Pending timers are cancelled, not fired early: a
     * stopped timer never fires, and shutdown is a stop. */
    l->stop = true;
    while (atomic_load_explicit(&l->posts, memory_order_acquire) != NULL)
        run_posts(l); /* including what those post */
    while (l->timers != NULL) {
        flare__timer_t *t = l->timers;
        flare__timer_stop(l, t);
        if (t->fn == heap_timer_fire)
            free(t->ud);
    }
    if (l->wake_io.fd >= 0)
        close(l->wake_io.fd);
    l->wake_io.fd = -1;
    backend_dispose(l);
}
