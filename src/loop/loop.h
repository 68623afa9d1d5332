/* Event loop: one per worker thread. A poller backend (backend.h: epoll.c
 * or uring.c, chosen at run time, both level-triggered), a heap of timers (no timer syscalls: the
 * nearest deadline is the poller's timeout), and a multi-producer single-consumer post queue woken
 * by an eventfd. Only the owning thread touches the loop, except the post and wake calls, which are
 * safe from any thread.
 *
 * Nothing outside src/loop/ sees the poller: fd interest and readiness are
 * FLARE_IO_* bits, so another backend (io_uring) replaces epoll.c without
 * touching the protocols.
 *
 * Timers and post nodes are intrusive: their owner embeds them, so arming a
 * timer or posting a node never allocates and never fails. That is what the
 * periodic sweeps, the drain request and the job pool's replies rely on: a
 * re-arm that could fail with ENOMEM would stop all timeouts for good. */
#ifndef FLARE_LOOP_H
#define FLARE_LOOP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/bufpool.h"

/* Interest and readiness. The values are poll(2)'s, which epoll and
 * io_uring's poll requests use too, so a backend passes them through
 * unchanged (epoll.c checks that at compile time). ERR and HUP are only
 * reported, never asked for: the kernel reports them whatever the interest. */
#define FLARE_IO_READ  0x001u
#define FLARE_IO_WRITE 0x004u
#define FLARE_IO_ERR   0x008u
#define FLARE_IO_HUP   0x010u
/* With FLARE_IO_READ: input as data, not readiness. Only the io_uring
 * backend asks for it (the stream on plain TCP: flare__loop_can_recv): a
 * multishot receive into the loop's buffer ring reads the socket, the
 * callback runs with FLARE_IO_READ when bytes (or the end) arrived, and the
 * io reads them with flare__loop_recv instead of read(2). No poll bit. */
#define FLARE_IO_RECV  0x01000000u

typedef struct flare_loop flare_loop_t;
typedef struct flare_io flare_io_t;

typedef void (*flare_io_fn)(flare_loop_t *loop, flare_io_t *io, uint32_t events);
typedef void (*flare_loop_task_fn)(void *ud);

struct flare_io {
    int fd;
    uint32_t events; /* currently registered FLARE_IO_* interest */
    flare_io_fn cb;
    struct flare_io *ready_next; /* on the loop's ready list (flare__loop_ready); NULL: not */
};

/* A timer, embedded in whoever owns it. A pairing heap node: `child` is the
 * first child, `next` the next sibling, `prev` the previous sibling or, for
 * a first child, the parent. Ordered by (when, seq): FIFO among equal
 * deadlines. */
typedef struct flare__timer {
    struct flare__timer *child, *next, *prev;
    uint64_t when;
    uint64_t seq;
    flare_loop_task_fn fn;
    void *ud;
    bool active;
} flare__timer_t;

typedef struct flare_post_node {
    struct flare_post_node *next;
    flare_loop_task_fn fn;
    void *ud;
    bool heap; /* allocated by flare__loop_post: freed before fn runs */
} flare_post_node_t;

struct flare_loop {
    int backend_fd;  /* the poller's descriptor (epoll), -1 when none */
    uint8_t backend; /* FLARE__LOOP_EPOLL or FLARE__LOOP_URING (backend.h) */
    bool stop;
    /* io_uring: plain streams take input as data (FLARE_IO_RECV). Off
     * unless FLARE_URING_RECV=1: a message left unread under load was seen
     * twice in the integration suite, not yet explained (docs/io_uring.md) */
    bool recv_streams;
    uint64_t now; /* cached monotonic ms, refreshed after each wait */
    /* the worker's free FLARE_CONN_BUF-byte buffers, lent to its streams:
     * here so that a stream reaches it through the loop pointer it has */
    flare_bufpool_t pool;
    uint64_t turn;          /* counts the waits: what one turn handles is simultaneous */
    flare__timer_t *timers; /* heap root */
    size_t ntimers;
    uint64_t timer_seq;
    flare_io_t wake_io; /* eventfd */
    /* called after each batch of events: frees what callbacks closed, so an
     * event later in the same batch never points at freed memory */
    flare_loop_task_fn after_events;
    void *after_events_ud;
    bool deferred; /* set by whoever needs after_events to run this time */
    /* ios readable without the poller knowing (bytes a TLS library holds):
     * called with FLARE_IO_READ after this iteration's events and timers,
     * before after_events; ends with FLARE__IO_READY_END */
    flare_io_t *ready;
    struct flare__uring *uring; /* uring.c's state; NULL with epoll */
    /* written by other threads: on its own cache line */
    _Alignas(64) _Atomic(flare_post_node_t *) posts;
};

#include "loop/backend.h"

/* Opens the loop on `backend` (FLARE__LOOP_EPOLL or FLARE__LOOP_URING).
 * 0, or FLARE_ESYS (recorded with flare__fail). */
