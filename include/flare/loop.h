/* Timers and file-descriptor watchers on a worker's event loop.
 *
 * Both are handles (opaque, heap-allocated, paired _new/_free) that belong
 * to one worker and are used only on that worker's thread: from a handler,
 * a middleware, a WebSocket callback, or a task run there by
 * flare_app_post / flare_worker_post / flare_worker_timer. They let code
 * that waits on something other than HTTP (a database driver, the user's
 * own async client, a pipe from another thread) live on the same loop as
 * the connections, without a thread of its own.
 *
 * Lifetime, for both kinds:
 * - A handle lives from _new until _free, or until its worker stops,
 *   whichever comes first. Freeing is always safe on the worker's thread,
 *   also from the handle's own callback.
 * - When the worker stops (flare_app_stop, after the drain), every handle
 *   not yet freed is stopped and freed by the worker, without calling its
 *   callback: from then on the pointer is dangling and must not be used,
 *   not even by a task that runs during shutdown. Nothing leaks and nothing
 *   is freed twice; what `ud` points to stays the caller's to release
 *   (after flare_app_run returns, for state that lives as long as the app).
 * - Creating a handle while the worker is not running (before
 *   flare_app_run has started it, or during its shutdown) fails with
 *   FLARE_ESTATE.
 *
 * flare_worker_timer (flare.h) remains the one-shot convenience without a
 * handle; like these timers it is cancelled, not fired, when the worker
 * stops. */
#ifndef FLARE_LOOP_H_PUBLIC
#define FLARE_LOOP_H_PUBLIC

#include <stdbool.h>
#include <stdint.h>

#include "flare/flare.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- timers ---- */

/* A timer on a worker (opaque). */
typedef struct flare_timer flare_timer_t;

/* Makes a stopped timer on worker w that will run fn(ud) each time it
 * expires. *out is set on success. 0, or FLARE_EINVAL (NULL w, fn or out),
 * FLARE_ESTATE (w not running), FLARE_ENOMEM. */
FLARE_API int flare_timer_new(flare_worker_t *w, flare_task_fn fn, void *ud, flare_timer_t **out);

/* Arms t to fire once, `ms` milliseconds from the loop's current time (a
 * delay too large for the clock means "never"). Starting an armed timer
 * moves its deadline. fn may start t again (a periodic timer re-arms
 * itself). Never allocates. 0 or FLARE_EINVAL (t NULL). */
FLARE_API int flare_timer_start(flare_timer_t *t, uint64_t ms);

/* Disarms t: it does not fire, even when its deadline has already passed
 * in this loop iteration. A no-op on a stopped timer or NULL. */
FLARE_API void flare_timer_stop(flare_timer_t *t);

/* Whether t is armed. */
FLARE_API bool flare_timer_active(const flare_timer_t *t);

/* Stops and frees t (NULL: no-op); t is invalid afterwards. Safe from t's
 * own callback. */
FLARE_API void flare_timer_free(flare_timer_t *t);

/* ---- file-descriptor watchers ---- */

/* Interest (flare_watch_new, flare_watch_set) and readiness (the callback).
 * ERROR and HUP are only reported: they can arrive whatever the interest,
 * except with interest 0, which stops watching the descriptor altogether. */
#define FLARE_WATCH_READ  0x001u
#define FLARE_WATCH_WRITE 0x004u
#define FLARE_WATCH_ERROR 0x008u
#define FLARE_WATCH_HUP   0x010u

/* A watcher of a file descriptor on a worker (opaque). */
typedef struct flare_watch flare_watch_t;

/* Called on the worker's thread while fd is ready: `events` holds the
 * FLARE_WATCH_* bits that are, within the interest plus ERROR/HUP. The
 * loop is level-triggered: a callback that does not consume the readiness
 * (read until EAGAIN, or change the interest) is called again on the next
 * iteration. It may call flare_watch_set and flare_watch_free on wt, and
 * on any other watcher. */
typedef void (*flare_watch_fn)(flare_watch_t *wt, unsigned events, void *ud);

/* Watches fd, which should be non-blocking, on worker w for `events`
 * (FLARE_WATCH_READ | FLARE_WATCH_WRITE, or 0 to start paused). The fd
 * stays the caller's: the watcher never closes it; free the watcher before
 * closing the fd. One watcher per fd per worker. *out is set on success.
 * 0, or FLARE_EINVAL (NULL w, cb or out, fd < 0, unknown event bits),
 * FLARE_ESTATE (w not running), FLARE_ENOMEM, FLARE_ESYS (the fd cannot be
 * watched, e.g. a regular file; flare_last_error() says why). */
FLARE_API int flare_watch_new(flare_worker_t *w, int fd, unsigned events, flare_watch_fn cb,
                              void *ud, flare_watch_t **out);

/* Changes the interest to events (0 pauses: no callback at all until it is set
 * again). No system call when it is unchanged. 0, or FLARE_EINVAL (NULL,
 * unknown bits), FLARE_ESYS. */
FLARE_API int flare_watch_set(flare_watch_t *wt, unsigned events);

/* The current interest. */
FLARE_API unsigned flare_watch_events(const flare_watch_t *wt);

/* The descriptor being watched. */
FLARE_API int flare_watch_fd(const flare_watch_t *wt);

/* Stops watching and frees wt (NULL: no-op); wt is invalid afterwards and
 * its callback is not called again, even for readiness already collected
 * in this loop iteration (the memory is released after the iteration).
 * Safe from wt's own callback. The fd is left open. */
FLARE_API void flare_watch_free(flare_watch_t *wt);

#ifdef __cplusplus
}
#endif

#endif
