/* The Redis client against a real redis-server (tests/services_redis.py
 * starts a private one and exports FLARE_TEST_REDIS_URL and how to restart
 * it), and the reply tree without a server. Commands are issued from tasks
 * posted to the workers; results are recorded there and checked here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <signal.h>
#include <time.h>

#include "harness.h"
#include "data/redis_int.h"
#include "flare/redis.h"

static harness_t h;
static flare_redis_t *R;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static const char *env_or_die(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0') {
        fprintf(stderr, "%s is not set: run through tests/services_redis.py\n", name);
        exit(1);
    }
    return v;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- the server: ping, kill, restart ---- */

static bool redis_ping(void)
{
    int port = atoi(env_or_die("FLARE_TEST_REDIS_PORT"));
    int fd = loopback_connect(port);
    bool ok = false;
    if (fd >= 0) {
        char buf[16] = { 0 };
        ok = write(fd, "PING\r\n", 6) == 6 && read(fd, buf, sizeof(buf) - 1) > 0 &&
             strncmp(buf, "+PONG", 5) == 0;
        close(fd);
    }
    return ok;
}

static void redis_kill(void)
{
    FILE *f = fopen(env_or_die("FLARE_TEST_REDIS_PIDFILE"), "r");
    assert_non_null(f);
    int pid = 0;
    assert_int_equal(fscanf(f, "%d", &pid), 1);
    fclose(f);
    assert_int_equal(kill(pid, SIGKILL), 0);
    for (int i = 0; i < 200 && redis_ping(); i++)
        usleep(10000);
    assert_false(redis_ping());
}

static void redis_restart(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s --daemonize yes >/dev/null", env_or_die("FLARE_TEST_REDIS_CMD"));
    assert_int_equal(system(cmd), 0);
    for (int i = 0; i < 500 && !redis_ping(); i++)
        usleep(10000);
    assert_true(redis_ping());
}

/* ---- the app ---- */

static void start_app(const flare_redis_config_t *cfg, void (*before_run)(void))
{
    flare_config_t c;
    flare_config_init(&c);
    c.workers = 2;
    h.app = flare_app_new(&c);
    assert_non_null(h.app);
    assert_int_equal(flare_redis_open(h.app, env_or_die("FLARE_TEST_REDIS_URL"), cfg, &R), 0);
    if (before_run != NULL)
        before_run();
    assert_int_equal(harness_start(&h), 0);
}

static void stop_app(void)
{
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
    h.app = NULL;
    R = NULL;
}

/* Runs fn(ud) on worker i and waits until *done reaches want (under mu). */
typedef struct waiter {
    int done, want;
} waiter_t;

static void wait_for(waiter_t *wt, int ms)
{
    uint64_t end = now_ms() + (uint64_t)ms;
    pthread_mutex_lock(&mu);
    while (wt->done < wt->want && now_ms() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&cv, &mu, &ts);
    }
    pthread_mutex_unlock(&mu);
}

static void bump(waiter_t *wt)
{
    pthread_mutex_lock(&mu);
    wt->done++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

/* One command, issued on a worker, its result copied for the test thread. */
typedef struct one {
    waiter_t wt;
    unsigned worker;
    int argc;
    const char *argv[8];
    size_t lens[8];
    int rc, err;
    flare_redis_type_t type;
    int64_t integer;
    char str[1024];
    size_t len, n;
    flare_redis_reply_t first; /* elem[0] for arrays (its str not kept) */
    flare_redis_type_t kinds[8];
    uint64_t t0, t1;
} one_t;

static void one_done(int err, const flare_redis_reply_t *rep, void *ud)
{
    one_t *o = ud;
    o->t1 = now_ms();
    o->err = err;
    if (rep != NULL) {
        o->type = rep->type;
        o->integer = rep->integer;
        o->len = rep->str.len;
        if (rep->str.len > 0 && rep->str.len < sizeof(o->str))
            memcpy(o->str, rep->str.ptr, rep->str.len);
        o->n = rep->n;
        for (size_t i = 0; i < rep->n && i < 8; i++)
            o->kinds[i] = rep->elem[i].type;
        if (rep->n > 0)
            o->first = rep->elem[0];
    }
    bump(&o->wt);
}

static void one_task(void *ud)
{
    one_t *o = ud;
    o->t0 = now_ms();
    o->rc = flare_redis_cmd(R, flare_app_worker(h.app, o->worker), o->argc, o->argv, o->lens,
                            one_done, o);
    if (o->rc != 0)
        bump(&o->wt);
}

/* Runs a command given as NUL-terminated strings (NULL-terminated list). */
static one_t *run(unsigned worker, const char *first, ...)
{
    one_t *o = calloc(1, sizeof(*o));
    o->worker = worker;
    o->wt.want = 1;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a != NULL && o->argc < 8; a = va_arg(ap, const char *)) {
        o->argv[o->argc] = a;
        o->lens[o->argc++] = strlen(a);
    }
    va_end(ap);
    assert_int_equal(flare_app_post(h.app, worker, one_task, o), 0);
    wait_for(&o->wt, 10000);
    assert_int_equal(o->wt.done, 1);
    return o;
}

