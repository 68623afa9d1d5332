/* loop/: timers in deadline order, cross-thread posts, fd callbacks; every
 * test runs on both backends (epoll, then io_uring where this process may
 * use it). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/core.h"
#include "loop/loop.h"

static unsigned g_backend = FLARE__LOOP_EPOLL;

typedef struct {
    flare_loop_t *loop;
    int order[16];
    int n;
} rec_t;

typedef struct {
    rec_t *rec;
    int id;
} tag_t;

static void record(void *ud)
{
    tag_t *t = ud;
    if (t->rec->n < 16)
        t->rec->order[t->rec->n] = t->id;
    t->rec->n++;
}

static void stop_loop(void *ud)
{
    ((flare_loop_t *)ud)->stop = true;
}

static void test_timers_order(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    rec_t rec = { &l, { 0 }, 0 };
    tag_t t[6] = { { &rec, 1 }, { &rec, 2 }, { &rec, 3 }, { &rec, 4 }, { &rec, 5 }, { &rec, 6 } };
    assert_int_equal(flare__loop_timer(&l, 30, record, &t[2]), 0);
    assert_int_equal(flare__loop_timer(&l, 10, record, &t[0]), 0);
    assert_int_equal(flare__loop_timer(&l, 20, record, &t[1]), 0);
    assert_int_equal(flare__loop_timer(&l, 20, record, &t[4]), 0); /* FIFO among equals */
    assert_int_equal(flare__loop_timer(&l, 0, record, &t[3]), 0);
    assert_int_equal(flare__loop_timer(&l, 50, stop_loop, &l), 0);
    flare__loop_run(&l);
    assert_int_equal(rec.n, 5);
    int want[] = { 4, 1, 2, 5, 3 };
    assert_memory_equal(rec.order, want, sizeof(want));
    flare__loop_dispose(&l);
}

static void test_many_timers(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    static rec_t rec;
    rec.n = 0;
    static tag_t tags[1000];
    for (int i = 0; i < 1000; i++) {
        tags[i].rec = &rec;
        tags[i].id = 0;
        assert_int_equal(flare__loop_timer(&l, (uint64_t)(i % 7), record, &tags[i]), 0);
    }
    assert_int_equal(l.ntimers, 1000);
    flare__loop_dispose(&l); /* cancelled, not fired; the nodes are freed (ASan) */
    assert_int_equal(l.ntimers, 0);
    assert_int_equal(rec.n, 0);
}

static void *poster(void *arg)
{
    flare_loop_t *l = arg;
    usleep(20000);
    flare__loop_post(l, stop_loop, l);
    return NULL;
}

static int post_count;
static void count_post(void *ud)
{
    (void)ud;
    post_count++;
}

static void *many_posts(void *arg)
{
    flare_loop_t *l = arg;
    for (int i = 0; i < 1000; i++)
        flare__loop_post(l, count_post, NULL);
    return NULL;
}

/* Embedded timers against a reference: random starts, restarts and stops;
 * then the loop runs past every deadline: each timer still armed fires
 * exactly once, in (deadline, start order) order, and no stopped one fires. */
#define EMB_N 300
typedef struct {
    flare__timer_t t;
    uint64_t when, seq; /* what the reference expects */
    bool armed;
    int fired;
} emb_t;

static uint64_t emb_last_when, emb_last_seq;
static bool emb_any;
static int emb_bad;

static void emb_fire(void *ud)
{
    emb_t *e = ud;
    e->fired++;
    if (!e->armed)
        emb_bad++; /* stopped, yet fired */
    if (emb_any && (e->when < emb_last_when || (e->when == emb_last_when && e->seq < emb_last_seq)))
        emb_bad++; /* out of order */
    emb_any = true;
    emb_last_when = e->when;
    emb_last_seq = e->seq;
}

