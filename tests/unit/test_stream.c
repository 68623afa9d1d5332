/* net/stream: the entry points a completion backend drives (io_uring,
 * issue 27), tested without one: output taken as "what to send next" and
 * "n bytes completed", input handed over in a buffer the backend owns;
 * and a plain stream on an io_uring loop, whose input the loop receives. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/core.h"
#include "loop/loop.h"
#include "net/stream.h"

typedef struct {
    flare_loop_t loop;
    flare_stream_t s;
    int peer; /* the other end of the socket pair */
} fix_t;

static void no_io(flare_loop_t *l, flare_io_t *io, uint32_t ev)
{
    (void)l;
    (void)io;
    (void)ev;
}

static int setup(void **state)
{
    fix_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(flare__loop_init(&f->loop, FLARE__LOOP_EPOLL), 0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    f->peer = sv[1];
    assert_int_equal(flare__stream_open(&f->s, &f->loop, sv[0], NULL, no_io), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;
    flare__stream_close(&f->s, false);
    close(f->peer);
    flare__bufpool_dispose(&f->loop.pool);
    flare__loop_dispose(&f->loop);
    free(f);
    return 0;
}

static void no_timer(void *ud)
{
    ((flare_loop_t *)ud)->stop = true;
}

static int released;
static void count_release(void *ud)
{
    (void)ud;
    released++;
}

/* Everything the queue holds, gathered by flare__stream_out_next into one
 * string (no file ranges in these tests). */
static size_t gather(const flare_stream_t *s, char *out, size_t cap, flare_out_next_t *nx)
{
    struct iovec iov[8];
    int n = flare__stream_out_next(s, iov, 8, nx);
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        assert_true(len + iov[i].iov_len <= cap);
        memcpy(out + len, iov[i].iov_base, iov[i].iov_len);
        len += iov[i].iov_len;
    }
    assert_int_equal(len, nx->total);
    return len;
}

/* Bytes, a borrowed segment, bytes: offered in order; a completion of part
 * of them advances the queue and keeps the segment; the completion of the
 * rest empties it and releases the segment then, not before. */
static void test_out_next_and_done(void **state)
{
    fix_t *f = *state;
    flare_stream_t *s = &f->s;
    released = 0;
    static const char big[1000] = { [0] = 'B', [999] = 'E' }; /* past COPY_MAX: borrowed */
    struct iovec in[3] = { { "head:", 5 }, { (void *)big, sizeof(big) } };
    assert_int_equal(flare__stream_queue(s, in, 2, count_release, NULL), 0);
    assert_int_equal(flare__stream_queue(s, &(struct iovec){ ":tail", 5 }, 1, NULL, NULL), 0);
    assert_int_equal(released, 0); /* borrowed, not copied */
    assert_int_equal(flare__stream_unsent(s), 1010);

    char out[1100];
    flare_out_next_t nx;
    size_t len = gather(s, out, sizeof(out), &nx);
    assert_int_equal(len, 1010);
    assert_true(nx.all);
    assert_null(nx.file);
    assert_memory_equal(out, "head:B", 6);
    assert_memory_equal(out + 5 + 999, "E:tail", 6);

    /* 7 bytes complete (a short send): the next offer starts after them */
    assert_false(flare__stream_out_done(s, 7));
    assert_int_equal(flare__stream_unsent(s), 1003);
    len = gather(s, out, sizeof(out), &nx);
    assert_int_equal(len, 1003);
    assert_int_equal(out[1003 - 6], 'E');
    assert_int_equal(released, 0);

    /* the rest completes: the queue is empty, the segment released */
    assert_true(flare__stream_out_done(s, 1003));
    assert_int_equal(released, 1);
    assert_int_equal(flare__stream_unsent(s), 0);
    assert_false(flare__stream_has_output(s));
    assert_int_equal(flare__stream_out_next(s, (struct iovec[1]){ 0 }, 1, &nx), 0);
}

/* The epoll path is the same two steps inline: flushing writes what
 * out_next offers and completes it; the peer reads the bytes in order. */
static void test_flush_is_next_and_done(void **state)
{
    fix_t *f = *state;
    flare_stream_t *s = &f->s;
    released = 0;
    static char big[4096];
    memset(big, 'x', sizeof(big));
    struct iovec in[2] = { { "a", 1 }, { big, sizeof(big) } };
    assert_int_equal(flare__stream_queue(s, in, 2, count_release, NULL), 0);
    assert_int_equal(flare__stream_queue(s, &(struct iovec){ "z", 1 }, 1, NULL, NULL), 0);
    assert_int_equal(flare__stream_flush(s), 1);
    assert_int_equal(released, 1);
    char got[4200];
    ssize_t n = read(f->peer, got, sizeof(got));
    assert_int_equal(n, 4098);
    assert_int_equal(got[0], 'a');
    assert_int_equal(got[1], 'x');
    assert_int_equal(got[4097], 'z');
}

/* A backend hands over bytes it received into its own buffer: they are in
 * the stream's read buffer as a read would have put them, the backend's
 * buffer is released at once, a second hand-over appends after what is
 * unconsumed, and a hand-over of nothing is the peer's end. */
static void test_give(void **state)
{
    fix_t *f = *state;
    flare_stream_t *s = &f->s;
    released = 0;
    char *kbuf = malloc(64); /* the backend's (a provided buffer) */
    assert_non_null(kbuf);
    memcpy(kbuf, "GET / HTTP/1.1\r\n", 16);
    assert_int_equal(flare__stream_give(s, kbuf, 16, 1 << 20, count_release, NULL), 16);
    assert_int_equal(released, 1);
    memset(kbuf, '#', 64); /* the backend reuses it: the stream's copy is unaffected */
    assert_int_equal(s->rlen - s->rpos, 16);
    assert_memory_equal(s->rbuf + s->rpos, "GET / HTTP/1.1\r\n", 16);

    s->rpos += 4; /* the protocol consumed "GET " */
    memcpy(kbuf, "Host: a\r\n\r\n", 11);
    assert_int_equal(flare__stream_give(s, kbuf, 11, 1 << 20, count_release, NULL), 11);
    assert_int_equal(released, 2);
    assert_int_equal(s->rlen - s->rpos, 23);
    assert_memory_equal(s->rbuf + s->rpos, "/ HTTP/1.1\r\nHost: a\r\n\r\n", 23);

    /* more than the buffer may grow to: refused, the buffer still released */
    char *huge = calloc(1, FLARE_CONN_BUF + 1);
    assert_non_null(huge);
    assert_int_equal(
        flare__stream_give(s, huge, FLARE_CONN_BUF + 1, FLARE_CONN_BUF, count_release, NULL),
        -ENOBUFS);
    assert_int_equal(released, 3);
    free(huge);

    s->rpos = s->rlen;
    assert_int_equal(flare__stream_give(s, kbuf, 0, 1 << 20, count_release, NULL), 0);
    assert_int_equal(released, 4);
    assert_true(s->sflags & FLARE_S_RD_EOF);
    free(kbuf);
}

/* ---- recv mode: plain TCP on an io_uring loop ---- */

typedef struct {
    flare_stream_t s;
    int calls, eofs;
    size_t got; /* what the reads returned, summed */
    char last[64];
} rs_t;

static void rs_cb(flare_loop_t *l, flare_io_t *io, uint32_t ev)
{
    rs_t *r = (rs_t *)io; /* the stream first, its io first */
    (void)ev;
    r->calls++;
    ssize_t n = flare__stream_read(&r->s, FLARE_CONN_BUF);
    if (n > 0) {
        r->got += (size_t)n;
        size_t have = r->s.rlen - r->s.rpos;
        memcpy(r->last, r->s.rbuf + r->s.rpos, have < sizeof(r->last) ? have : sizeof(r->last));
        r->s.rpos = r->s.rlen; /* consumed */
        flare__stream_idle(&r->s);
    } else if (n == 0) {
        r->eofs++;
    }
    l->stop = true;
}

static void rs_run(flare_loop_t *l)
{
    flare__timer_t t;
    flare__timer_init(&t, no_timer, l);
    flare__timer_start(l, &t, 300);
    l->stop = false;
    flare__loop_run(l);
    flare__timer_stop(l, &t);
}

/* On io_uring a plain stream takes its input from the loop's receive (the
 * marker transport, no read(2)): a read reports the bytes that arrived
 * since the last one, -EAGAIN when none did, 0 at the end; input paused
 * keeps what arrives for when it resumes. */
static void test_recv_mode(void **state)
{
    (void)state;
    char why[160];
    if (flare__uring_probe(why, sizeof(why)) != 0) {
        print_message("io_uring not usable here: %s\n", why);
        return;
    }
    flare_loop_t loop;
    /* the receiving streams are opt-in for now: off by default */
    unsetenv("FLARE_URING_RECV");
    assert_int_equal(flare__loop_init(&loop, FLARE__LOOP_URING), 0);
    assert_false(loop.recv_streams);
    flare__loop_dispose(&loop);
    setenv("FLARE_URING_RECV", "1", 1);
    assert_int_equal(flare__loop_init(&loop, FLARE__LOOP_URING), 0);
    unsetenv("FLARE_URING_RECV");
    assert_true(loop.recv_streams);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    static rs_t r;
    memset(&r, 0, sizeof(r));
    assert_int_equal(flare__stream_open(&r.s, &loop, sv[0], NULL, rs_cb), 0);
    assert_ptr_equal(r.s.tr, FLARE__RECV_TR);
    assert_false(flare__stream_tls(&r.s));
    assert_true(r.s.io.events & FLARE_IO_RECV);
    /* nothing arrived: -EAGAIN, and no read(2) would have said so either */
    assert_int_equal(flare__stream_read(&r.s, FLARE_CONN_BUF), -EAGAIN);
    flare__stream_idle(&r.s);

    assert_int_equal(write(sv[1], "GET / HTTP/1.1\r\n\r\n", 18), 18);
    rs_run(&loop);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.got, 18);
    assert_memory_equal(r.last, "GET / HTTP/1.1\r\n\r\n", 18);
    assert_int_equal(flare__stream_read(&r.s, FLARE_CONN_BUF), -EAGAIN); /* reported once */
    flare__stream_idle(&r.s);

    /* paused: no callback; the bytes wait and come when input resumes */
    flare__stream_read_enable(&r.s, false);
    assert_false(r.s.io.events & FLARE_IO_READ);
    assert_int_equal(write(sv[1], "PAUSED", 6), 6);
    rs_run(&loop);
    assert_int_equal(r.calls, 1);
    flare__stream_read_enable(&r.s, true);
    rs_run(&loop);
    assert_int_equal(r.calls, 2);
    assert_int_equal(r.got, 24);
    assert_memory_equal(r.last, "PAUSED", 6);

    /* the peer's end: 0, and the stream knows it */
    close(sv[1]);
    rs_run(&loop);
    assert_int_equal(r.eofs, 1);
    assert_true(r.s.sflags & FLARE_S_RD_EOF);
    assert_int_equal(flare__stream_read(&r.s, FLARE_CONN_BUF), 0);
    flare__stream_close(&r.s, false);
    assert_null(r.s.tr);
    flare__bufpool_dispose(&loop.pool);
    flare__loop_dispose(&loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_out_next_and_done, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flush_is_next_and_done, setup, teardown),
        cmocka_unit_test_setup_teardown(test_give, setup, teardown),
        cmocka_unit_test(test_recv_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