/* ---- tests ---- */

static void test_binary_args(void **state)
{
    (void)state;
    start_app(NULL, NULL);
    static const char val[] = "a\0b\r\nc\0";
    one_t *o = calloc(1, sizeof(*o));
    o->wt.want = 1;
    o->argc = 3;
    o->argv[0] = "SET";
    o->argv[1] = "bin\r\nkey";
    o->argv[2] = val;
    o->lens[0] = 3;
    o->lens[1] = 8;
    o->lens[2] = sizeof(val); /* 8 bytes, two NULs */
    assert_int_equal(flare_app_post(h.app, 0, one_task, o), 0);
    wait_for(&o->wt, 5000);
    assert_int_equal(o->rc, 0);
    assert_int_equal(o->err, 0);
    assert_int_equal(o->type, FLARE_REDIS_STATUS);
    assert_memory_equal(o->str, "OK", 2);
    free(o);
    o = run(1, "GET", "bin\r\nkey", NULL);
    assert_int_equal(o->err, 0);
    assert_int_equal(o->type, FLARE_REDIS_STRING);
    assert_int_equal(o->len, sizeof(val));
    assert_memory_equal(o->str, val, sizeof(val));
    free(o);
    stop_app();
}

/* A worker's Redis state belongs to its thread: a command for worker 0
 * issued on worker 1 (or on a thread that is no worker) is refused, not
 * run on state another thread owns. */
static void test_wrong_thread(void **state)
{
    (void)state;
    start_app(NULL, NULL);
    one_t *o = calloc(1, sizeof(*o));
    o->wt.want = 1;
    o->worker = 0;
    o->argc = 1;
    o->argv[0] = "PING";
    o->lens[0] = 4;
    assert_int_equal(flare_app_post(h.app, 1, one_task, o), 0);
    wait_for(&o->wt, 5000);
    assert_int_equal(o->wt.done, 1);
    assert_int_equal(o->rc, FLARE_EINVAL);
    free(o);
    assert_int_equal(flare_redis_cmd(R, flare_app_worker(h.app, 0), 1, (const char *[]){ "PING" },
                                     NULL, one_done, NULL),
                     FLARE_EINVAL);
    o = run(0, "PING", NULL); /* the same command on its own worker */
    assert_int_equal(o->rc, 0);
    assert_int_equal(o->err, 0);
    free(o);
    stop_app();
}

static void test_reply_types(void **state)
{
    (void)state;
    start_app(NULL, NULL);
    one_t *o = run(0, "PING", NULL);
    assert_int_equal(o->type, FLARE_REDIS_STATUS);
    assert_int_equal(o->len, 4);
    assert_memory_equal(o->str, "PONG", 4);
    free(o);
    o = run(0, "DEL", "t:n", "t:l", "t:s", NULL);
    assert_int_equal(o->type, FLARE_REDIS_INT);
    free(o);
    o = run(0, "INCRBY", "t:n", "41", NULL);
    assert_int_equal(o->type, FLARE_REDIS_INT);
    assert_int_equal(o->integer, 41);
    free(o);
    o = run(0, "GET", "t:missing", NULL);
    assert_int_equal(o->err, 0);
    assert_int_equal(o->type, FLARE_REDIS_NIL);
    free(o);
    o = run(0, "RPUSH", "t:l", "x", "yy", NULL);
    assert_int_equal(o->integer, 2);
    free(o);
    o = run(0, "LRANGE", "t:l", "0", "-1", NULL);
    assert_int_equal(o->type, FLARE_REDIS_ARRAY);
    assert_int_equal(o->n, 2);
    assert_int_equal(o->kinds[0], FLARE_REDIS_STRING);
    assert_int_equal(o->first.str.len, 1);
    free(o);
    o = run(0, "LRANGE", "t:nothing", "0", "-1", NULL);
    assert_int_equal(o->type, FLARE_REDIS_ARRAY);
    assert_int_equal(o->n, 0);
    free(o);
    /* nested, mixed: a script returns int, array, status, nil (false), error */
    o = run(0, "EVAL",
            "return {7, {'a', 2}, redis.status_reply('FINE'), false, redis.error_reply('BAD x')}",
            "0", NULL);
    assert_int_equal(o->err, 0);
    assert_int_equal(o->type, FLARE_REDIS_ARRAY);
    assert_int_equal(o->n, 5);
    assert_int_equal(o->kinds[0], FLARE_REDIS_INT);
    assert_int_equal(o->first.integer, 7);
    assert_int_equal(o->kinds[1], FLARE_REDIS_ARRAY);
    assert_int_equal(o->kinds[2], FLARE_REDIS_STATUS);
    assert_int_equal(o->kinds[3], FLARE_REDIS_NIL);
    assert_int_equal(o->kinds[4], FLARE_REDIS_ERROR);
    free(o);
    /* a server error is a reply, not an err */
    o = run(0, "SET", "t:s", "text", NULL);
    free(o);
    o = run(0, "LPUSH", "t:s", "x", NULL);
    assert_int_equal(o->err, 0);
    assert_int_equal(o->type, FLARE_REDIS_ERROR);
    assert_memory_equal(o->str, "WRONGTYPE", 9);
    free(o);
    o = run(0, "NOSUCHCOMMAND", NULL);
    assert_int_equal(o->type, FLARE_REDIS_ERROR);
    free(o);
    /* subscribing goes through flare_redis_subscribe */
    o = run(0, "subscribe", "x", NULL);
    assert_int_equal(o->rc, FLARE_EINVAL);
    free(o);
    flare_redis_stats_t st;
    assert_int_equal(flare_redis_stats(R, UINT32_MAX, &st), 0);
    assert_int_equal(st.conns_open, 2); /* one per worker */
    assert_true(st.commands >= 11);
    assert_true(st.errors >= 2);
    assert_int_equal(st.in_flight, 0);
    stop_app();
}

