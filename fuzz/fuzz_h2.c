/* libFuzzer target: HTTP/2 through nghttp2 into Flare's stream glue.
 *
 * Each input is what a client sends after a valid preface and an empty
 * SETTINGS frame (the harness adds both). A worker is built in-process
 * (loop, buffer pool, no listener, no thread): the server end of a
 * socketpair is opened as a connection (flare__conn_open, so preface
 * detection in http1/conn.c hands it to flare__h2_start), the client end
 * gets the bytes, the loop runs a few non-blocking iterations, what the
 * server wrote is read and dropped, then the connection is closed and the
 * worker freed. Routes: GET / answers, POST /echo echoes its body, so
 * streams reach dispatch and the response path (data provider, flow
 * control). Nothing outlives an input: no socket, no thread, no timer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <flare/flare.h>

#include "app.h"
#include "core/arena.h"
#include "core/buf.h"
#include "http/exchange.h"
#include "http/svc.h"
#include "http1/conn.h"
#include "http2/h2.h"
#include "mw/chain.h"
#include "net/stream.h"

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                              "\x00\x00\x00\x04\x00\x00\x00\x00\x00"; /* SETTINGS, empty */

static int get_root(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("Hello, World!"));
}

static int post_echo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("application/octet-stream"), flare_req_body(req));
}

static flare_app_t *app;

static void app_free(void)
{
    flare_app_free(app);
}

static flare_app_t *app_get(void)
{
    if (app != NULL)
        return app;
    flare_config_t cfg = { .workers = 1 };
    app = flare_app_new(&cfg);
    if (app == NULL || flare_get(app, "/", get_root, NULL) != 0 ||
        flare_post(app, "/echo", post_echo, NULL) != 0 ||
        flare__chains_build(app, flare__res_auto) != 0)
        abort();
    atexit(app_free);
    return app;
}

static void stop_loop(void *ud)
{
    ((flare_loop_t *)ud)->stop = true;
}

static void after_events(void *ud)
{
    flare__conn_free_dead(ud);
}

/* One loop iteration that does not block: a timer due now stops it. */
static void loop_once(flare_worker_t *w, flare__timer_t *t)
{
    w->loop.stop = false;
    flare__timer_start(&w->loop, t, 0);
    flare__loop_run(&w->loop);
}

static void drain(int fd)
{
    char buf[16384];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
}

/* Writes what fits (the socket is non-blocking); returns bytes written. */
static size_t feed(int fd, const uint8_t *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = write(fd, p + done, n - done);
        if (r <= 0)
            break;
        done += (size_t)r;
    }
    return done;
}

static void worker_free(flare_worker_t *w)
{
    flare__conn_close_all(w);
    flare__loop_dispose(&w->loop);
    flare__worker_free_memory(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    flare_worker_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return 0;
    w->app = app_get();
    w->reserve_fd = -1;
    if (flare__loop_init(&w->loop, FLARE__LOOP_EPOLL) != 0)
        abort();
    w->loop.after_events = after_events;
    w->loop.after_events_ud = w;
    flare__worker_update_date(w, 1700000000); /* fixed: runs are deterministic */
    flare__timer_t t;
    flare__timer_init(&t, stop_loop, &w->loop);

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        abort();
    flare__conn_open(w, sv[0], NULL, NULL); /* owns sv[0] from here */

    size_t off = 0;
    uint8_t *msg = malloc(sizeof(preface) - 1 + size);
    if (msg == NULL)
        abort();
    memcpy(msg, preface, sizeof(preface) - 1);
    if (size > 0)
        memcpy(msg + sizeof(preface) - 1, data, size);
    size_t total = sizeof(preface) - 1 + size;
    /* input that does not fit in the socket goes in as the server reads */
    for (int i = 0; i < 64 && w->conns != NULL; i++) {
        off += feed(sv[1], msg + off, total - off);
        loop_once(w, &t);
        drain(sv[1]);
        if (off == total && i >= 3)
            break;
    }
    free(msg);
    flare__timer_stop(&w->loop, &t);
    worker_free(w);
    close(sv[1]);
    free(w);
    return 0;
}
