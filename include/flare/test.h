/* flare/test.h — a client for testing an application's own routes.
 *
 * flare_test_start runs an app in the test process, on a private loopback
 * port (127.0.0.1, a port the kernel picks), on a thread of its own; the
 * calls below then talk to it over a real socket, the way a client would,
 * and return parsed answers. flare_test_stop drains the app and joins the
 * thread. The calls block the calling thread (each with a timeout, 5 s by
 * default) and are meant for the test's own thread: one flare_test_t per
 * thread. They work with any test framework (cmocka, plain assert).
 *
 *     flare_app_t *app = flare_app_new(NULL);
 *     my_routes(app);
 *     flare_test_t *t;
 *     assert(flare_test_start(app, NULL, &t) == 0);
 *     flare_test_res_t res;
 *     assert(flare_test_get(t, "/hello", &res) == 0);
 *     assert(res.status == 200 && strcmp(res.body, "hi") == 0);
 *     flare_test_res_free(&res);
 *     assert(flare_test_stop(t) == 0);
 *     flare_app_free(app);
 *
 * Every call returns 0 or a negative FLARE_E* code (results through
 * out-parameters): FLARE_ETIMEDOUT when the app did not answer in time,
 * FLARE_ECLOSED when it closed the connection, FLARE_EIO for an answer that
 * is not valid HTTP (flare_test_error says what was wrong), FLARE_ESYS for a
 * failed system call. An HTTP error status is not a failure: it is in
 * res.status. */
#ifndef FLARE_TEST_H
#define FLARE_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/flare.h"
#include "flare/json.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A running app and the client's connection to it (opaque). */
typedef struct flare_test flare_test_t;

/* flare_test_start's options; zero fields take the defaults. */
typedef struct flare_test_opts {
    unsigned timeout_ms; /* per call: connect, send, the whole answer; 0: 5000 */
    const char *listen;  /* where the app listens; NULL: "127.0.0.1:0" */
    bool no_cookies;     /* do not keep cookies (see flare_test_request) */
} flare_test_opts_t;

/* Runs app (routes added, not running) on its own thread and waits until
 * it serves. opts may be NULL. 0 and *out, or the code flare_app_run failed
 * with (flare_last_error() on this thread says why), FLARE_ETIMEDOUT (it
 * did not come up within 10 s), FLARE_ENOMEM, FLARE_ETHREAD. */
FLARE_API int flare_test_start(flare_app_t *app, const flare_test_opts_t *opts, flare_test_t **out);

/* Stops the app gracefully (flare_app_stop), waits for its run to return
 * and frees t (not the app). Returns what flare_app_run returned. NULL: 0. */
FLARE_API int flare_test_stop(flare_test_t *t);

/* The port the app serves on. */
FLARE_API int flare_test_port(const flare_test_t *t);

/* The cookies kept, as sent ("a=1; b=2"; "" when none). */
FLARE_API const char *flare_test_cookies(const flare_test_t *t);

/* Forgets every cookie kept. */
FLARE_API void flare_test_clear_cookies(flare_test_t *t);

/* A description of the last failure of a call on t ("" when none). */
FLARE_API const char *flare_test_error(const flare_test_t *t);

/* A request. Fields left zero take defaults. */
typedef struct flare_test_req {
    const char *method;         /* NULL: "GET" */
    const char *path;           /* "/todos?x=1"; required */
    const char *const *headers; /* "Name: value" strings, NULL-terminated; may be NULL */
    const void *body;           /* sent with Content-Length; NULL: none */
    size_t body_len;            /* bytes of body */
    bool close;                 /* send Connection: close (the next call reconnects) */
} flare_test_req_t;

/* An answer. Everything is owned by the response until flare_test_res_free:
 * names and values of headers are NUL-terminated, the body is too (a NUL
 * after body_len bytes; the body itself may contain NULs). */
typedef struct flare_test_res {
    int status;              /* the status code */
    flare_header_t *headers; /* in the order received */
    size_t nheaders;         /* entries in headers[] */
    char *body;              /* the body, NUL-terminated */
    size_t body_len;         /* its bytes (the NUL not counted) */
} flare_test_res_t;

