/* Metrics, health and status: Prometheus text exposition (format 0.0.4),
 * liveness and readiness endpoints, and a live status page.
 *
 *     flare_metrics_route(app, "/metrics");
 *     flare_health_routes(app, NULL, NULL);      // /healthz, /readyz
 *     flare_status_route(app, "/status");        // HTML page + /status?json
 *
 * Counting: every worker counts into its own block (no atomic read-modify-
 * write, no lock, nothing shared between workers on the request path); a
 * scrape sums the blocks. Counts are exact. Counting is on once any of
 * flare_metrics_route, flare_status_route or flare_metrics_enable has been
 * called; an app without them pays one pointer test per request.
 *
 * Every function here is called before flare_app_run (or between runs)
 * unless it says otherwise; they return 0 or a negative FLARE_E* code, with
 * flare_last_error() saying why. */
#ifndef FLARE_METRICS_H
#define FLARE_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "flare/flare.h"

#ifdef __cplusplus
extern "C" {
#endif

struct flare_db;

/* ---- the exposition ---------------------------------------------------- */

/* Turns counting on (without a route: for an app that reads the figures
 * through its own handler or flare_metrics_render). 0, FLARE_ESTATE
 * (running), FLARE_ENOMEM. Idempotent. */
FLARE_API int flare_metrics_enable(flare_app_t *app);

/* GET path answers the Prometheus text format 0.0.4 (Content-Type:
 * text/plain; version=0.0.4; charset=utf-8) with the built-in series (see
 * docs/metrics.md), the user's metrics and what the collectors write.
 * path is copied. 0, FLARE_EINVAL, FLARE_ESTATE, FLARE_EEXIST (route taken),
 * FLARE_ENOMEM. */
FLARE_API int flare_metrics_route(flare_app_t *app, const char *path);

/* Renders the exposition into a malloc'd NUL-terminated string (*out, the
 * caller frees it; *len without the NUL). From any thread while the app
 * exists; counts of other workers may be a moment old. 0, FLARE_EINVAL,
 * FLARE_ESTATE (counting is off), FLARE_ENOMEM. */
FLARE_API int flare_metrics_render(flare_app_t *app, char **out, size_t *len);

/* ---- collectors: extra series written at scrape time ------------------- */

/* What a collector writes its series through (opaque). */
typedef struct flare_metrics_writer flare_metrics_writer_t;

/* Called at every scrape (on the scraping thread: a worker, or the caller
 * of flare_metrics_render); writes series through the calls below. It must
 * not block. */
typedef void (*flare_metrics_collect_fn)(flare_metrics_writer_t *mw, void *ud);

/* Adds a collector (called in registration order, after the built-in
 * series). 0, FLARE_EINVAL (fn NULL), FLARE_ESTATE, FLARE_ENOMEM. */
FLARE_API int flare_metrics_collector(flare_app_t *app, flare_metrics_collect_fn fn, void *ud);

/* Starts a family: "# HELP name help" and "# TYPE name type", type one of
 * "counter", "gauge", "histogram", "summary", "untyped". Help is escaped.
 * FLARE_EINVAL for a malformed name or an unknown type (nothing written). */
FLARE_API int flare_metrics_family(flare_metrics_writer_t *mw, const char *name, const char *type,
                                   const char *help);

/* One sample line: name{labels} value. labels: NULL, or name/value pairs
 * ending with NULL ({"method", "GET", NULL}); values are escaped (\\, \",
 * \n). Integers print exactly up to 2^53. FLARE_EINVAL for a malformed
 * metric or label name (nothing written). */
FLARE_API int flare_metrics_sample(flare_metrics_writer_t *mw, const char *name,
                                   const char *const *labels, double value);

/* ---- user metrics --------------------------------------------------------- */

/* One series: a name and a fixed label set. Several handles may share a
 * name (same type and help) with different label values: one family. Owned
 * by the app, valid until flare_app_free. */
typedef struct flare_metric flare_metric_t;

/* Registers a counter / a gauge / a histogram series. name:
 * [a-zA-Z_:][a-zA-Z0-9_:]*, not starting with "flare_" or "process_"
 * (built-in); labels as for flare_metrics_sample (copied), label names
 * [a-zA-Z_][a-zA-Z0-9_]*, not "le" or starting with "__". Histogram bounds:
 * nbounds > 0 finite values in increasing order (copied; +Inf is implied).
 * 0 and *out, or FLARE_EINVAL (bad name, label, bounds; the same name with
 * another type, help or bounds), FLARE_EEXIST (same name and labels),
 * FLARE_ESTATE (running), FLARE_ENOMEM. Turns counting on. */
FLARE_API int flare_metrics_counter(flare_app_t *app, const char *name, const char *help,
                                    const char *const *labels, flare_metric_t **out);
FLARE_API int flare_metrics_gauge(flare_app_t *app, const char *name, const char *help,
                                  const char *const *labels, flare_metric_t **out);
FLARE_API int flare_metrics_histogram(flare_app_t *app, const char *name, const char *help,
                                      const char *const *labels, const double *bounds,
                                      size_t nbounds, flare_metric_t **out);

/* On worker w's thread (a handler: flare_req_worker(req)): adds n to
 * counter m, delta to gauge m, or observes v in histogram m, in w's
 * share, summed at scrape. No lock, no shared write. A NULL or wrong-type
 * handle, or a NULL worker, is ignored. A gauge's value is the sum of every
 * worker's adds (a connection count: +1 on open, -1 on close). */
FLARE_API void flare_counter_add(flare_worker_t *w, flare_metric_t *m, uint64_t n);
FLARE_API void flare_gauge_add(flare_worker_t *w, flare_metric_t *m, int64_t delta);
FLARE_API void flare_histogram_observe(flare_worker_t *w, flare_metric_t *m, double v);

/* Exposes a database's statistics (flare_db_stats) as flare_db_* series
 * labelled {db="<driver>"} and registers the readiness check "db"
 * (at least one pooled connection up). 0, FLARE_EINVAL, FLARE_ESTATE,
 * FLARE_ENOMEM. */
FLARE_API int flare_metrics_db(flare_app_t *app, struct flare_db *db);

/* ---- health ---------------------------------------------------------------- */

/* GET healthz (NULL: "/healthz"): 200 {"status":"ok","pid":N,...} while
 * the process serves. GET readyz (NULL: "/readyz"): 200 {"status":"ready"}
 * when listening, not draining and every check passes; 503 otherwise, the
 * body naming the reason ("draining") or the failing check. From the
 * moment a stop is requested (SIGTERM, flare_app_stop) every /readyz still
 * answered is a 503, one pipelined behind a request in flight too (it is
 * answered once the request before it is done). Paths are copied. 0,
 * FLARE_EINVAL, FLARE_ESTATE, FLARE_EEXIST, FLARE_ENOMEM. */
FLARE_API int flare_health_routes(flare_app_t *app, const char *healthz, const char *readyz);

/* A readiness check: fn(ud) on the worker answering /readyz, at each
 * request; false makes /readyz answer 503 naming it. It must be quick and
 * not block (read a flag, a statistic). name is copied. 0, FLARE_EINVAL,
 * FLARE_ESTATE, FLARE_ENOMEM. */
FLARE_API int flare_health_check(flare_app_t *app, const char *name, bool (*fn)(void *ud),
                                 void *ud);

/* ---- status page ------------------------------------------------------------ */

/* GET path: a self-contained HTML page (inline SVG and script, nothing
 * fetched from elsewhere) that polls path?json every second and draws
 * requests/s, latency percentiles, connections and a per-route table.
 * GET path?json: the same counters as JSON. Turns counting on. 0,
 * FLARE_EINVAL, FLARE_ESTATE, FLARE_EEXIST, FLARE_ENOMEM. */
FLARE_API int flare_status_route(flare_app_t *app, const char *path);

/* Options of the status page. A zeroed struct (or NULL) is the default:
 * the page alone, as flare_status_route serves it. */
typedef struct flare_status_opts {
    /* a "← back" link to this URL above the page's title [NULL: none] */
    const char *back_href;
    /* HTML added at the end of the page's <head>: the site's stylesheet,
     * icon or script (a navigation bar), so the page looks like the rest
     * of the site; it must keep the page usable [NULL: none] */
    const char *head_html;
} flare_status_opts_t;

/* flare_status_route at path with options (copied; opts may be NULL).
 * Same errors. */
FLARE_API int flare_status_route_opts(flare_app_t *app, const char *path,
                                      const flare_status_opts_t *opts);

/* ---- the admin listener -------------------------------------------------- */

/* Adds a plain listening address addr (HOST:PORT, as flare_app_listen) for the
 * operational routes: once an app has one, the routes of
 * flare_metrics_route, flare_health_routes and flare_status_route answer
 * only on it, and 404 on every other listener (a load balancer or a
 * scraper reaches them on a private address; the public one does not show
 * them). Without one, they answer on every listener. The app's other
 * routes answer on it as well: bind it where only operators reach it
 * ("127.0.0.1:9100", an internal interface). Checked by those routes'
 * handlers: other requests pay nothing. One per app; before flare_app_run.
 * 0, FLARE_EINVAL, FLARE_EADDR, FLARE_EEXIST (the app has one already),
 * FLARE_ESTATE (running), FLARE_ENOMEM. The settings key admin-listen
 * (flare/settings.h) calls it. */
FLARE_API int flare_app_admin_listen(flare_app_t *app, const char *addr);

/* The port the admin listener is bound to while the app runs (useful with
 * port 0); 0 without one or before it is bound. */
FLARE_API int flare_app_admin_port(const flare_app_t *app);

#ifdef __cplusplus
}
#endif

#endif
