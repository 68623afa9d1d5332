/* What the layers (web/, data/, obs/, ws/) ask of the app itself, without
 * its insides (app.h): handing it an object to free, the gate through
 * which another thread reaches its workers, and the few facts of the app's
 * listeners and routes they read. Only the lifecycle's files (app.c,
 * listeners.c, run.c, worker.c, ...) and the hot path that reads the app's
 * limits include app.h; what a module asks of the app is in module.h, the
 * configuration's resolution in config.h. */
#ifndef FLARE_APP_SVC_H
#define FLARE_APP_SVC_H

#include <stdbool.h>

#include "flare/flare.h"

/* module.c: the app's resolved configuration (every default filled in),
 * valid until flare_app_free; from any thread (it changes only while the
 * app is not running). */
const flare_config_t *flare__app_config(const flare_app_t *app);

/* Hands ptr to the app: free_fn(ptr) runs in flare_app_free. On failure
 * (out of memory) free_fn(ptr) runs at once and FLARE_ENOMEM is returned. */
int flare__app_own(flare_app_t *app, void *ptr, void (*free_fn)(void *ptr));

/* gate.c: the window in which other threads may reach the workers (see
 * flare_app_t.gate). enter: 0, or FLARE_ESTATE when the workers are not up
 * (not started yet, or stopped); every 0 is paired with one leave. */
int flare__app_enter(flare_app_t *app);
void flare__app_leave(flare_app_t *app);

/* listeners.c: whether one of the app's listeners is an admin listener. */
bool flare__app_has_admin(const flare_app_t *app);

/* app.c: the app a group belongs to. */
flare_app_t *flare__group_app(const flare_group_t *g);

/* app.c: whether a route with this method and full pattern is registered
 * (before flare_app_run or between runs). */
bool flare__app_has_route(const flare_app_t *app, flare_method_t method, const char *pattern);

#endif
