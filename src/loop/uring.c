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
 * the loop, and registers the ring's descriptor there.
 *
 * Input as data (FLARE_IO_RECV with FLARE_IO_READ): instead of a POLLIN
 * request, one multishot receive per descriptor into the loop's provided
 * buffer ring; POLLOUT interest stays a poll request beside it. A receive
 * completion is the io's read: its bytes are "current" while io->cb runs
 * with FLARE_IO_READ, and the io's owner takes them with flare__uring_recv
 * (a copy into its own buffer, the read(2) it no longer makes). What it did
 * not take (input paused, or its buffer full) is copied to the slot's held
 * bytes, and the ring buffer goes back at once, whatever happened: a
 * connection never holds one, so the ring runs dry only within one turn.
 * The owner is called again (flare__loop_ready) while held bytes, or an
 * end it was not told of, wait and it wants input. Copying instead of
 * appending to the owner's buffer at completion time: the owner may hold
 * views into its buffer (a request handled asynchronously, input paused),
 * and only its own read may move or overwrite what is there. A receive's
 * user_data has URECV set in its low half (the fd is never negative) and a
 * receive generation; completions of every receive of the io's current
 * registration deliver (a cancelled one may still bring bytes that arrived
 * before the cancel), older ones only give their buffer back. */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/core.h"
#include "loop/loop.h"

_Static_assert(FLARE_IO_READ == (unsigned)POLLIN && FLARE_IO_WRITE == (unsigned)POLLOUT &&
                   FLARE_IO_ERR == (unsigned)POLLERR && FLARE_IO_HUP == (unsigned)POLLHUP,
               "FLARE_IO_* must equal the POLL* bits");

_Static_assert((FLARE_IO_RECV & (FLARE_IO_READ | FLARE_IO_WRITE | FLARE_IO_ERR | FLARE_IO_HUP |
                                 POLLNVAL | POLLPRI | POLLRDHUP)) == 0,
               "FLARE_IO_RECV must be no poll bit");

#define URING_ENTRIES 4096u
#define URING_BATCH   256u       /* completions taken per wait */
#define UD_IGNORE     UINT64_MAX /* a removal request's own completion */
#define UD(fd, gen)   (((uint64_t)(gen) << 32) | (uint32_t)(fd))
#define URECV         0x80000000u /* in a user_data's low half: a receive */

/* The provided buffer ring. A buffer is held from its completion to the end
 * of that completion's dispatch (then copied to the owner or the slot, and
 * given back), so the ring only has to cover what one turn receives, not
 * the connections: 512 x 4 KiB (2 MiB per worker) covers a turn of 256
 * completions (URING_BATCH) twice over. A keep-alive request (~100 bytes)
 * takes one; a larger upload 4 KiB per completion. When the ring runs dry
 * anyway, the kernel ends that receive with -ENOBUFS, the bytes stay in the
 * socket and the receive is armed again next turn, when the buffers are
 * back: flow control, no loss. */
#define RECV_BUFS   512u
#define RECV_BUF_SZ 4096u
#define RECV_BGID   0

unsigned flare__uring_recv_bufs; /* tests: 0, or a smaller ring (a power of two) */

/* Bytes a receive brought that the io has not read yet. */
typedef struct uheld {
    uint32_t off, len, cap; /* data[off, len) unread */
    char data[];
} uheld_t;

typedef struct uslot {
    flare_io_t *io; /* registered on this fd; NULL: none */
    uheld_t *held;  /* received, not read yet (NULL: nothing) */
    uint32_t gen;   /* the generation of the live poll request (or the next one) */
    uint32_t rgen;  /* the generation of the latest receive request */
    uint32_t rbase; /* the first receive generation of this registration */
    uint32_t pmask; /* what the armed poll request waits for */
    int32_t rerr;   /* with rend: 0 the peer's end, or -errno */
    bool armed;     /* a poll request with generation gen is in the kernel */
    bool queued;    /* on the arm list */
    bool rarmed;    /* the receive with generation rgen is wanted live */
    bool rflight;   /* ... and the kernel has not ended it yet (maybe cancelled) */
    bool rend;      /* the registration's receiving ended (EOF or an error) */
    bool rtold;     /* the io has read that end */
} uslot_t;

