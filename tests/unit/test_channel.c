/* The channel layer (flare/channel.h) without a cluster: positions and
 * their tokens; on a running app with several workers, C subscribers on
 * every worker and publishers on several threads (one order for every
 * subscriber, each publisher's order kept, nothing twice or missing);
 * subscribers joining and leaving while messages flow, also from inside
 * their own callbacks; a callback that publishes does not overtake the
 * message it was given; an SSE stream too slow for its channel is dropped
 * (FLARE_ETOOBIG) while the others go on; bad input refused; the
 * subscriptions left at shutdown told FLARE_CHANNEL_CLOSED. */
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

#include "flare/channel.h"
#include "flare/flare.h"
#include "flare/sse.h"
#include "harness.h"

#define S(lit)   FLARE_STR(lit)
#define WORKERS  3
#define PUBS     4   /* publishing threads outside the app */
#define WPUBS    2   /* publishing tasks on workers */
#define PER_PUB  400 /* messages each */
#define TOTAL    ((PUBS + WPUBS) * PER_PUB)
#define MAX_SUBS 8

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* ---- positions ---- */

static void test_pos_tokens(void **state)
{
    (void)state;
    flare_channel_pos_t p;
    assert_int_equal(flare_channel_pos_parse(S("17:a1b2c3d4e5f60718"), &p), 0);
    assert_int_equal(p.offset, 17);
    assert_int_equal(p.epoch_len, 16);
    assert_memory_equal(p.epoch, "a1b2c3d4e5f60718", 16);
    char buf[FLARE_CHANNEL_POS_MAX + 1];
    assert_int_equal(flare_channel_pos_format(&p, buf, sizeof(buf)), 19);
    assert_string_equal(buf, "17:a1b2c3d4e5f60718");
    assert_int_equal(flare_channel_pos_parse(S("0:x"), &p), 0);
    assert_int_equal(p.offset, 0);
    /* cut, still terminated */
    assert_int_equal(flare_channel_pos_format(&p, buf, 2), 3);
    assert_string_equal(buf, "0");
    const char *bad[] = { "",
                          ":",
                          "1:",
                          ":abc",
                          "abc",
                          "-1:abc",
                          "1:ab c",
                          "1:ab\ncd",
                          "12x:abc",
                          "99999999999999999:abc",               /* above 2^53 */
                          "1:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", /* 33-byte epoch */
                          "1:abc:def" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p.offset = 99;
        assert_int_equal(flare_channel_pos_parse(flare_str(bad[i]), &p), FLARE_EINVAL);
        assert_int_equal(p.offset, 0);
    }
    assert_int_equal(flare_channel_pos_parse(S("1:a"), NULL), FLARE_EINVAL);
    assert_int_equal(flare_channel_pos_parse(FLARE_STR_NULL, &p), FLARE_EINVAL);
}

/* ---- subscribers on every worker ---- */

typedef struct rec {
    flare_channel_sub_t *sub;
    unsigned worker;
    _Atomic int n;                /* written by the subscriber's worker, read by the test */
    uint32_t got[2 * TOTAL + 16]; /* originals, and echoes in the race test */
    int closed;
    bool leave_at_half; /* unsubscribes itself from its callback */
    bool echo;          /* publishes "echo:<msg>" on each "p..." message */
} rec_t;

static flare_app_t *app;
static rec_t recs[MAX_SUBS];
static _Atomic int nrecs;
static _Atomic int closed_notices;

/* p<publisher>.<seq> -> publisher << 16 | seq; echo:... -> bit 31 set */
static uint32_t code_of(flare_str_t d)
{
    uint32_t echo = 0;
    if (d.len > 5 && memcmp(d.ptr, "echo:", 5) == 0) {
        echo = 1u << 31;
        d.ptr += 5;
        d.len -= 5;
    }
    unsigned p = 0, q = 0;
    char tmp[32];
    size_t n = d.len < sizeof(tmp) - 1 ? d.len : sizeof(tmp) - 1;
    memcpy(tmp, d.ptr, n);
    tmp[n] = '\0';
    assert_int_equal(sscanf(tmp, "p%u.%u", &p, &q), 2);
    return echo | p << 16 | q;
}

