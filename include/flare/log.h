/* Flare: the error/application log and the access log (docs/logging.md).
 *
 * Asynchronous: every worker formats its lines into its own bounded ring
 * buffer (one producer, the worker; one consumer, the log's writer thread;
 * no lock), and the writer thread drains all of them to the files (or
 * stderr, stdout) in batched writes. A worker never waits for the disk:
 * when its ring is full the line is dropped and counted
 * (flare_log_dropped), and the writer logs "N lines dropped" once a second
 * while that happens. Everything in the rings is written before
 * flare_app_run returns.
 *
 * Lines carry a timestamp (UTC, milliseconds), the level, the worker and,
 * for flare_req_log and the access log, the request's id: the one the
 * request-id middleware set (flare_request_id), else one made per exchange
 * (16 hex digits, unique per process). */
#ifndef FLARE_LOG_H
#define FLARE_LOG_H

#include <stdint.h>

#include "flare/flare.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most severe first: a line is written when its level <= the configured one. */
typedef enum {
    FLARE_LOG_ERROR,
    FLARE_LOG_WARN,
    FLARE_LOG_INFO,
    FLARE_LOG_DEBUG,
} flare_log_level_t;

/* Line formats of the error log. */
enum {
    FLARE_LOG_TEXT = 0, /* 2026-12-02T05:40:15.123Z info w0 req=... message */
    FLARE_LOG_JSON = 1, /* {"ts":"...","level":"info","worker":0,"request_id":"...","msg":"..."} */
};

/* Line formats of the access log. */
enum {
    FLARE_ACCESS_COMBINED = 0, /* nginx's combined, then "request id" and duration in µs */
    FLARE_ACCESS_JSON = 1,     /* one object per line (docs/logging.md) */
};

/* "error", "warn", "info", "debug" -> *out: 0, or FLARE_EINVAL (s NULL or
 * another word; *out unchanged). */
FLARE_API int flare_log_level_parse(const char *s, flare_log_level_t *out);
/* "error", ... for a level lvl; "?" for a value outside the enum. */
FLARE_API const char *flare_log_level_name(flare_log_level_t lvl);

/* What flare_log_setup takes. A zeroed struct is the default: error log to
 * stderr at level error, text lines, no access log, 1 MiB rings. */
typedef struct flare_log_config {
    const char *path;        /* error log file, opened O_APPEND; NULL or "-": stderr */
    flare_log_level_t level; /* [FLARE_LOG_ERROR] */
    int format;              /* FLARE_LOG_TEXT | FLARE_LOG_JSON [TEXT] */
    const char *access_path; /* access log file, "-": stdout; NULL: no access log */
    int access_format;       /* FLARE_ACCESS_COMBINED | FLARE_ACCESS_JSON [COMBINED] */
    size_t ring_bytes;       /* per worker and per log, rounded up to a power of two,
                                4 KiB .. 1 GiB [1 MiB] */
    void *reserved[4];       /* zero: room to grow without changing the struct's size */
} flare_log_config_t;

/* Sets up logging for app as cfg says, before flare_app_run (or between
 * runs): the strings are copied, the files are opened now (so an unwritable path fails
 * here, with flare_last_error() naming it). Calling it again replaces the
 * configuration. 0, FLARE_EINVAL (a field out of range), FLARE_ESYS (a file
 * cannot be opened), FLARE_ESTATE (the app is running), FLARE_ENOMEM. The
 * state is freed with the app. */
FLARE_API int flare_log_setup(flare_app_t *app, const flare_log_config_t *cfg);

/* Logs one line at level lvl (fmt: a printf format; a message longer than about 4 KiB is cut).
 * w is the calling worker (on its own thread, lock-free, never blocks) or
 * NULL from any other thread (a mutex-protected shared ring; before the
 * run starts or after it ends, written at once). Control bytes in the
 * message are escaped, so one call is always one line. A no-op when
 * logging is not set up or lvl is above the current level. */
FLARE_API void flare_log(flare_worker_t *w, flare_log_level_t lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same (lvl, fmt) for app, from any thread that is not a worker
 * (w == NULL). */
FLARE_API void flare_app_log(flare_app_t *app, flare_log_level_t lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* flare_log (lvl, fmt) on the request's worker, with the request's id in
 * the line.
 * Call on the request's worker while the request is valid. */
FLARE_API void flare_req_log(flare_req_t *req, flare_log_level_t lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Reopens both files (logrotate's postrotate, SIGHUP): from any thread. The
 * new descriptors are opened here (so a failure is returned: FLARE_ESYS,
 * and the old files stay in use); the writer switches to them between two
 * batches, so no line is lost or split. Files are created mode 0640 (less
 * the umask): they hold client addresses and request targets. 0 when
 * logging goes to stderr/stdout or is not set up. */
FLARE_API int flare_log_reopen(flare_app_t *app);

/* flare_log_reopen with new names (a reload that moved the logs): path for
 * the error log, access_path for the access log; NULL keeps that log's
 * name (the file is reopened all the same), "-" is stderr for the error
 * log and stdout for the access log. The names are copied. From any
 * thread, also while the app runs; lines are switched over as with
 * flare_log_reopen. The access log is not turned on or off here (its rings
 * exist from the run's start): FLARE_ESTATE when access_path is given and
 * flare_log_setup had none, or when logging is not set up. On failure
 * (also FLARE_ESYS naming the file, FLARE_EINVAL for "", FLARE_ENOMEM)
 * nothing changes. */
FLARE_API int flare_log_reopen_as(flare_app_t *app, const char *path, const char *access_path);

/* Changes the level to lvl, from any thread (takes effect at once on every worker). */
FLARE_API void flare_log_set_level(flare_app_t *app, flare_log_level_t lvl);
FLARE_API flare_log_level_t flare_log_get_level(const flare_app_t *app);

/* Lines dropped because a ring was full, since flare_log_setup (both logs). */
FLARE_API uint64_t flare_log_dropped(const flare_app_t *app);

#ifdef __cplusplus
}
#endif

#endif
