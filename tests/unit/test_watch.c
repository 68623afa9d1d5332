/* Public timers and fd watchers on a worker (include/flare/loop.h): a
 * watcher on one end of a socketpair echoes what another thread writes,
 * switching its interest between READ and WRITE; timers stop, re-arm and
 * free themselves; handles and a pending request left at shutdown are
 * freed without their callbacks running (ASan checks the "no leak" part,
 * TSan the cross-thread part). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "harness.h"

static void wait_for(atomic_int *v, int want)
{
    for (int i = 0; i < 500 && atomic_load(v) < want; i++)
        usleep(10000);
    assert_true(atomic_load(v) >= want);
}

static int start(harness_t *h, unsigned workers)
{
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = workers;
    cfg.drain_timeout_ms = 200;
    h->app = flare_app_new(&cfg);
    assert_non_null(h->app);
    return 0;
}

/* ---- echo over a socketpair ---- */

typedef struct {
    flare_app_t *app;
    int fd;
    flare_watch_t *wt;
    char buf[256];
    size_t len;
    atomic_int ready, freed, switches;
    int rc;
} echo_t;

static void echo_cb(flare_watch_t *wt, unsigned events, void *ud)
{
    echo_t *e = ud;
    if (events & FLARE_WATCH_READ) {
        ssize_t n = read(e->fd, e->buf + e->len, sizeof(e->buf) - e->len);
        if (n <= 0) {
            flare_watch_free(wt); /* peer gone */
            atomic_store(&e->freed, 1);
            return;
        }
        e->len += (size_t)n;
        if (e->len >= 4 && memcmp(e->buf + e->len - 4, "quit", 4) == 0) {
            flare_watch_free(wt); /* from its own callback */
            atomic_store(&e->freed, 1);
            return;
        }
        /* answer when the socket is writable, and read nothing meanwhile */
        assert_int_equal(flare_watch_set(wt, FLARE_WATCH_WRITE), 0);
        assert_int_equal(flare_watch_events(wt), FLARE_WATCH_WRITE);
        atomic_fetch_add(&e->switches, 1);
    } else if (events & FLARE_WATCH_WRITE) {
        ssize_t n = write(e->fd, e->buf, e->len);
        assert_int_equal(n, (ssize_t)e->len);
        e->len = 0;
        assert_int_equal(flare_watch_set(wt, FLARE_WATCH_READ), 0);
    }
}

static void echo_start(void *ud)
{
    echo_t *e = ud;
    flare_worker_t *w = flare_app_worker(e->app, 1);
    e->rc = flare_watch_new(w, e->fd, FLARE_WATCH_READ, echo_cb, e, &e->wt);
    if (e->rc == 0)
        assert_int_equal(flare_watch_fd(e->wt), e->fd);
    atomic_store(&e->ready, 1);
}

