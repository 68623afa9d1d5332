/* The rate limiter's Redis store against a real redis-server
 * (tests/services_redis.py starts a private one and exports
 * FLARE_TEST_REDIS_URL and how to restart it): the script's token bucket
 * (burst, refill, Retry-After, the key's expiry), the fall back to EVAL
 * after SCRIPT FLUSH, one budget shared by two apps, and Redis down or
 * stalled: fail open or closed, within the command timeout, counted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <signal.h>
#include <time.h>

#include "harness.h"
#include "flare/redis.h"
#include "flare/tls.h"

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

/* ---- the server, by hand: one inline command, the first reply read ---- */

static int redis_connect(void)
{
    int port = atoi(env_or_die("FLARE_TEST_REDIS_PORT"));
    return loopback_connect(port);
}

static void redis_raw(const char *cmd, char *out, size_t cap)
{
    int fd = redis_connect();
    assert_true(fd >= 0);
    char line[512];
    int n = snprintf(line, sizeof(line), "%s\r\n", cmd);
    assert_int_equal(write(fd, line, (size_t)n), n);
    ssize_t got = read(fd, out, cap - 1);
    out[got > 0 ? got : 0] = '\0';
    close(fd);
}

/* An integer reply (":N"). */
static long long redis_int(const char *cmd)
{
    char buf[128];
    redis_raw(cmd, buf, sizeof(buf));
    assert_true(buf[0] == ':');
    return atoll(buf + 1);
}

static bool redis_ping(void)
{
    int fd = redis_connect();
    if (fd < 0)
        return false;
    char buf[16] = { 0 };
    bool ok = write(fd, "PING\r\n", 6) == 6 && read(fd, buf, sizeof(buf) - 1) > 0 &&
              strncmp(buf, "+PONG", 5) == 0;
    close(fd);
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

/* ---- an app: GET /x answers 200 behind the limiter ---- */

typedef struct inst {
    harness_t h;
    flare_redis_t *r;
} inst_t;

static int ok_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("ok\n"));
}

/* Until every worker's Redis connection is up (2 workers, 1 each): a
 * worker still connecting or reconnecting fails its decisions at once,
 * which a test of the timeout must not meet. */
static void wait_connected(inst_t *in)
{
    flare_redis_stats_t st = { 0 };
    for (int i = 0; i < 500; i++) {
        assert_int_equal(flare_redis_stats(in->r, UINT32_MAX, &st), 0);
        if (st.conns_open == 2)
            return;
        usleep(10000);
    }
    fail_msg("%llu Redis connections up, not 2", (unsigned long long)st.conns_open);
}

/* rl: the limiter's options (redis filled in here); timeout_ms: the
 * handle's command timeout. */
static void start(inst_t *in, flare_ratelimit_config_t rl, unsigned timeout_ms)
{
    flare_config_t c;
    flare_config_init(&c);
    c.workers = 2;
    c.drain_timeout_ms = 300; /* a stop with decisions in flight ends them (EUNAVAIL) */
    in->h.app = flare_app_new(&c);
    assert_non_null(in->h.app);
    flare_redis_config_t rc = { .command_timeout_ms = timeout_ms,
                                .reconnect_min_ms = 20,
                                .reconnect_max_ms = 50 };
    assert_int_equal(flare_redis_open(in->h.app, env_or_die("FLARE_TEST_REDIS_URL"), &rc, &in->r),
                     0);
    rl.redis = in->r;
    flare_middleware_t m;
    assert_int_equal(flare_ratelimit(in->h.app, &rl, &m), 0);
    assert_int_equal(flare_route_mw(in->h.app, FLARE_METHOD_GET, "/x", ok_handler, NULL, &m, 1), 0);
    assert_int_equal(flare_metrics_enable(in->h.app), 0);
    assert_int_equal(harness_start(&in->h), 0);
    wait_connected(in);
}