static void test_embedded_timers(void **state)
{
    (void)state;
    static emb_t es[EMB_N];
    memset(es, 0, sizeof(es)); /* the suite runs once per backend */
    emb_bad = 0;
    flare_loop_t loop;
    assert_int_equal(flare__loop_init(&loop, g_backend), 0);
    for (int i = 0; i < EMB_N; i++)
        flare__timer_init(&es[i].t, emb_fire, &es[i]);
    uint64_t seq = 0;
    unsigned r = 12345;
    for (int k = 0; k < 50000; k++) {
        r = r * 1103515245u + 12345u;
        emb_t *e = &es[(r >> 8) % EMB_N];
        if ((r >> 20) % 4 == 0) {
            flare__timer_stop(&loop, &e->t);
            e->armed = false;
        } else {
            uint64_t ms = (r >> 22) % 40; /* many equal deadlines */
            flare__timer_start(&loop, &e->t, ms);
            e->when = loop.now + ms;
            e->seq = seq++;
            e->armed = true;
        }
        if (k % 1000 == 999)
            loop.now++; /* deadlines spread over time, not only over ms */
    }
    size_t armed = 0;
    for (int i = 0; i < EMB_N; i++)
        armed += es[i].armed;
    assert_true(armed > 0 && armed < EMB_N);
    assert_int_equal(loop.ntimers, armed);
    flare__timer_t stopper;
    flare__timer_init(&stopper, stop_loop, &loop);
    flare__timer_start(&loop, &stopper, 41); /* after the latest deadline (now + 39) */
    flare__loop_run(&loop);
    assert_int_equal(loop.ntimers, 0);
    flare__loop_dispose(&loop);
    assert_int_equal(emb_bad, 0);
    for (int i = 0; i < EMB_N; i++)
        assert_int_equal(es[i].fired, es[i].armed ? 1 : 0);
}

/* A timer that re-arms itself from its callback keeps going; stopping it
 * from another timer's callback takes effect at once. */
static int rearm_count;
static flare__timer_t rearm_t, stopper_t;
static flare_loop_t *rearm_loop;

static void rearm_cb(void *ud)
{
    (void)ud;
    rearm_count++;
    flare__timer_start(rearm_loop, &rearm_t, 1);
}

static void stopper_cb(void *ud)
{
    (void)ud;
    flare__timer_stop(rearm_loop, &rearm_t);
    rearm_loop->stop = true;
}

static void test_timer_rearm_and_stop(void **state)
{
    (void)state;
    flare_loop_t loop;
    assert_int_equal(flare__loop_init(&loop, g_backend), 0);
    rearm_loop = &loop;
    flare__timer_init(&rearm_t, rearm_cb, NULL);
    flare__timer_init(&stopper_t, stopper_cb, NULL);
    flare__timer_start(&loop, &rearm_t, 1);
    flare__timer_start(&loop, &stopper_t, 60);
    flare__loop_run(&loop);
    assert_true(rearm_count >= 5);
    assert_false(rearm_t.active);
    assert_int_equal(loop.ntimers, 0);
    /* a delay near UINT64_MAX is "never", not "at once" (the sum used to wrap) */
    flare__timer_start(&loop, &rearm_t, UINT64_MAX - 1);
    assert_true(rearm_t.when > loop.now);
    flare__timer_stop(&loop, &rearm_t);
    int before = rearm_count;
    flare__loop_dispose(&loop);
    assert_int_equal(rearm_count, before);
}

/* A caller-owned post node: queued without allocating, run once, and free
 * to be released by its own callback. */
typedef struct {
    flare_post_node_t node;
    int *ran;
} owned_post_t;

static void owned_post_run(void *ud)
{
    owned_post_t *p = ud;
    (*p->ran)++;
    free(p);
}

static void test_post_node(void **state)
{
    (void)state;
    flare_loop_t loop;
    assert_int_equal(flare__loop_init(&loop, g_backend), 0);
    int ran = 0;
    for (int i = 0; i < 3; i++) {
        owned_post_t *p = malloc(sizeof(*p));
        assert_non_null(p);
        p->node = (flare_post_node_t){ .fn = owned_post_run, .ud = p };
        p->ran = &ran;
        flare__loop_post_node(&loop, &p->node);
    }
    flare__loop_dispose(&loop); /* runs what was posted */
    assert_int_equal(ran, 3);
}

