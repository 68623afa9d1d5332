/* Flare: a fast web framework for Linux: HTTP/1.1 and HTTP/2 (h2 over TLS
 * through ALPN, h2c with prior knowledge; docs/http2.md), WebSocket, TLS.
 * This header includes every other header of include/flare/ but
 * flare/redis.h and flare/settings.h, which an app includes itself.
 *
 * Threads: flare_app_run() starts N worker threads, each with its own event
 * loop, listening socket (SO_REUSEPORT) and connections. A handler runs on
 * the worker that owns the connection; everything it is given belongs to
 * that worker and must only be touched from it (flare_worker_post() is the
 * one thread-safe way in).
 *
 * Lifetimes: everything reachable from a flare_req_t / flare_res_t (views
 * returned by flare_req_*, memory from flare_req_alloc) is valid until the
 * response has been sent (flare_res_send* or flare_res_end returned) — for
 * an asynchronous handler, until it sends. Copy what you need longer. */
#ifndef FLARE_FLARE_H
#define FLARE_FLARE_H

#include <stdbool.h>

#include "flare/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque handles: the app, a route group, a worker (one thread with its
 * event loop) and a request. */
typedef struct flare_app flare_app_t;
typedef struct flare_group flare_group_t;
typedef struct flare_worker flare_worker_t;
typedef struct flare_req flare_req_t;
/* A handler is given two handles to one exchange: the request it reads and
 * the response it produces. Distinct types, so swapping them is a compile
 * error; both live until the response completes. */
typedef struct flare_res flare_res_t;

/* A request handler. Returns 0 after it has sent the response, FLARE_ASYNC
 * when it will send later on the same worker, or a negative FLARE_E* code
 * (the client then gets a 500 if nothing was sent yet). */
typedef int (*flare_handler_fn)(flare_req_t *req, flare_res_t *res, void *ud);
typedef void (*flare_task_fn)(void *ud);

/* ---- configuration ------------------------------------------------------ */

/* The I/O backend each worker's loop uses (flare_config_t.io).
 * FLARE_IO_AUTO: io_uring when this process may use it (io_uring_setup is
 * allowed and the kernel has the requests Flare submits), else epoll; FLARE_IO
 * in the environment (auto, uring or epoll) decides instead when it is set.
 * The choice and its reason are logged once per run, at info level.
 * FLARE_IO_URING: the app does not start when io_uring cannot be used. */
typedef enum flare_io_backend {
    FLARE_IO_AUTO = 0, /* io_uring where this process may use it, else epoll */
    FLARE_IO_EPOLL,    /* epoll, level-triggered */
    FLARE_IO_URING,    /* io_uring; the run fails when it cannot be used */
} flare_io_backend_t;

/* The server's settings. A zero field means its default (in brackets), so a
 * zeroed struct, `(flare_config_t){ 0 }` or a designated initializer naming
 * only what differs, is a complete configuration. Values past the bound
 * after "<=" are refused by flare_app_new (FLARE_EINVAL, see there); every
 * timeout is <= INT_MAX ms (about 24.8 days). */