int flare__loop_init(flare_loop_t *l, unsigned backend);

/* Runs what is still posted (a post that returned 0 always runs once), then
 * cancels every pending timer: none fires, the loop's own one-shot nodes
 * (flare__loop_timer) are freed, embedded ones are left stopped. Whoever
 * armed a timer to release something must release it another way. */
void flare__loop_dispose(flare_loop_t *l);

/* Watch io->fd for `events` (FLARE_IO_READ | FLARE_IO_WRITE, or 0 for
 * errors only). 0, or FLARE_ESYS with errno set. */
static inline int flare__loop_add(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    return flare__backend_add(l, io, events);
}

/* Changes the interest; a no-op (no syscall) when it is unchanged, which is
 * the common case on the write path. 0, or FLARE_ESYS with errno set. */
static inline int flare__loop_mod(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    if (io->events == events)
        return 0;
    return flare__backend_mod(l, io, events);
}

#define FLARE__IO_READY_END ((flare_io_t *)(uintptr_t)1)

/* io has input the poller cannot see (a TLS library holds decrypted bytes):
 * its callback runs with FLARE_IO_READ after the current iteration's events
 * and timers (before after_events; marked before the loop runs: when it
 * starts), whatever the socket does. Idempotent. The owner
 * must not free io before that (objects closed in a batch are freed by
 * after_events, which runs later). */
static inline void flare__loop_ready(flare_loop_t *l, flare_io_t *io)
{
    if (io->ready_next != NULL)
        return;
    io->ready_next = l->ready != NULL ? l->ready : FLARE__IO_READY_END;
    l->ready = io;
}

/* Can ios on this loop ask for FLARE_IO_RECV (the io_uring backend)? */
static inline bool flare__loop_can_recv(const flare_loop_t *l)
{
    return l->backend == FLARE__LOOP_URING && l->recv_streams;
}

/* For an io registered with FLARE_IO_READ | FLARE_IO_RECV: copies up to len
 * of the bytes received for it into buf, oldest first, as read(2) would
 * read them: >0 bytes, 0 the peer's end, -EAGAIN nothing now (the callback
 * runs again when there is), or the -errno the socket failed with. Bytes
 * the callback does not read stay with the loop (never lost), and it is
 * called again while some wait and it wants input. */
static inline ssize_t flare__loop_recv(flare_loop_t *l, flare_io_t *io, char *buf, size_t len)
{
    return flare__uring_recv(l, io, buf, len);
}

/* Hands from's registration (same fd, same loop) to `to` with `events`:
 * for an io with FLARE_IO_RECV, bytes received and not read yet go to `to`,
 * and so does what is in flight. from is then unregistered (as after
 * flare__loop_del). 0, or FLARE_ESYS with errno set. */
static inline int flare__loop_move(flare_loop_t *l, flare_io_t *from, flare_io_t *to,
                                   uint32_t events)
{
    if (l->backend == FLARE__LOOP_URING)
        return flare__uring_move(l, from, to, events);
    flare__backend_del(l, from);
    return flare__backend_add(l, to, events);
}

/* Stops watching io->fd (before it is closed). An event already collected
 * in this batch may still be delivered: callers mark their object dead and
 * free it after the batch (after_events). */
static inline void flare__loop_del(flare_loop_t *l, flare_io_t *io)
{
    flare__backend_del(l, io);
}

/* An embedded timer: init once, then start/stop as often as needed. A
 * started timer runs fn(ud) once at l->now + ms; starting an active timer
 * moves it; a stopped timer never fires. The owner stops it before freeing
 * the memory it lives in. */
static inline void flare__timer_init(flare__timer_t *t, flare_loop_task_fn fn, void *ud)
{
    *t = (flare__timer_t){ .fn = fn, .ud = ud };
}
void flare__timer_start(flare_loop_t *l, flare__timer_t *t, uint64_t ms);
void flare__timer_stop(flare_loop_t *l, flare__timer_t *t);

/* A one-shot timer the loop allocates (and frees after it fires, or at
 * dispose without firing): for callers with nowhere to embed one.
 * 0 or FLARE_ENOMEM. */
int flare__loop_timer(flare_loop_t *l, uint64_t ms, flare_loop_task_fn fn, void *ud);

/* Thread-safe: queues fn(ud) to run on the loop's thread. 0 or
 * FLARE_ENOMEM (the node is allocated). */
int flare__loop_post(flare_loop_t *l, flare_loop_task_fn fn, void *ud);

/* Thread-safe: queues a caller-owned node (fn and ud set, not queued
 * already) and cannot fail. The node is not touched after n->fn runs, so fn
 * may free the memory holding it. */
void flare__loop_post_node(flare_loop_t *l, flare_post_node_t *n);

/* Thread-safe: makes a blocked wait return. */
void flare__loop_wake(flare_loop_t *l);

/* Runs until l->stop is set (by a callback on this thread). */
void flare__loop_run(flare_loop_t *l);

#endif