static void test_post_wakes(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    pthread_t th[4];
    post_count = 0;
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, many_posts, &l);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    pthread_create(&th[3], NULL, poster, &l);
    flare__loop_run(&l); /* blocks until the other thread's post stops it */
    pthread_join(th[3], NULL);
    assert_int_equal(post_count, 3000);
    flare__loop_dispose(&l);
}

static int fd_events;
static void on_pipe(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    char buf[16];
    assert_true(events & FLARE_IO_READ);
    assert_int_equal(read(io->fd, buf, sizeof(buf)), 3);
    fd_events++;
    l->stop = true;
}

static void test_io(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    int p[2];
    assert_int_equal(pipe(p), 0);
    flare_io_t io = { .fd = p[0], .cb = on_pipe };
    assert_int_equal(flare__loop_add(&l, &io, FLARE_IO_READ), 0);
    assert_int_equal(io.events, FLARE_IO_READ);
    assert_int_equal(flare__loop_mod(&l, &io, FLARE_IO_READ), 0); /* no-op */
    assert_int_equal(write(p[1], "abc", 3), 3);
    fd_events = 0;
    flare__loop_run(&l);
    assert_int_equal(fd_events, 1);
    flare__loop_del(&l, &io);
    assert_int_equal(io.events, 0);
    close(p[0]);
    close(p[1]);
    flare__loop_dispose(&l);
}

/* Dispose cancels: neither embedded nor loop-allocated timers fire, a
 * stopped one stays stopped, and what posts arm at dispose is dropped. */
static int cancel_fired;
static void cancel_fire(void *ud)
{
    (void)ud;
    cancel_fired++;
}

static void post_arms_timer(void *ud)
{
    flare_loop_t *l = ud;
    assert_int_equal(flare__loop_timer(l, 0, cancel_fire, NULL), 0);
}

static void test_dispose_cancels(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    flare__timer_t a, b;
    flare__timer_init(&a, cancel_fire, NULL);
    flare__timer_init(&b, cancel_fire, NULL);
    flare__timer_start(&l, &a, 0);
    flare__timer_start(&l, &b, 5);
    flare__timer_stop(&l, &b);
    assert_false(b.active);
    assert_int_equal(flare__loop_timer(&l, 0, cancel_fire, NULL), 0);
    assert_int_equal(flare__loop_post(&l, post_arms_timer, &l), 0);
    cancel_fired = 0;
    flare__loop_dispose(&l);
    assert_int_equal(cancel_fired, 0);
    assert_false(a.active);
    assert_int_equal(l.ntimers, 0);
}

/* A stopped timer never fires, even when its deadline has passed before
 * the loop looks at the heap. */
static void test_stopped_never_fires(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    flare__timer_t a, stopper;
    flare__timer_init(&a, cancel_fire, NULL);
    flare__timer_init(&stopper, stop_loop, &l);
    flare__timer_start(&l, &a, 0);
    flare__timer_start(&l, &stopper, 10);
    flare__timer_stop(&l, &a);
    cancel_fired = 0;
    flare__loop_run(&l);
    assert_int_equal(cancel_fired, 0);
    flare__loop_dispose(&l);
}

/* The backend interface on its own: add/mod/del on a pipe, readiness in
 * FLARE_IO_* bits, nothing reported for a descriptor no longer watched. */
typedef struct {
    flare_io_t io; /* first: the callback gets &io */
    uint32_t got;
} be_io_t;

static void be_cb(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    (void)l;
    ((be_io_t *)(void *)io)->got = events;
}