/* GET /x over IPv6 to port (the app's [::1] listener): the status. */
static int get6(int port)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port) };
    sa.sin6_addr = in6addr_loopback;
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    const char *req = "GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    char buf[512];
    size_t len = 0;
    ssize_t r;
    while (len < sizeof(buf) - 1 && (r = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
        len += (size_t)r;
    buf[len] = '\0';
    close(fd);
    int status = 0;
    sscanf(buf, "HTTP/1.1 %d", &status);
    return status;
}

static void stop(inst_t *in)
{
    assert_int_equal(harness_stop(&in->h), 0);
    flare_app_free(in->h.app);
    in->h.app = NULL;
}

/* GET /x: the status, and Retry-After into *retry (-1 without one). */
static int get(inst_t *in, int *retry)
{
    char *r = harness_roundtrip(&in->h, "GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    int status = 0;
    sscanf(r, "HTTP/1.1 %d", &status);
    if (retry != NULL) {
        const char *p = strstr(r, "\r\nRetry-After: ");
        *retry = p != NULL ? atoi(p + 15) : -1;
    }
    free(r);
    return status;
}

/* flare_ratelimit_decisions_total{prefix=...,result=what} from the exposition. */
static long metric(inst_t *in, const char *prefix, const char *what)
{
    char *text;
    size_t len;
    assert_int_equal(flare_metrics_render(in->h.app, &text, &len), 0);
    char want[256];
    snprintf(want, sizeof(want), "flare_ratelimit_decisions_total{prefix=\"%s\",result=\"%s\"} ",
             prefix, what);
    const char *p = strstr(text, want);
    long v = p != NULL ? atol(p + strlen(want)) : -1;
    free(text);
    return v;
}

static void flush(void)
{
    char buf[64];
    redis_raw("FLUSHALL", buf, sizeof(buf));
    assert_string_equal(buf, "+OK\r\n");
}

/* ---- the bucket ---- */

/* The burst, then 429 with the wait until one token: rate 0.5/s, 5 tokens.
 * The bucket is a hash whose expiry is the time to fill it again (5 tokens
 * at 0.5/s: 10 s). */
static void test_burst_and_retry_after(void **state)
{
    (void)state;
    flush();
    inst_t a = { 0 };
    start(&a, (flare_ratelimit_config_t){ .rate = 0.5, .burst = 5, .redis_prefix = "t:rl:" }, 3000);
    for (int i = 0; i < 5; i++)
        assert_int_equal(get(&a, NULL), 200);
    int retry;
    assert_int_equal(get(&a, &retry), 429);
    assert_int_equal(retry, 2); /* (1 - ~0 tokens) / 0.5 a second, rounded up */
    assert_int_equal(get(&a, &retry), 429);
    long long pttl = redis_int("PTTL t:rl:127.0.0.1");
    assert_true(pttl > 8000 && pttl <= 10000);
    char buf[256];
    redis_raw("HGET t:rl:127.0.0.1 tokens", buf, sizeof(buf));
    assert_true(buf[0] == '$'); /* a bulk string: the tokens left, < 1 */
    double tokens = atof(strchr(buf, '\n') + 1);
    assert_true(tokens >= 0 && tokens < 1);
    assert_int_equal(metric(&a, "t:rl:", "allowed"), 5);
    assert_int_equal(metric(&a, "t:rl:", "limited"), 2);
    assert_int_equal(metric(&a, "t:rl:", "error"), 0);
    stop(&a);

    /* an IPv6 client: its own key, the address in eight groups */
    flush();
    a.h.app = NULL;
    flare_config_t c;
    flare_config_init(&c);
    c.workers = 1;
    a.h.app = flare_app_new(&c);
    assert_int_equal(flare_app_listen(a.h.app, "[::1]:0", NULL), 0);
    assert_int_equal(flare_redis_open(a.h.app, env_or_die("FLARE_TEST_REDIS_URL"), NULL, &a.r), 0);
    flare_middleware_t m;
    flare_ratelimit_config_t rl6 = {
        .rate = 0.01, .burst = 2, .redis = a.r, .redis_prefix = "t6:"
    };
    assert_int_equal(flare_ratelimit(a.h.app, &rl6, &m), 0);
    assert_int_equal(flare_route_mw(a.h.app, FLARE_METHOD_GET, "/x", ok_handler, NULL, &m, 1), 0);
    assert_int_equal(harness_start(&a.h), 0);
    int port6 = flare_app_listener_port(a.h.app, 1);
    assert_int_equal(get6(port6), 200);
    assert_int_equal(get6(port6), 200);
    assert_int_equal(get6(port6), 429);
    assert_int_equal(get(&a, NULL), 200); /* 127.0.0.1: another client */
    assert_int_equal(redis_int("EXISTS t6:0:0:0:0:0:0:0:1"), 1);
    assert_int_equal(redis_int("EXISTS t6:127.0.0.1"), 1);
    stop(&a);

    /* the default burst is one second's worth (rate 0.1: 1); 10 s to wait */
    flush();
    start(&a, (flare_ratelimit_config_t){ .rate = 0.1 }, 3000);
    assert_int_equal(get(&a, NULL), 200);
    assert_int_equal(get(&a, &retry), 429);
    assert_int_equal(retry, 10);
    assert_int_equal(redis_int("EXISTS flare:rl:127.0.0.1"), 1);
    stop(&a);
}

/* Tokens come back at the rate, up to the burst; an idle client's key
 * expires once its bucket would be full: 10/s with a burst of 2 is full
 * again 200 ms after its last two tokens were taken. The bounds leave
 * room for a slow run (ThreadSanitizer, a loaded machine): a round trip
 * that takes long refills a token meanwhile. */
static void test_refill_and_expiry(void **state)
{
    (void)state;
    flush();
    inst_t a = { 0 };
    start(&a, (flare_ratelimit_config_t){ .rate = 10, .burst = 2, .redis_prefix = "t:rl:" }, 3000);
    int n200 = 0, retry = -1;
    for (int i = 0; i < 50 && get(&a, &retry) == 200; i++)
        n200++;
    assert_true(n200 >= 2 && n200 < 50); /* the burst, and what refilled meanwhile */
    assert_int_equal(retry, 1);
    usleep(300000); /* 3 tokens' worth, capped at 2 */
    assert_int_equal(get(&a, NULL), 200);
    assert_int_equal(get(&a, NULL), 200);
    long long pttl = redis_int("PTTL t:rl:127.0.0.1");
    assert_true(pttl == -2 || (pttl > 0 && pttl <= 200)); /* -2: expired already */
    usleep(400000);
    assert_int_equal(redis_int("EXISTS t:rl:127.0.0.1"), 0); /* idle: gone */
    assert_int_equal(get(&a, NULL), 200);                    /* and a full bucket again */
    assert_int_equal(get(&a, NULL), 200);
    stop(&a);
}

/* A Redis that lost its scripts (SCRIPT FLUSH, a restart): the decision
 * is made all the same (EVAL after NOSCRIPT), not counted as an error. */
static void test_noscript(void **state)
{
    (void)state;
    flush();
    inst_t a = { 0 };
    start(&a, (flare_ratelimit_config_t){ .rate = 0.01, .burst = 3, .redis_prefix = "t:rl:" },
          3000);
    assert_int_equal(get(&a, NULL), 200);
    char buf[64];
    redis_raw("SCRIPT FLUSH", buf, sizeof(buf));
    assert_string_equal(buf, "+OK\r\n");
    assert_int_equal(get(&a, NULL), 200);
    assert_int_equal(get(&a, NULL), 200);
    assert_int_equal(get(&a, NULL), 429);
    assert_int_equal(metric(&a, "t:rl:", "error"), 0);
    assert_int_equal(metric(&a, "t:rl:", "allowed"), 3);
    stop(&a);
}

/* Two apps (two instances) on one Redis and one prefix: one budget. Each
 * app has two workers, so the requests also cross workers. */
static void test_shared_by_instances(void **state)
{
    (void)state;
    flush();
    inst_t a = { 0 }, b = { 0 };
    flare_ratelimit_config_t rl = { .rate = 0.01, .burst = 7, .redis_prefix = "t:shared:" };
    start(&a, rl, 3000);
    start(&b, rl, 3000);
    int ok = 0, limited = 0;
    for (int i = 0; i < 20; i++) {
        int s = get(i % 2 ? &b : &a, NULL);
        ok += s == 200;
        limited += s == 429;
    }
    assert_int_equal(ok, 7);
    assert_int_equal(limited, 13);
    assert_int_equal(metric(&a, "t:shared:", "allowed") + metric(&b, "t:shared:", "allowed"), 7);
    /* another prefix is another budget */
    inst_t c = { 0 };
    start(&c, (flare_ratelimit_config_t){ .rate = 0.01, .burst = 1, .redis_prefix = "t:other:" },
          3000);
    assert_int_equal(get(&c, NULL), 200);
    assert_int_equal(get(&c, NULL), 429);
    stop(&c);
    stop(&b);
    stop(&a);
}

/* ---- Redis down or stalled ---- */

/* Fail open (the default): down, every request goes through at once;
 * stalled (writes paused), each waits the command timeout (300 ms), not
 * the pause (2 s). Errors counted. Back up: limited again. */
static void test_fail_open(void **state)
{
    (void)state;
    flush();
    inst_t a = { 0 };
    start(&a, (flare_ratelimit_config_t){ .rate = 0.01, .burst = 1, .redis_prefix = "t:rl:" }, 300);
    assert_int_equal(get(&a, NULL), 200);
    assert_int_equal(get(&a, NULL), 429);
    redis_kill();
    uint64_t t0 = now_ms();
    for (int i = 0; i < 10; i++)
        assert_int_equal(get(&a, NULL), 200);
    assert_true(now_ms() - t0 < 1000); /* refused at once: no wait for a timeout */
    assert_int_equal(metric(&a, "t:rl:", "error"), 10);

    redis_restart(); /* empty: a new bucket */
    wait_connected(&a);
    assert_int_equal(get(&a, NULL), 200);
    assert_int_equal(get(&a, NULL), 429);

    char buf[64];
    redis_raw("CLIENT PAUSE 2000 WRITE", buf, sizeof(buf)); /* scripts wait; reads do not */
    assert_string_equal(buf, "+OK\r\n");
    long errors = metric(&a, "t:rl:", "error");
    t0 = now_ms();
    assert_int_equal(get(&a, NULL), 200);
    uint64_t took = now_ms() - t0;
    assert_true(took >= 250 && took < 1500);
    assert_int_equal(metric(&a, "t:rl:", "error"), errors + 1);
    redis_raw("CLIENT UNPAUSE", buf, sizeof(buf));
    stop(&a);
}

/* Fail closed: 503 with Retry-After: 1, down (at once) or stalled (after
 * the command timeout). */
static void test_fail_closed(void **state)
{
    (void)state;
    flush();
    inst_t a = { 0 };
    start(&a,
          (flare_ratelimit_config_t){
              .rate = 0.01, .burst = 100, .redis_prefix = "t:rl:", .fail_closed = true },
          300);
    assert_int_equal(get(&a, NULL), 200);
    char buf[64];
    redis_raw("CLIENT PAUSE 2000 WRITE", buf, sizeof(buf));
    uint64_t t0 = now_ms();
    int retry;
    assert_int_equal(get(&a, &retry), 503);
    uint64_t took = now_ms() - t0;
    assert_true(took >= 250 && took < 1500);
    assert_int_equal(retry, 1);
    redis_raw("CLIENT UNPAUSE", buf, sizeof(buf));

    redis_kill();
    t0 = now_ms();
    for (int i = 0; i < 5; i++) {
        assert_int_equal(get(&a, &retry), 503);
        assert_int_equal(retry, 1);
    }
    assert_true(now_ms() - t0 < 1000);
    assert_int_equal(metric(&a, "t:rl:", "error"), 6);
    redis_restart();
    uint64_t t1 = now_ms();
    int status = 0;
    while (now_ms() - t1 < 5000 && (status = get(&a, NULL)) != 200)
        usleep(20000);
    assert_int_equal(status, 200);
    stop(&a);
}

/* Requests waiting for Redis when the app stops (and clients that left
 * while they waited): every decision completes, nothing leaks (ASan). */
static void test_stop_while_waiting(void **state)
{
    (void)state;
    flush();
    inst_t a = { 0 };
    start(&a, (flare_ratelimit_config_t){ .rate = 100, .redis_prefix = "t:rl:" }, 3000);
    assert_int_equal(get(&a, NULL), 200);
    char buf[64];
    redis_raw("CLIENT PAUSE 1500 WRITE", buf, sizeof(buf));
    int fds[8];
    for (int i = 0; i < 8; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)a.h.port) };
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
        const char *req = "GET /x HTTP/1.1\r\nHost: t\r\n\r\n";
        assert_int_equal(write(fds[i], req, strlen(req)), (ssize_t)strlen(req));
    }
    usleep(100000);
    for (int i = 0; i < 4; i++) /* half of them leave */
        close(fds[i]);
    usleep(50000);
    stop(&a);
    for (int i = 4; i < 8; i++)
        close(fds[i]);
    redis_raw("CLIENT UNPAUSE", buf, sizeof(buf));
}

