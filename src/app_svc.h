/* What the layers (web/, data/, obs/, ws/) ask of the app itself, without
 * its insides (app.h): handing it an object to free, and the gate through
 * which another thread reaches its workers. */
#ifndef FLARE_APP_SVC_H
#define FLARE_APP_SVC_H

#include "flare/flare.h"

/* Hands ptr to the app: free_fn(ptr) runs in flare_app_free. On failure
 * (out of memory) free_fn(ptr) runs at once and FLARE_ENOMEM is returned. */
int flare__app_own(flare_app_t *app, void *ptr, void (*free_fn)(void *ptr));

/* run.c: the window in which other threads may reach the workers (see
 * flare_app_t.gate). enter: 0, or FLARE_ESTATE when the workers are not up
 * (not started yet, or stopped); every 0 is paired with one leave. */
int flare__app_enter(flare_app_t *app);
void flare__app_leave(flare_app_t *app);

#endif