/* ---- pipelining ---- */

#define PIPE_N 1000

typedef struct pipe_state {
    waiter_t wt;
    int rc;
    int64_t got[PIPE_N];
    int errs;
    int idx;
} pipe_state_t;

static pipe_state_t pipe_st;

static void pipe_done(int err, const flare_redis_reply_t *rep, void *ud)
{
    (void)ud;
    if (err != 0 || rep->type != FLARE_REDIS_INT)
        pipe_st.errs++;
    else
        pipe_st.got[pipe_st.idx] = rep->integer;
    pipe_st.idx++;
    bump(&pipe_st.wt);
}

static void pipe_task(void *ud)
{
    (void)ud;
    flare_worker_t *w = flare_app_worker(h.app, 0);
    flare_str_t args[] = { FLARE_STR("INCR"), FLARE_STR("t:pipe") };
    for (int i = 0; i < PIPE_N; i++)
        pipe_st.rc |= flare_redis_cmd_str(R, w, args, 2, pipe_done, NULL);
    flare_redis_stats_t st;
    flare_redis_stats(R, 0, &st);
    pipe_st.got[0] = -(int64_t)st.in_flight; /* all of them in flight at once */
}

static void test_pipeline(void **state)
{
    (void)state;
    start_app(NULL, NULL);
    free(run(0, "DEL", "t:pipe", NULL));
    memset(&pipe_st, 0, sizeof(pipe_st));
    pipe_st.wt.want = PIPE_N;
    assert_int_equal(flare_app_post(h.app, 0, pipe_task, NULL), 0);
    wait_for(&pipe_st.wt, 10000);
    assert_int_equal(pipe_st.wt.done, PIPE_N);
    assert_int_equal(pipe_st.rc, 0);
    assert_int_equal(pipe_st.errs, 0);
    for (int i = 0; i < PIPE_N; i++)
        assert_int_equal(pipe_st.got[i], i + 1); /* in order */
    stop_app();
}

/* ---- timeouts ---- */

static void test_timeout(void **state)
{
    (void)state;
    flare_redis_config_t cfg = { .command_timeout_ms = 300 };
    start_app(&cfg, NULL);
    one_t *o = run(0, "BLPOP", "t:never", "5", NULL);
    assert_int_equal(o->rc, 0);
    assert_int_equal(o->err, FLARE_ETIMEDOUT);
    /* at its own 300 ms, though issued as the connection was being made:
     * the timer was left armed for the 2 s connect deadline, which held this
     * timeout back to about 2 s (and past it under ThreadSanitizer); the
     * bound leaves room for a slow build */
    assert_true(o->t1 - o->t0 >= 250 && o->t1 - o->t0 < 1500);
    free(o);
    /* the connection was dropped and is made again at once */
    uint64_t t0 = now_ms();
    o = run(0, "PING", NULL);
    while (o->err != 0 && now_ms() - t0 < 3000) {
        free(o);
        usleep(20000);
        o = run(0, "PING", NULL);
    }
    assert_int_equal(o->err, 0);
    assert_int_equal(o->type, FLARE_REDIS_STATUS);
    free(o);
    flare_redis_stats_t st;
    flare_redis_stats(R, 0, &st);
    assert_int_equal(st.timeouts, 1);
    stop_app();
}