static void on_msg(flare_channel_sub_t *sub, const flare_channel_msg_t *m, void *ud)
{
    rec_t *r = ud;
    assert_ptr_equal(sub, r->sub);
    assert_true(flare_str_eq(m->channel, S("ord")));
    assert_int_equal(m->offset, 0); /* no cluster: no positions */
    int n = atomic_load_explicit(&r->n, memory_order_relaxed);
    assert_true(n < 2 * TOTAL + 16);
    r->got[n] = code_of(m->data);
    atomic_store_explicit(&r->n, n + 1, memory_order_release);
    if (r->echo && m->data.ptr[0] == 'p') {
        char buf[64];
        int len = snprintf(buf, sizeof(buf), "echo:%.*s", (int)m->data.len, m->data.ptr);
        assert_int_equal(
            flare_channel_publish(
                app, S("ord"), &(flare_channel_msg_t){ .data = { buf, (size_t)len } }, NULL, NULL),
            0);
    }
    if (r->leave_at_half && n + 1 == TOTAL / 2) {
        assert_int_equal(flare_channel_unsubscribe(sub), 0);
        r->sub = NULL;
    }
}

static void on_notice(flare_channel_sub_t *sub, const flare_channel_notice_t *n, void *ud)
{
    (void)sub;
    rec_t *r = ud;
    if (n->kind == FLARE_CHANNEL_CLOSED) {
        r->closed++;
        atomic_fetch_add(&closed_notices, 1);
    }
}

static void subscribe_task(void *ud)
{
    rec_t *r = ud;
    flare_worker_t *w = flare_app_worker(app, r->worker);
    assert_non_null(w);
    flare_channel_sub_config_t cfg = { .on_message = on_msg, .on_notice = on_notice, .ud = r };
    assert_int_equal(flare_channel_subscribe(w, S("ord"), &cfg, &r->sub), 0);
    assert_true(flare_str_eq(flare_channel_sub_name(r->sub), S("ord")));
    atomic_fetch_add(&nrecs, 1);
}

static void *publisher(void *arg)
{
    unsigned p = (unsigned)(uintptr_t)arg;
    for (unsigned i = 0; i < PER_PUB; i++) {
        char buf[32];
        int n = snprintf(buf, sizeof(buf), "p%u.%u", p, i);
        int rc;
        while ((rc = flare_channel_publish(app, S("ord"),
                                           &(flare_channel_msg_t){ .data = { buf, (size_t)n } },
                                           NULL, NULL)) == FLARE_ENOMEM)
            sleep_ms(1);
        assert_int_equal(rc, 0);
    }
    return NULL;
}

static _Atomic int wpub_done;
static _Atomic int published_cbs;

static void published(int err, uint64_t offset, flare_str_t epoch, void *ud)
{
    (void)ud;
    assert_int_equal(err, 0);
    assert_int_equal(offset, 0);
    assert_int_equal(epoch.len, 0);
    atomic_fetch_add(&published_cbs, 1);
}

/* a publisher on a worker thread: all of its messages in one task */
static void worker_publisher(void *ud)
{
    unsigned p = (unsigned)(uintptr_t)ud;
    for (unsigned i = 0; i < PER_PUB; i++) {
        char buf[32];
        int n = snprintf(buf, sizeof(buf), "p%u.%u", p, i);
        assert_int_equal(flare_channel_publish(app, S("ord"),
                                               &(flare_channel_msg_t){ .data = { buf, (size_t)n } },
                                               i == 0 ? published : NULL, NULL),
                         0);
    }
    atomic_fetch_add(&wpub_done, 1);
}

static void start_app(void)
{
    app = flare_app_new(&(flare_config_t){ .workers = WORKERS });
    assert_non_null(app);
    assert_int_equal(flare_channel_enable(app), 0);
    assert_int_equal(flare_channel_enable(app), 0); /* idempotent */
}

