/* Liveness and readiness: /healthz and /readyz, and the readiness checks.
 *
 * Draining: the thread that asks the workers to stop sets app->stopping
 * before it posts the drain to them, so a /readyz answered on any worker
 * from then on is a 503 even when that worker has not run its drain yet;
 * the worker's own flag covers the time after. A /readyz pipelined behind a
 * request still in flight is answered when that request is done (so the
 * answer is the state at the time it is sent, not when it was read). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app_svc.h"
#include "module.h"
#include "net/conn.h"
#include "net/listen.h"
#include "http/exchange.h"
#include "http/svc.h"
#include "obs/metrics_app.h"

bool flare__admin_elsewhere(const flare_req_t *req)
{
    const struct flare_req *ex = req;
    if (!flare__app_has_admin(ex->worker->app))
        return false;
    return ex->conn == NULL || !flare__conn_admin(ex->conn);
}

int flare_health_check(flare_app_t *app, const char *name, bool (*fn)(void *ud), void *ud)
{
    if (app == NULL || name == NULL || *name == '\0' || fn == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_health_check: app, name or fn missing");
    if (flare__app_running(app))
        return flare__fail(FLARE_ESTATE, 0, "flare_health_check: the app is running");
    flare_metrics_app_t *ma = flare__metrics_app(app, true);
    if (ma == NULL)
        return FLARE_ENOMEM;
    flare_health_check_t *v = realloc(ma->checks, (ma->nchecks + 1) * sizeof(*v));
    if (v == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_health_check: out of memory");
    ma->checks = v;
    char *n = strdup(name);
    if (n == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_health_check: out of memory");
    v[ma->nchecks++] = (flare_health_check_t){ n, fn, ud };
    return 0;
}

bool flare__health_ready(flare_worker_t *w, const char **why)
{
    flare_app_t *app = w->app;
    if (flare__app_stopping(app) || w->draining) {
        *why = "draining";
        return false;
    }
    if (flare_app_port(app) == 0) {
        *why = "not listening";
        return false;
    }
    flare_metrics_app_t *ma = flare__metrics_app(app, false);
    for (size_t i = 0; ma != NULL && i < ma->nchecks; i++) {
        if (!ma->checks[i].fn(ma->checks[i].ud)) {
            *why = ma->checks[i].name;
            return false;
        }
    }
    return true;
}

/* JSON string body: only the check names come from outside; escape them. */
static size_t json_str(char *out, size_t cap, const char *s)
{
    size_t n = 0;
    for (; *s != '\0' && n + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c < 0x20)
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        else
            out[n++] = (char)c;
    }
    out[n] = '\0';
    return n;
}

static int healthz(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    if (flare__admin_elsewhere(req))
        return flare__res_error(req, 404, "not found");
    flare_worker_t *w = flare_req_worker(req);
    char body[160];
    int n = snprintf(body, sizeof(body), "{\"status\":\"ok\",\"pid\":%ld,\"worker\":%u}\n",
                     (long)getpid(), flare_worker_id(w));
    return flare_res_send(res, 200, FLARE_STR("application/json"),
                          (flare_str_t){ body, (size_t)n });
}

static int ready_answer(flare_res_t *res, flare_worker_t *w)
{
    const char *why = NULL;
    char body[320], esc[200];
    if (flare__health_ready(w, &why))
        return flare_res_send(res, 200, FLARE_STR("application/json"),
                              FLARE_STR("{\"status\":\"ready\"}\n"));
    json_str(esc, sizeof(esc), why);
    int n = snprintf(body, sizeof(body), "{\"status\":\"not ready\",\"failing\":\"%s\"}\n", esc);
    return flare_res_send(res, 503, FLARE_STR("application/json"),
                          (flare_str_t){ body, (size_t)n });
}

/* Whether a request before this one on its connection is still in flight. */
static bool behind_another(struct flare_req *ex)
{
    flare_conn_t *c = ex->conn;
    if (c == NULL)
        return false;
    flare_conn_stats_t st;
    c->ops->stats(c, &st);
    return st.next_out != NULL && st.next_out != ex;
}

#define READY_RECHECK_MS 5

static void ready_later(void *ud)
{
    flare_res_t *res = ud;
    struct flare_req *ex = flare__res_ex(res);
    if (behind_another(ex) &&
        flare_worker_timer(ex->worker, READY_RECHECK_MS, ready_later, res) == 0)
        return;
    ready_answer(res, ex->worker); /* a no-op that frees it when the client is gone */
}

static int readyz(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    struct flare_req *ex = req;
    const char *why;
    if (flare__admin_elsewhere(req))
        return flare__res_error(ex, 404, "not found");
    if (!flare__health_ready(ex->worker, &why) || !behind_another(ex))
        return ready_answer(res, ex->worker);
    if (flare_worker_timer(ex->worker, READY_RECHECK_MS, ready_later, res) != 0)
        return ready_answer(res, ex->worker);
    return FLARE_ASYNC;
}

int flare_health_routes(flare_app_t *app, const char *hpath, const char *rpath)
{
    if (app == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_health_routes: app is NULL");
    hpath = hpath != NULL ? hpath : "/healthz";
    rpath = rpath != NULL ? rpath : "/readyz";
    if (hpath[0] != '/' || rpath[0] != '/')
        return flare__fail(FLARE_EINVAL, 0, "flare_health_routes: paths must start with /");
    int rc = flare_get(app, hpath, healthz, NULL);
    if (rc == 0)
        rc = flare_get(app, rpath, readyz, NULL);
    return rc;
}