typedef struct flare_config {
    unsigned workers;           /* worker threads [0: number of CPUs], <= 1024 */
    unsigned max_conns;         /* per worker; beyond it new connections are closed [100000] */
    unsigned header_timeout_ms; /* first byte to complete head (408 and close) [10 s] */
    unsigned body_timeout_ms;   /* between body reads [30 s] */
    unsigned idle_timeout_ms;   /* keep-alive idle [60 s] */
    unsigned write_timeout_ms;  /* a write that makes no progress [30 s] */
    unsigned drain_timeout_ms;  /* graceful shutdown: in-flight requests get this long [10 s] */
    size_t max_request_line;    /* 414 past it [8 KiB], <= 1 GiB */
    size_t max_head;            /* 431 past it (request line + headers) [32 KiB], <= 1 GiB */
    size_t max_headers;         /* 431 past it [100], <= 65535 */
    size_t max_body;            /* 413 past it [1 MiB], <= 1 TiB (bodies are held in memory) */
    unsigned job_threads;       /* blocking-job pool size [4], <= 1024 */
    int backlog;                /* listen(2) backlog [4096], >= 0 (the kernel caps it at
                                   net.core.somaxconn) */
    bool mw_stats;              /* time every middleware hook (flare_app_mw_stats) [off] */
    /* request body bytes one connection may hold buffered at once, all its
     * HTTP/2 streams together [4 x max_body], <= 4 TiB; taken as max_body
     * when smaller. Past it the connection's flow-control window is not
     * given back until bodies are answered or their streams end
     * (docs/http2.md). HTTP/1.1 holds one body at a time: max_body. */
    size_t max_conn_body;
    /* flare_req_json / flare_req_bind parse a body whatever its Content-Type
     * says. Off [default]: a body must be labelled application/json or
     * TYPE/SUBTYPE+json (parameters allowed), else 415: a cross-origin
     * form or fetch can send text/plain or a form type without a CORS
     * preflight, and must not reach a JSON API that way. */
    bool json_any_content_type;
    /* the loop's I/O backend [FLARE_IO_AUTO: io_uring where it works, else epoll]
     * (docs/io_uring.md) */
    flare_io_backend_t io;
} flare_config_t;

/* Fills *cfg with the defaults: workers 0 (= CPUs), max_conns 100000,
 * header 10 s, body 30 s, idle 60 s, write 30 s, drain 10 s, request line
 * 8 KiB, head 32 KiB, 100 header fields, body 1 MiB, 4 job threads,
 * backlog 4096; max_conn_body stays 0 (4 x max_body, resolved by
 * flare_app_new). The same as a zeroed struct. */
FLARE_API void flare_config_init(flare_config_t *cfg);

/* ---- application lifecycle ---------------------------------------------- */

/* Creates an app with a copy of *cfg (NULL: the defaults); zero fields take
 * their defaults. Returns NULL when a field is out of range (see
 * flare_config_t) or on out of memory; flare_last_error() then says which,
 * naming the field: "flare_config_t.max_headers: 100000 is more than 65535". */
FLARE_API flare_app_t *flare_app_new(const flare_config_t *cfg);

/* Registers a route: requests with this method whose path matches pattern
 * go to fn (given ud). The pattern is copied: literal segments, `{name}`
 * parameters and a final `{*name}` wildcard ("/users/{id}", "/static/{*path}").
 * Must be called before flare_app_run. Returns 0 or FLARE_EPATTERN,
 * FLARE_EEXIST, FLARE_EINVAL, FLARE_ENOMEM, FLARE_ESTATE (app running);
 * every failure says why in flare_last_error() ("flare_route: route GET
 * \"/a//b\": empty segment (\"//\")").
 * HEAD requests reach the GET handler of the path when no HEAD route exists
 * (only the headers go out): a GET handler with side effects must check
 * flare_req_method(req) (or the side effect happens for HEAD too). The same
 * holds for flare_get and for GET routes added through a group. */
FLARE_API int flare_route(flare_app_t *app, flare_method_t method, const char *pattern,
                          flare_handler_fn fn, void *ud);
/* flare_route for one method (pattern, fn and ud as there). flare_get's
 * handler also answers HEAD (see
 * flare_route): check the method before a side effect. */
FLARE_API int flare_get(flare_app_t *app, const char *pattern, flare_handler_fn fn, void *ud);
FLARE_API int flare_post(flare_app_t *app, const char *pattern, flare_handler_fn fn, void *ud);
FLARE_API int flare_put(flare_app_t *app, const char *pattern, flare_handler_fn fn, void *ud);
FLARE_API int flare_patch(flare_app_t *app, const char *pattern, flare_handler_fn fn, void *ud);
FLARE_API int flare_delete(flare_app_t *app, const char *pattern, flare_handler_fn fn, void *ud);

/* A route group: every route added through it gets the prefix ("/api/v1";
 * it starts with '/', a trailing '/' is dropped). Groups nest. Owned by the
 * app (freed by flare_app_free). NULL on error, with the reason in
 * flare_last_error() (NULL app or prefix, a prefix without '/' first,
 * out of memory). */
