/* The server of bench/cluster.sh: channel fan-out over WebSocket, on one
 * instance's local channel layer or across instances through Redis
 * (--cluster redis://HOST:PORT, the settings key every example takes).
 *
 *   cluster_server --listen 127.0.0.1:PORT --workers 1 [--cluster redis://HOST:PORT]
 *
 * Routes:
 *   GET /plaintext       "Hello, World!" (the bench scripts' readiness check)
 *   WebSocket /sub?ch=N  a subscriber: joins the room "bN" (flare_ws_join) and
 *                        only listens
 *   WebSocket /pub       the publisher's control connection: each text message
 *                        "FIRST COUNT CHANNELS SIZE" publishes COUNT messages,
 *                        sequence numbers FIRST, FIRST + 1, ..., message s to
 *                        the room "b" (s % CHANNELS), with flare_ws_broadcast
 *                        from this worker, as a chat handler does. A message
 *                        is the text "SEQ TIME" padded with 'x' to SIZE bytes,
 *                        TIME the publisher's CLOCK_MONOTONIC in nanoseconds
 *                        taken just before the broadcast call (processes on
 *                        one host share that clock: the client subtracts it
 *                        from its own to get the publish-to-delivery latency).
 *                        The text "stats" answers "published N failed M" (the
 *                        counts of this control connection).
 *
 * Everything is the public API, as an application would write it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flare/flare.h>
#include <flare/settings.h>
#include <flare/ws.h>

#define SIZE_MAX_MSG 4096

typedef struct pub_counts {
    unsigned long long published, failed;
} pub_counts_t;

static int plaintext(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("Hello, World!"));
}

static int sub_open(flare_ws_t *ws, flare_req_t *req)
{
    flare_str_t ch = flare_req_query_param(req, "ch");
    if (ch.len == 0 || ch.len > 8)
        return 400;
    char room[16] = "b";
    for (size_t i = 0; i < ch.len; i++) {
        if (ch.ptr[i] < '0' || ch.ptr[i] > '9')
            return 400;
        room[1 + i] = ch.ptr[i];
    }
    return flare_ws_join(ws, flare_str(room)) == 0 ? 0 : 503;
}

static size_t put_u64(char *out, unsigned long long v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

static int pub_open(flare_ws_t *ws, flare_req_t *req)
{
    (void)req;
    pub_counts_t *pc = calloc(1, sizeof(*pc));
    if (pc == NULL)
        return 503;
    flare_ws_set_data(ws, pc);
    return 0;
}

static void pub_close(flare_ws_t *ws, int code, flare_str_t reason)
{
    (void)code;
    (void)reason;
    free(flare_ws_data(ws));
}

static void pub_message(flare_ws_t *ws, flare_ws_opcode_t op, flare_str_t text)
{
    pub_counts_t *pc = flare_ws_data(ws);
    if (op != FLARE_WS_TEXT)
        return;
    char cmd[128];
    if (text.len >= sizeof(cmd))
        return;
    memcpy(cmd, text.ptr, text.len);
    cmd[text.len] = '\0';
    if (strcmp(cmd, "stats") == 0) {
        char out[96];
        int n = snprintf(out, sizeof(out), "published %llu failed %llu", pc->published, pc->failed);
        flare_ws_send_text(ws, (flare_str_t){ out, (size_t)n });
        return;
    }
    unsigned long long first, count, channels, size;
    if (sscanf(cmd, "%llu %llu %llu %llu", &first, &count, &channels, &size) != 4 ||
        channels == 0 || size < 48 || size > SIZE_MAX_MSG)
        return;
    flare_app_t *app = flare_ws_app(ws);
    char msg[SIZE_MAX_MSG];
    memset(msg, 'x', size);
    for (unsigned long long s = first; s < first + count; s++) {
        char room[24] = "b";
        room[1 + put_u64(room + 1, s % channels)] = '\0';
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        size_t n = put_u64(msg, s);
        msg[n++] = ' ';
        n += put_u64(msg + n, (unsigned long long)ts.tv_sec * 1000000000ull +
                                  (unsigned long long)ts.tv_nsec);
        msg[n] = ' ';
        int rc =
            flare_ws_broadcast(app, flare_str(room), FLARE_WS_TEXT, (flare_str_t){ msg, size }, 0);
        if (rc == 0)
            pc->published++;
        else
            pc->failed++;
    }
}

int main(int argc, char **argv)
{
    flare_settings_t st;
    int rc;
    if (flare_settings_main(&st, argc, argv, NULL, 0, &rc) != 0)
        return rc;
    flare_app_t *app;
    if ((rc = flare_settings_app_new(&st, NULL, &app)) != 0) {
        fprintf(stderr, "cluster_server: %s\n", flare_settings_error(&st));
        flare_settings_free(&st);
        return 1;
    }
    flare_ws_config_t sub = {
        .on_open = sub_open,
        .heartbeat_ms = FLARE_WS_NEVER,
    };
    flare_ws_config_t pub = {
        .on_open = pub_open,
        .on_message = pub_message,
        .on_close = pub_close,
        .heartbeat_ms = FLARE_WS_NEVER,
    };
    if ((rc = flare_get(app, "/plaintext", plaintext, NULL)) != 0 ||
        (rc = flare_ws_route(app, "/sub", &sub)) != 0 ||
        (rc = flare_ws_route(app, "/pub", &pub)) != 0) {
        fprintf(stderr, "cluster_server: route: %s\n", flare_strerror(rc));
        flare_app_free(app);
        flare_settings_free(&st);
        return 1;
    }
    if ((rc = flare_app_run(app, NULL)) != 0)
        fprintf(stderr, "cluster_server: %s: %s\n", flare_strerror(rc), flare_last_error());
    flare_app_free(app);
    flare_settings_free(&st);
    return rc != 0;
}