static void test_backend(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    int p[2];
    assert_int_equal(pipe(p), 0);
    be_io_t rd = { { .fd = p[0], .cb = be_cb }, 0 }, wr = { { .fd = p[1], .cb = be_cb }, 0 };

    assert_int_equal(flare__backend_add(&l, &rd.io, FLARE_IO_READ), 0);
    assert_int_equal(rd.io.events, FLARE_IO_READ);
    assert_int_equal(flare__backend_add(&l, &wr.io, FLARE_IO_WRITE), 0);
    assert_int_equal(flare__backend_poll(&l, 0), 1); /* writable; nothing to read */
    assert_int_equal(wr.got, FLARE_IO_WRITE);

    assert_int_equal(write(p[1], "x", 1), 1);
    rd.got = wr.got = 0;
    assert_int_equal(flare__backend_poll(&l, 0), 2);
    assert_int_equal(rd.got, FLARE_IO_READ);
    assert_int_equal(wr.got, FLARE_IO_WRITE);

    /* interest 0: a pipe end with nothing to report stays quiet */
    assert_int_equal(flare__backend_mod(&l, &wr.io, 0), 0);
    assert_int_equal(wr.io.events, 0);
    rd.got = wr.got = 0;
    assert_int_equal(flare__backend_poll(&l, 0), 1);
    assert_int_equal(rd.got, FLARE_IO_READ);
    assert_int_equal(wr.got, 0);

    /* del: no longer reported, though still readable */
    flare__backend_del(&l, &rd.io);
    assert_int_equal(rd.io.events, 0);
    rd.got = 0;
    assert_int_equal(flare__backend_poll(&l, 0), 0);
    assert_int_equal(rd.got, 0);

    /* the writer closes: the reader sees data and HUP. With io_uring the
     * writer's poll request held the file until its removal ran in the next
     * submission, so the HUP may come one wait later: the descriptor is
     * closed for the kernel when the loop next waits, not inside close(2) */
    flare__backend_del(&l, &wr.io);
    close(p[1]);
    assert_int_equal(flare__backend_add(&l, &rd.io, FLARE_IO_READ), 0);
    rd.got = 0;
    assert_int_equal(flare__backend_poll(&l, 0), 1);
    for (int i = 0; i < 10 && rd.got != (FLARE_IO_READ | FLARE_IO_HUP); i++)
        flare__backend_poll(&l, 100);
    assert_int_equal(rd.got, FLARE_IO_READ | FLARE_IO_HUP);

    /* errors keep errno: a descriptor that is not open */
    be_io_t bad = { { .fd = -1, .cb = be_cb }, 0 };
    assert_int_equal(flare__backend_add(&l, &bad.io, FLARE_IO_READ), FLARE_ESYS);
    assert_int_equal(errno, EBADF);
    assert_int_equal(bad.io.events, 0);
    flare__backend_del(&l, &rd.io);
    close(p[0]);
    flare__loop_dispose(&l);
}

/* An io marked ready runs with FLARE_IO_READ after the batch although its
 * descriptor never becomes readable (what a TLS library holds), once per
 * mark, and may mark itself again from its own callback. */
static int ready_calls;
static void on_ready(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    assert_int_equal(events, FLARE_IO_READ);
    assert_null(io->ready_next); /* off the list before its callback */
    if (++ready_calls < 3)
        flare__loop_ready(l, io); /* again, next round */
    else
        l->stop = true;
}

static void test_ready_list(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    int p[2];
    assert_int_equal(pipe(p), 0);
    flare_io_t a = { .fd = p[0], .cb = on_ready }, b = { .fd = p[0], .cb = on_ready };
    assert_int_equal(flare__loop_add(&l, &a, FLARE_IO_READ), 0); /* never readable */
    ready_calls = 0;
    flare__loop_ready(&l, &a);
    flare__loop_ready(&l, &a); /* idempotent */
    assert_ptr_equal(l.ready, &a);
    uint64_t t0 = l.now;
    flare__loop_run(&l);
    assert_int_equal(ready_calls, 3);
    assert_null(l.ready);
    assert_true(l.now - t0 < 1000); /* the wait did not block */
    /* two on the list: both run */
    ready_calls = 0;
    l.stop = false;
    flare__loop_ready(&l, &a);
    flare__loop_ready(&l, &b);
    flare__loop_run(&l);
    assert_true(ready_calls >= 3);
    flare__loop_del(&l, &a);
    flare__loop_dispose(&l);
    close(p[0]);
    close(p[1]);
}

/* An fd closed and reused within one turn: the new io sees only its own
 * readiness, and the old one (unregistered, its memory reused) is never
 * called, although the kernel may still have held a request for it. */