static void test_echo(void **state)
{
    (void)state;
    harness_t h = { 0 };
    start(&h, 2);
    assert_null(flare_app_worker(h.app, 0)); /* not run yet */
    assert_int_equal(harness_start(&h), 0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    static echo_t e;
    memset(&e, 0, sizeof(e));
    e.app = h.app;
    e.fd = sv[0];
    assert_int_equal(flare_app_post(h.app, 1, echo_start, &e), 0);
    wait_for(&e.ready, 1);
    assert_int_equal(e.rc, 0);
    for (int i = 0; i < 50; i++) {
        char msg[32], got[32];
        int n = snprintf(msg, sizeof(msg), "ping %d", i);
        assert_int_equal(write(sv[1], msg, (size_t)n), n);
        ssize_t r = 0;
        while (r < n) {
            ssize_t k = read(sv[1], got + r, sizeof(got) - (size_t)r);
            assert_true(k > 0);
            r += k;
        }
        assert_memory_equal(got, msg, (size_t)n);
    }
    assert_int_equal(atomic_load(&e.switches), 50);
    /* the worker serves HTTP beside the watcher */
    char *resp =
        harness_roundtrip(&h, "GET /none HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_non_null(strstr(resp, " 404 "));
    free(resp);
    assert_int_equal(write(sv[1], "quit", 4), 4);
    wait_for(&e.freed, 1);
    assert_int_equal(harness_stop(&h), 0);
    close(sv[0]); /* still the caller's */
    close(sv[1]);
    flare_app_free(h.app);
}

/* ---- timers ---- */

typedef struct {
    flare_app_t *app;
    flare_timer_t *once, *stopped, *periodic;
    atomic_int once_fired, stopped_fired, periodic_fired, done;
} timers_t;

static void once_cb(void *ud)
{
    timers_t *t = ud;
    atomic_fetch_add(&t->once_fired, 1);
    assert_false(flare_timer_active(t->once));
    flare_timer_free(t->once); /* from its own callback */
    t->once = NULL;
}

static void stopped_cb(void *ud)
{
    timers_t *t = ud;
    atomic_fetch_add(&t->stopped_fired, 1);
}

static void periodic_cb(void *ud)
{
    timers_t *t = ud;
    if (atomic_fetch_add(&t->periodic_fired, 1) + 1 < 5) {
        assert_int_equal(flare_timer_start(t->periodic, 2), 0);
        return;
    }
    flare_timer_free(t->periodic);
    flare_timer_free(t->stopped); /* never fired: freeing a stopped one */
    atomic_store(&t->done, 1);
}

static void timers_start(void *ud)
{
    timers_t *t = ud;
    flare_worker_t *w = flare_app_worker(t->app, 0);
    assert_int_equal(flare_timer_new(w, once_cb, t, &t->once), 0);
    assert_int_equal(flare_timer_new(w, stopped_cb, t, &t->stopped), 0);
    assert_int_equal(flare_timer_new(w, periodic_cb, t, &t->periodic), 0);
    assert_false(flare_timer_active(t->once));
    assert_int_equal(flare_timer_start(t->once, 50), 0);
    assert_int_equal(flare_timer_start(t->once, 5), 0); /* moved earlier */
    assert_int_equal(flare_timer_start(t->stopped, 0), 0);
    assert_true(flare_timer_active(t->stopped));
    flare_timer_stop(t->stopped); /* due now, yet never fires */
    flare_timer_stop(t->stopped); /* twice: a no-op */
    assert_int_equal(flare_timer_start(t->periodic, 1), 0);
}

static void test_timers(void **state)
{
    (void)state;
    harness_t h = { 0 };
    start(&h, 2);
    assert_int_equal(harness_start(&h), 0);
    static timers_t t;
    memset(&t, 0, sizeof(t));
    t.app = h.app;
    assert_int_equal(flare_app_post(h.app, 0, timers_start, &t), 0);
    wait_for(&t.done, 1);
    wait_for(&t.once_fired, 1);
    usleep(20000);
    assert_int_equal(atomic_load(&t.once_fired), 1);
    assert_int_equal(atomic_load(&t.stopped_fired), 0);
    assert_int_equal(atomic_load(&t.periodic_fired), 5);
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
}

/* ---- shutdown with handles still registered ---- */

static atomic_int never_called, made, late_rc;

static void never_task(void *ud)
{
    (void)ud;
    atomic_fetch_add(&never_called, 1);
}

static void never_watch(flare_watch_t *wt, unsigned events, void *ud)
{
    (void)wt;
    (void)events;
    (void)ud;
    atomic_fetch_add(&never_called, 1);
}

typedef struct {
    flare_app_t *app;
    unsigned worker;
    int fd; /* a pipe's read end nobody writes */
} leave_t;

static void leave_handles(void *ud)
{
    leave_t *l = ud;
    flare_worker_t *w = flare_app_worker(l->app, l->worker);
    flare_timer_t *armed, *idle;
    flare_watch_t *wt, *paused;
    assert_int_equal(flare_timer_new(w, never_task, NULL, &armed), 0);
    assert_int_equal(flare_timer_start(armed, 60000), 0);
    assert_int_equal(flare_timer_new(w, never_task, NULL, &idle), 0);
    assert_int_equal(flare_watch_new(w, l->fd, FLARE_WATCH_READ, never_watch, NULL, &wt), 0);
    int dup_fd = dup(l->fd);
    assert_int_equal(flare_watch_new(w, dup_fd, 0, never_watch, NULL, &paused), 0);
    assert_int_equal(flare_watch_set(paused, FLARE_WATCH_READ), 0);
    assert_int_equal(flare_watch_set(paused, 0), 0); /* paused again */
    close(dup_fd);                                   /* after the set to 0 it is not registered */
    assert_int_equal(flare_worker_timer(w, 60000, never_task, NULL), 0);
    /* bad arguments and an fd that cannot be watched */
    flare_watch_t *bad;
    assert_int_equal(flare_watch_new(w, l->fd, 0x100, never_watch, NULL, &bad), FLARE_EINVAL);
    assert_int_equal(flare_watch_new(w, -1, FLARE_WATCH_READ, never_watch, NULL, &bad),
                     FLARE_EINVAL);
    /* a regular file (always ready: epoll refuses it, io_uring would report
     * it ready forever): refused the same way on both backends */
    char path[] = "/tmp/flare-watch-XXXXXX";
    int file = mkstemp(path);
    assert_true(file >= 0);
    unlink(path);
    int rc = flare_watch_new(w, file, FLARE_WATCH_READ, never_watch, NULL, &bad);
    assert_int_equal(rc, FLARE_ESYS);
    assert_int_equal(flare_last_errno(), EPERM);
    close(file);
    atomic_fetch_add(&made, 1);
}

/* A response whose handler waits on timers: pending at shutdown, cancelled;
 * the worker frees the orphaned exchange. */
static int h_wait(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_worker_t *w = flare_req_worker(req);
    if (flare_worker_timer(w, 60000, never_task, res) != 0)
        return FLARE_ENOMEM;
    flare_timer_t *t;
    if (flare_timer_new(w, never_task, res, &t) != 0)
        return FLARE_ENOMEM;
    flare_timer_start(t, 60000);
    atomic_fetch_add(&made, 1);
    return FLARE_ASYNC;
}

static flare_worker_t *stopped_worker;
static void try_after_stop(void *ud)
{
    (void)ud;
    flare_timer_t *t;
    atomic_store(&late_rc, flare_timer_new(stopped_worker, never_task, NULL, &t));
}

static void test_shutdown_frees_handles(void **state)
{
    (void)state;
    harness_t h = { 0 };
    start(&h, 2);
    assert_int_equal(flare_get(h.app, "/wait", h_wait, NULL), 0);
    assert_int_equal(harness_start(&h), 0);
    int p[2];
    assert_int_equal(pipe(p), 0);
    atomic_store(&never_called, 0);
    atomic_store(&made, 0);
    leave_t l[2] = { { h.app, 0, p[0] }, { h.app, 1, p[0] } };
    for (unsigned i = 0; i < 2; i++)
        assert_int_equal(flare_app_post(h.app, i, leave_handles, &l[i]), 0);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)h.port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
    const char *req = "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(write(c, req, strlen(req)), (ssize_t)strlen(req));
    wait_for(&made, 3);
    assert_int_equal(harness_stop(&h), 0);
    assert_int_equal(atomic_load(&never_called), 0);
    close(c);
    close(p[0]);
    close(p[1]);

    /* after the run, the worker refuses new handles */
    stopped_worker = flare_app_worker(h.app, 0);
    assert_non_null(stopped_worker);
    atomic_store(&late_rc, 1);
    try_after_stop(NULL);
    assert_int_equal(atomic_load(&late_rc), FLARE_ESTATE);
    flare_app_free(h.app);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echo),
        cmocka_unit_test(test_timers),
        cmocka_unit_test(test_shutdown_frees_handles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