/* Sends req on t's keep-alive connection (opened, or reopened after the app
 * closed it) and reads the whole answer into *res (zeroed first; free it
 * with flare_test_res_free even after a failure). Interim 1xx answers are
 * skipped. Like a browser, t keeps the cookies answers set (name=value;
 * Max-Age=0 or an empty value removes one; other attributes are ignored:
 * every cookie goes with every request) and sends them in a Cookie header,
 * unless req->headers has one or opts.no_cookies was set. */
FLARE_API int flare_test_request(flare_test_t *t, const flare_test_req_t *req,
                                 flare_test_res_t *res);

/* GET path, the answer into *res. */
FLARE_API int flare_test_get(flare_test_t *t, const char *path, flare_test_res_t *res);

/* method path with a JSON body (Content-Type: application/json); json may
 * be NULL for none. Extra headers as in flare_test_req_t (may be NULL). The
 * answer into *res. */
FLARE_API int flare_test_json(flare_test_t *t, const char *method, const char *path,
                              const char *json, const char *const *headers, flare_test_res_t *res);

/* The value of the first header of res named name (case-insensitive), NULL
 * when there is none. */
FLARE_API const char *flare_test_res_header(const flare_test_res_t *res, const char *name);

/* Parses the body of res as JSON: 0 and *doc (free it with flare_json_doc_free),
 * or FLARE_EINVAL (not JSON) / FLARE_ENOMEM. */
FLARE_API int flare_test_res_json(const flare_test_res_t *res, flare_json_doc_t **doc);

/* Frees what res holds and zeroes it (NULL, or an already freed one: no-op). */
FLARE_API void flare_test_res_free(flare_test_res_t *res);

/* ---- WebSocket ---- */

/* A WebSocket client connection to the app (opaque). */
typedef struct flare_test_ws flare_test_ws_t;

/* Opens a WebSocket to path (GET with the upgrade; headers as in
 * flare_test_req_t, e.g. "Origin: ..."). 0 and *out; an answer other than
 * 101 is FLARE_EIO with the status in flare_test_error, and *status (may
 * be NULL) set to it. */
FLARE_API int flare_test_ws_open(flare_test_t *t, const char *path, const char *const *headers,
                                 int *status, flare_test_ws_t **out);

/* Sends one text (or, when binary, binary) message of len bytes from data,
 * masked as a client must. */
FLARE_API int flare_test_ws_send(flare_test_ws_t *ws, bool binary, const void *data, size_t len);

/* Receives the next message (pings are answered on the way): 0 with *msg
 * (NUL-terminated; free() it), *len and *binary (may be NULL); FLARE_ECLOSED
 * when the server closed (flare_test_ws_close_code says with what);
 * FLARE_ETIMEDOUT; FLARE_EIO when the server broke the protocol. */
FLARE_API int flare_test_ws_recv(flare_test_ws_t *ws, char **msg, size_t *len, bool *binary);

/* The close code the server sent (0 until it closed). */
FLARE_API int flare_test_ws_close_code(const flare_test_ws_t *ws);

/* Sends a close (code 1000), waits briefly for the server's, and frees ws. */
FLARE_API void flare_test_ws_close(flare_test_ws_t *ws);

/* ---- server-sent events ---- */

/* An event stream from the app (opaque). */
typedef struct flare_test_sse flare_test_sse_t;

/* One event; its strings are owned by the stream until the next call. */
typedef struct flare_test_event {
    const char *id;    /* NULL when the event had no id field */
    const char *event; /* "message" when it had no event field */
    const char *data;  /* the data lines joined with "\n" */
} flare_test_event_t;

/* GETs path with Accept: text/event-stream (headers as in flare_test_req_t,
 * e.g. "Last-Event-ID: 7"). 0 and *out once a 200 text/event-stream answer
 * started; otherwise FLARE_EIO with *status (may be NULL) set. */
FLARE_API int flare_test_sse_open(flare_test_t *t, const char *path, const char *const *headers,
                                  int *status, flare_test_sse_t **out);

/* The next event into *ev (comments and retry fields are skipped): 0, FLARE_ECLOSED
 * at the end of the stream, FLARE_ETIMEDOUT. */
FLARE_API int flare_test_sse_next(flare_test_sse_t *s, flare_test_event_t *ev);

/* Closes the stream and frees s (NULL: no-op). */
FLARE_API void flare_test_sse_close(flare_test_sse_t *s);

#ifdef __cplusplus
}
#endif

#endif
