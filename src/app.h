/* The app object: what app.c, listeners.c, worker.c and run.c (the
 * lifecycle) wire together (the listeners, the module table, the job pool)
 * and the few files that read its insides. A worker is worker.h; what
 * the other layers ask of the app is app_svc.h. */
#ifndef FLARE_APP_H
#define FLARE_APP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "flare/flare.h"
#include "http/head.h"
#include "worker.h"
#include "mw/chain.h"
#include "net/listen.h"

struct flare_module;
struct flare_req;
struct flare_router;

typedef struct flare_job_pool flare_job_pool_t;

typedef struct flare_owned {
    struct flare_owned *next;
    void *ptr;
    void (*free_fn)(void *ptr);
} flare_owned_t;

struct flare_app {
    flare_config_t cfg;
    flare_http_limits_t limits;
    struct flare_router *router;
    struct flare_route **routes; /* owned route records */
    size_t nroutes, caproutes;
    struct flare_group *groups;
    struct flare_worker *workers; /* made by the first run, freed with the app */
    unsigned nworkers;
    flare_listener_t *listeners; /* added by flare_app_listen (owned) */
    unsigned nlisteners;
    flare_listener_t run_listener; /* the address flare_app_run was given */
    bool has_admin;                /* one of listeners is an admin listener */
    uint8_t io_backend;            /* this run's loop backend (loop/backend.h), run.c */
    _Atomic bool run_addr_used;    /* this run has it (listener 0) */
    flare_listener_t **active;     /* this run's listeners, run_listener first if used */
    unsigned nactive;
    _Atomic int port;     /* 0 until the listeners of the current run are bound */
    _Atomic bool running; /* flare_app_run is between its start and its return */
    /* set (relaxed) before the drain is posted to the workers: a stop or an
     * upgrade's hand-over has begun */
    _Atomic bool stopping;
    /* Other threads reach the workers only through flare__app_enter/leave:
     * the top bit says the workers are up (from the moment every worker has
     * started until all of them have been joined), the rest counts callers
     * inside. Closing it waits for them to leave before anything is freed. */
    _Atomic uint64_t gate;
    int stop_fd; /* eventfd, from flare_app_new to flare_app_free: stop -> run */
    flare_job_pool_t *jobs;
    flare_mw_list_t mws; /* app-level middlewares (also the chain of unmatched requests) */
    bool mws_have_after;
    /* the chain's last step for a request no route matched (mw/chain.c),
     * set by flare__chains_build */
    int (*unmatched)(struct flare_req *ex);
    char **mw_names; /* by middleware id */
    /* the modules (module.h: WebSocket, ...) in registration order, with
     * their app-wide state; written only while the app is not running */
    struct flare_module_reg {
        const struct flare_module *m;
        void *state;
    } modules[FLARE__MODULES_MAX];
    unsigned nmodules;
    struct flare_owned *owned; /* objects freed with the app (middleware state) */
    unsigned nmw;
    /* flare_app_on_reload: run on SIGHUP by the thread in flare_app_run,
     * in registration order; written only while the app is not running */
    struct flare_reload_hook *reload_hooks; /* defined in app.c */
    struct flare_reload_hook **reload_tail;
};

/* job pool */
int flare__jobs_start(flare_app_t *app);
void flare__jobs_stop(flare_app_t *app);
/* jobs waiting for a thread (metrics), on a worker while the pool runs */
size_t flare__jobs_queued(flare_app_t *app);

#endif