/* ---- outage: killed under load, fast failures, reconnect ---- */

typedef struct load {
    waiter_t wt;
    int ok, unavail, other, issued;
    bool stop;
} load_t;

static load_t ld;

static void load_done(int err, const flare_redis_reply_t *rep, void *ud);

static void load_issue(void)
{
    flare_worker_t *w = flare_app_worker(h.app, 0);
    flare_str_t args[] = { FLARE_STR("INCR"), FLARE_STR("t:load") };
    if (flare_redis_cmd_str(R, w, args, 2, load_done, NULL) == 0)
        ld.issued++;
}

static void load_done(int err, const flare_redis_reply_t *rep, void *ud)
{
    (void)ud;
    (void)rep;
    pthread_mutex_lock(&mu);
    if (err == 0)
        ld.ok++;
    else if (err == FLARE_EUNAVAIL)
        ld.unavail++;
    else
        ld.other++;
    ld.wt.done++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    if (!ld.stop)
        load_issue(); /* keep 50 in flight */
}

static void load_start(void *ud)
{
    (void)ud;
    for (int i = 0; i < 50; i++)
        load_issue();
}

static void load_stop(void *ud)
{
    (void)ud;
    ld.stop = true;
}

static void test_outage_reconnect(void **state)
{
    (void)state;
    flare_redis_config_t cfg = { .reconnect_min_ms = 50, .reconnect_max_ms = 200 };
    start_app(&cfg, NULL);
    memset(&ld, 0, sizeof(ld));
    ld.wt.want = 500;
    assert_int_equal(flare_app_post(h.app, 0, load_start, NULL), 0);
    wait_for(&ld.wt, 10000);
    pthread_mutex_lock(&mu); /* the worker goes on counting meanwhile */
    int ok_count = ld.ok;
    pthread_mutex_unlock(&mu);
    assert_true(ok_count >= 500);
    redis_kill(); /* mid-load */
    usleep(300000);
    assert_int_equal(flare_app_post(h.app, 0, load_stop, NULL), 0);
    usleep(100000);
    /* while it is down: failures, and fast ones */
    one_t *o = run(0, "PING", NULL);
    assert_int_equal(o->rc, 0);
    assert_int_equal(o->err, FLARE_EUNAVAIL);
    assert_true(o->t1 - o->t0 < 50);
    free(o);
    pthread_mutex_lock(&mu);
    int issued = ld.issued, done = ld.ok + ld.unavail + ld.other;
    pthread_mutex_unlock(&mu);
    assert_true(ld.unavail > 0);
    assert_int_equal(ld.other, 0);
    assert_int_equal(done, issued); /* every command answered, none left hanging */

    redis_restart();
    uint64_t t0 = now_ms();
    o = run(0, "PING", NULL);
    while (o->err != 0 && now_ms() - t0 < 5000) {
        free(o);
        usleep(20000);
        o = run(0, "PING", NULL);
    }
    assert_int_equal(o->err, 0);
    free(o);
    flare_redis_stats_t st;
    flare_redis_stats(R, 0, &st);
    assert_true(st.reconnects >= 1);
    assert_true(st.rejected >= 1);
    assert_int_equal(st.conns_open, 1);
    stop_app();
}

/* ---- shutdown: owed callbacks run, with FLARE_EUNAVAIL ---- */

static void test_shutdown_callbacks(void **state)
{
    (void)state;
    flare_redis_config_t cfg = { .command_timeout_ms = 60000 };
    start_app(&cfg, NULL);
    one_t *o = calloc(1, sizeof(*o));
    o->wt.want = 1;
    o->worker = 1; /* the worker it is posted to: a command runs on its own worker's thread */
    o->argc = 3;
    o->argv[0] = "BLPOP";
    o->argv[1] = "t:forever";
    o->argv[2] = "30";
    for (int i = 0; i < 3; i++)
        o->lens[i] = strlen(o->argv[i]);
    assert_int_equal(flare_app_post(h.app, 1, one_task, o), 0);
    usleep(200000);
    assert_int_equal(o->wt.done, 0);
    stop_app();
    assert_int_equal(o->wt.done, 1);
    assert_int_equal(o->err, FLARE_EUNAVAIL);
    free(o);
}

/* ---- pub/sub ---- */

typedef struct psub {
    waiter_t wt;
    pthread_t thread, worker1;
    char chan[64], msg[64], pat[64];
} psub_t;

