/* module.c: registration, and the lifecycle hooks worker.c and app.c call
 * (init on setup, drain when a stop is asked, dispose when a worker ends,
 * free with the app): their order, their threads, a failed init, and draining that
 * waits for the connections a module holds. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "module.h"
#include "app.h"

/* ---- an event log: "init a 0", "drain b 1", ... ---- */

#define LOG_MAX 64

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char events[LOG_MAX][32];
static int nevents;

static void log_event(const char *fmt, ...)
{
    pthread_mutex_lock(&log_lock);
    if (nevents < LOG_MAX) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(events[nevents++], sizeof(events[0]), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&log_lock);
}

/* Position of an event in the log, -1 when absent. */
static int find(const char *ev)
{
    int at = -1;
    pthread_mutex_lock(&log_lock);
    for (int i = 0; i < nevents && at < 0; i++) {
        if (strcmp(events[i], ev) == 0)
            at = i;
    }
    pthread_mutex_unlock(&log_lock);
    return at;
}

static void log_reset(void)
{
    nevents = 0;
}

/* ---- test modules ---- */

typedef struct mod {
    const char *name;
    unsigned slot;
    int fail_on_worker; /* init fails there (-1: never) */
    bool hold_on_drain; /* holds a connection for a while when draining */
} mod_t;

static int mod_init(flare_worker_t *w, void *state)
{
    mod_t *m = state;
    if ((int)w->id == m->fail_on_worker) {
        log_event("fail %s %u", m->name, w->id);
        return FLARE_ENOMEM;
    }
    log_event("init %s %u", m->name, w->id);
    flare__worker_module_set(w, m->slot, m); /* the per-worker state: here, the module */
    return 0;
}

static void release_held(void *ud)
{
    flare_worker_t *w = ud;
    log_event("release %u", w->id);
    flare__worker_conn_release(w);
}

static void mod_drain(flare_worker_t *w, void *state)
{
    mod_t *m = state;
    log_event("drain %s %u", m->name, w->id);
    assert_ptr_equal(flare__worker_module_state(w, m->slot), m);
    if (m->hold_on_drain) {
        flare__worker_conn_hold(w);
        assert_int_equal(flare_worker_timer(w, 150, release_held, w), 0);
    }
}

static void mod_dispose(flare_worker_t *w, void *state)
{
    mod_t *m = state;
    log_event("dispose %s %u", m->name, w->id);
    flare__worker_module_set(w, m->slot, NULL);
}

static void mod_free(flare_app_t *app, void *state)
{
    (void)app;
    mod_t *m = state;
    log_event("free %s", m->name);
}

static const flare_module_t module_a = { "a", mod_init, mod_drain, mod_dispose, mod_free };
static const flare_module_t module_b = { "b", mod_init, mod_drain, mod_dispose, mod_free };

/* ---- running an app on another thread ---- */

typedef struct runner {
    flare_app_t *app;
    pthread_t thread;
    int rc;
} runner_t;

static void *serve(void *arg)
{
    runner_t *r = arg;
    r->rc = flare_app_run(r->app, "127.0.0.1:0");
    return NULL;
}

static void nothing(void *ud)
{
    (void)ud;
}

/* Returns once the workers are up: posts are refused until then (the port
 * may still be the previous run's). */
static void run_start(runner_t *r)
{
    assert_int_equal(pthread_create(&r->thread, NULL, serve, r), 0);
    int rc = FLARE_ESTATE;
    for (int i = 0; i < 5000 && (rc = flare_app_post(r->app, 0, nothing, NULL)) == FLARE_ESTATE;
         i++)
        usleep(1000);
    assert_int_equal(rc, 0);
}

static void run_stop(runner_t *r)
{
    flare_app_stop(r->app);
    pthread_join(r->thread, NULL);
}

static flare_app_t *app_new(unsigned workers)
{
    flare_config_t cfg = { .workers = workers, .job_threads = 1 };
    flare_app_t *app = flare_app_new(&cfg);
    assert_non_null(app);
    return app;
}

/* ---- tests ---- */

static void test_register(void **state)
{
    (void)state;
    log_reset();
    flare_app_t *app = app_new(1);
    mod_t a = { "a", 0, -1, false }, b = { "b", 0, -1, false };
    assert_null(flare__app_module_state(app, &module_a));
    assert_int_equal(flare__app_module(app, &module_a, &a, &a.slot), 0);
    assert_int_equal(flare__app_module(app, &module_b, &b, &b.slot), 0);
    assert_int_not_equal(a.slot, b.slot);
    unsigned other = 99;
    assert_int_equal(flare__app_module(app, &module_a, &b, &other), FLARE_EEXIST);
    assert_int_equal(other, 99);
    assert_ptr_equal(flare__app_module_state(app, &module_a), &a);
    assert_ptr_equal(flare__app_module_state(app, &module_b), &b);

    /* the table is bounded */
    static flare_module_t more[FLARE__MODULES_MAX];
    int rc = 0;
    unsigned n = 2, slot;
    for (unsigned i = 0; i < FLARE__MODULES_MAX && rc == 0; i++) {
        more[i] = (flare_module_t){ .name = "more" };
        rc = flare__app_module(app, &more[i], NULL, &slot);
        n += rc == 0;
    }
    assert_int_equal(rc, FLARE_ETOOBIG);
    assert_int_equal(n, FLARE__MODULES_MAX);

    /* freed with the app, last registered first (hooks may be NULL) */
    flare_app_free(app);
    assert_int_equal(nevents, 2);
    assert_string_equal(events[0], "free b");
    assert_string_equal(events[1], "free a");
}

