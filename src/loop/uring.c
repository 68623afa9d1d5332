/* The io_uring backend: readiness through one-shot poll requests on one ring
 * per loop, submitted in a batch with the wait (one io_uring_enter per turn
 * where epoll needs epoll_wait plus an epoll_ctl per interest change).
 *
 * Level-triggered, like epoll.c: a poll request completes once; the loop
 * arms it again after the callback, with the interest the io has then, and
 * a descriptor that is still ready completes again at once. A descriptor
 * has at most one poll request in the kernel.
 *
 * Nothing the kernel holds points at an io: a request's user_data is the
 * descriptor and a generation, (gen << 32) | fd, and slots[fd] says which io
 * is registered on fd now. Changing the interest of an armed io or removing
 * it bumps the generation and asks the kernel to remove the old request; a
 * completion whose generation is not the slot's is stale and dropped, so an
 * io freed after flare__loop_del, or an fd closed and reused, is never
 * reached through an old request. Arming and removal requests are queued
 * and prepared just before the wait, so a callback that changes its
 * interest twice, or closes what it just armed, costs no request.
 *
 * Set up with SINGLE_ISSUER and DEFER_TASKRUN where the kernel has them
 * (completions are posted only when the loop waits, by the loop's thread).
 * The worker's loop is made on the main thread and runs on its own, so the
 * ring starts disabled and the first wait enables it on the thread that runs
 * the loop, and registers the ring's descriptor there. */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/core.h"
#include "loop/loop.h"

_Static_assert(FLARE_IO_READ == (unsigned)POLLIN && FLARE_IO_WRITE == (unsigned)POLLOUT &&
                   FLARE_IO_ERR == (unsigned)POLLERR && FLARE_IO_HUP == (unsigned)POLLHUP,
               "FLARE_IO_* must equal the POLL* bits");

#define URING_ENTRIES 4096u
#define URING_BATCH   256u       /* completions taken per wait */
#define UD_IGNORE     UINT64_MAX /* a removal request's own completion */
#define UD(fd, gen)   (((uint64_t)(gen) << 32) | (uint32_t)(fd))

typedef struct uslot {
    flare_io_t *io; /* registered on this fd; NULL: none */
    uint32_t gen;   /* the generation of the live request (or the next one) */
    bool armed;     /* a poll request with generation gen is in the kernel */
    bool queued;    /* on the arm list */
} uslot_t;

struct flare__uring {
    struct io_uring ring;
    bool enabled; /* started disabled: enabled by the first wait */
    uslot_t *slots;
    uint32_t nslots;
    int *arm; /* fds whose io wants a poll request */
    uint32_t narm, carm;
    uint64_t *rm;      /* user_data of requests to remove */
    uint32_t nrm, crm; /* carm and crm: nslots once the lists have grown with it */
};

static int setup(struct io_uring *r, unsigned entries, bool want_single)
{
    struct io_uring_params p;
    if (want_single) {
        memset(&p, 0, sizeof(p));
        p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
                  IORING_SETUP_R_DISABLED | IORING_SETUP_SUBMIT_ALL;
        if (io_uring_queue_init_params(entries, r, &p) == 0)
            return 1;
    }
    memset(&p, 0, sizeof(p));
    p.flags = IORING_SETUP_SUBMIT_ALL;
    int rc = io_uring_queue_init_params(entries, r, &p);
    if (rc == -EINVAL) {
        memset(&p, 0, sizeof(p));
        rc = io_uring_queue_init_params(entries, r, &p);
    }
    return rc < 0 ? rc : 0;
}

int flare__uring_probe(char *why, size_t n)
{
    struct io_uring r;
    int rc = setup(&r, 8, false);
    if (rc < 0) {
        snprintf(why, n, "io_uring_setup: %s", strerror(-rc));
        return rc;
    }
    rc = 0;
    struct io_uring_probe *p = io_uring_get_probe_ring(&r);
    if (p == NULL) {
        snprintf(why, n, "the kernel cannot list its io_uring operations");
        rc = -ENOSYS;
    } else if (!io_uring_opcode_supported(p, IORING_OP_POLL_ADD) ||
               !io_uring_opcode_supported(p, IORING_OP_POLL_REMOVE)) {
        snprintf(why, n, "the kernel's io_uring has no poll requests");
        rc = -ENOSYS;
    } else if (!(r.features & IORING_FEAT_EXT_ARG)) {
        snprintf(why, n, "the kernel's io_uring cannot wait with a timeout (before Linux 5.11)");
        rc = -ENOSYS;
    } else {
        snprintf(why, n, "io_uring_setup works and the kernel has what the backend submits");
    }
    if (p != NULL)
        io_uring_free_probe(p);
    io_uring_queue_exit(&r);
    return rc;
}