static void test_fd_reuse(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    int p[2], q[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(write(p[1], "x", 1), 1);
    be_io_t a = { { .fd = p[0], .cb = be_cb }, 0 };
    assert_int_equal(flare__loop_add(&l, &a.io, FLARE_IO_READ), 0);
    assert_int_equal(flare__backend_poll(&l, 0), 1);
    assert_int_equal(a.got, FLARE_IO_READ);
    /* still readable: armed again; now removed and the fd closed */
    flare__loop_del(&l, &a.io);
    close(p[0]);
    a.got = 0;
    assert_int_equal(pipe(q), 0); /* takes p[0]'s number back */
    assert_int_equal(q[0], p[0]);
    be_io_t b = { { .fd = q[0], .cb = be_cb }, 0 };
    assert_int_equal(flare__loop_add(&l, &b.io, FLARE_IO_READ), 0);
    assert_int_equal(flare__backend_poll(&l, 0), 0); /* q is empty */
    assert_int_equal(a.got, 0);
    assert_int_equal(b.got, 0);
    assert_int_equal(write(q[1], "y", 1), 1);
    assert_int_equal(flare__backend_poll(&l, 0), 1);
    assert_int_equal(b.got, FLARE_IO_READ);
    assert_int_equal(a.got, 0);

    /* interest changed while a request is armed: the new interest counts */
    b.got = 0;
    assert_int_equal(flare__loop_mod(&l, &b.io, FLARE_IO_WRITE), 0);
    assert_int_equal(flare__backend_poll(&l, 0), 0); /* a read end is never writable */
    assert_int_equal(flare__loop_mod(&l, &b.io, FLARE_IO_READ), 0);
    assert_int_equal(flare__backend_poll(&l, 0), 1);
    assert_int_equal(b.got, FLARE_IO_READ);
    flare__loop_del(&l, &b.io);
    close(q[0]);
    close(q[1]);
    close(p[1]);
    flare__loop_dispose(&l);
}

/* More descriptors than the first table holds, each reported once. */
static void test_many_fds(void **state)
{
    (void)state;
    enum { N = 300 };
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    static int fds[N][2];
    static be_io_t ios[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(pipe(fds[i]), 0);
        ios[i] = (be_io_t){ { .fd = fds[i][0], .cb = be_cb }, 0 };
        assert_int_equal(flare__loop_add(&l, &ios[i].io, FLARE_IO_READ), 0);
        assert_int_equal(write(fds[i][1], "z", 1), 1);
    }
    int seen = 0;
    /* one wait reports at most a batch; count distinct ios that fired */
    for (int round = 0; round < 8; round++) {
        flare__backend_poll(&l, 100);
        seen = 0;
        for (int i = 0; i < N; i++)
            seen += ios[i].got == FLARE_IO_READ;
        if (seen == N)
            break;
    }
    assert_int_equal(seen, N);
    for (int i = 0; i < N; i++) {
        flare__loop_del(&l, &ios[i].io);
        close(fds[i][0]);
        close(fds[i][1]);
    }
    flare__loop_dispose(&l);
}

/* ---- input as data (FLARE_IO_RECV): only io_uring honours it; on epoll
 * the same io reads with read(2) after readiness. Each case runs on both. */

typedef struct {
    flare_io_t io;
    char got[8192];
    size_t len, want;
    size_t chunk; /* bytes read per callback (one read, as HTTP/1.1 does) */
    int eof, calls;
    ssize_t err;
} rx_t;

static ssize_t rx_read(flare_loop_t *l, rx_t *r, char *buf, size_t len)
{
    if (r->io.events & FLARE_IO_RECV)
        return flare__loop_recv(l, &r->io, buf, len);
    ssize_t n = read(r->io.fd, buf, len);
    return n < 0 ? -errno : n;
}

static void rx_cb(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    rx_t *r = (rx_t *)io;
    r->calls++;
    if (!(events & (FLARE_IO_READ | FLARE_IO_HUP | FLARE_IO_ERR)))
        return;
    if (r->want != 0 && r->len >= r->want) {
        l->stop = true; /* has what it waited for: reads no more now */
        return;
    }
    size_t room = sizeof(r->got) - r->len;
    ssize_t n = rx_read(l, r, r->got + r->len, r->chunk < room ? r->chunk : room);
    if (n > 0)
        r->len += (size_t)n;
    else if (n == 0)
        r->eof++;
    else if (n != -EAGAIN)
        r->err = n;
    if (n <= 0 && n != -EAGAIN)
        flare__loop_mod(l, io, 0); /* as the stream does after the end */
    if (r->want != 0 && r->len >= r->want)
        l->stop = true;
    if (r->eof || r->err)
        l->stop = true;
}

static uint32_t rx_interest(flare_loop_t *l)
{
    return FLARE_IO_READ | (flare__loop_can_recv(l) ? FLARE_IO_RECV : 0);
}

static void rx_init(rx_t *r, int fd, size_t chunk)
{
    memset(r, 0, sizeof(*r));
    r->io.fd = fd;
    r->io.cb = rx_cb;
    r->chunk = chunk;
}

/* Runs the loop until a callback stops it, or ms pass. */
static void run_for(flare_loop_t *l, uint64_t ms)
{
    flare__timer_t t;
    flare__timer_init(&t, stop_loop, l);
    flare__timer_start(l, &t, ms);
    l->stop = false;
    flare__loop_run(l);
    flare__timer_stop(l, &t);
    l->stop = false;
}

static void sockpair(int sv[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
}

/* Bytes in order, also when the callback reads fewer than arrived (the
 * rest waits with the loop and the callback runs again), then the end. */
static void test_recv_data(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    int sv[2];
    sockpair(sv);
    rx_t r;
    rx_init(&r, sv[0], 4096);
    assert_int_equal(flare__loop_add(&l, &r.io, rx_interest(&l)), 0);
    assert_int_equal(write(sv[1], "hello", 5), 5);
    r.want = 5;
    run_for(&l, 2000);
    assert_int_equal(r.len, 5);
    assert_memory_equal(r.got, "hello", 5);
    r.chunk = 3; /* "world, again" in pieces of 3 */
    assert_int_equal(write(sv[1], "world, again", 12), 12);
    r.want = 17;
    run_for(&l, 2000);
    assert_int_equal(r.len, 17);
    assert_memory_equal(r.got, "helloworld, again", 17);
    int calls = r.calls;
    run_for(&l, 50); /* nothing more: no callback */
    assert_int_equal(r.calls, calls);
    assert_int_equal(write(sv[1], "bye", 3), 3);
    close(sv[1]);
    r.want = 0;
    run_for(&l, 2000);
    if (r.len == 20 && r.eof == 0)
        run_for(&l, 2000); /* the bytes stopped the loop first */
    assert_int_equal(r.len, 20);
    assert_memory_equal(r.got + 17, "bye", 3);
    assert_int_equal(r.eof, 1);
    assert_int_equal(r.err, 0);
    flare__loop_del(&l, &r.io);
    close(sv[0]);
    flare__loop_dispose(&l);
}

/* A reset peer: the read reports the error it would with read(2). */
static void test_recv_reset(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(lfd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(lfd, 1), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
    int s = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
    assert_true(s >= 0);
    rx_t r;
    rx_init(&r, s, 4096);
    assert_int_equal(flare__loop_add(&l, &r.io, rx_interest(&l)), 0);
    run_for(&l, 20); /* armed */
    struct linger lg = { 1, 0 };
    assert_int_equal(setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
    close(c); /* RST */
    run_for(&l, 2000);
    assert_int_equal(r.err, -ECONNRESET);
    assert_int_equal(r.len, 0);
    flare__loop_del(&l, &r.io);
    close(s);
    close(lfd);
    flare__loop_dispose(&l);
}

/* Input paused (READ off): no callback; bytes that arrive meanwhile, also
 * those a receive took before its cancel ran, are read once input resumes. */
static void test_recv_pause(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    int sv[2];
    sockpair(sv);
    rx_t r;
    rx_init(&r, sv[0], 4096);
    uint32_t in = rx_interest(&l);
    assert_int_equal(flare__loop_add(&l, &r.io, in), 0);
    assert_int_equal(write(sv[1], "ab", 2), 2);
    r.want = 2;
    run_for(&l, 2000);
    assert_int_equal(r.len, 2);
    /* bytes sent just before the pause: the receive is still armed */
    assert_int_equal(write(sv[1], "cd", 2), 2);
    assert_int_equal(flare__loop_mod(&l, &r.io, in & ~FLARE_IO_READ), 0);
    int calls = r.calls;
    run_for(&l, 50);
    assert_int_equal(write(sv[1], "ef", 2), 2);
    run_for(&l, 50);
    assert_int_equal(r.calls, calls);
    assert_int_equal(r.len, 2);
    assert_int_equal(flare__loop_mod(&l, &r.io, in), 0);
    r.want = 6;
    run_for(&l, 2000);
    assert_int_equal(r.len, 6);
    assert_memory_equal(r.got, "abcdef", 6);
    /* and again, several times in one turn */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(write(sv[1], "g", 1), 1);
        assert_int_equal(flare__loop_mod(&l, &r.io, in & ~FLARE_IO_READ), 0);
        assert_int_equal(flare__loop_mod(&l, &r.io, in), 0);
    }
    r.want = 9;
    run_for(&l, 2000);
    assert_int_equal(r.len, 9);
    assert_memory_equal(r.got, "abcdefggg", 9);
    flare__loop_del(&l, &r.io);
    close(sv[0]);
    close(sv[1]);
    flare__loop_dispose(&l);
}

/* A buffer ring far smaller than what arrives at once: receives end with
 * -ENOBUFS and are armed again; nothing is lost, no connection hangs. */
static void test_recv_dry_ring(void **state)
{
    (void)state;
    enum { N = 40 };
    flare__uring_recv_bufs = 2;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    flare__uring_recv_bufs = 0;
    static int sv[N][2];
    static rx_t r[N];
    for (int i = 0; i < N; i++) {
        sockpair(sv[i]);
        rx_init(&r[i], sv[i][0], 4096);
        assert_int_equal(flare__loop_add(&l, &r[i].io, rx_interest(&l)), 0);
    }
    run_for(&l, 20);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            char msg[16];
            int n = snprintf(msg, sizeof(msg), "%02d:%d;", i, round);
            assert_int_equal(write(sv[i][1], msg, (size_t)n), n);
        }
        for (int k = 0; k < 200; k++) {
            int done = 0;
            for (int i = 0; i < N; i++)
                done += r[i].len == (size_t)(round + 1) * 5;
            if (done == N)
                break;
            run_for(&l, 10);
        }
    }
    for (int i = 0; i < N; i++) {
        char want[32];
        int n = snprintf(want, sizeof(want), "%02d:0;%02d:1;%02d:2;", i, i, i);
        assert_int_equal(r[i].len, (size_t)n);
        assert_memory_equal(r[i].got, want, (size_t)n);
        flare__loop_del(&l, &r[i].io);
        close(sv[i][0]);
        close(sv[i][1]);
    }
    flare__loop_dispose(&l);
}

/* A descriptor closed with a receive armed and bytes on their way, its
 * number reused at once: the old io is never called, the new one reads
 * only its own bytes. */
static void test_recv_fd_reuse(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    int sv[2], sw[2];
    sockpair(sv);
    rx_t a, b;
    rx_init(&a, sv[0], 4096);
    assert_int_equal(flare__loop_add(&l, &a.io, rx_interest(&l)), 0);
    run_for(&l, 20);
    assert_int_equal(write(sv[1], "old", 3), 3);
    flare__loop_del(&l, &a.io);
    close(sv[0]);
    sockpair(sw);
    assert_int_equal(sw[0], sv[0]);
    rx_init(&b, sw[0], 4096);
    assert_int_equal(flare__loop_add(&l, &b.io, rx_interest(&l)), 0);
    assert_int_equal(write(sw[1], "new", 3), 3);
    b.want = 3;
    run_for(&l, 2000);
    run_for(&l, 20);
    assert_int_equal(a.calls, 0);
    assert_int_equal(b.len, 3);
    assert_memory_equal(b.got, "new", 3);
    flare__loop_del(&l, &b.io);
    close(sw[0]);
    close(sw[1]);
    close(sv[1]);
    flare__loop_dispose(&l);
}

/* The registration handed to another io (a protocol switch): what was
 * received for the first and not read, and what comes after, is the
 * second's, in order. */
static void test_recv_move(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    int sv[2];
    sockpair(sv);
    rx_t a, b;
    rx_init(&a, sv[0], 2);
    rx_init(&b, sv[0], 4096);
    uint32_t in = rx_interest(&l);
    assert_int_equal(flare__loop_add(&l, &a.io, in), 0);
    assert_int_equal(write(sv[1], "upgrade", 7), 7);
    a.want = 2;
    run_for(&l, 2000);
    assert_int_equal(a.len, 2); /* "up"; "grade" not read by a */
    assert_int_equal(flare__loop_move(&l, &a.io, &b.io, in), 0);
    assert_int_equal(write(sv[1], "+frame", 6), 6);
    b.want = 11;
    run_for(&l, 2000);
    assert_int_equal(b.len, 11);
    assert_memory_equal(b.got, "grade+frame", 11);
    assert_int_equal(a.len, 2);
    flare__loop_del(&l, &b.io);
    close(sv[0]);
    close(sv[1]);
    flare__loop_dispose(&l);
}

/* Many connections, each its own bytes. */
static void test_recv_many(void **state)
{
    (void)state;
    enum { N = 300 };
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l, g_backend), 0);
    static int sv[N][2];
    static rx_t r[N];
    for (int i = 0; i < N; i++) {
        sockpair(sv[i]);
        rx_init(&r[i], sv[i][0], 4096);
        assert_int_equal(flare__loop_add(&l, &r[i].io, rx_interest(&l)), 0);
        char msg[16];
        int n = snprintf(msg, sizeof(msg), "conn %03d", i);
        assert_int_equal(write(sv[i][1], msg, (size_t)n), n);
    }
    for (int k = 0; k < 200; k++) {
        int done = 0;
        for (int i = 0; i < N; i++)
            done += r[i].len == 8;
        if (done == N)
            break;
        run_for(&l, 10);
    }
    for (int i = 0; i < N; i++) {
        char msg[16];
        snprintf(msg, sizeof(msg), "conn %03d", i);
        assert_int_equal(r[i].len, 8);
        assert_memory_equal(r[i].got, msg, 8);
        flare__loop_del(&l, &r[i].io);
        close(sv[i][0]);
        close(sv[i][1]);
    }
    flare__loop_dispose(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timers_order),
        cmocka_unit_test(test_many_timers),
        cmocka_unit_test(test_embedded_timers),
        cmocka_unit_test(test_timer_rearm_and_stop),
        cmocka_unit_test(test_post_node),
        cmocka_unit_test(test_post_wakes),
        cmocka_unit_test(test_io),
        cmocka_unit_test(test_dispose_cancels),
        cmocka_unit_test(test_stopped_never_fires),
        cmocka_unit_test(test_backend),
        cmocka_unit_test(test_ready_list),
        cmocka_unit_test(test_fd_reuse),
        cmocka_unit_test(test_many_fds),
        cmocka_unit_test(test_recv_data),
        cmocka_unit_test(test_recv_reset),
        cmocka_unit_test(test_recv_pause),
        cmocka_unit_test(test_recv_dry_ring),
        cmocka_unit_test(test_recv_fd_reuse),
        cmocka_unit_test(test_recv_move),
        cmocka_unit_test(test_recv_many),
    };
    int failed = cmocka_run_group_tests_name("epoll", tests, NULL, NULL);
    char why[160];
    if (flare__uring_probe(why, sizeof(why)) != 0) {
        /* a process that may not use io_uring (seccomp, io_uring_disabled):
         * the app falls back to epoll, tested above */
        print_message("io_uring backend not tested here: %s\n", why);
        return failed;
    }
    g_backend = FLARE__LOOP_URING;
    return failed + cmocka_run_group_tests_name("io_uring", tests, NULL, NULL);
}