static psub_t ps;

static void on_msg(flare_str_t pattern, flare_str_t channel, flare_str_t message, void *ud)
{
    (void)ud;
    pthread_mutex_lock(&mu);
    ps.thread = pthread_self();
    snprintf(ps.chan, sizeof(ps.chan), "%.*s", (int)channel.len, channel.ptr);
    snprintf(ps.msg, sizeof(ps.msg), "%.*s", (int)message.len, message.ptr);
    snprintf(ps.pat, sizeof(ps.pat), "%.*s", (int)pattern.len,
             pattern.ptr != NULL ? pattern.ptr : "");
    ps.wt.done++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void subscribe_before_run(void)
{
    assert_int_equal(flare_redis_subscribe(R, 1, FLARE_STR("news"), false, on_msg, NULL), 0);
    assert_int_equal(flare_redis_subscribe(R, 1, FLARE_STR("ev.*"), true, on_msg, NULL), 0);
    assert_int_equal(flare_redis_subscribe(R, 2, FLARE_STR("x"), false, on_msg, NULL),
                     FLARE_EINVAL);
}

static void record_thread(void *ud)
{
    (void)ud;
    pthread_mutex_lock(&mu);
    ps.worker1 = pthread_self();
    pthread_mutex_unlock(&mu);
}

/* Publishes until someone is subscribed (PUBLISH answers the count). */
static void publish_until_heard(const char *chan, const char *msg, int want)
{
    uint64_t t0 = now_ms();
    for (;;) {
        one_t *o = run(0, "PUBLISH", chan, msg, NULL);
        bool heard = o->err == 0 && o->type == FLARE_REDIS_INT && o->integer >= 1;
        free(o);
        if (heard)
            break;
        assert_true(now_ms() - t0 < 5000);
        usleep(20000);
    }
    ps.wt.want = want;
    wait_for(&ps.wt, 5000);
    assert_int_equal(ps.wt.done, want);
}

static void test_pubsub(void **state)
{
    (void)state;
    flare_redis_config_t cfg = { .reconnect_min_ms = 50, .reconnect_max_ms = 200 };
    memset(&ps, 0, sizeof(ps));
    start_app(&cfg, subscribe_before_run);
    assert_int_equal(flare_app_post(h.app, 1, record_thread, NULL), 0);
    publish_until_heard("news", "hello", 1);
    assert_true(pthread_equal(ps.thread, ps.worker1)); /* delivered on the chosen worker */
    assert_string_equal(ps.chan, "news");
    assert_string_equal(ps.msg, "hello");
    assert_string_equal(ps.pat, "");
    publish_until_heard("ev.login", "bob", 2);
    assert_string_equal(ps.pat, "ev.*");
    assert_string_equal(ps.chan, "ev.login");
    assert_string_equal(ps.msg, "bob");

    redis_kill();
    redis_restart();
    publish_until_heard("news", "again", 3); /* subscribed again after the reconnect */
    assert_string_equal(ps.msg, "again");
    flare_redis_stats_t st;
    flare_redis_stats(R, 1, &st);
    assert_int_equal(st.messages, 3);
    assert_true(st.reconnects >= 1);
    stop_app();
}

/* ---- URLs and arguments ---- */

static void test_open_errors(void **state)
{
    (void)state;
    flare_app_t *app = flare_app_new(NULL);
    flare_redis_t *r;
    assert_int_equal(flare_redis_open(app, "http://x", NULL, &r), FLARE_EINVAL);
    assert_int_equal(flare_redis_open(app, "redis://", NULL, &r), FLARE_EINVAL);
    assert_int_equal(flare_redis_open(app, "redis://h:99999", NULL, &r), FLARE_EINVAL);
    assert_int_equal(flare_redis_open(app, "redis://h:1/x", NULL, &r), FLARE_EINVAL);
    assert_int_equal(flare_redis_open(app, "redis://[::1", NULL, &r), FLARE_EINVAL);
    flare_redis_config_t bad = { .conns = 65 };
    assert_int_equal(flare_redis_open(app, "redis://127.0.0.1", &bad, &r), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "conns"));
    assert_int_equal(flare_redis_open(app, "redis://:p%40ss@[::1]:6380/3", NULL, &r), 0);
    assert_int_equal(flare_redis_open(app, "redis://localhost", NULL, &r), 0);
    assert_int_equal(flare_redis_cmd(r, NULL, 1, (const char *[]){ "PING" }, NULL, NULL, NULL),
                     FLARE_EINVAL);
    flare_app_free(app);
}