int flare__uring_init(flare_loop_t *l)
{
    struct flare__uring *u = calloc(1, sizeof(*u));
    if (u == NULL)
        return flare__fail(FLARE_ESYS, ENOMEM, "io_uring backend");
    int rc = setup(&u->ring, URING_ENTRIES, true);
    if (rc < 0) {
        free(u);
        return flare__fail(FLARE_ESYS, -rc, "io_uring_setup");
    }
    u->enabled = rc == 0; /* only the single-issuer ring starts disabled */
    l->uring = u;
    l->backend_fd = u->ring.ring_fd;
    return 0;
}

void flare__uring_dispose(flare_loop_t *l)
{
    struct flare__uring *u = l->uring;
    if (u == NULL)
        return;
    io_uring_queue_exit(&u->ring);
    free(u->slots);
    free(u->arm);
    free(u->rm);
    free(u);
    l->uring = NULL;
    l->backend_fd = -1;
}

/* slots[fd], grown when fd is past the table. The arm and removal lists
 * grow with it: an fd is on the arm list at most once, and a removal is
 * queued only for an armed request (at most one per fd between two waits),
 * so queueing either never fails. */
static uslot_t *slot_for(struct flare__uring *u, int fd)
{
    if ((uint32_t)fd >= u->nslots) {
        uint32_t n = u->nslots ? u->nslots : 256;
        while (n <= (uint32_t)fd)
            n *= 2;
        uslot_t *s = realloc(u->slots, n * sizeof(*s));
        if (s == NULL)
            return NULL;
        memset(s + u->nslots, 0, (n - u->nslots) * sizeof(*s));
        u->slots = s;
        u->nslots = n;
    }
    if (u->carm < u->nslots) {
        int *a = realloc(u->arm, u->nslots * sizeof(*a));
        if (a == NULL)
            return NULL;
        u->arm = a;
        u->carm = u->nslots;
    }
    if (u->crm < u->nslots) {
        uint64_t *r = realloc(u->rm, u->nslots * sizeof(*r));
        if (r == NULL)
            return NULL;
        u->rm = r;
        u->crm = u->nslots;
    }
    return &u->slots[fd];
}

static void queue_arm(struct flare__uring *u, uslot_t *s, int fd)
{
    if (s->queued)
        return;
    u->arm[u->narm++] = fd;
    s->queued = true;
}

/* Asks the kernel to remove s's request; its completion is then stale. */
static void queue_remove(struct flare__uring *u, uslot_t *s, int fd)
{
    u->rm[u->nrm++] = UD(fd, s->gen);
    s->armed = false;
    s->gen++;
}

int flare__uring_add(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    struct flare__uring *u = l->uring;
    if (io->fd < 0) {
        errno = EBADF;
        return FLARE_ESYS;
    }
    uslot_t *s = slot_for(u, io->fd);
    if (s == NULL) {
        errno = ENOMEM;
        return FLARE_ESYS;
    }
    if (s->io != NULL) { /* as EPOLL_CTL_ADD: one registration per descriptor */
        errno = EEXIST;
        return FLARE_ESYS;
    }
    if (s->armed) /* a stale request of a closed fd */
        queue_remove(u, s, io->fd);
    else
        s->gen++;
    queue_arm(u, s, io->fd);
    s->io = io;
    io->events = events;
    return 0;
}

int flare__uring_mod(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    struct flare__uring *u = l->uring;
    uslot_t *s = io->fd >= 0 && (uint32_t)io->fd < u->nslots ? &u->slots[io->fd] : NULL;
    if (s == NULL || s->io != io) {
        errno = ENOENT;
        return FLARE_ESYS;
    }
    /* not armed: the arm list or the dispatch arms it with io->events */
    if (s->armed && events != io->events) {
        queue_remove(u, s, io->fd);
        queue_arm(u, s, io->fd);
    }
    io->events = events;
    return 0;
}

void flare__uring_del(flare_loop_t *l, flare_io_t *io)
{
    struct flare__uring *u = l->uring;
    io->events = 0;
    if (io->fd < 0 || (uint32_t)io->fd >= u->nslots)
        return;
    uslot_t *s = &u->slots[io->fd];
    if (s->io != io)
        return;
    s->io = NULL;
    if (s->armed)
        queue_remove(u, s, io->fd);
    else
        s->gen++;
}

