/* The poller behind the loop, chosen by the build: src/loop/epoll.c now
 * (an io_uring backend would be src/loop/uring.c). Five functions, called
 * only by loop.c and loop.h; interest and readiness are FLARE_IO_* bits.
 * Included by loop.h after struct flare_loop. */
#ifndef FLARE_LOOP_BACKEND_H
#define FLARE_LOOP_BACKEND_H

/* Opens the poller into l->backend_fd. 0 or FLARE_ESYS (recorded with
 * flare__fail). */
int flare__backend_init(flare_loop_t *l);
void flare__backend_dispose(flare_loop_t *l);

/* Register, change, unregister io->fd; add and mod set io->events on
 * success. 0 or FLARE_ESYS with errno set (the caller says what failed). */
int flare__backend_add(flare_loop_t *l, flare_io_t *io, uint32_t events);
int flare__backend_mod(flare_loop_t *l, flare_io_t *io, uint32_t events);
void flare__backend_del(flare_loop_t *l, flare_io_t *io);

/* Waits up to timeout_ms (-1: no limit), refreshes l->now, then calls
 * io->cb(l, io, ready) for each ready descriptor, ready being FLARE_IO_*
 * bits. Returns how many it
 * dispatched (0 on timeout or EINTR). */
int flare__backend_poll(flare_loop_t *l, int timeout_ms);

#endif