FLARE_API flare_group_t *flare_group_new(flare_app_t *app, const char *prefix);
FLARE_API flare_group_t *flare_group_sub(flare_group_t *parent, const char *prefix);
/* As flare_route (method, fn, ud), for the group's prefix + pattern. pattern starts with '/'
 * ("/{id}" in group "/api/todos" is "/api/todos/{id}"), or is "" or "/" for
 * the group's root: the prefix itself ("/api/todos"; "/" for a group whose
 * prefix is "/"). "" and "/" are one route: "/api/todos/" (with the slash)
 * is reachable only from a parent group or flare_route. Same returns as
 * flare_route; FLARE_EINVAL for a NULL group or a pattern that is neither
 * empty nor starts with '/'. */
FLARE_API int flare_group_route(flare_group_t *g, flare_method_t method, const char *pattern,
                                flare_handler_fn fn, void *ud);

/* Binds listen, HOST:PORT (IPv4, "[v6]:port" or "*:port") or a unix socket
 * ("unix:/run/app.sock", with options "?mode=0660&owner=www-data&group=
 * www-data" for the file, names or numbers; "unix:@name" for the abstract
 * namespace). A unix socket is one socket that every worker accepts from;
 * a socket file left at the path by a process that died is replaced, one
 * a live server answers on is refused (FLARE_EBIND, EADDRINUSE), and the
 * file is removed when the run returns, except after an upgrade's hand-over
 * (the new process serves on it). Starts the workers and
 * blocks until SIGTERM/SIGINT or flare_app_stop(), then drains: stops
 * accepting, lets in-flight requests finish (their last response says
 * Connection: close) for up to drain_timeout_ms, and closes a keep-alive
 * connection once it has been idle for 250 ms. SIGUSR2 upgrades: the binary
 * at the same path is started again with the listening sockets, and once it
 * reports ready this process drains the same way and returns 0 (a new
 * binary that fails leaves it serving). Listening sockets inherited through
 * systemd's socket activation (LISTEN_FDS) are adopted instead of bound;
 * under systemd (NOTIFY_SOCKET) it reports READY=1, STOPPING=1 and the
 * watchdog. docs/operations.md. Returns 0 or a FLARE_E* code; on failure
 * flare_last_error() says which call failed and why, and flare_last_errno()
 * gives its errno (FLARE_EBIND with EADDRINUSE: the port is taken; with
 * EACCES: a privileged port).
 *
 * Signals: while it runs, SIGINT, SIGTERM and SIGUSR2 belong to the app. They are
 * blocked in the calling thread before any worker or job thread starts (the
 * threads inherit the mask) and read through a signalfd; a handler is also
 * installed for the whole process, so a thread started earlier that does not
 * block them cannot be killed by them either. The previous mask and
 * handlers are restored before it returns. SIGPIPE is ignored while it
 * runs.
 *
 * The workers are reachable from other threads (flare_app_post,
 * flare_worker_post, flare_ws_broadcast, flare_ws_send_to,
 * flare_app_mw_stats) from the moment all of them have started until all of
 * them have finished draining; before and after, those calls fail with
 * FLARE_ESTATE (or report zero counts) and never touch freed memory. An app
 * can run again after it returned. */
FLARE_API int flare_app_run(flare_app_t *app, const char *listen);

/* Asks the app to shut down gracefully: the run in progress, or, when
 * called before flare_app_run has started waiting, that run as soon as its
 * workers are up. Safe from any thread and from a signal handler, from
 * flare_app_new until flare_app_free. */
FLARE_API void flare_app_stop(flare_app_t *app);

/* Runs fn(ud) on worker `worker` (0 .. flare_app_workers() - 1) soon. Safe
 * from any thread at any time between flare_app_new and flare_app_free: 0,
 * FLARE_ESTATE when the workers are not up (see flare_app_run), FLARE_EINVAL
 * for a bad index, FLARE_ENOMEM. After 0, fn runs exactly once, even when
 * the app stops first (then on the thread that runs flare_app_run, as it
 * returns). */
FLARE_API int flare_app_post(flare_app_t *app, unsigned worker, flare_task_fn fn, void *ud);