static void task(void *ud)
{
    mod_t *m = ud;
    log_event("task %s", m->name);
}

static void test_lifecycle_order(void **state)
{
    (void)state;
    log_reset();
    runner_t r = { .app = app_new(2) };
    mod_t a = { "a", 0, -1, false }, b = { "b", 0, -1, false };
    assert_int_equal(flare__app_module(r.app, &module_a, &a, &a.slot), 0);
    assert_int_equal(flare__app_module(r.app, &module_b, &b, &b.slot), 0);
    for (int round = 0; round < 2; round++) { /* and again: a second run of the same app */
        log_reset();
        run_start(&r);
        unsigned slot;
        mod_t c = { "c", 0, -1, false };
        static const flare_module_t module_c = { "c", NULL, NULL, NULL, NULL };
        assert_int_equal(flare__app_module(r.app, &module_c, &c, &slot), FLARE_ESTATE);
        assert_int_equal(flare_app_post(r.app, 0, task, &a), 0);
        for (int i = 0; i < 2000 && find("task a") < 0; i++)
            usleep(1000);
        run_stop(&r);
        assert_int_equal(r.rc, 0);
        for (unsigned w = 0; w < 2; w++) {
            char ia[32], ib[32], da[32], db[32], xa[32], xb[32];
            snprintf(ia, sizeof(ia), "init a %u", w);
            snprintf(ib, sizeof(ib), "init b %u", w);
            snprintf(da, sizeof(da), "drain a %u", w);
            snprintf(db, sizeof(db), "drain b %u", w);
            snprintf(xa, sizeof(xa), "dispose a %u", w);
            snprintf(xb, sizeof(xb), "dispose b %u", w);
            /* init and drain in registration order, dispose in reverse */
            assert_true(find(ia) >= 0 && find(ia) < find(ib));
            assert_true(find(ib) < find("task a"));
            assert_true(find(da) >= 0 && find(da) < find(db));
            assert_true(find(db) < find(xb));
            assert_true(find(xb) < find(xa));
            assert_ptr_equal(flare__worker_module_state(&r.app->workers[w], a.slot), NULL);
        }
        assert_int_equal(nevents, 13); /* 2 workers x 2 modules x 3 hooks + the task */
    }
    log_reset();
    flare_app_free(r.app);
    assert_int_equal(find("free b"), 0);
    assert_int_equal(find("free a"), 1);
}

static void test_init_failure(void **state)
{
    (void)state;
    log_reset();
    runner_t r = { .app = app_new(2) };
    mod_t a = { "a", 0, -1, false }, b = { "b", 0, 1, false }; /* b fails on worker 1 */
    assert_int_equal(flare__app_module(r.app, &module_a, &a, &a.slot), 0);
    assert_int_equal(flare__app_module(r.app, &module_b, &b, &b.slot), 0);
    r.rc = flare_app_run(r.app, "127.0.0.1:0");
    assert_int_equal(r.rc, FLARE_ENOMEM);
    assert_non_null(strstr(flare_last_error(), "module b"));
    /* what was set up is disposed, last first; nothing else ran */
    assert_true(find("init a 0") < find("init b 0"));
    assert_true(find("init b 0") < find("init a 1"));
    assert_true(find("init a 1") < find("fail b 1"));
    assert_true(find("dispose b 0") >= 0 && find("dispose b 0") < find("dispose a 0"));
    assert_true(find("dispose a 1") >= 0);
    assert_int_equal(find("dispose b 1"), -1);
    assert_int_equal(find("drain a 0"), -1);
    assert_int_equal(nevents, 7);
    flare_app_free(r.app);
}

static void test_drain_waits_for_held(void **state)
{
    (void)state;
    log_reset();
    runner_t r = { .app = app_new(1) };
    mod_t a = { "a", 0, -1, true };
    assert_int_equal(flare__app_module(r.app, &module_a, &a, &a.slot), 0);
    run_start(&r);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    run_stop(&r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    assert_int_equal(r.rc, 0);
    /* the worker ended once the held connection was released, not before
     * and not at the drain deadline (10 s) */
    assert_true(find("drain a 0") < find("release 0"));
    assert_true(find("release 0") < find("dispose a 0"));
    assert_true(ms >= 100 && ms < 5000);
    flare_app_free(r.app);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register),
        cmocka_unit_test(test_lifecycle_order),
        cmocka_unit_test(test_init_failure),
        cmocka_unit_test(test_drain_waits_for_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
