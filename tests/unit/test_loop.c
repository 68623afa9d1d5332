/* loop/: timers in deadline order, cross-thread posts, fd callbacks. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "loop/loop.h"

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
    assert_int_equal(flare__loop_init(&l), 0);
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
    assert_int_equal(flare__loop_init(&l), 0);
    static rec_t rec;
    rec.n = 0;
    static tag_t tags[1000];
    for (int i = 0; i < 1000; i++) {
        tags[i].rec = &rec;
        tags[i].id = 0;
        assert_int_equal(flare__loop_timer(&l, (uint64_t)(i % 7), record, &tags[i]), 0);
    }
    assert_int_equal(l.ntimers, 1000);
    flare__loop_dispose(&l); /* pending timers fire at dispose: no leak */
    assert_int_equal(l.ntimers, 0);
    assert_int_equal(rec.n, 1000);
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

static void test_post_wakes(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l), 0);
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
    assert_true(events & EPOLLIN);
    assert_int_equal(read(io->fd, buf, sizeof(buf)), 3);
    fd_events++;
    l->stop = true;
}

static void test_io(void **state)
{
    (void)state;
    flare_loop_t l;
    assert_int_equal(flare__loop_init(&l), 0);
    int p[2];
    assert_int_equal(pipe(p), 0);
    flare_io_t io = { p[0], 0, on_pipe };
    assert_int_equal(flare__loop_add(&l, &io, EPOLLIN), 0);
    assert_int_equal(io.events, EPOLLIN);
    assert_int_equal(flare__loop_mod(&l, &io, EPOLLIN), 0); /* no-op */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timers_order),
        cmocka_unit_test(test_many_timers),
        cmocka_unit_test(test_post_wakes),
        cmocka_unit_test(test_io),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
