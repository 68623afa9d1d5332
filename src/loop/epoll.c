/* The epoll backend: level-triggered, one epoll_event per descriptor whose
 * data is the flare_io_t. */
#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/core.h"
#include "core/sys.h"
#include "loop/loop.h"

/* FLARE_IO_* are poll(2)'s bits; epoll's are the same, so no translation. */
_Static_assert(FLARE_IO_READ == (unsigned)EPOLLIN && FLARE_IO_WRITE == (unsigned)EPOLLOUT &&
                   FLARE_IO_ERR == (unsigned)EPOLLERR && FLARE_IO_HUP == (unsigned)EPOLLHUP,
               "FLARE_IO_* must equal the EPOLL* bits");

#define EPOLL_MAX_EVENTS 256

/* epoll_wait is a cancellation point in glibc; see core/sys.h for why the
 * hot path calls the kernel directly. */
static inline int wait_raw(int epfd, struct epoll_event *ev, int max, int timeout)
{
#if defined(__x86_64__)
    return (int)flare__syscall4(SYS_epoll_wait, epfd, (long)ev, max, timeout);
#else
    int r = epoll_wait(epfd, ev, max, timeout);
    return r < 0 ? -errno : r;
#endif
}

int flare__epoll_init(flare_loop_t *l)
{
    l->backend_fd = epoll_create1(EPOLL_CLOEXEC);
    if (l->backend_fd < 0)
        return flare__fail(FLARE_ESYS, errno, "epoll_create1");
    return 0;
}

void flare__epoll_dispose(flare_loop_t *l)
{
    if (l->backend_fd >= 0)
        close(l->backend_fd);
    l->backend_fd = -1;
}

static int ctl(flare_loop_t *l, int op, flare_io_t *io, uint32_t events)
{
    struct epoll_event ev = { .events = events, .data.ptr = io };
    if (epoll_ctl(l->backend_fd, op, io->fd, &ev) != 0)
        return FLARE_ESYS;
    io->events = events;
    return 0;
}

int flare__epoll_add(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    return ctl(l, EPOLL_CTL_ADD, io, events);
}

int flare__epoll_mod(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    return ctl(l, EPOLL_CTL_MOD, io, events);
}

void flare__epoll_del(flare_loop_t *l, flare_io_t *io)
{
    epoll_ctl(l->backend_fd, EPOLL_CTL_DEL, io->fd, NULL);
    io->events = 0;
}

int flare__epoll_poll(flare_loop_t *l, int timeout_ms)
{
    struct epoll_event events[EPOLL_MAX_EVENTS];
    int n = wait_raw(l->backend_fd, events, EPOLL_MAX_EVENTS, timeout_ms);
    l->now = flare__now_ms();
    l->turn++;
    for (int i = 0; i < n; i++) {
        flare_io_t *io = events[i].data.ptr;
        io->cb(l, io, events[i].events);
    }
    return n > 0 ? n : 0;
}
