/* Metrics, internal: the app-wide state of the metrics module (the
 * workers' blocks, user metrics, collectors, readiness checks), shared by
 * metrics.c, expose.c, health.c and status.c. */
#ifndef FLARE_OBS_METRICS_APP_H
#define FLARE_OBS_METRICS_APP_H

#include "obs/metrics.h"

enum { FLARE__M_COUNTER, FLARE__M_GAUGE, FLARE__M_HISTOGRAM };

struct flare_metric {
    struct flare_metric *next;
    int type;
    char *name, *help;
    char **labels; /* name, value pairs */
    size_t nlabels;
    double *bounds;
    size_t nbounds;
    size_t cell; /* first cell in each worker's user array */
};

/* A worker's block and what drives its sampling. */
typedef struct flare_mblock {
    flare_metrics_w_t m; /* first: w->metrics points here */
    flare__timer_t timer;
    flare_worker_t *w;
    size_t nhist; /* cells in m.hist */
} flare_mblock_t;

typedef struct flare_metrics_collector {
    flare_metrics_collect_fn fn;
    void *ud;
} flare_metrics_collector_t;

typedef struct flare_health_check {
    char *name;
    bool (*fn)(void *ud);
    void *ud;
} flare_health_check_t;

/* A status page (status.c), made at registration with its options; the
 * route's ud. */
typedef struct flare_status_page {
    struct flare_status_page *next;
    flare_app_t *app;
    size_t len;
    char html[];
} flare_status_page_t;

struct flare_metrics_app {
    flare_app_t *app;
    bool counting; /* workers get blocks */
    double start_time;
    flare_mblock_t **blocks; /* by worker id */
    unsigned nblocks;
    flare_metric_t *metrics; /* registration order */
    size_t nuser_cells;
    flare_metrics_collector_t *collectors;
    size_t ncollectors;
    flare_health_check_t *checks;
    size_t nchecks;
    struct flare_db **dbs; /* flare_metrics_db: not owned */
    size_t ndbs;
    flare_status_page_t *status_pages; /* owned */
};

bool flare__metrics_name_ok(const char *s);

/* health.c: whether an operational route (metrics, status, health) must
 * not answer this request: the app has an admin listener and the request
 * came on another one. The route's handler then answers 404, as for a
 * path without routes. Asked only by those handlers. */
bool flare__admin_elsewhere(const flare_req_t *req);
bool flare__metrics_label_ok(const char *s);

#endif