static struct io_uring_sqe *sqe_get(struct flare__uring *u)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (sqe == NULL) { /* the queue is full: hand it to the kernel and go on */
        io_uring_submit(&u->ring);
        sqe = io_uring_get_sqe(&u->ring);
    }
    return sqe;
}

/* The queued removals and arming requests, just before the wait. */
static void prepare(struct flare__uring *u)
{
    for (uint32_t i = 0; i < u->nrm; i++) {
        struct io_uring_sqe *sqe = sqe_get(u);
        if (sqe == NULL)
            break; /* cannot happen after a submit; the completion is stale anyway */
        io_uring_prep_poll_remove(sqe, u->rm[i]);
        io_uring_sqe_set_data64(sqe, UD_IGNORE);
    }
    u->nrm = 0;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < u->narm; i++) {
        int fd = u->arm[i];
        uslot_t *s = &u->slots[fd];
        s->queued = false;
        if (s->io == NULL || s->armed)
            continue;
        struct io_uring_sqe *sqe = sqe_get(u);
        if (sqe == NULL) { /* try again next turn */
            s->queued = true;
            u->arm[kept++] = fd;
            continue;
        }
        io_uring_prep_poll_add(sqe, fd, s->io->events);
        io_uring_sqe_set_data64(sqe, UD(fd, s->gen));
        s->armed = true;
    }
    u->narm = kept;
}

static void enable(struct flare__uring *u)
{
    /* the ring was made disabled on another thread: this one (the loop's)
     * becomes its single issuer */
    /* IORING_REGISTER_ENABLE_RINGS by hand: liburing 2.3 declares
     * io_uring_enable_rings but its library does not export it */
    syscall(__NR_io_uring_register, u->ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, NULL, 0);
    io_uring_register_ring_fd(&u->ring); /* optional: enter without an fd lookup */
    u->enabled = true;
}

void flare__uring_submit(flare_loop_t *l)
{
    struct flare__uring *u = l->uring;
    if (!u->enabled)
        return; /* never ran: nothing was ever submitted */
    prepare(u);
    /* with events: under DEFER_TASKRUN a cancelled request completes, and
     * lets go of its file, only when this thread asks for completions */
    io_uring_submit_and_get_events(&u->ring);
}

int flare__uring_poll(flare_loop_t *l, int timeout_ms)
{
    struct flare__uring *u = l->uring;
    if (flare__unlikely(!u->enabled))
        enable(u);
    prepare(u);
    struct io_uring_cqe *cqe = NULL;
    if (timeout_ms < 0) {
        io_uring_submit_and_wait(&u->ring, 1);
    } else {
        struct __kernel_timespec ts = { .tv_sec = timeout_ms / 1000,
                                        .tv_nsec = (long long)(timeout_ms % 1000) * 1000000 };
        io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1, &ts, NULL);
    }
    l->now = flare__now_ms();
    l->turn++;

    /* copy the batch out and give the slots back first: a callback may
     * submit (a full queue), which may post more completions */
    struct io_uring_cqe *cqes[URING_BATCH];
    uint64_t ud[URING_BATCH];
    int32_t res[URING_BATCH];
    unsigned n = io_uring_peek_batch_cqe(&u->ring, cqes, URING_BATCH);
    for (unsigned i = 0; i < n; i++) {
        ud[i] = io_uring_cqe_get_data64(cqes[i]);
        res[i] = cqes[i]->res;
    }
    io_uring_cq_advance(&u->ring, n);

    int dispatched = 0;
    for (unsigned i = 0; i < n; i++) {
        if (ud[i] == UD_IGNORE)
            continue;
        int fd = (int)(uint32_t)ud[i];
        uint32_t gen = (uint32_t)(ud[i] >> 32);
        uslot_t *s = &u->slots[fd];
        if (s->gen != gen || !s->armed || s->io == NULL)
            continue; /* stale: removed, changed, or the fd was reused */
        s->armed = false;
        flare_io_t *io = s->io;
        uint32_t ev = FLARE_IO_ERR; /* the request failed, or the fd is not open (POLLNVAL) */
        if (res[i] >= 0 && !(res[i] & POLLNVAL))
            ev = (uint32_t)res[i] & (FLARE_IO_READ | FLARE_IO_WRITE | FLARE_IO_ERR | FLARE_IO_HUP);
        io->cb(l, io, ev);
        dispatched++;
        /* level-triggered: armed again with the interest it has now, unless
         * the callback removed it (the slot then has another generation);
         * the table may have moved (a callback added a higher fd) */
        s = &u->slots[fd];
        if (s->io == io && s->gen == gen && !s->armed)
            queue_arm(u, s, fd);
    }
    return dispatched;
}