/* Adds a reload hook: fn(ud) runs on the thread that runs flare_app_run
 * each time the app gets SIGHUP (see flare_app_run), after every hook added
 * before it (registration order), while the workers keep serving. A hook
 * reaches the workers only through the thread-safe calls (flare_app_post,
 * flare_app_tls_reload...). Hooks stay until flare_app_free, across runs.
 * Before flare_app_run or between runs: 0, FLARE_EINVAL (fn NULL),
 * FLARE_ESTATE (running), FLARE_ENOMEM. flare/settings.h's
 * flare_settings_watch adds one that re-reads the configuration file. */
FLARE_API int flare_app_on_reload(flare_app_t *app, flare_task_fn fn, void *ud);

/* The number of workers the app runs (or will run). */
FLARE_API unsigned flare_app_workers(const flare_app_t *app);

/* Worker i (0 .. flare_app_workers() - 1), or NULL when i is out of range
 * or the app has not run yet. The workers are made by the first
 * flare_app_run and kept until flare_app_free, so the pointer stays valid
 * that long; read it from a task running on the workers (flare_app_post) or
 * from the thread that ran the app. */
FLARE_API flare_worker_t *flare_app_worker(flare_app_t *app, unsigned i);

/* The port actually bound (useful with port 0), valid once running; 0 when
 * the first listener is a unix socket. */
FLARE_API int flare_app_port(const flare_app_t *app);

/* Frees the app and everything it owns. Not while running. */
FLARE_API void flare_app_free(flare_app_t *app);

/* ---- request -------------------------------------------------------------- */

/* The request method: its enum value (FLARE_METHOD_OTHER for a method
 * without one) and its name as sent ("GET", or an extension method). */
FLARE_API flare_method_t flare_req_method(const flare_req_t *req);
FLARE_API flare_str_t flare_req_method_str(const flare_req_t *req);
FLARE_API flare_str_t flare_req_target(const flare_req_t *req); /* as sent */
FLARE_API flare_str_t flare_req_path(const flare_req_t *req);   /* raw, without query */
FLARE_API flare_str_t flare_req_query(const flare_req_t *req);  /* raw, without '?' */

/* The protocol a request came in with: X(NAME, name as on the wire). The
 * values of a request's protocol, not of the connection's transport (see
 * flare_req_secure for TLS): an HTTP/2 request, over h2 or h2c, is
 * FLARE_PROTO_HTTP2 ("HTTP/2"). */
#define FLARE_PROTO_MAP(X) X(HTTP10, "HTTP/1.0") X(HTTP11, "HTTP/1.1") X(HTTP2, "HTTP/2")

/* clang-format off */
/* The protocol a request came over (the map above). */
typedef enum flare_proto {
#define FLARE_PROTO_ENUM(name, text) FLARE_PROTO_##name,
    FLARE_PROTO_MAP(FLARE_PROTO_ENUM)
#undef FLARE_PROTO_ENUM
    FLARE_PROTO_COUNT
} flare_proto_t;
/* clang-format on */

/* The request's protocol (FLARE_PROTO_HTTP11 for HTTP/1.1, and for 1.2 to
 * 1.9, which are answered as 1.1; FLARE_PROTO_HTTP2 for HTTP/2) and its
 * name ("HTTP/1.1", "HTTP/2": a static string). */
FLARE_API flare_proto_t flare_req_protocol(const flare_req_t *req);
FLARE_API flare_str_t flare_req_protocol_name(const flare_req_t *req);

/* True when the request came over TLS (an https:// listener). The
 * connection layer records it when it accepts the connection; false for a
 * plain TCP connection, and once the client has gone (as flare_req_peer). */
FLARE_API bool flare_req_secure(const flare_req_t *req);

/* Header value by name, case-insensitive; the first field if repeated.
 * .ptr == NULL when absent. _count / _at: all fields, field i of them
 * (NULL past the end). */
FLARE_API flare_str_t flare_req_header(const flare_req_t *req, const char *name);
FLARE_API size_t flare_req_header_count(const flare_req_t *req);
FLARE_API const flare_header_t *flare_req_header_at(const flare_req_t *req, size_t i);