/* A host name is resolved on the job pool, then connected to. */
static void test_host_name(void **state)
{
    (void)state;
    flare_config_t c;
    flare_config_init(&c);
    c.workers = 1;
    h.app = flare_app_new(&c);
    char url[128];
    snprintf(url, sizeof(url), "redis://localhost:%s/1", env_or_die("FLARE_TEST_REDIS_PORT"));
    assert_int_equal(flare_redis_open(h.app, url, NULL, &R), 0);
    assert_int_equal(harness_start(&h), 0);
    uint64_t t0 = now_ms();
    one_t *o = run(0, "PING", NULL);
    while (o->err != 0 && now_ms() - t0 < 3000) {
        free(o);
        usleep(20000);
        o = run(0, "PING", NULL);
    }
    assert_int_equal(o->err, 0);
    free(o);
    o = run(0, "CLIENT", "INFO", NULL); /* SELECT 1 went first */
    assert_int_equal(o->type, FLARE_REDIS_STRING);
    assert_non_null(strstr(o->str, " db=1 "));
    free(o);
    stop_app();
}

/* ---- the session store ---- */

/* A command on a connection of the test's own (inline protocol), its
 * first reply line in out. */
static void redis_raw(const char *cmd, char *out, size_t cap)
{
    int port = atoi(env_or_die("FLARE_TEST_REDIS_PORT"));
    int fd = loopback_connect(port);
    assert_true(fd >= 0);
    char line[512];
    int n = snprintf(line, sizeof(line), "%s\r\n", cmd);
    assert_int_equal(write(fd, line, (size_t)n), n);
    ssize_t got = read(fd, out, cap - 1);
    out[got > 0 ? got : 0] = '\0';
    close(fd);
}

typedef struct sop {
    waiter_t wt;
    int rc;
    char data[64];
    size_t len;
    flare_session_store_t *st;
    const char *id, *val;
    unsigned ttl;
    int what; /* 0 save, 1 load, 2 remove */
} sop_t;

static void sop_loaded(void *ctx, int rc, flare_str_t data)
{
    sop_t *o = ctx;
    o->rc = rc;
    o->len = data.len < sizeof(o->data) ? data.len : sizeof(o->data);
    if (o->len > 0)
        memcpy(o->data, data.ptr, o->len);
    bump(&o->wt);
}

static void sop_done(void *ctx, int rc)
{
    sop_t *o = ctx;
    o->rc = rc;
    bump(&o->wt);
}

static void sop_task(void *ud)
{
    sop_t *o = ud;
    flare_worker_t *w = flare_app_worker(h.app, 0);
    flare_str_t id = flare_str(o->id);
    if (o->what == 0)
        o->st->save(o->st->self, w, id, flare_str(o->val), o->ttl, sop_done, o);
    else if (o->what == 1)
        o->st->load(o->st->self, w, id, o->ttl, sop_loaded, o);
    else
        o->st->remove(o->st->self, w, id, sop_done, o);
}

static sop_t sop_run(flare_session_store_t *st, int what, const char *id, const char *val,
                     unsigned ttl)
{
    sop_t o = { .wt = { 0, 1 }, .rc = 1, .st = st, .id = id, .val = val, .ttl = ttl, .what = what };
    assert_int_equal(flare_app_post(h.app, 0, sop_task, &o), 0);
    wait_for(&o.wt, 5000);
    assert_int_equal(o.wt.done, 1);
    return o;
}

static void test_session_store(void **state)
{
    (void)state;
    start_app(NULL, NULL);
    flare_session_store_t st;
    assert_int_equal(flare_session_redis_store(R, "t:sess:", &st), 0);
    sop_t o = sop_run(&st, 1, "abc", NULL, 60);
    assert_int_equal(o.rc, FLARE_ENOTFOUND);
    o = sop_run(&st, 0, "abc", "1\n3 1\nkeyv", 60);
    assert_int_equal(o.rc, 0);
    char buf[256];
    redis_raw("TTL t:sess:abc", buf, sizeof(buf));
    assert_true(atoi(buf + 1) > 50 && atoi(buf + 1) <= 60);
    o = sop_run(&st, 1, "abc", NULL, 120); /* the idle time slides */
    assert_int_equal(o.rc, 0);
    assert_int_equal(o.len, 10);
    assert_memory_equal(o.data, "1\n3 1\nkeyv", 10);
    redis_raw("TTL t:sess:abc", buf, sizeof(buf));
    assert_true(atoi(buf + 1) > 110);
    o = sop_run(&st, 2, "abc", NULL, 0);
    assert_int_equal(o.rc, 0);
    o = sop_run(&st, 1, "abc", NULL, 60);
    assert_int_equal(o.rc, FLARE_ENOTFOUND);
    /* expiry: EX */
    o = sop_run(&st, 0, "short", "x", 1);
    assert_int_equal(o.rc, 0);
    usleep(2100000);
    o = sop_run(&st, 1, "short", NULL, 60);
    assert_int_equal(o.rc, FLARE_ENOTFOUND);
    st.destroy(st.self);
    stop_app();
}