static void wait_for(rec_t *r, int want, int ms)
{
    for (int i = 0; i < ms && atomic_load_explicit(&r->n, memory_order_acquire) < want; i++)
        sleep_ms(1);
}

static void test_order_concurrent_publishers(void **state)
{
    (void)state;
    memset(recs, 0, sizeof(recs));
    atomic_store(&nrecs, 0);
    atomic_store(&wpub_done, 0);
    atomic_store(&published_cbs, 0);
    atomic_store(&closed_notices, 0);
    start_app();
    /* not running: refused, not crashed */
    assert_int_equal(
        flare_channel_publish(app, S("ord"), &(flare_channel_msg_t){ .data = S("x") }, NULL, NULL),
        FLARE_ESTATE);
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    /* two subscribers per worker, one of them on the echo-free path */
    int nsubs = 2 * WORKERS;
    for (int i = 0; i < nsubs; i++) {
        recs[i].worker = (unsigned)(i % WORKERS);
        assert_int_equal(flare_app_post(app, recs[i].worker, subscribe_task, &recs[i]), 0);
    }
    for (int i = 0; i < 2000 && atomic_load(&nrecs) < nsubs; i++)
        sleep_ms(1);
    assert_int_equal(atomic_load(&nrecs), nsubs);

    pthread_t th[PUBS];
    for (unsigned p = 0; p < PUBS; p++)
        assert_int_equal(pthread_create(&th[p], NULL, publisher, (void *)(uintptr_t)p), 0);
    for (unsigned p = 0; p < WPUBS; p++)
        assert_int_equal(
            flare_app_post(app, p % WORKERS, worker_publisher, (void *)(uintptr_t)(PUBS + p)), 0);
    for (unsigned p = 0; p < PUBS; p++)
        pthread_join(th[p], NULL);
    for (int i = 0; i < nsubs; i++)
        wait_for(&recs[i], TOTAL, 10000);
    assert_int_equal(atomic_load(&wpub_done), WPUBS);
    for (int i = 0; i < 2000 && atomic_load(&published_cbs) < WPUBS; i++)
        sleep_ms(1);
    assert_int_equal(atomic_load(&published_cbs), WPUBS);

    for (int i = 0; i < nsubs; i++) {
        rec_t *r = &recs[i];
        assert_int_equal(atomic_load(&r->n), TOTAL);
        /* one order for everybody */
        assert_memory_equal(r->got, recs[0].got, TOTAL * sizeof(uint32_t));
        /* each publisher's messages in its order, each once */
        unsigned next[PUBS + WPUBS] = { 0 };
        for (int k = 0; k < TOTAL; k++) {
            unsigned p = r->got[k] >> 16, q = r->got[k] & 0xffff;
            assert_true(p < PUBS + WPUBS);
            assert_int_equal(q, next[p]);
            next[p]++;
        }
    }
    /* the subscriptions still there at shutdown are told */
    assert_int_equal(harness_stop(&h), 0);
    assert_int_equal(atomic_load(&closed_notices), nsubs);
    flare_app_free(app);
}

/* ---- joining and leaving while messages flow ---- */

static _Atomic bool churn_stop;
static _Atomic long churn_rounds;

typedef struct churn {
    unsigned worker;
    flare_channel_sub_t *subs[4];
    flare_timer_t *timer;
    int received;
} churn_t;

static void churn_msg(flare_channel_sub_t *sub, const flare_channel_msg_t *m, void *ud)
{
    churn_t *c = ud;
    (void)m;
    c->received++;
    /* leave from inside a delivery: this one, or another of the channel's */
    if (c->received % 7 == 0) {
        for (int i = 0; i < 4; i++) {
            if (c->subs[i] != NULL && (c->received % 14 == 0 || c->subs[i] == sub)) {
                assert_int_equal(flare_channel_unsubscribe(c->subs[i]), 0);
                c->subs[i] = NULL;
                break;
            }
        }
    }
}