/* Request trailers: fields the client sent after the body (HTTP/1.1: the
 * trailer section of a chunked body; HTTP/2: a HEADERS frame after the
 * DATA, ending the stream). They are kept apart from the header fields
 * and are never merged into them: flare_req_header, flare_req_cookie, the
 * session, CORS and request-id middlewares and the framing never see them,
 * so a Cookie or an Authorization sent as a trailer authenticates nothing.
 * Trusting a trailer is the handler's choice (a checksum computed as the
 * body was sent, say).
 *
 * flare_req_trailer: the value of the first trailer with that name
 * (case-insensitive); .ptr == NULL when there is none. _count / _at (trailer
 * i): all of them in the order sent (NULL past the end). Empty until the body has
 * ended: a buffered route's handler sees them at once (the body is read
 * whole first), a streaming route's (flare/body.h) from on_end with err 0
 * on. Names and values live in the request's arena: valid until the
 * response completes, like everything reached from req. At most
 * max_headers trailer fields are accepted (431 past it); the HTTP/1.1
 * trailer section is also bounded at 8 KiB (431), HTTP/2's by max_head
 * together with the head (431). Values are as sent, without the
 * surrounding whitespace HTTP/1.1 allows. */
FLARE_API flare_str_t flare_req_trailer(const flare_req_t *req, const char *name);
FLARE_API size_t flare_req_trailer_count(const flare_req_t *req);
FLARE_API const flare_header_t *flare_req_trailer_at(const flare_req_t *req, size_t i);

/* Path parameter `name` of the matched route, percent-decoded (decoding happens in
 * the request arena only when the raw value contains '%'). .ptr == NULL when
 * the route has no such parameter. */
FLARE_API flare_str_t flare_req_param(flare_req_t *req, const char *name);

/* First query parameter with that key (name), percent-decoded ('+' is a space):
 * flare_form_get (flare/form.h) on the query, decoding into the request
 * arena, so the same rules hold (empty pieces skipped, "=v" has the key "",
 * "k" alone has the value "", at most FLARE_FORM_MAX_PAIRS pairs looked at).
 * .ptr == NULL when absent; an empty value is {"", 0}. */
FLARE_API flare_str_t flare_req_query_param(flare_req_t *req, const char *name);

/* The whole request body (Content-Length or de-chunked): the server reads it
 * completely, up to max_body, before calling the handler. */
FLARE_API flare_str_t flare_req_body(const flare_req_t *req);

/* size bytes of request-scoped memory from the request's arena, 16-byte
 * aligned; freed
 * when the response completes. NULL on out of memory. */
FLARE_API void *flare_req_alloc(flare_req_t *req, size_t size);

/* Runs fn(ud) when the exchange ends (response sent or connection lost).
 * Hooks run in reverse order of registration. */
FLARE_API int flare_req_on_cleanup(flare_req_t *req, flare_task_fn fn, void *ud);

/* Runs fn(ud) once if the exchange loses its client before it ends (the
 * connection closed, the HTTP/2 stream was reset), on the worker's thread,
 * from inside the connection's close: fn must not answer or end the
 * exchange itself, only arrange for the work it waits on to stop (a timer,
 * flare_client_req_t.req does this for an upstream call). The handler still
 * answers (the answer goes nowhere) and the cleanups still run. Not run at
 * a normal end. 0, FLARE_EINVAL, FLARE_ECLOSED (the client is gone already),
 * FLARE_ENOMEM. */
FLARE_API int flare_req_on_abort(flare_req_t *req, flare_task_fn fn, void *ud);

/* Per-request attributes: a middleware sets, a handler reads. Typed: a
 * missing key or a value of another type is a plain "not found"
 * (FLARE_ENOTFOUND / NULL), never an error path. Keys and string values are copied into the
 * request arena; pointers (ptr) are stored as given, tagged with `type` (compared
 * by address, so use a static string per type). Setting a key again
 * replaces it. The getters return 0 and set *out when found. Valid until the response
 * completes. */
