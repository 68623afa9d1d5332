/* The gate: the window in which threads other than a worker's may reach
 * the workers (flare_app_t.gate). run.c opens it once every worker has
 * started and closes it before they are joined; the layers (web/, ws/,
 * obs/) and the worker services enter and leave around each post or sum of
 * counters. Below every caller: it calls nothing. */
#include <sched.h>

#include "app.h"
#include "app_svc.h"
#include "run_int.h"

#define GATE_OPEN ((uint64_t)1 << 63)

int flare__app_enter(flare_app_t *app)
{
    uint64_t v = atomic_fetch_add_explicit(&app->gate, 1, memory_order_acquire);
    if (v & GATE_OPEN)
        return 0;
    atomic_fetch_sub_explicit(&app->gate, 1, memory_order_release);
    return FLARE_ESTATE;
}

void flare__app_leave(flare_app_t *app)
{
    atomic_fetch_sub_explicit(&app->gate, 1, memory_order_release);
}

void flare__app_gate_open(flare_app_t *app)
{
    atomic_fetch_or_explicit(&app->gate, GATE_OPEN, memory_order_release);
}

void flare__app_gate_close(flare_app_t *app)
{
    atomic_fetch_and_explicit(&app->gate, ~GATE_OPEN, memory_order_acq_rel);
    while ((atomic_load_explicit(&app->gate, memory_order_acquire) & ~GATE_OPEN) != 0)
        sched_yield();
}
