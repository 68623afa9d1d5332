/* Flare: common definitions shared by every public header.
 *
 * Strings are views: flare_str_t never owns its bytes and is never assumed
 * to be NUL-terminated.
 *
 * Return values: one convention for every public function.
 *   - A call that can fail returns int: 0 on success or a negative FLARE_E*
 *     code (flare_strerror() turns it into text). Results come back through
 *     out-parameters, never as a positive return.
 *   - Iterators (flare_form_next, flare_form_find, flare_form_next_decoded,
 *     flare_cookie_next, flare_json_val_next) are calls like any other: 0
 *     with the next item in the out-parameters, FLARE_EEND when there is
 *     none left, or another negative code on an error:
 *         while ((rc = flare_form_next(&it, &key, &value)) == 0)
 *             ...;
 *         if (rc != FLARE_EEND)
 *             return rc;
 *   - A call that cannot fail may return its value directly: a predicate
 *     returns bool (flare_str_eq, flare_req_secure, flare_ws_backpressured),
 *     an accessor returns the view, handle, size or count it reads (an empty
 *     view or NULL when there is none), and a call with nothing to report
 *     returns void. A constructor returns its new object, or NULL when it
 *     failed (flare_app_new, flare_group_new, flare_req_alloc; the cause in
 *     flare_last_error() where documented).
 *   - FLARE_ASYNC (positive, never an error) is a return of request
 *     handlers and middleware `before` hooks only: "I will finish later, on
 *     this worker". No library function returns it.
 *   - Backpressure (WebSocket sends, SSE sends, flare_res_write) follows one
 *     idiom: the send queues the data and returns 0; when the bytes waiting
 *     for the client pass the high-water mark, the handle's *_backpressured()
 *     predicate turns true until the output falls to half the mark, when the
 *     drain callback (flare_ws_config_t.on_drain, flare_sse_config_t.on_drain,
 *     flare_res_on_drain) is called once. Slow down while it is true. */
#ifndef FLARE_COMMON_H
#define FLARE_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FLARE_BUILDING) && defined(__GNUC__)
/* Marks a public function: exported from the library when it is built. */
#define FLARE_API __attribute__((visibility("default")))
#else
/* Marks a public function (nothing to do outside the library's build). */
#define FLARE_API
#endif

/* A view of bytes owned by someone else. */
typedef struct flare_str {
    const char *ptr; /* the first byte; may be NULL when len is 0 */
    size_t len;      /* bytes, no NUL counted */
} flare_str_t;

/* A view of a string literal (its length without the NUL), and the empty
 * view {NULL, 0}. */
#define FLARE_STR(lit) ((flare_str_t){ (lit), sizeof(lit) - 1 })
#define FLARE_STR_NULL ((flare_str_t){ NULL, 0 })

/* A view of cstr, a NUL-terminated string (NULL: the empty view {NULL, 0}). */
static inline flare_str_t flare_str(const char *cstr)
{
    flare_str_t s = { cstr, cstr != NULL ? strlen(cstr) : 0 };
    return s;
}