static void churn_tick(void *ud)
{
    churn_t *c = ud;
    flare_worker_t *w = flare_app_worker(app, c->worker);
    for (int i = 0; i < 4; i++) {
        if (c->subs[i] != NULL) {
            assert_int_equal(flare_channel_unsubscribe(c->subs[i]), 0);
            c->subs[i] = NULL;
        } else {
            flare_channel_sub_config_t cfg = { .on_message = churn_msg, .ud = c };
            assert_int_equal(flare_channel_subscribe(w, S("ord"), &cfg, &c->subs[i]), 0);
        }
    }
    atomic_fetch_add(&churn_rounds, 1);
    if (!atomic_load(&churn_stop))
        flare_timer_start(c->timer, 1);
}

static void churn_start(void *ud)
{
    churn_t *c = ud;
    assert_int_equal(flare_timer_new(flare_app_worker(app, c->worker), churn_tick, c, &c->timer),
                     0);
    flare_timer_start(c->timer, 0);
}

static void churn_end(void *ud)
{
    churn_t *c = ud;
    flare_timer_free(c->timer);
    for (int i = 0; i < 4; i++) {
        if (c->subs[i] != NULL)
            flare_channel_unsubscribe(c->subs[i]);
        c->subs[i] = NULL;
    }
    c->timer = NULL;
}

static void test_join_leave_races(void **state)
{
    (void)state;
    memset(recs, 0, sizeof(recs));
    atomic_store(&nrecs, 0);
    atomic_store(&churn_stop, false);
    atomic_store(&churn_rounds, 0);
    start_app();
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    /* steady subscribers: one leaves from its own callback halfway, one
     * publishes an echo of each message it gets */
    for (int i = 0; i < 3; i++)
        recs[i].worker = (unsigned)i;
    recs[1].leave_at_half = true;
    recs[2].echo = true;
    for (int i = 0; i < 3; i++)
        assert_int_equal(flare_app_post(app, recs[i].worker, subscribe_task, &recs[i]), 0);
    for (int i = 0; i < 2000 && atomic_load(&nrecs) < 3; i++)
        sleep_ms(1);
    churn_t churn[WORKERS];
    memset(churn, 0, sizeof(churn));
    for (unsigned i = 0; i < WORKERS; i++) {
        churn[i].worker = i;
        assert_int_equal(flare_app_post(app, i, churn_start, &churn[i]), 0);
    }
    pthread_t th[PUBS];
    for (unsigned p = 0; p < PUBS; p++)
        assert_int_equal(pthread_create(&th[p], NULL, publisher, (void *)(uintptr_t)p), 0);
    for (unsigned p = 0; p < WPUBS; p++)
        assert_int_equal(
            flare_app_post(app, p % WORKERS, worker_publisher, (void *)(uintptr_t)(PUBS + p)), 0);
    for (unsigned p = 0; p < PUBS; p++)
        pthread_join(th[p], NULL);
    /* the originals and recs[2]'s echo of each */
    wait_for(&recs[0], 2 * TOTAL, 10000);
    atomic_store(&churn_stop, true);
    sleep_ms(50);
    for (unsigned i = 0; i < WORKERS; i++)
        assert_int_equal(flare_app_post(app, i, churn_end, &churn[i]), 0);
    sleep_ms(50);
    assert_true(atomic_load(&churn_rounds) > 10);
    /* recs[0] stayed: every original once, in publisher order; each echo
     * after the message it echoes */
    rec_t *r = &recs[0];
    int n = atomic_load(&r->n);
    assert_int_equal(n, 2 * TOTAL);
    unsigned next[PUBS + WPUBS] = { 0 };
    static bool seen[PUBS + WPUBS][PER_PUB];
    memset(seen, 0, sizeof(seen));
    for (int k = 0; k < n; k++) {
        uint32_t c = r->got[k];
        unsigned p = (c >> 16) & 0x7fff, q = c & 0xffff;
        if (c & (1u << 31)) {
            assert_true(seen[p][q]); /* the echo never overtakes its message */
            continue;
        }
        assert_int_equal(q, next[p]);
        next[p]++;
        seen[p][q] = true;
    }
    for (unsigned p = 0; p < PUBS + WPUBS; p++)
        assert_int_equal(next[p], PER_PUB);
    /* recs[1] left at half and got nothing after */
    assert_int_equal(atomic_load(&recs[1].n), TOTAL / 2);
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(app);
}