static int h_login(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_session_regenerate(req);
    flare_session_set(req, "user", flare_req_body(req));
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("in"));
}

static int h_me(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t u = flare_session_get(req, "user");
    if (u.ptr == NULL)
        return flare_res_send(res, 401, FLARE_STR("text/plain"), FLARE_STR("anonymous"));
    return flare_res_send(res, 200, FLARE_STR("text/plain"), u);
}

static int h_logout(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_session_destroy(req);
    return flare_res_send(res, 204, FLARE_STR_NULL, FLARE_STR_NULL);
}

static void sessions_before_run(void)
{
    flare_session_config_t sc = { .cookie_name = "sid", .idle_timeout = 600 };
    assert_int_equal(flare_session_redis_store(R, "t:web:", &sc.store), 0);
    flare_middleware_t m;
    assert_int_equal(flare_sessions(h.app, &sc, &m), 0);
    assert_int_equal(flare_use(h.app, &m), 0);
    assert_int_equal(flare_post(h.app, "/login", h_login, NULL), 0);
    assert_int_equal(flare_get(h.app, "/me", h_me, NULL), 0);
    assert_int_equal(flare_post(h.app, "/logout", h_logout, NULL), 0);
}

static char *http(const char *method, const char *path, const char *sid, const char *body)
{
    char buf[512];
    snprintf(
        buf, sizeof(buf),
        "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%s%s%sContent-Length: %zu\r\n\r\n%s",
        method, path, sid ? "Cookie: sid=" : "", sid ? sid : "", sid ? "\r\n" : "", strlen(body),
        body);
    return harness_roundtrip(&h, buf);
}

static bool sid_of(const char *resp, char *out)
{
    const char *p = strstr(resp, "Set-Cookie: sid=");
    if (p == NULL || strcspn(p + 16, ";\r") != 32)
        return false;
    memcpy(out, p + 16, 32);
    out[32] = '\0';
    return true;
}

static void test_session_http(void **state)
{
    (void)state;
    flare_redis_config_t cfg = { .command_timeout_ms = 3000,
                                 .reconnect_min_ms = 50,
                                 .reconnect_max_ms = 100 };
    start_app(&cfg, sessions_before_run);
    char sid[33], key[64], buf[256];
    char *r = http("POST", "/login", NULL, "alice");
    assert_non_null(strstr(r, "HTTP/1.1 200"));
    assert_true(sid_of(r, sid));
    free(r);
    snprintf(key, sizeof(key), "EXISTS t:web:%s", sid);
    redis_raw(key, buf, sizeof(buf));
    assert_string_equal(buf, ":1\r\n");
    r = http("GET", "/me", sid, "");
    assert_non_null(strstr(r, "\r\n\r\nalice"));
    free(r);

    /* the response waits for the save: with Redis's writes paused for
     * 600 ms, the login answers after them, and the session is stored by
     * the time the client sees its cookie */
    redis_raw("CLIENT PAUSE 600 WRITE", buf, sizeof(buf));
    assert_string_equal(buf, "+OK\r\n");
    uint64_t t0 = now_ms();
    r = http("POST", "/login", sid, "bob");
    uint64_t took = now_ms() - t0;
    assert_non_null(strstr(r, "HTTP/1.1 200"));
    char sid2[33];
    assert_true(sid_of(r, sid2));
    free(r);
    assert_true(took >= 450);
    snprintf(key, sizeof(key), "EXISTS t:web:%s", sid2);
    redis_raw(key, buf, sizeof(buf));
    assert_string_equal(buf, ":1\r\n");
    snprintf(key, sizeof(key), "EXISTS t:web:%s", sid);
    redis_raw(key, buf, sizeof(buf));
    assert_string_equal(buf, ":0\r\n"); /* regenerated: the old one removed */

    r = http("POST", "/logout", sid2, "");
    assert_non_null(strstr(r, "HTTP/1.1 204"));
    assert_non_null(strstr(r, "Set-Cookie: sid=; Path=/; Max-Age=0"));
    free(r);
    snprintf(key, sizeof(key), "EXISTS t:web:%s", sid2);
    redis_raw(key, buf, sizeof(buf));
    assert_string_equal(buf, ":0\r\n");

    /* Redis down: a login is not handed a session that was never stored */
    r = http("POST", "/login", NULL, "carol");
    assert_true(sid_of(r, sid));
    free(r);
    redis_kill();
    usleep(200000);
    r = http("POST", "/login", NULL, "dave");
    assert_non_null(strstr(r, "HTTP/1.1 503"));
    assert_non_null(strstr(r, "session store unavailable"));
    assert_null(strstr(r, "Set-Cookie"));
    free(r);
    r = http("GET", "/me", sid, ""); /* cannot be loaded: not "logged out" */
    assert_non_null(strstr(r, "HTTP/1.1 503"));
    free(r);
    r = http("GET", "/me", NULL, ""); /* no session: no store needed */
    assert_non_null(strstr(r, "HTTP/1.1 401"));
    free(r);

    redis_restart(); /* empty: no persistence */
    uint64_t t1 = now_ms();
    for (;;) {
        r = http("POST", "/login", NULL, "erin");
        bool ok = strstr(r, "HTTP/1.1 200") != NULL;
        if (ok)
            assert_true(sid_of(r, sid));
        free(r);
        if (ok)
            break;
        assert_true(now_ms() - t1 < 5000);
        usleep(50000);
    }
    /* each worker reconnects on its own: one still reconnecting answers
     * 503 (store unavailable), never 401 (the session is stored) */
    t1 = now_ms();
    for (;;) {
        r = http("GET", "/me", sid, "");
        bool ok = strstr(r, "\r\n\r\nerin") != NULL;
        if (!ok)
            assert_non_null(strstr(r, "HTTP/1.1 503"));
        free(r);
        if (ok)
            break;
        assert_true(now_ms() - t1 < 5000);
        usleep(50000);
    }
    stop_app();
}