FLARE_API int flare_req_set_str(flare_req_t *req, const char *key, flare_str_t value);
FLARE_API int flare_req_set_int(flare_req_t *req, const char *key, int64_t value);
FLARE_API int flare_req_set_ptr(flare_req_t *req, const char *key, const char *type, void *ptr);
FLARE_API int flare_req_get_str(const flare_req_t *req, const char *key, flare_str_t *out);
FLARE_API int flare_req_get_int(const flare_req_t *req, const char *key, int64_t *out);
FLARE_API void *flare_req_get_ptr(const flare_req_t *req, const char *key, const char *type);

/* The client's address as text ("192.0.2.1", "2001:db8::1") in the request
 * arena, and its raw form: family AF_INET or AF_INET6 returned, 4 or 16 bytes
 * in addr. A
 * client of a unix socket listener has no address: "unix:" (a static
 * string), and AF_UNIX with 16 zero bytes. */
FLARE_API flare_str_t flare_req_peer(flare_req_t *req);
FLARE_API int flare_req_peer_raw(const flare_req_t *req, uint8_t addr[16]);

/* The worker that owns this request. */
FLARE_API flare_worker_t *flare_req_worker(const flare_req_t *req);

/* False once the client has gone (an async handler may stop early). */
FLARE_API bool flare_req_connected(const flare_req_t *req);

/* ---- response ------------------------------------------------------------- */

/* Adds a response header before the response is sent. Name and value are
 * copied; CR, LF and NUL are rejected (FLARE_EINVAL) so no header injection
 * is possible; name must be a token. Content-Length, Transfer-Encoding,
 * Date and Connection are managed by Flare (FLARE_EINVAL). */
FLARE_API int flare_res_header(flare_res_t *res, flare_str_t name, flare_str_t value);

/* Sends a complete response: status, content_type (len 0: none) and a body
 * that is copied. For HEAD requests only the headers go out. Returns 0, or
 * FLARE_ESTATE if a response was already sent; when the client has gone
 * this is a no-op that returns 0 and releases the exchange. */
FLARE_API int flare_res_send(flare_res_t *res, int status, flare_str_t content_type,
                             flare_str_t body);

/* Sends a redirect: status 301, 302, 303, 307 or 308, a Location header
 * with `location` (copied; a path "/todos" or an absolute URL, sent as
 * given: escape it yourself) and a short text/plain body naming it (HEAD:
 * headers only). Headers added before with flare_res_header go out too.
 * 303 after a form POST (the browser follows with GET); 307/308 keep the
 * method and body, 301/302 let browsers turn a POST into a GET. Returns
 * what flare_res_send returns, or FLARE_EINVAL (another status, an empty
 * location, one holding CR, LF, NUL or another control byte: no header
 * injection), with the reason in flare_last_error(); nothing is sent then,
 * so the handler can still answer. */
FLARE_API int flare_res_redirect(flare_res_t *res, int status, flare_str_t location);

/* Like flare_res_send (status, content_type), but the body is referenced, not copied: it must stay
 * valid until release(ud) is called (after it has been written or the
 * connection dropped). release may be NULL for static data. */
FLARE_API int flare_res_send_ref(flare_res_t *res, int status, flare_str_t content_type,
                                 flare_str_t body, flare_task_fn release, void *ud);

/* Sends len bytes of the open file fd from offset off as the body, with
 * status and content_type as for flare_res_send (HEAD: headers only). Takes fd in every case: it is
 * closed once the bytes are written, the connection drops, or on error. Small files are read into
 * the response (one write with the head); larger ones go out with sendfile(2), after the responses
 * queued before them. FLARE_EIO when the file is shorter than promised. See flare/static.h for
 * serving a directory. */
FLARE_API int flare_res_sendfile(flare_res_t *res, int status, flare_str_t content_type, int fd,
                                 uint64_t off, uint64_t len);

/* Streaming with chunked transfer coding for bodies of unknown length:
 * begin (status, content_type), write data any number of times, end.
 * flare_res_write copies data and returns 0 once it is queued (also when
 * the client reads slowly: see backpressure below), FLARE_ESTATE outside
 * begin..end, FLARE_ENOMEM. */
