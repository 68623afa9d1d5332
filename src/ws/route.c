/* WebSocket routes: configuration (defaults, owned copies), the app-wide
 * state, and the handler that turns a GET into a handshake. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app_svc.h"
#include "module.h"
#include "http/exchange.h"
#include "worker.h"
#include "ws/ws_int.h"

/* The app-wide states, reachable from here as long as they exist: until
 * flare_app_free calls the module's free_app they are not leaks, only
 * long-lived. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static ws_app_t *registry;

static void route_free(ws_route_t *r)
{
    free(r->protocols);
    free(r->origins);
    free(r->strings);
    free(r);
}

static void wapp_free(flare_app_t *app, void *state)
{
    (void)app;
    ws_app_t *wa = state;
    pthread_mutex_lock(&registry_lock);
    for (ws_app_t **p = &registry; *p != NULL; p = &(*p)->reg_next) {
        if (*p == wa) {
            *p = wa->reg_next;
            break;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    while (wa->routes != NULL) {
        ws_route_t *r = wa->routes;
        wa->routes = r->next;
        route_free(r);
    }
    free(wa);
}

/* Per-worker state is made on a worker's first handshake (no init_worker):
 * a worker that never upgrades pays nothing. */
const flare_module_t flare__ws_module = {
    .name = "websocket",
    .drain_worker = flare__ws_drain,
    .dispose_worker = flare__ws_dispose,
    .free_app = wapp_free,
};

static ws_app_t *wapp_get(flare_app_t *app)
{
    ws_app_t *wa = flare__ws_app_state(app);
    if (wa != NULL)
        return wa;
    wa = calloc(1, sizeof(*wa));
    if (wa == NULL)
        return NULL;
    wa->app = app;
    wa->sweep_ms = 1000;
    /* the channel layer first: it is disposed after the connections left it */
    if (flare__chan_use(app, &flare__ws_chan_kind) != 0 ||
        flare__app_module(app, &flare__ws_module, wa, &wa->slot) != 0) {
        free(wa);
        return NULL;
    }
    wa->instance = flare__chan_instance(app);
    pthread_mutex_lock(&registry_lock);
    wa->reg_next = registry;
    registry = wa;
    pthread_mutex_unlock(&registry_lock);
    return wa;
}

/* Copies a NULL-terminated list into views over `*at`. */
static flare_str_t *copy_list(const char *const *list, size_t *count, char **at)
{
    size_t n = 0;
    while (list[n] != NULL)
        n++;
    *count = n;
    flare_str_t *v = calloc(n > 0 ? n : 1, sizeof(*v));
    if (v == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(list[i]);
        memcpy(*at, list[i], len);
        v[i] = (flare_str_t){ *at, len };
        *at += len;
    }
    return v;
}

static size_t list_bytes(const char *const *list)
{
    size_t total = 0;
    for (size_t i = 0; list != NULL && list[i] != NULL; i++)
        total += strlen(list[i]);
    return total;
}

static bool list_ok(const char *const *list)
{
    for (size_t i = 0; list != NULL && list[i] != NULL; i++) {
        if (list[i][0] == '\0')
            return false;
        for (const char *p = list[i]; *p != '\0'; p++) {
            unsigned char c = (unsigned char)*p;
            if (c <= 0x20 || c == 0x7f || c == ',')
                return false;
        }
    }
    return true;
}

