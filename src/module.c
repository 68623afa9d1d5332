/* Module registration and the lifecycle hooks (module.h). */
#include "module.h"

#include "app.h"
#include "app_svc.h"
#include "worker.h"

int flare__app_module(flare_app_t *app, const flare_module_t *m, void *state, unsigned *slot)
{
    if (app == NULL || m == NULL)
        return FLARE_EINVAL;
    if (atomic_load(&app->running))
        return FLARE_ESTATE;
    for (unsigned i = 0; i < app->nmodules; i++) {
        if (app->modules[i].m == m)
            return FLARE_EEXIST;
    }
    if (app->nmodules == FLARE__MODULES_MAX)
        return FLARE_ETOOBIG;
    app->modules[app->nmodules] = (struct flare_module_reg){ m, state };
    *slot = app->nmodules++;
    return 0;
}

bool flare__app_running(const flare_app_t *app)
{
    return atomic_load(&app->running);
}

int flare__app_module_replace(flare_app_t *app, const flare_module_t *m, void *state)
{
    if (atomic_load(&app->running))
        return FLARE_ESTATE;
    for (unsigned i = 0; i < app->nmodules; i++) {
        if (app->modules[i].m == m) {
            app->modules[i].state = state;
            return 0;
        }
    }
    return FLARE_ENOTFOUND;
}

const flare_config_t *flare__app_config(const flare_app_t *app)
{
    return &app->cfg;
}

unsigned flare__app_nworkers(const flare_app_t *app)
{
    return app->workers != NULL ? app->nworkers : 0;
}

bool flare__app_stopping(const flare_app_t *app)
{
    return atomic_load_explicit(&app->stopping, memory_order_relaxed);
}

void *flare__app_module_state(const flare_app_t *app, const flare_module_t *m)
{
    for (unsigned i = 0; i < app->nmodules; i++) {
        if (app->modules[i].m == m)
            return app->modules[i].state;
    }
    return NULL;
}

void *flare__worker_module_state(const flare_worker_t *w, unsigned slot)
{
    return w->module_state[slot];
}

void flare__worker_module_set(flare_worker_t *w, unsigned slot, void *state)
{
    w->module_state[slot] = state;
}

void flare__worker_conn_hold(flare_worker_t *w)
{
    w->nmodule_conns++;
}

void flare__worker_conn_release(flare_worker_t *w)
{
    w->nmodule_conns--;
    w->loop.deferred = true; /* a draining worker may stop now */
}

int flare__modules_init_worker(flare_worker_t *w)
{
    const flare_app_t *app = w->app;
    for (unsigned i = 0; i < app->nmodules; i++) {
        const struct flare_module_reg *r = &app->modules[i];
        if (r->m->init_worker != NULL) {
            int rc = r->m->init_worker(w, r->state);
            if (rc != 0)
                return flare__fail(rc, 0, "module %s: worker %u: %s", r->m->name, w->id,
                                   flare_strerror(rc));
        }
        w->nmodules_up = i + 1;
    }
    return 0;
}

void flare__modules_drain_worker(flare_worker_t *w)
{
    const flare_app_t *app = w->app;
    for (unsigned i = 0; i < w->nmodules_up; i++) {
        const struct flare_module_reg *r = &app->modules[i];
        if (r->m->drain_worker != NULL)
            r->m->drain_worker(w, r->state);
    }
}

void flare__modules_dispose_worker(flare_worker_t *w)
{
    const flare_app_t *app = w->app;
    while (w->nmodules_up > 0) {
        const struct flare_module_reg *r = &app->modules[--w->nmodules_up];
        if (r->m->dispose_worker != NULL)
            r->m->dispose_worker(w, r->state);
    }
}

void flare__modules_free_app(flare_app_t *app)
{
    while (app->nmodules > 0) {
        const struct flare_module_reg *r = &app->modules[--app->nmodules];
        if (r->m->free_app != NULL)
            r->m->free_app(app, r->state);
    }
}