FLARE_API int flare_res_begin(flare_res_t *res, int status, flare_str_t content_type);
FLARE_API int flare_res_write(flare_res_t *res, flare_str_t data);
FLARE_API int flare_res_end(flare_res_t *res);

/* Backpressure of a streamed response, the idiom shared with WebSocket
 * (flare_ws_backpressured) and SSE (flare_sse_backpressured): writes always
 * queue; flare_res_backpressured turns true after a flare_res_write that
 * left more than the high-water mark waiting for the client, and false
 * again when that has fallen to half the mark, at which point the drain
 * callback (if any) is called once, from the worker's loop, never from
 * inside a flare_res_* call. A producer that can wait (a file, a database
 * cursor, a generator) stops writing while it is true and resumes from the
 * callback:
 *
 *   static void more(flare_res_t *res, void *ud)
 *   {
 *       struct job *j = ud;
 *       while (j->left > 0 && !flare_res_backpressured(res))
 *           flare_res_write(res, next_piece(j));
 *       if (j->left == 0)
 *           flare_res_end(res);
 *   }
 *   ... in the handler: flare_res_begin(...); flare_res_on_drain(res, 0, more, j);
 *       more(res, j); return FLARE_ASYNC;
 *
 * If the client goes away the callback is not called (writes become no-ops
 * and flare_req_connected() turns false; end the response then). */

/* The default high-water mark of a streamed response (bytes). */
#define FLARE_RES_HIGH_WATER (64u * 1024)

/* Called once each time a backpressured streamed response has drained to
 * half its high-water mark. */
typedef void (*flare_res_drain_fn)(flare_res_t *res, void *ud);

/* True while the streamed response is backpressured (see above). */
FLARE_API bool flare_res_backpressured(const flare_res_t *res);

/* Sets the high-water mark high_water (0: FLARE_RES_HIGH_WATER) and the drain callback
 * fn(res, ud) (NULL: none, the predicate alone) of this response; call it
 * again to change them. Any time before the response is complete; the
 * settings last as long as the response. 0, FLARE_ESTATE (the response is
 * complete), FLARE_ENOMEM. */
FLARE_API int flare_res_on_drain(flare_res_t *res, size_t high_water, flare_res_drain_fn fn,
                                 void *ud);

/* Asks for the connection to be closed after this response. */
FLARE_API void flare_res_close(flare_res_t *res);

/* ---- middleware ------------------------------------------------------------ */

/* A `before` hook runs ahead of the handler. It returns 0 to pass the
 * request on; it may instead answer itself (flare_res_send...) and return 0,
 * which stops the chain; or return FLARE_ASYNC and later, on the same
 * worker, either answer or call flare_next(req) to resume the chain. A
 * negative code answers 500. */
typedef int (*flare_before_fn)(flare_req_t *req, flare_res_t *res, void *ud);

/* An `after` hook runs once a response exists and before its head is
 * written: it may change the status (flare_res_set_status) and add headers
 * (flare_res_header). After hooks run in reverse order (the outermost
 * middleware last), only for middlewares whose `before` ran. */
typedef void (*flare_after_fn)(flare_req_t *req, flare_res_t *res, void *ud);

/* A middleware: its name and hooks, and the ud they are given. */
typedef struct flare_middleware {
    const char *name;       /* for statistics; copied */
    flare_before_fn before; /* may be NULL */
    flare_after_fn after;   /* may be NULL */
    void *ud;               /* given to both hooks */
} flare_middleware_t;

/* Adds a middleware to every request of the app (also to 404/405 and
 * automatic OPTIONS answers), to every route of a group (and its
 * sub-groups), or to one route. Order: app, then outer group to inner
 * group, then route, each in registration order. *mw is copied.
 * flare_route_mw registers a route as flare_route (method, pattern, fn,
 * ud) with its own middlewares mws[0 .. nmws). Before
 * flare_app_run only. 0 or FLARE_EINVAL (NULL argument, a middleware with
 * neither hook) / FLARE_ENOMEM / FLARE_ESTATE, with the reason in
 * flare_last_error(). */