/* True when a and b hold the same bytes (case-sensitive). */
static inline bool flare_str_eq(flare_str_t a, flare_str_t b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

/* True when a and b hold the same bytes up to ASCII case (header names,
 * tokens). */
FLARE_API bool flare_str_ieq(flare_str_t a, flare_str_t b);

/* Error codes: one table generates the enum and the messages.
 * X(NAME, value, message) */
#define FLARE_ERRNO_MAP(X)                                          \
    X(NOMEM, -1, "out of memory")                                   \
    X(INVAL, -2, "invalid argument")                                \
    X(EXIST, -3, "already exists")                                  \
    X(NOTFOUND, -4, "not found")                                    \
    X(STATE, -5, "operation not allowed in the current state")      \
    X(ADDR, -6, "cannot parse listen address (expected HOST:PORT)") \
    X(BIND, -7, "cannot bind or listen on the address")             \
    X(SYS, -8, "system call failed")                                \
    X(CLOSED, -9, "connection closed")                              \
    X(TOOBIG, -10, "size limit exceeded")                           \
    X(PATTERN, -11, "invalid route pattern")                        \
    X(THREAD, -12, "cannot start a thread")                         \
    X(IO, -13, "input/output error")                                \
    X(TLS, -14, "TLS error")                                        \
    X(DB, -15, "database error")                                    \
    X(UNAVAIL, -16, "service unavailable")                          \
    X(TIMEDOUT, -17, "timed out")                                   \
    X(END, -18, "end of sequence")                                  \
    X(CANCELED, -19, "cancelled")

enum {
    FLARE_OK = 0,
#define FLARE_ERRNO_ENUM(name, val, msg) FLARE_E##name = (val),
    FLARE_ERRNO_MAP(FLARE_ERRNO_ENUM)
#undef FLARE_ERRNO_ENUM
};

/* Returned by a request handler or a middleware `before` hook that will
 * finish later, on the same worker (it answers, or calls flare_next, from a
 * callback of that worker). Not an error and not in the error enum: no
 * library function returns it. Its value stays 1. */
#define FLARE_ASYNC 1

/* Text for a FLARE_E* code (or 0). Never NULL; static storage. */
FLARE_API const char *flare_strerror(int code);

/* The cause of the last failure of a call documented to record one
 * (flare_app_new, flare_app_run, ...) on the calling thread: a message that
 * names the system call, the field or the address and why, for example
 * "bind 127.0.0.1:8080: Address already in use" or
 * "flare_config_t.max_headers: 100000 is more than 65535". "" when nothing
 * failed yet. Thread-local, like errno: valid until the next recorded
 * failure on this thread. Never NULL. */
FLARE_API const char *flare_last_error(void);

/* The errno of the system call behind the last recorded failure on this
 * thread (EADDRINUSE, EACCES, EMFILE...), or 0 when it was not a system call
 * (a bad argument, out of memory in Flare itself). */
FLARE_API int flare_last_errno(void);

/* Request methods: one table generates the enum and the names. */
#define FLARE_METHOD_MAP(X) \
    X(GET) X(HEAD) X(POST) X(PUT) X(DELETE) X(CONNECT) X(OPTIONS) X(TRACE) X(PATCH)

/* clang-format off */
/* The request methods Flare knows (FLARE_METHOD_OTHER: any other). */
typedef enum flare_method {
    FLARE_METHOD_OTHER = 0,
#define FLARE_METHOD_ENUM(m) FLARE_METHOD_##m,
    FLARE_METHOD_MAP(FLARE_METHOD_ENUM)
#undef FLARE_METHOD_ENUM
    FLARE_METHOD_COUNT
} flare_method_t;
/* clang-format on */

/* Name of method m ("GET"), or "" for FLARE_METHOD_OTHER. */
FLARE_API flare_str_t flare_method_name(flare_method_t m);

/* Status codes: X(code, NAME, reason phrase). */
#define FLARE_STATUS_MAP(X)                                                    \
    X(100, CONTINUE, "Continue")                                               \
    X(101, SWITCHING_PROTOCOLS, "Switching Protocols")                         \
    X(200, OK, "OK")                                                           \
    X(201, CREATED, "Created")                                                 \
    X(202, ACCEPTED, "Accepted")                                               \
    X(204, NO_CONTENT, "No Content")                                           \
    X(206, PARTIAL_CONTENT, "Partial Content")                                 \
    X(301, MOVED_PERMANENTLY, "Moved Permanently")                             \
    X(302, FOUND, "Found")                                                     \
    X(303, SEE_OTHER, "See Other")                                             \
    X(304, NOT_MODIFIED, "Not Modified")                                       \
    X(307, TEMPORARY_REDIRECT, "Temporary Redirect")                           \
    X(308, PERMANENT_REDIRECT, "Permanent Redirect")                           \
    X(400, BAD_REQUEST, "Bad Request")                                         \
    X(401, UNAUTHORIZED, "Unauthorized")                                       \
    X(403, FORBIDDEN, "Forbidden")                                             \
    X(404, NOT_FOUND, "Not Found")                                             \
    X(405, METHOD_NOT_ALLOWED, "Method Not Allowed")                           \
    X(406, NOT_ACCEPTABLE, "Not Acceptable")                                   \
    X(408, REQUEST_TIMEOUT, "Request Timeout")                                 \
    X(409, CONFLICT, "Conflict")                                               \
    X(410, GONE, "Gone")                                                       \
    X(411, LENGTH_REQUIRED, "Length Required")                                 \
    X(412, PRECONDITION_FAILED, "Precondition Failed")                         \
    X(413, CONTENT_TOO_LARGE, "Content Too Large")                             \
    X(414, URI_TOO_LONG, "URI Too Long")                                       \
    X(415, UNSUPPORTED_MEDIA_TYPE, "Unsupported Media Type")                   \
    X(416, RANGE_NOT_SATISFIABLE, "Range Not Satisfiable")                     \
    X(417, EXPECTATION_FAILED, "Expectation Failed")                           \
    X(422, UNPROCESSABLE_CONTENT, "Unprocessable Content")                     \
    X(426, UPGRADE_REQUIRED, "Upgrade Required")                               \
    X(429, TOO_MANY_REQUESTS, "Too Many Requests")                             \
    X(431, REQUEST_HEADER_FIELDS_TOO_LARGE, "Request Header Fields Too Large") \
    X(500, INTERNAL_SERVER_ERROR, "Internal Server Error")                     \
    X(501, NOT_IMPLEMENTED, "Not Implemented")                                 \
    X(502, BAD_GATEWAY, "Bad Gateway")                                         \
    X(503, SERVICE_UNAVAILABLE, "Service Unavailable")                         \
    X(504, GATEWAY_TIMEOUT, "Gateway Timeout")                                 \
    X(505, HTTP_VERSION_NOT_SUPPORTED, "HTTP Version Not Supported")

enum {
#define FLARE_STATUS_ENUM(code, name, reason) FLARE_STATUS_##name = (code),
    FLARE_STATUS_MAP(FLARE_STATUS_ENUM)
#undef FLARE_STATUS_ENUM
};

/* Reason phrase for a status code; "Unknown" for codes not in the table. */
FLARE_API flare_str_t flare_status_reason(int status);

/* An allocator: returns n bytes aligned for any type, or NULL when out of
 * memory. Whoever supplies it owns and releases the memory (for the request
 * arena: when the response completes); Flare never frees it. An adapter for
 * a request is one line:
 *     static void *req_alloc(void *req, size_t n) { return flare_req_alloc(req, n); } */
typedef void *(*flare_alloc_fn)(void *ctx, size_t n);

/* One header field: views. */
typedef struct flare_header {
    flare_str_t name;  /* the field's name */
    flare_str_t value; /* the field's value */
} flare_header_t;

#ifdef __cplusplus
}
#endif
#endif
