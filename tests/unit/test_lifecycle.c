/* run.c start and stop under fire: other threads broadcast, post to the
 * workers (by index and through a worker pointer kept across runs), queue
 * blocking jobs and read statistics while the app starts and stops in a
 * loop. Every call either works or fails with FLARE_ESTATE; every post that
 * returned 0 runs exactly once; every job's done callback runs. Built and
 * run under ThreadSanitizer in CI (label tsan), where it must be clean. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <flare/flare.h>
#include <flare/ws.h>

#include "loopback.h"

#define ROUNDS  200
#define POSTERS 3

static flare_app_t *app;
static int run_rc;
static atomic_bool done;
static _Atomic(flare_worker_t *) captured;
static atomic_long posted, ran, estate, jobs_queued, jobs_done, bcasts, other_rc;

static void *serve(void *arg)
{
    (void)arg;
    run_rc = flare_app_run(app, "127.0.0.1:0");
    return NULL;
}

static int h_worker(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    atomic_store(&captured, flare_req_worker(req));
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("ok"));
}

static int mw_pass(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)res;
    (void)ud;
    return 0;
}

static void on_ws_message(flare_ws_t *ws, flare_ws_opcode_t op, flare_str_t data)
{
    (void)ws;
    (void)op;
    (void)data;
}

static void count_ran(void *ud)
{
    (void)ud;
    atomic_fetch_add(&ran, 1);
}

static void job_work(void *ud)
{
    (void)ud;
}

static void job_done(void *ud)
{
    (void)ud;
    atomic_fetch_add(&jobs_done, 1);
}

/* Posted through a worker pointer: runs on that worker (or, when the app
 * stopped first, on the thread that ran it), and queues a blocking job. */
static void post_with_job(void *ud)
{
    flare_worker_t *w = ud;
    atomic_fetch_add(&ran, 1);
    if (flare_worker_job(w, job_work, job_done, NULL) == 0)
        atomic_fetch_add(&jobs_queued, 1);
}

static void tally(int rc)
{
    if (rc == FLARE_ESTATE)
        atomic_fetch_add(&estate, 1);
    else if (rc != 0)
        atomic_fetch_add(&other_rc, 1);
}

static void *poster(void *arg)
{
    unsigned k = (unsigned)(uintptr_t)arg;
    while (!atomic_load(&done)) {
        int rc = flare_app_post(app, k % 2, count_ran, NULL);
        if (rc == 0)
            atomic_fetch_add(&posted, 1);
        tally(rc);
        flare_worker_t *w = atomic_load(&captured);
        if (w != NULL) {
            rc = flare_worker_post(w, post_with_job, w);
            if (rc == 0)
                atomic_fetch_add(&posted, 1);
            tally(rc);
        }
        rc = flare_ws_broadcast(app, FLARE_STR("room"), FLARE_WS_TEXT, FLARE_STR("hello"), 0);
        if (rc == 0)
            atomic_fetch_add(&bcasts, 1);
        tally(rc);
        rc = flare_ws_send_to(app, ((uint64_t)1 << 8) | 1, FLARE_WS_TEXT, FLARE_STR("x"));
        if (rc != FLARE_ENOTFOUND)
            tally(rc);
        flare_mw_stats_t st[2];
        flare_app_mw_stats(app, st, 2);
        k++;
        struct timespec pause = { 0, 20000 }; /* a steady stream, not a flood */
        nanosleep(&pause, NULL);
    }
    return NULL;
}