/* ---- a slow SSE subscriber is dropped, the others go on ---- */

static _Atomic int slow_reason = 1;
static _Atomic int streams_up;

static void slow_closed(flare_sse_t *s, int reason, void *ud)
{
    (void)s;
    (void)ud;
    atomic_store(&slow_reason, reason);
}

static int slow_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_sse_t *s;
    flare_sse_config_t cfg = { .max_queued = 64 * 1024,
                               .heartbeat_ms = FLARE_SSE_HEARTBEAT_OFF,
                               .on_close = slow_closed };
    int rc = flare_sse_start(req, res, &cfg, &s);
    if (rc != 0)
        return rc;
    assert_int_equal(flare_sse_join(s, S("big")), 0);
    atomic_fetch_add(&streams_up, 1);
    return FLARE_ASYNC;
}

static void big_msg(flare_channel_sub_t *sub, const flare_channel_msg_t *m, void *ud)
{
    (void)sub;
    rec_t *r = ud;
    assert_int_equal(m->data.len, 16 * 1024);
    atomic_fetch_add(&r->n, 1);
}

static void big_subscribe_task(void *ud)
{
    rec_t *r = ud;
    flare_channel_sub_config_t cfg = { .on_message = big_msg, .ud = r };
    assert_int_equal(
        flare_channel_subscribe(flare_app_worker(app, r->worker), S("sse:big"), &cfg, &r->sub), 0);
    atomic_fetch_add(&nrecs, 1);
}

static void test_slow_subscriber_dropped(void **state)
{
    (void)state;
    memset(recs, 0, sizeof(recs));
    atomic_store(&nrecs, 0);
    atomic_store(&slow_reason, 1);
    atomic_store(&streams_up, 0);
    app = flare_app_new(&(flare_config_t){ .workers = 2 });
    assert_non_null(app);
    assert_int_equal(flare_sse_route(app, "/big", slow_handler, NULL), 0);
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    /* a client that asks and then never reads */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)h.port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    const char *req = "GET /big HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    for (int i = 0; i < 2000 && atomic_load(&streams_up) < 1; i++)
        sleep_ms(1);
    /* a C subscriber of the same channel on each worker: they keep getting all */
    for (int i = 0; i < 2; i++) {
        recs[i].worker = (unsigned)i;
        assert_int_equal(flare_app_post(app, recs[i].worker, big_subscribe_task, &recs[i]), 0);
    }
    for (int i = 0; i < 2000 && atomic_load(&nrecs) < 2; i++)
        sleep_ms(1);
    static char big[16 * 1024];
    memset(big, 'x', sizeof(big));
    int sent = 0;
    /* the kernel's buffers take a few MiB; the stream's queue 64 KiB more */
    for (; sent < 4096 && atomic_load(&slow_reason) == 1; sent++) {
        int rc = flare_channel_publish(
            app, S("sse:big"), &(flare_channel_msg_t){ .data = { big, sizeof(big) } }, NULL, NULL);
        assert_int_equal(rc, 0);
        if (sent % 64 == 63)
            sleep_ms(5);
    }
    for (int i = 0; i < 5000 && atomic_load(&slow_reason) == 1; i++)
        sleep_ms(1);
    assert_int_equal(atomic_load(&slow_reason), FLARE_ETOOBIG);
    for (int i = 0; i < 2; i++) {
        wait_for(&recs[i], sent, 5000);
        assert_int_equal(atomic_load(&recs[i].n), sent);
    }
    close(fd);
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(app);
}

/* ---- bad input ---- */

static int bad_rc[8];
static _Atomic bool bad_done;

