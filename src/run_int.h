/* What flare_app_run (run.c) takes from the app's other files: the steps
 * of a run that worker.c, listeners.c, gate.c and app.c own. Nothing
 * outside those five files includes this. */
#ifndef FLARE_RUN_INT_H
#define FLARE_RUN_INT_H

#include <stdbool.h>

#include "flare/flare.h"

/* ---- worker.c ---- */

/* The first run makes the workers; later runs reuse them (same count), so a
 * worker pointer stays valid until flare_app_free. 0 or FLARE_ENOMEM. */
int flare__workers_alloc(flare_app_t *app);

/* One run's worker: listeners, loop, timers, EMFILE reserve, the modules'
 * init_worker. *inited is set once its loop exists (flare__worker_dispose
 * must then dispose it), even when a later step fails. */
int flare__worker_setup(flare_worker_t *w, bool *inited);

/* A worker's thread (arg: the worker): runs its loop until the drain ends,
 * then closes what is left. */
void *flare__worker_main(void *arg);

/* Closes what a run opened for w; `inited`: its loop exists. */
void flare__worker_dispose(flare_worker_t *w, bool inited);

/* ---- listeners.c ---- */

/* This run's listeners (listen_addr, when given, first), each probed,
 * adopted or bound before any thread starts; 0, or the error with
 * flare_last_error() set. */
int flare__listeners_begin(flare_app_t *app, const char *listen_addr);

/* The run's end for its listeners. `handover`: an upgrade's new process
 * holds the sockets; `served`: this run's workers ran. */
void flare__listeners_end(flare_app_t *app, bool handover, bool served);

/* ---- gate.c ---- */

/* After every worker has started: what they are is now visible to whoever
 * enters (the release pairs with flare__app_enter's acquire). */
void flare__app_gate_open(flare_app_t *app);

/* No caller enters from now on; waits for those inside (each holds it for a
 * post or a sum of counters: microseconds) before anything is freed. */
void flare__app_gate_close(flare_app_t *app);

/* ---- app.c ---- */

/* Runs the hooks flare_app_on_reload registered, in registration order. */
void flare__app_reload_hooks_run(flare_app_t *app);

#endif