struct flare__uring {
    struct io_uring ring;
    bool enabled; /* started disabled: enabled by the first wait */
    bool recv_ok; /* the buffer ring is registered and multishot receive works */
    uslot_t *slots;
    uint32_t nslots;
    int *arm; /* fds whose io wants a request */
    uint32_t narm, carm;
    uint64_t *rm;      /* user_data of requests to remove (poll) or cancel (receive) */
    uint32_t nrm, crm; /* carm: nslots, crm: 2 x nslots once the lists have grown */
    struct io_uring_buf_ring *br;
    char *bufs; /* nbufs x RECV_BUF_SZ */
    uint32_t nbufs;
    size_t br_size;
    /* the receive being dispatched: bytes current (for cur_fd) while its
     * io's callback runs */
    const char *cur;
    uint32_t cur_len;
    int cur_fd;
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

/* The provided buffer ring, registered by hand (liburing 2.3 has no
 * io_uring_setup_buf_ring). false when the kernel has none (before 5.19):
 * input is then read with read(2) after a poll, as without FLARE_IO_RECV. */
static bool setup_bufs(struct flare__uring *u)
{
    u->nbufs = flare__uring_recv_bufs != 0 ? flare__uring_recv_bufs : RECV_BUFS;
    u->br_size = u->nbufs * sizeof(struct io_uring_buf);
    void *br = mmap(NULL, u->br_size, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (br == MAP_FAILED)
        return false;
    u->bufs = malloc((size_t)u->nbufs * RECV_BUF_SZ);
    struct io_uring_buf_reg reg = { .ring_addr = (unsigned long)(uintptr_t)br,
                                    .ring_entries = u->nbufs,
                                    .bgid = RECV_BGID };
    if (u->bufs == NULL || io_uring_register_buf_ring(&u->ring, &reg, 0) != 0) {
        free(u->bufs);
        u->bufs = NULL;
        munmap(br, u->br_size);
        return false;
    }
    u->br = br;
    io_uring_buf_ring_init(u->br);
    int mask = io_uring_buf_ring_mask(u->nbufs);
    for (uint32_t i = 0; i < u->nbufs; i++)
        io_uring_buf_ring_add(u->br, u->bufs + (size_t)i * RECV_BUF_SZ, RECV_BUF_SZ,
                              (unsigned short)i, mask, (int)i);
    io_uring_buf_ring_advance(u->br, (int)u->nbufs);
    return true;
}

static void put_buf(struct flare__uring *u, unsigned bid)
{
    io_uring_buf_ring_add(u->br, u->bufs + (size_t)bid * RECV_BUF_SZ, RECV_BUF_SZ,
                          (unsigned short)bid, io_uring_buf_ring_mask(u->nbufs), 0);
    io_uring_buf_ring_advance(u->br, 1);
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
    u->recv_ok = setup_bufs(u);
    u->cur_fd = -1;
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
    if (u->br != NULL)
        munmap(u->br, u->br_size);
    free(u->bufs);
    for (uint32_t i = 0; i < u->nslots; i++)
        free(u->slots[i].held);
    free(u->slots);
    free(u->arm);
    free(u->rm);
    free(u);
    l->uring = NULL;
    l->backend_fd = -1;
}

/* slots[fd], grown when fd is past the table. The arm and removal lists
 * grow with it: an fd is on the arm list at most once, and a removal is
 * queued only for an armed request (at most one poll request and one
 * receive per fd between two waits), so queueing either never fails. */
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
    if (u->crm < 2 * u->nslots) {
        uint64_t *r = realloc(u->rm, 2 * u->nslots * sizeof(*r));
        if (r == NULL)
            return NULL;
        u->rm = r;
        u->crm = 2 * u->nslots;
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

/* Asks the kernel to remove s's poll request; its completion is then stale. */
static void queue_remove(struct flare__uring *u, uslot_t *s, int fd)
{
    u->rm[u->nrm++] = UD(fd, s->gen);
    s->armed = false;
    s->gen++;
}

/* Asks the kernel to cancel s's receive (its last completions may still
 * bring bytes). */
static void queue_cancel(struct flare__uring *u, uslot_t *s, int fd)
{
    u->rm[u->nrm++] = UD((uint32_t)fd | URECV, s->rgen);
    s->rarmed = false;
}

/* Input as data: the io asks for it and the loop can. */
static inline bool wants_recv(const struct flare__uring *u, uint32_t events)
{
    return u->recv_ok &&
           (events & (FLARE_IO_READ | FLARE_IO_RECV)) == (FLARE_IO_READ | FLARE_IO_RECV);
}

/* What s's poll request waits for (POLLIN only when no receive reads), and
 * whether it needs one: with a receive, errors come through the receive. */
static inline bool wants_poll(const struct flare__uring *u, uint32_t events, uint32_t *mask)
{
    if (wants_recv(u, events)) {
        *mask = events & FLARE_IO_WRITE;
        return *mask != 0;
    }
    *mask = events & (FLARE_IO_READ | FLARE_IO_WRITE);
    return true;
}

/* A new registration on s (or none): nothing received before belongs to it. */
static void recv_reset(uslot_t *s)
{
    s->rbase = s->rgen + 1;
    s->rend = s->rtold = false;
    s->rerr = 0;
    if (s->held != NULL)
        s->held->off = s->held->len = 0;
}

/* Has io something to read that no completion will announce (held bytes,
 * an end it was not told of)? */
static inline bool recv_waiting(const uslot_t *s)
{
    return (s->held != NULL && s->held->off < s->held->len) || (s->rend && !s->rtold);
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
    if (s->rarmed)
        queue_cancel(u, s, io->fd);
    recv_reset(s);
    queue_arm(u, s, io->fd);
    s->io = io;
    io->events = events;
    return 0;
}

/* Brings s's requests in line with io->events: a poll request that waits
 * for something else is removed, a receive no longer wanted cancelled, and
 * what is missing armed before the next wait. */
static void resync(flare_loop_t *l, struct flare__uring *u, uslot_t *s, flare_io_t *io)
{
    uint32_t mask;
    bool poll = wants_poll(u, io->events, &mask), recv = wants_recv(u, io->events);
    if (s->armed && (!poll || mask != s->pmask))
        queue_remove(u, s, io->fd);
    if (s->rarmed && !recv)
        queue_cancel(u, s, io->fd);
    if ((poll && !s->armed) || (recv && !s->rarmed && !s->rend))
        queue_arm(u, s, io->fd);
    if (recv && recv_waiting(s))
        flare__loop_ready(l, io); /* input resumed: what arrived meanwhile */
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
    io->events = events;
    resync(l, u, s, io);
    return 0;
}

int flare__uring_move(flare_loop_t *l, flare_io_t *from, flare_io_t *to, uint32_t events)
{
    struct flare__uring *u = l->uring;
    uslot_t *s = from->fd >= 0 && (uint32_t)from->fd < u->nslots ? &u->slots[from->fd] : NULL;
    if (s == NULL || s->io != from || to->fd != from->fd) {
        errno = ENOENT;
        return FLARE_ESYS;
    }
    /* the same registration: what is in flight or held goes to `to` */
    s->io = to;
    to->events = events;
    from->events = 0;
    resync(l, u, s, to);
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
    if (s->rarmed)
        queue_cancel(u, s, io->fd);
    recv_reset(s);
}

static ssize_t read_fd(int fd, char *buf, size_t len)
{
    ssize_t n;
    do {
        n = read(fd, buf, len);
    } while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : n;
}

ssize_t flare__uring_recv(flare_loop_t *l, flare_io_t *io, char *buf, size_t len)
{
    struct flare__uring *u = l->uring;
    if (flare__unlikely(!u->recv_ok))
        return read_fd(io->fd, buf, len);
    uslot_t *s = io->fd >= 0 && (uint32_t)io->fd < u->nslots ? &u->slots[io->fd] : NULL;
    if (s == NULL || s->io != io)
        return -EBADF;
    size_t got = 0;
    uheld_t *h = s->held;
    if (h != NULL && h->off < h->len) { /* older than the current bytes */
        size_t n = h->len - h->off < len ? h->len - h->off : len;
        memcpy(buf, h->data + h->off, n);
        h->off += (uint32_t)n;
        got = n;
    }
    if (u->cur_fd == io->fd && u->cur_len > 0 && got < len) {
        size_t n = u->cur_len < len - got ? u->cur_len : len - got;
        memcpy(buf + got, u->cur, n);
        u->cur += n;
        u->cur_len -= (uint32_t)n;
        got += n;
    }
    if (got > 0 || len == 0) {
        /* more than it took: called again, as a level-triggered poll would */
        if (recv_waiting(s) && u->cur_fd != io->fd && (io->events & FLARE_IO_READ))
            flare__loop_ready(l, io);
        return (ssize_t)got;
    }
    if (s->rend) {
        s->rtold = true;
        return s->rerr;
    }
    /* no receive in the kernel (input paused, the ring ran dry) and nothing
     * of one left: the socket itself is next in order. A paused io woken by
     * the peer's hang-up reads its end this way, as with epoll. */
    if (!s->rflight)
        return read_fd(io->fd, buf, len);
    return -EAGAIN;
}

/* Keeps what the io did not take of the current receive. false: out of
 * memory (the io is then told of an error: its input has a hole). */
static bool hold(uslot_t *s, const char *p, uint32_t n)
{
    uheld_t *h = s->held;
    if (h != NULL && h->off == h->len)
        h->off = h->len = 0;
    if (h == NULL || h->cap - h->len < n) {
        if (h != NULL && h->off > 0) {
            memmove(h->data, h->data + h->off, h->len - h->off);
            h->len -= h->off;
            h->off = 0;
        }
        uint32_t have = h != NULL ? h->len : 0, cap = h != NULL ? h->cap : 0;
        if (cap - have < n) {
            uint32_t nc = cap != 0 ? cap : RECV_BUF_SZ;
            while (nc - have < n)
                nc *= 2;
            uheld_t *g = realloc(h, sizeof(*g) + nc);
            if (g == NULL)
                return false;
            if (h == NULL)
                g->off = g->len = 0;
            g->cap = nc;
            s->held = h = g;
        }
    }
    memcpy(h->data + h->len, p, n);
    h->len += n;
    return true;
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
        if (u->rm[i] & URECV)
            io_uring_prep_cancel64(sqe, u->rm[i], 0);
        else
            io_uring_prep_poll_remove(sqe, u->rm[i]);
        io_uring_sqe_set_data64(sqe, UD_IGNORE);
    }
    u->nrm = 0;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < u->narm; i++) {
        int fd = u->arm[i];
        uslot_t *s = &u->slots[fd];
        s->queued = false;
        if (s->io == NULL)
            continue;
        uint32_t mask;
        bool poll = wants_poll(u, s->io->events, &mask) && !s->armed;
        bool recv = wants_recv(u, s->io->events) && !s->rarmed && !s->rend;
        struct io_uring_sqe *sqe = NULL;
        if (recv && (sqe = sqe_get(u)) != NULL) {
            io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
            sqe->flags |= IOSQE_BUFFER_SELECT;
            sqe->buf_group = RECV_BGID;
            s->rgen++;
            io_uring_sqe_set_data64(sqe, UD((uint32_t)fd | URECV, s->rgen));
            s->rarmed = s->rflight = true;
        }
        if (poll && (sqe = sqe_get(u)) != NULL) {
            io_uring_prep_poll_add(sqe, fd, mask);
            io_uring_sqe_set_data64(sqe, UD(fd, s->gen));
            s->armed = true;
            s->pmask = mask;
        }
        if (sqe == NULL && (poll || recv)) { /* try again next turn */
            s->queued = true;
            u->arm[kept++] = fd;
        }
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

/* A receive's completion: its bytes, its end, or the ring ran dry. The
 * buffer goes back before this returns. 1 when io->cb ran. */
static int on_recv(flare_loop_t *l, struct flare__uring *u, uint64_t ud, int32_t res, uint32_t fl)
{
    int fd = (int)((uint32_t)ud & ~URECV);
    uint32_t rg = (uint32_t)(ud >> 32);
    uslot_t *s = &u->slots[fd];
    bool has_buf = (fl & IORING_CQE_F_BUFFER) != 0;
    unsigned bid = fl >> IORING_CQE_BUFFER_SHIFT;
    bool ends = !(fl & IORING_CQE_F_MORE);
    if (ends && rg == s->rgen)
        s->rarmed = s->rflight = false;
    flare_io_t *io = s->io;
    /* of this registration (receives of an earlier one are stale) */
    if (io == NULL || (int32_t)(rg - s->rbase) < 0) {
        if (has_buf)
            put_buf(u, bid);
        return 0;
    }
    if (ends && rg == s->rgen) {
        if (res > 0 || res == -ENOBUFS) {
            queue_arm(u, s, fd); /* ended early (the kernel's choice, or no buffer) */
        } else if (res == -EINVAL && !s->rend) {
            u->recv_ok = false; /* no multishot receive (before Linux 6.0): poll and read */
            queue_arm(u, s, fd);
            if (io->events & FLARE_IO_READ)
                flare__loop_ready(l, io);
        } else if (res != -ECANCELED) {
            s->rend = true; /* 0: the peer's end; else the error a read would give */
            s->rerr = res;
        }
    }
    int ran = 0;
    bool told = res > 0 || (ends && s->rend && !s->rtold && rg == s->rgen);
    if (res > 0 && has_buf) {
        u->cur = u->bufs + (size_t)bid * RECV_BUF_SZ;
        u->cur_len = (uint32_t)res;
        u->cur_fd = fd;
    }
    if (told && (io->events & FLARE_IO_READ)) {
        io->cb(l, io, FLARE_IO_READ);
        ran = 1;
    }
    /* what the callback did not read is kept for the io registered now (a
     * move hands it over), unless it was removed */
    s = &u->slots[fd];
    if (u->cur_fd == fd && u->cur_len > 0 && s->io != NULL && (int32_t)(rg - s->rbase) >= 0 &&
        !hold(s, u->cur, u->cur_len) && !s->rend) {
        s->rend = true;
        s->rerr = -ENOMEM;
    }
    u->cur_fd = -1;
    u->cur_len = 0;
    if (has_buf)
        put_buf(u, bid);
    if (s->io != NULL && (s->io->events & FLARE_IO_READ) && wants_recv(u, s->io->events) &&
        recv_waiting(s))
        flare__loop_ready(l, s->io);
    return ran;
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
    uint32_t fl[URING_BATCH];
    unsigned n = io_uring_peek_batch_cqe(&u->ring, cqes, URING_BATCH);
    for (unsigned i = 0; i < n; i++) {
        ud[i] = io_uring_cqe_get_data64(cqes[i]);
        res[i] = cqes[i]->res;
        fl[i] = cqes[i]->flags;
    }
    io_uring_cq_advance(&u->ring, n);

    int dispatched = 0;
    for (unsigned i = 0; i < n; i++) {
        if (ud[i] == UD_IGNORE)
            continue;
        if ((uint32_t)ud[i] & URECV) {
            dispatched += on_recv(l, u, ud[i], res[i], fl[i]);
            continue;
        }
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
