/* Module hooks: how a layer that is not part of every app (WebSocket, TLS,
 * the data layer, metrics) takes part in the lifecycle without fields of its
 * own in the core structs (nginx's ngx_module_t init_process/exit_process).
 *
 * A module registers once per app, with its app-wide state, and gets a slot;
 * each worker keeps one state pointer per slot, which the module reads and
 * sets on that worker's thread. */
#ifndef FLARE_MODULE_H
#define FLARE_MODULE_H

#include <stdbool.h>

#include "flare/flare.h"

/* Every hook may be NULL. `state` is what the module registered with. */
typedef struct flare_module {
    const char *name;
    /* Each run, for each worker, as the run sets the worker up: on the
     * thread that runs flare_app_run, before the worker's thread starts (its
     * loop exists: timers may be armed on it). Called in registration order.
     * 0, or a negative FLARE_E* code that fails the run (the modules whose
     * init ran then get dispose_worker). */
    int (*init_worker)(flare_worker_t *w, void *state);
    /* On the worker's thread when it starts draining (stop requested), after
     * the HTTP connections were told to finish: start closing gracefully.
     * The worker stops once it has no connection left, its own or the ones
     * modules hold (flare__worker_conn_hold), or at the drain deadline.
     * Registration order. */
    void (*drain_worker)(flare_worker_t *w, void *state);
    /* Once per run for every worker whose init_worker succeeded (or that has
     * none): on the worker's thread when its loop has ended and its HTTP
     * connections are closed, before the handles the user left are freed;
     * on the thread running flare_app_run for a worker whose thread never
     * ran. Frees the per-worker state (close what is still open, with no
     * callbacks that reach other workers). Reverse registration order. */
    void (*dispose_worker)(flare_worker_t *w, void *state);
    /* In flare_app_free: frees `state`. Reverse registration order. */
    void (*free_app)(flare_app_t *app, void *state);
} flare_module_t;

/* Registers module m (not copied: it must outlive the app; typically a
 * static const) with its app-wide state, before flare_app_run or between
 * runs. *slot gets the index of its per-worker state. 0, FLARE_EEXIST (m is
 * already registered), FLARE_ESTATE (running), FLARE_ETOOBIG (more than
 * FLARE__MODULES_MAX modules, worker.h). On failure nothing is kept: the caller still
 * owns state. */
int flare__app_module(flare_app_t *app, const flare_module_t *m, void *state, unsigned *slot);

/* Replaces the app-wide state module m was registered with (a second
 * setup of the same module keeps its slot). 0, FLARE_ESTATE (running),
 * FLARE_ENOTFOUND (m is not registered); the caller frees the old state. */
int flare__app_module_replace(flare_app_t *app, const flare_module_t *m, void *state);

/* Whether the calling thread is w's (a module's per-worker state is that
 * thread's alone: an entry point taking a worker checks it). */
bool flare__worker_on_thread(const flare_worker_t *w);

/* The state m was registered with, NULL when it is not. From any thread:
 * the table is written only while the app is not running. */
void *flare__app_module_state(const flare_app_t *app, const flare_module_t *m);

/* Whether flare_app_run is between its start and its return (any thread). */
bool flare__app_running(const flare_app_t *app);

/* module.c: the workers the first run made (0 before it; the same count
 * until flare_app_free), unlike flare_app_workers, which counts the workers
 * a run will make. flare_app_worker(app, i) is worker i. */
unsigned flare__app_nworkers(const flare_app_t *app);

/* module.c: whether a stop or an upgrade's hand-over has begun (relaxed:
 * a hint for readiness, any thread). */
bool flare__app_stopping(const flare_app_t *app);

/* Worker w's state for a slot (NULL until the module sets it), on w's thread. */
void *flare__worker_module_state(const flare_worker_t *w, unsigned slot);
void flare__worker_module_set(flare_worker_t *w, unsigned slot, void *state);

/* A connection that a module owns (an upgraded WebSocket): counted so that
 * draining waits for it as for the HTTP ones. Release when it closes. */
void flare__worker_conn_hold(flare_worker_t *w);
void flare__worker_conn_release(flare_worker_t *w);

/* The hooks of every registered module, for one worker (init stops at the
 * first failure and returns it) and for the app: what worker.c and app.c
 * call. */
int flare__modules_init_worker(flare_worker_t *w);
void flare__modules_drain_worker(flare_worker_t *w);
void flare__modules_dispose_worker(flare_worker_t *w); /* once: later calls do nothing */
void flare__modules_free_app(flare_app_t *app);

#endif