static ws_route_t *route_new(flare_app_t *app, ws_app_t *wa, const flare_ws_config_t *in)
{
    if (!list_ok(in->protocols) || !list_ok(in->origins))
        return NULL;
    ws_route_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->wapp = wa;
    r->cfg = *in;
    flare_ws_config_t *c = &r->cfg;
    size_t bytes = list_bytes(in->protocols) + list_bytes(in->origins);
    r->strings = malloc(bytes > 0 ? bytes : 1);
    if (r->strings == NULL)
        goto fail;
    char *at = r->strings;
    if (in->protocols != NULL) {
        r->protocols = copy_list(in->protocols, &r->hs.nprotocols, &at);
        if (r->protocols == NULL)
            goto fail;
        r->hs.protocols = r->protocols;
    }
    if (in->origins != NULL) {
        r->origins = copy_list(in->origins, &r->hs.norigins, &at);
        if (r->origins == NULL)
            goto fail;
        r->hs.origins = r->origins;
    }
    r->hs.origin_required = in->origin_required;
    c->protocols = NULL; /* the copies live in r->protocols / r->origins */
    c->origins = NULL;

    if (c->max_message == 0)
        c->max_message = 1u << 20;
    if (c->deflate_window_bits < 9 || c->deflate_window_bits > 15)
        c->deflate_window_bits = 15;
    if (c->deflate_mem_level < 1 || c->deflate_mem_level > 9)
        c->deflate_mem_level = 8;
    if (c->deflate_level < 1 || c->deflate_level > 9)
        c->deflate_level = 6;
    if (c->deflate_min_size == 0)
        c->deflate_min_size = 64;
    r->pmd.max_window_bits = c->deflate_window_bits;
    r->pmd.no_context_takeover = !c->deflate_context_takeover;
    /* internally 0 means "never" */
    if (c->heartbeat_ms == 0)
        c->heartbeat_ms = 30000;
    else if (c->heartbeat_ms == FLARE_WS_NEVER)
        c->heartbeat_ms = 0;
    if (c->heartbeat_misses == 0)
        c->heartbeat_misses = 2;
    if (c->write_high_water == 0)
        c->write_high_water = 1u << 20;
    if (c->write_limit == 0)
        c->write_limit = c->write_high_water <= SIZE_MAX / 16 ? c->write_high_water * 16 : SIZE_MAX;
    if (c->write_limit < c->write_high_water)
        c->write_limit = c->write_high_water;
    if (c->write_timeout_ms == 0)
        c->write_timeout_ms = flare__app_config(app)->write_timeout_ms;
    else if (c->write_timeout_ms == FLARE_WS_NEVER)
        c->write_timeout_ms = 0;
    if (c->close_timeout_ms == 0)
        c->close_timeout_ms = 5000;
    else if (c->close_timeout_ms == FLARE_WS_NEVER)
        c->close_timeout_ms = 0;
    return r;
fail:
    route_free(r);
    return NULL;
}

static unsigned min_nonzero(unsigned a, unsigned b)
{
    if (a == 0)
        return b;
    if (b == 0)
        return a;
    return a < b ? a : b;
}

/* The sweep runs often enough for the tightest heartbeat / close timeout. */
static void wapp_update(ws_app_t *wa, const ws_route_t *r)
{
    unsigned t = min_nonzero(r->cfg.heartbeat_ms / 4, r->cfg.close_timeout_ms / 4);
    t = min_nonzero(t, r->cfg.write_timeout_ms / 4);
    if (t != 0 && t < wa->sweep_ms)
        wa->sweep_ms = t < 20 ? 20 : t;
    if (r->cfg.deflate && !r->cfg.deflate_context_takeover && !wa->shared_deflate) {
        wa->shared_deflate = true;
        wa->bcast_bits = r->cfg.deflate_window_bits;
        wa->bcast_mem = r->cfg.deflate_mem_level;
        wa->bcast_level = r->cfg.deflate_level;
        wa->bcast_min = r->cfg.deflate_min_size;
    }
}

static int answer(flare_res_t *res, int status, const char *msg)
{
    char body[128];
    size_t n = strlen(msg);
    if (n > sizeof(body) - 1)
        n = sizeof(body) - 1;
    memcpy(body, msg, n);
    body[n++] = '\n';
    return flare_res_send(res, status, FLARE_STR("text/plain; charset=utf-8"),
                          (flare_str_t){ body, n });
}