static void bad_task(void *ud)
{
    (void)ud;
    flare_worker_t *w = flare_app_worker(app, 0);
    flare_channel_sub_t *sub;
    flare_channel_sub_config_t cfg = { .on_message = on_msg };
    static char longname[FLARE_CHANNEL_NAME_MAX + 1];
    memset(longname, 'n', sizeof(longname));
    bad_rc[0] = flare_channel_subscribe(w, (flare_str_t){ longname, sizeof(longname) }, &cfg, &sub);
    bad_rc[1] = flare_channel_subscribe(w, S(""), &cfg, &sub);
    bad_rc[2] = flare_channel_subscribe(w, S("x"), &(flare_channel_sub_config_t){ 0 }, &sub);
    /* another worker's handle, from this thread */
    bad_rc[3] = flare_channel_subscribe(flare_app_worker(app, 1), S("x"), &cfg, &sub);
    bad_rc[4] = flare_channel_unsubscribe(NULL);
    atomic_store(&bad_done, true);
}

static void test_bad_input(void **state)
{
    (void)state;
    atomic_store(&bad_done, false);
    start_app();
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    static char longname[FLARE_CHANNEL_NAME_MAX + 1];
    memset(longname, 'n', sizeof(longname));
    flare_channel_msg_t m = { .data = S("x") };
    assert_int_equal(
        flare_channel_publish(app, (flare_str_t){ longname, sizeof(longname) }, &m, NULL, NULL),
        FLARE_EINVAL);
    assert_int_equal(flare_channel_publish(app, (flare_str_t){ longname, FLARE_CHANNEL_NAME_MAX },
                                           &m, NULL, NULL),
                     0);
    assert_int_equal(flare_channel_publish(app, S(""), &m, NULL, NULL), FLARE_EINVAL);
    assert_int_equal(flare_channel_publish(NULL, S("x"), &m, NULL, NULL), FLARE_EINVAL);
    assert_int_equal(flare_channel_publish(app, S("x"), NULL, NULL, NULL), FLARE_EINVAL);
    assert_int_equal(flare_channel_publish(
                         app, S("x"), &(flare_channel_msg_t){ .data = S("\xff\xfe") }, NULL, NULL),
                     FLARE_EINVAL);
    assert_int_equal(
        flare_channel_publish(
            app, S("x"), &(flare_channel_msg_t){ .data = S("\xff"), .binary = true }, NULL, NULL),
        0);
    assert_int_equal(flare_channel_publish(
                         app, S("x"), &(flare_channel_msg_t){ .event = S("a\nb") }, NULL, NULL),
                     FLARE_EINVAL);
    /* from a thread that is not the worker's */
    flare_channel_sub_t *sub;
    assert_int_equal(flare_channel_subscribe(flare_app_worker(app, 0), S("x"),
                                             &(flare_channel_sub_config_t){ .on_message = on_msg },
                                             &sub),
                     FLARE_EINVAL);
    assert_int_equal(flare_app_post(app, 0, bad_task, NULL), 0);
    for (int i = 0; i < 2000 && !atomic_load(&bad_done); i++)
        sleep_ms(1);
    assert_int_equal(bad_rc[0], FLARE_EINVAL);
    assert_int_equal(bad_rc[1], FLARE_EINVAL);
    assert_int_equal(bad_rc[2], FLARE_EINVAL);
    assert_int_equal(bad_rc[3], FLARE_EINVAL);
    assert_int_equal(bad_rc[4], FLARE_EINVAL);
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(app);
    /* no channel layer at all */
    flare_app_t *bare = flare_app_new(NULL);
    assert_int_equal(flare_channel_publish(bare, S("x"), &m, NULL, NULL), FLARE_ESTATE);
    flare_app_free(bare);
}

int main(void)
{
    (void)harness_roundtrip;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pos_tokens),       cmocka_unit_test(test_order_concurrent_publishers),
        cmocka_unit_test(test_join_leave_races), cmocka_unit_test(test_slow_subscriber_dropped),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
