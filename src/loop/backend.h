/* The poller behind the loop, chosen at run time (flare_config_t.io,
 * --io auto|uring|epoll, FLARE_IO): src/loop/epoll.c (level-triggered
 * epoll) or src/loop/uring.c (io_uring). Both implement the same five
 * functions; the loop dispatches with one well-predicted branch, so the
 * epoll path costs what it cost before there was a choice. Called only by
 * loop.c and loop.h; interest and readiness are FLARE_IO_* bits. Included by
 * loop.h after struct flare_loop. */
#ifndef FLARE_LOOP_BACKEND_H
#define FLARE_LOOP_BACKEND_H

/* flare_loop_t.backend */
enum {
    FLARE__LOOP_EPOLL = 0,
    FLARE__LOOP_URING = 1,
};

/* Each backend: opens its poller (0 or FLARE_ESYS, recorded with
 * flare__fail); closes it; registers, changes and unregisters io->fd (add and
 * mod set io->events on success; 0 or FLARE_ESYS with errno set: the caller
 * says what failed); waits up to timeout_ms (-1: no limit), refreshes
 * l->now, then calls io->cb(l, io, ready) for each ready descriptor and
 * returns how many it dispatched (0 on timeout or EINTR). */
int flare__epoll_init(flare_loop_t *l);
void flare__epoll_dispose(flare_loop_t *l);
int flare__epoll_add(flare_loop_t *l, flare_io_t *io, uint32_t events);
int flare__epoll_mod(flare_loop_t *l, flare_io_t *io, uint32_t events);
void flare__epoll_del(flare_loop_t *l, flare_io_t *io);
int flare__epoll_poll(flare_loop_t *l, int timeout_ms);

int flare__uring_init(flare_loop_t *l);
void flare__uring_dispose(flare_loop_t *l);
int flare__uring_add(flare_loop_t *l, flare_io_t *io, uint32_t events);
int flare__uring_mod(flare_loop_t *l, flare_io_t *io, uint32_t events);
void flare__uring_del(flare_loop_t *l, flare_io_t *io);
int flare__uring_poll(flare_loop_t *l, int timeout_ms);
/* Submits what is queued (removals, arming) without waiting: the loop has
 * stopped, and a descriptor removed in its last turn must be let go now (a
 * poll request holds its file: a closed socket would send no FIN). */
void flare__uring_submit(flare_loop_t *l);
/* flare__loop_recv and flare__loop_move (loop.h) on io_uring. */
ssize_t flare__uring_recv(flare_loop_t *l, flare_io_t *io, char *buf, size_t len);
int flare__uring_move(flare_loop_t *l, flare_io_t *from, flare_io_t *to, uint32_t events);
/* Tests: the provided buffer ring's size for loops made from now on (a
 * power of two; 0: the default), to make it run dry. */
extern unsigned flare__uring_recv_bufs;

/* Can this process use io_uring the way uring.c does (io_uring_setup
 * allowed, the operations it submits supported)? 0, or a negative errno;
 * either way `why` (n bytes) says why, for the log line. */
int flare__uring_probe(char *why, size_t n);

static inline int flare__backend_add(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    if (__builtin_expect(l->backend == FLARE__LOOP_EPOLL, 1))
        return flare__epoll_add(l, io, events);
    return flare__uring_add(l, io, events);
}

static inline int flare__backend_mod(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    if (__builtin_expect(l->backend == FLARE__LOOP_EPOLL, 1))
        return flare__epoll_mod(l, io, events);
    return flare__uring_mod(l, io, events);
}

static inline void flare__backend_del(flare_loop_t *l, flare_io_t *io)
{
    if (__builtin_expect(l->backend == FLARE__LOOP_EPOLL, 1))
        flare__epoll_del(l, io);
    else
        flare__uring_del(l, io);
}

static inline int flare__backend_poll(flare_loop_t *l, int timeout_ms)
{
    if (__builtin_expect(l->backend == FLARE__LOOP_EPOLL, 1))
        return flare__epoll_poll(l, timeout_ms);
    return flare__uring_poll(l, timeout_ms);
}

#endif