static int ws_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    const ws_route_t *r = ud;
    flare_worker_t *w = flare_req_worker(req);
    if (w->draining)
        return answer(res, 503, "server shutting down");
    flare_ws_hs_t hs;
    int st = flare__ws_handshake_check(req->head.method_id, req->head.minor, req->head.headers,
                                       req->head.nheaders, &r->hs, &hs);
    if (st != 0) {
        if (st == 426) {
            flare_res_header(res, FLARE_STR("Upgrade"), FLARE_STR("websocket"));
            flare_res_header(res, FLARE_STR("Sec-WebSocket-Version"), FLARE_STR("13"));
        }
        return answer(res, st, hs.error);
    }
    char accept[FLARE_WS_ACCEPT_LEN];
    if (flare__ws_accept_key(hs.key, accept) != 0)
        return answer(res, 500, "cannot compute Sec-WebSocket-Accept");
    flare_ws_pmd_t pmd;
    char ext[FLARE_WS_PMD_RESPONSE_MAX];
    size_t ext_len = 0;
    bool pmd_on = r->cfg.deflate && flare__ws_pmd_negotiate(req->head.headers, req->head.nheaders,
                                                            &r->pmd, &pmd, ext, &ext_len);
    ws_worker_t *ww = flare__ws_worker_get(w, r->wapp);
    flare_ws_t *ws = ww != NULL ? flare__ws_new(ww, r) : NULL;
    if (ws == NULL)
        return answer(res, 503, "out of memory");
    ws->protocol = hs.protocol;
    ws->pmd_on = pmd_on;
    if (pmd_on) {
        ws->pmd = pmd;
        ws->parser.rsv1_allowed = true;
    }
    if (r->cfg.on_open != NULL) {
        int rc = r->cfg.on_open(ws, req);
        if (rc != 0) {
            flare__ws_free_pending(ws);
            return answer(res, rc >= 400 && rc <= 599 ? rc : 403, "WebSocket connection refused");
        }
    }
    ws->flags |= WF_OPENED;
    int rc = flare_res_header(res, FLARE_STR("Sec-WebSocket-Accept"),
                              (flare_str_t){ accept, FLARE_WS_ACCEPT_LEN });
    if (rc == 0 && hs.protocol.len > 0)
        rc = flare_res_header(res, FLARE_STR("Sec-WebSocket-Protocol"), hs.protocol);
    if (rc == 0 && pmd_on)
        rc = flare_res_header(res, FLARE_STR("Sec-WebSocket-Extensions"),
                              (flare_str_t){ ext, ext_len });
    if (rc == 0)
        rc = flare__res_upgrade(res, FLARE_STR("websocket"), flare__ws_handoff, ws);
    if (rc != 0) {
        flare__ws_abort(ws, FLARE_WS_CLOSE_ABNORMAL);
        return answer(res, 500, "cannot upgrade");
    }
    return 0;
}

static int check_cfg(flare_app_t *app, const char *pattern, const flare_ws_config_t *cfg)
{
    if (app == NULL || pattern == NULL || cfg == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_ws_route: %s is NULL",
                           app == NULL       ? "app"
                           : pattern == NULL ? "pattern"
                                             : "cfg");
    if (flare__app_running(app))
        return flare__fail(FLARE_ESTATE, 0, "flare_ws_route %s: the app is running", pattern);
    return 0;
}

static int add(flare_app_t *app, flare_group_t *g, const char *pattern,
               const flare_ws_config_t *cfg)
{
    int rc = check_cfg(app, pattern, cfg);
    if (rc != 0)
        return rc;
    ws_app_t *wa = wapp_get(app);
    if (wa == NULL)
        return FLARE_ENOMEM;
    ws_route_t *r = route_new(app, wa, cfg);
    if (r == NULL)
        return list_ok(cfg->protocols) && list_ok(cfg->origins)
                   ? flare__fail(FLARE_ENOMEM, 0, "flare_ws_route %s: out of memory", pattern)
                   : flare__fail(FLARE_EINVAL, 0,
                                 "flare_ws_route %s: a protocol or origin in cfg is empty or "
                                 "holds a space, a control or ','",
                                 pattern);
    rc = g != NULL ? flare_group_route(g, FLARE_METHOD_GET, pattern, ws_handler, r)
                   : flare_route(app, FLARE_METHOD_GET, pattern, ws_handler, r);
    if (rc != 0) {
        route_free(r);
        return rc;
    }
    r->next = wa->routes;
    wa->routes = r;
    wapp_update(wa, r);
    return 0;
}

int flare_ws_route(flare_app_t *app, const char *pattern, const flare_ws_config_t *cfg)
{
    return add(app, NULL, pattern, cfg);
}

int flare_ws_group_route(flare_group_t *g, const char *pattern, const flare_ws_config_t *cfg)
{
    if (g == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_ws_group_route: group is NULL");
    return add(flare__group_app(g), g, pattern, cfg);
}