static void test_config_errors(void **state)
{
    (void)state;
    flare_app_t *app = flare_app_new(NULL);
    flare_redis_t *r;
    assert_int_equal(flare_redis_open(app, "redis://127.0.0.1:1", NULL, &r), 0);
    char prefix[202];
    memset(prefix, 'p', sizeof(prefix) - 1);
    prefix[sizeof(prefix) - 1] = '\0';
    flare_middleware_t m;
    flare_ratelimit_config_t rl = { .rate = 1, .redis = r, .redis_prefix = prefix };
    assert_int_equal(flare_ratelimit(app, &rl, &m), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "redis_prefix"));
    rl.redis_prefix = NULL;
    rl.rate = 0;
    assert_int_equal(flare_ratelimit(app, &rl, &m), FLARE_EINVAL);
    rl.rate = 1;
    assert_int_equal(flare_ratelimit(app, &rl, &m), 0);
    assert_non_null(m.before);
    assert_int_equal(flare_ratelimit(app, &rl, &m), 0); /* two limiters: one module */
    flare_app_free(app);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_errors),       cmocka_unit_test(test_burst_and_retry_after),
        cmocka_unit_test(test_refill_and_expiry),   cmocka_unit_test(test_noscript),
        cmocka_unit_test(test_shared_by_instances), cmocka_unit_test(test_stop_while_waiting),
        cmocka_unit_test(test_fail_closed),         cmocka_unit_test(test_fail_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