static int http_get(int port, const char *path)
{
    int fd = loopback_connect(port);
    if (fd < 0)
        return -1;
    char req[128];
    int n =
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    char buf[512];
    ssize_t got, total = 0;
    while ((got = read(fd, buf + total, sizeof(buf) - 1 - (size_t)total)) > 0)
        total += got;
    close(fd);
    buf[total] = '\0';
    return strncmp(buf, "HTTP/1.1 200", 12) == 0 ? 200 : -1;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static void test_start_stop_under_fire(void **state)
{
    (void)state;
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 2;
    cfg.job_threads = 2;
    cfg.mw_stats = true;
    app = flare_app_new(&cfg);
    assert_non_null(app);
    assert_int_equal(flare_get(app, "/w", h_worker, NULL), 0);
    assert_int_equal(
        flare_ws_route(app, "/ws", &(flare_ws_config_t){ .on_message = on_ws_message }), 0);
    assert_int_equal(flare_use(app, &(flare_middleware_t){ .name = "noop", .before = mw_pass }), 0);
    assert_int_equal(flare_app_workers(app), 2);

    /* before any run: refused, not crashed */
    assert_int_equal(flare_app_post(app, 0, count_ran, NULL), FLARE_ESTATE);
    assert_int_equal(flare_ws_broadcast(app, FLARE_STR("r"), FLARE_WS_TEXT, FLARE_STR("x"), 0),
                     FLARE_ESTATE);

    pthread_t posters[POSTERS];
    for (unsigned i = 0; i < POSTERS; i++)
        assert_int_equal(pthread_create(&posters[i], NULL, poster, (void *)(uintptr_t)i), 0);

    int served = 0;
    for (int round = 0; round < ROUNDS; round++) {
        pthread_t server;
        assert_int_equal(pthread_create(&server, NULL, serve, NULL), 0);
        switch (round % 4) {
        case 0: /* stopped while it may still be starting */
            flare_app_stop(app);
            break;
        case 1: /* stopped a moment after it started */
            sleep_ms(2);
            flare_app_stop(app);
            break;
        default: /* stopped once it has served a request */
            for (int i = 0; i < 500 && flare_app_post(app, 0, count_ran, NULL) != 0; i++)
                sleep_ms(2);
            atomic_fetch_add(&posted, 1); /* the loop's last post went through */
            if (http_get(flare_app_port(app), "/w") == 200)
                served++;
            sleep_ms(5);
            flare_app_stop(app);
            break;
        }
        pthread_join(server, NULL);
        assert_int_equal(run_rc, 0);
        /* stopped: refused again, and a worker pointer from a past run is
         * still safe to hand in */
        assert_int_equal(flare_app_post(app, 1, count_ran, NULL), FLARE_ESTATE);
        flare_worker_t *w = atomic_load(&captured);
        if (w != NULL)
            assert_int_equal(flare_worker_post(w, count_ran, NULL), FLARE_ESTATE);
    }
    atomic_store(&done, true);
    for (unsigned i = 0; i < POSTERS; i++)
        pthread_join(posters[i], NULL);

    assert_int_equal(served, ROUNDS / 2);
    assert_int_equal(atomic_load(&other_rc), 0);
    assert_true(atomic_load(&estate) > 0);
    assert_true(atomic_load(&posted) > 0);
    /* every accepted post ran exactly once; every queued job came back */
    assert_int_equal(atomic_load(&ran), atomic_load(&posted));
    assert_int_equal(atomic_load(&jobs_done), atomic_load(&jobs_queued));
    fprintf(stderr, "# %d rounds: %ld posts ran, %ld jobs, %ld broadcasts, %ld refused\n", ROUNDS,
            atomic_load(&ran), atomic_load(&jobs_done), atomic_load(&bcasts), atomic_load(&estate));
    flare_app_free(app);
    app = NULL;
}

/* A stop asked for before the run started waiting ends that run as soon as
 * its workers are up; one asked for during a run does not carry over. */
static void test_stop_before_run(void **state)
{
    (void)state;
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 1;
    app = flare_app_new(&cfg);
    assert_non_null(app);
    flare_app_stop(app);
    assert_int_equal(flare_app_run(app, "127.0.0.1:0"), 0);
    /* the next run is not stopped by the old request */
    pthread_t server;
    assert_int_equal(pthread_create(&server, NULL, serve, NULL), 0);
    int up = 0;
    for (int i = 0; i < 500 && !up; i++) {
        up = flare_app_post(app, 0, count_ran, NULL) == 0;
        if (!up)
            sleep_ms(2);
    }
    assert_true(up);
    sleep_ms(50);
    assert_int_equal(flare_app_post(app, 0, count_ran, NULL), 0); /* still up */
    flare_app_stop(app);
    pthread_join(server, NULL);
    assert_int_equal(run_rc, 0);
    flare_app_free(app);
    app = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_stop_under_fire),
        cmocka_unit_test(test_stop_before_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