/* ---- the reply tree, without a server ---- */

static void test_reply_tree(void **state)
{
    (void)state;
    redisReply s1 = { .type = REDIS_REPLY_STRING, .str = (char *)"ab\0c", .len = 4 };
    redisReply i1 = { .type = REDIS_REPLY_INTEGER, .integer = -5 };
    redisReply n1 = { .type = REDIS_REPLY_NIL };
    redisReply *inner_el[] = { &i1, &n1 };
    redisReply inner = { .type = REDIS_REPLY_ARRAY, .elements = 2, .element = inner_el };
    redisReply st = { .type = REDIS_REPLY_STATUS, .str = (char *)"OK", .len = 2 };
    redisReply *outer_el[] = { &s1, &inner, &st };
    redisReply outer = { .type = REDIS_REPLY_ARRAY, .elements = 3, .element = outer_el };
    flare_redis_reply_t root, *heap;
    assert_int_equal(flare__redis_reply_build(&outer, &root, &heap), 0);
    assert_non_null(heap);
    assert_int_equal(root.type, FLARE_REDIS_ARRAY);
    assert_int_equal(root.n, 3);
    assert_int_equal(root.elem[0].type, FLARE_REDIS_STRING);
    assert_int_equal(root.elem[0].str.len, 4);
    assert_memory_equal(root.elem[0].str.ptr, "ab\0c", 4);
    assert_int_equal(root.elem[1].type, FLARE_REDIS_ARRAY);
    assert_int_equal(root.elem[1].n, 2);
    assert_int_equal(root.elem[1].elem[0].integer, -5);
    assert_int_equal(root.elem[1].elem[1].type, FLARE_REDIS_NIL);
    assert_null(root.elem[1].elem[1].str.ptr);
    assert_int_equal(root.elem[2].type, FLARE_REDIS_STATUS);
    free(heap);
    /* a scalar: no allocation */
    assert_int_equal(flare__redis_reply_build(&i1, &root, &heap), 0);
    assert_null(heap);
    assert_int_equal(root.type, FLARE_REDIS_INT);
    redisReply empty = { .type = REDIS_REPLY_ARRAY };
    assert_int_equal(flare__redis_reply_build(&empty, &root, &heap), 0);
    assert_null(heap);
    assert_int_equal(root.n, 0);
    assert_null(root.elem);
    redisReply odd = { .type = 99 };
    assert_int_equal(flare__redis_reply_build(&odd, &root, &heap), FLARE_EINVAL);
    assert_string_equal(flare_redis_type_name(FLARE_REDIS_MAP), "map");
    assert_string_equal(flare_redis_type_name((flare_redis_type_t)99), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reply_tree),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_binary_args),
        cmocka_unit_test(test_wrong_thread), /* a worker's state, another thread */
        cmocka_unit_test(test_reply_types),
        cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_shutdown_callbacks),
        cmocka_unit_test(test_host_name),
        cmocka_unit_test(test_pubsub),
        cmocka_unit_test(test_session_store),
        cmocka_unit_test(test_session_http),
        cmocka_unit_test(test_outage_reconnect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