FLARE_API int flare_use(flare_app_t *app, const flare_middleware_t *mw);
FLARE_API int flare_group_use(flare_group_t *g, const flare_middleware_t *mw);
FLARE_API int flare_route_mw(flare_app_t *app, flare_method_t method, const char *pattern,
                             flare_handler_fn fn, void *ud, const flare_middleware_t *mws,
                             size_t nmws);

/* Resumes a chain paused by a `before` hook that returned FLARE_ASYNC.
 * Call on the request's worker. A no-op when the client has gone. */
FLARE_API void flare_next(flare_req_t *req);

/* Status of the response being produced (in an after hook), 0 before. */
FLARE_API int flare_res_status(const flare_res_t *res);
/* Changes the status from an after hook. FLARE_ESTATE once the head is out. */
FLARE_API int flare_res_set_status(flare_res_t *res, int status);

/* Per-middleware timing, summed over workers when read. Collected only when
 * flare_config_t.mw_stats is set (two clock reads per hook otherwise
 * saved). */
typedef struct flare_mw_stats {
    const char *name;  /* the middleware's name */
    uint64_t count;    /* hooks run */
    uint64_t total_ns; /* nanoseconds spent in them */
    uint64_t max_ns;   /* the longest run, nanoseconds */
} flare_mw_stats_t;

/* Fills out with up to `max` entries (one per registered middleware, in registration
 * order), returns how many middlewares exist. Safe from any thread; counts
 * are summed while the workers are up (figures from other workers may be a
 * moment old) and are zero outside that window. */
FLARE_API size_t flare_app_mw_stats(flare_app_t *app, flare_mw_stats_t *out, size_t max);

/* ---- workers, timers, jobs ------------------------------------------------ */

/* Runs fn(ud) once on worker w after `ms` milliseconds: the one-shot
 * convenience, with no handle to stop it (flare_timer_new in flare/loop.h
 * makes one that can be stopped and re-armed). Call from w's thread only.
 * If w stops first, the timer is cancelled: fn is not called, so ud must
 * not be the only reference to something that needs releasing (a response
 * is fine: the worker frees exchanges left unanswered at shutdown).
 * Returns 0 or FLARE_EINVAL / FLARE_ENOMEM. */
FLARE_API int flare_worker_timer(flare_worker_t *w, uint64_t ms, flare_task_fn fn, void *ud);

/* Runs fn(ud) on worker w's thread soon. Safe from any thread while the
 * workers are up (see flare_app_run); before and after, FLARE_ESTATE. A
 * worker pointer stays valid until flare_app_free (also across runs), so a
 * late call fails cleanly. After 0, fn runs exactly once, as with
 * flare_app_post. 0 or FLARE_EINVAL / FLARE_ESTATE / FLARE_ENOMEM. */
FLARE_API int flare_worker_post(flare_worker_t *w, flare_task_fn fn, void *ud);

/* Runs work(ud) on the blocking-job pool, then done(ud) back on worker w.
 * Call from w's thread. */
FLARE_API int flare_worker_job(flare_worker_t *w, flare_task_fn work, flare_task_fn done, void *ud);

/* Index of the worker (0..N-1). */
FLARE_API unsigned flare_worker_id(const flare_worker_t *w);

#ifdef __cplusplus
}
#endif

/* The rest of the public API, so that one include is enough; but
 * flare/redis.h and flare/settings.h: they include session.h (settings.h
 * also static.h and ws.h), and those include this file, so including them
 * here would break a file that includes session.h, static.h or ws.h
 * first. */
#include "flare/body.h"
#include "flare/channel.h"
#include "flare/client.h"
#include "flare/cluster.h"
#include "flare/compress.h"
#include "flare/cookie.h"
#include "flare/db.h"
#include "flare/form.h"
#include "flare/json.h"
#include "flare/log.h"
#include "flare/loop.h"
#include "flare/mapping.h"
#include "flare/metrics.h"
#include "flare/middleware.h"
#include "flare/multipart.h"
#include "flare/openapi.h"
#include "flare/rest.h"
#include "flare/session.h"
#include "flare/sse.h"
#include "flare/static.h"
#include "flare/tls.h"
#include "flare/ws.h"
#endif
