/* Event loop: one per worker thread. epoll (level-triggered), a binary heap
 * of timers (no timer syscalls: the nearest deadline is epoll_wait's
 * timeout), and a multi-producer single-consumer post queue woken by an
 * eventfd. Only the owning thread touches the loop, except flare__loop_post
 * and flare__loop_wake, which are safe from any thread. */
#ifndef FLARE_LOOP_H
#define FLARE_LOOP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

typedef struct flare_loop flare_loop_t;
typedef struct flare_io flare_io_t;

typedef void (*flare_io_fn)(flare_loop_t *loop, flare_io_t *io, uint32_t events);
typedef void (*flare_loop_task_fn)(void *ud);

struct flare_io {
    int fd;
    uint32_t events; /* currently registered EPOLL* mask */
    flare_io_fn cb;
};

typedef struct flare_timer_entry {
    uint64_t when;
    uint64_t seq; /* FIFO among equal deadlines */
    flare_loop_task_fn fn;
    void *ud;
} flare_timer_entry_t;

typedef struct flare_post_node {
    struct flare_post_node *next;
    flare_loop_task_fn fn;
    void *ud;
} flare_post_node_t;

struct flare_loop {
    int epfd;
    bool stop;
    uint64_t now; /* cached monotonic ms, refreshed after each wait */
    flare_timer_entry_t *timers;
    size_t ntimers, captimers;
    uint64_t timer_seq;
    flare_io_t wake_io; /* eventfd */
    /* called after each batch of events: frees what callbacks closed, so an
     * event later in the same batch never points at freed memory */
    flare_loop_task_fn after_events;
    void *after_events_ud;
    bool deferred; /* set by whoever needs after_events to run this time */
    /* written by other threads: on its own cache line */
    _Alignas(64) _Atomic(flare_post_node_t *) posts;
};

int flare__loop_init(flare_loop_t *l);
void flare__loop_dispose(flare_loop_t *l);

int flare__loop_add(flare_loop_t *l, flare_io_t *io, uint32_t events);
int flare__loop_mod(flare_loop_t *l, flare_io_t *io, uint32_t events);
void flare__loop_del(flare_loop_t *l, flare_io_t *io);

/* Runs fn(ud) at l->now + ms. 0 or FLARE_ENOMEM. */
int flare__loop_timer(flare_loop_t *l, uint64_t ms, flare_loop_task_fn fn, void *ud);

/* Thread-safe: queues fn(ud) to run on the loop's thread. */
int flare__loop_post(flare_loop_t *l, flare_loop_task_fn fn, void *ud);

/* Thread-safe: makes a blocked epoll_wait return. */
void flare__loop_wake(flare_loop_t *l);

/* Runs until l->stop is set (by a callback on this thread). */
void flare__loop_run(flare_loop_t *l);

#endif
