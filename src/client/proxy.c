/* flare/proxy.h: a route's requests forwarded through the client to a pool
 * of upstreams. The request is read whole by the server (its parser has
 * refused every ambiguous framing by then), its fields filtered, the
 * forwarding fields set, and sent with a framing of the proxy's own; the
 * answer comes back the same way. The upstream's health (failures in a
 * row, when it may be tried again) and its requests in flight are shared
 * by the workers as relaxed atomics: a statistic, not a lock. */
#include "flare/proxy.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client/url.h"
#include "core/clock.h"
#include "core/core.h"
#include "http/hop.h"
#include "module.h"

typedef struct upstream {
    char *base; /* "http://HOST:PORT" */
    _Atomic unsigned fails;
    _Atomic uint64_t down_until; /* ms */
    _Atomic unsigned inflight;
} upstream_t;

struct flare_proxy {
    flare_proxy_t *next;
    flare_client_t *client;
    flare_proxy_config_t cfg;
    upstream_t *ups;
    unsigned nups;
    _Atomic unsigned rr;
};

typedef struct proxy_set {
    flare_proxy_t *head;
} proxy_set_t;

static void proxy_free_app(flare_app_t *app, void *state)
{
    (void)app;
    proxy_set_t *set = state;
    for (flare_proxy_t *p = set->head, *n; p != NULL; p = n) {
        n = p->next;
        for (unsigned i = 0; i < p->nups; i++)
            free(p->ups[i].base);
        free(p->ups);
        free(p);
    }
    free(set);
}

static const flare_module_t proxy_module = { .name = "proxy", .free_app = proxy_free_app };

int flare_proxy_new(flare_app_t *app, const flare_proxy_config_t *cfg, flare_proxy_t **out)
{
    *out = NULL;
    if (app == NULL || cfg == NULL || cfg->upstreams == NULL || cfg->upstreams[0] == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_proxy_new: no upstream");
    flare_proxy_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return FLARE_ENOMEM;
    p->cfg = *cfg;
    p->cfg.upstreams = NULL;
    if (p->cfg.max_fails == 0)
        p->cfg.max_fails = 1;
    if (p->cfg.fail_timeout_ms == 0)
        p->cfg.fail_timeout_ms = 10000;
    while (cfg->upstreams[p->nups] != NULL)
        p->nups++;
    int rc = FLARE_ENOMEM;
    p->ups = calloc(p->nups, sizeof(*p->ups));
    if (p->ups == NULL)
        goto fail;
    for (unsigned i = 0; i < p->nups; i++) {
        const char *u = cfg->upstreams[i];
        bool has_scheme = strncasecmp(u, "http://", 7) == 0 || strncasecmp(u, "https://", 8) == 0;
        size_t n = strlen(u) + 8;
        p->ups[i].base = malloc(n);
        if (p->ups[i].base == NULL)
            goto fail;
        snprintf(p->ups[i].base, n, "%s%s", has_scheme ? "" : "http://", u);
        size_t bl = strlen(p->ups[i].base);
        if (bl > 0 && p->ups[i].base[bl - 1] == '/')
            p->ups[i].base[bl - 1] = '\0';
        flare_url_t url;
        const char *why;
        if (flare__url_parse(p->ups[i].base, &url, &why) != 0 || url.target.len != 1) {
            rc = flare__fail(FLARE_EINVAL, 0, "flare_proxy_new: upstream \"%s\": %s", u,
                             url.target.len != 1 ? "a path is not allowed" : why);
            goto fail;
        }
    }
    if ((rc = flare_client_new(app, &cfg->client, &p->client)) != 0)
        goto fail;
    proxy_set_t *set = flare__app_module_state(app, &proxy_module);
    if (set == NULL) {
        unsigned slot;
        set = calloc(1, sizeof(*set));
        if (set == NULL || (rc = flare__app_module(app, &proxy_module, set, &slot)) != 0) {
            free(set);
            rc = set == NULL ? FLARE_ENOMEM : rc;
            goto fail; /* the client stays with the app: freed with it */
        }
    }
    p->next = set->head;
    set->head = p;
    *out = p;
    return 0;
fail:
    for (unsigned i = 0; p->ups != NULL && i < p->nups; i++)
        free(p->ups[i].base);
    free(p->ups);
    free(p);
    return rc;
}

int flare_proxy_route(flare_app_t *app, const char *prefix, flare_proxy_t *p)
{
    if (prefix == NULL || p == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_proxy_route: NULL argument");
    char pat[512];
    size_t n = strlen(prefix);
    while (n > 0 && prefix[n - 1] == '/')
        n--;
    if (n + 16 > sizeof(pat))
        return flare__fail(FLARE_EINVAL, 0, "flare_proxy_route: prefix too long");
    static const flare_method_t methods[] = { FLARE_METHOD_GET,    FLARE_METHOD_HEAD,
                                              FLARE_METHOD_POST,   FLARE_METHOD_PUT,
                                              FLARE_METHOD_DELETE, FLARE_METHOD_OPTIONS,
                                              FLARE_METHOD_PATCH };
    for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++) {
        int rc;
        /* the prefix itself, and everything under it */
        if (n > 0) {
            snprintf(pat, sizeof(pat), "%.*s", (int)n, prefix);
            if ((rc = flare_route(app, methods[m], pat, flare_proxy_handler, p)) != 0)
                return rc;
        }
        snprintf(pat, sizeof(pat), "%.*s/{*rest}", (int)n, prefix);
        if ((rc = flare_route(app, methods[m], pat, flare_proxy_handler, p)) != 0)
            return rc;
        if (n == 0 && (rc = flare_route(app, methods[m], "/", flare_proxy_handler, p)) != 0 &&
            rc != FLARE_EEXIST)
            return rc;
    }
    return 0;
}

/* ---- one forwarded request ---- */

typedef struct fwd {
    flare_proxy_t *p;
    flare_req_t *req;
    flare_res_t *res;
    char *target;
    const char **headers;
    char *host;
    unsigned start; /* the round-robin position of this request */
    unsigned tries;
    int cur; /* the upstream in use */
} fwd_t;

/* Not forwarded either way: the hop-by-hop fields (http/hop.h), and the
 * length (the proxy frames what it sends itself). */
static bool hop_by_hop(flare_str_t name)
{
    return flare__http_hop_field(name) != 0 || FLARE__IEQ(name, "content-length");
}

/* Whether a Connection field names this field. */
static bool named_by_connection(flare_str_t conn, flare_str_t name)
{
    const char *p = conn.ptr, *end = conn.ptr + conn.len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        const char *a = p, *b = e;
        while (a < b && flare__is_ows(*a))
            a++;
        while (b > a && flare__is_ows(b[-1]))
            b--;
        if ((size_t)(b - a) == name.len && strncasecmp(a, name.ptr, name.len) == 0)
            return true;
        p = comma ? comma + 1 : end;
    }
    return false;
}

static bool forwarding_field(flare_str_t name)
{
    return FLARE__IEQ(name, "forwarded") || FLARE__IEQ(name, "x-forwarded-for") ||
           FLARE__IEQ(name, "x-forwarded-proto") || FLARE__IEQ(name, "x-forwarded-host");
}

/* "Name: value" in the request's arena. */
static const char *field(flare_req_t *req, const char *name, flare_str_t v1, const char *sep,
                         flare_str_t v2)
{
    size_t n = strlen(name) + 2 + v1.len + strlen(sep) + v2.len + 1;
    char *s = flare_req_alloc(req, n);
    if (s != NULL)
        snprintf(s, n, "%s: %.*s%s%.*s", name, (int)v1.len, v1.ptr ? v1.ptr : "", sep, (int)v2.len,
                 v2.ptr ? v2.ptr : "");
    return s;
}

static int build_request(fwd_t *f)
{
    flare_req_t *req = f->req;
    size_t n = flare_req_header_count(req);
    f->headers = flare_req_alloc(req, (n + 8) * sizeof(char *));
    if (f->headers == NULL)
        return FLARE_ENOMEM;
    flare_str_t conn = flare_req_header(req, "connection");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const flare_header_t *h = flare_req_header_at(req, i);
        if (hop_by_hop(h->name) || FLARE__IEQ(h->name, "host") || FLARE__IEQ(h->name, "via") ||
            (!f->p->cfg.trust_forwarded && forwarding_field(h->name)) ||
            (f->p->cfg.trust_forwarded && forwarding_field(h->name) &&
             !FLARE__IEQ(h->name, "x-forwarded-proto")) ||
            (conn.len > 0 && named_by_connection(conn, h->name)))
            continue;
        char *s = flare_req_alloc(req, h->name.len + h->value.len + 3);
        if (s == NULL)
            return FLARE_ENOMEM;
        snprintf(s, h->name.len + h->value.len + 3, "%.*s: %.*s", (int)h->name.len, h->name.ptr,
                 (int)h->value.len, h->value.ptr);
        f->headers[k++] = s;
    }
    flare_str_t peer = flare_req_peer(req);
    flare_str_t host = flare_req_header(req, "host");
    flare_str_t proto = flare_req_secure(req) ? FLARE_STR("https") : FLARE_STR("http");
    bool trust = f->p->cfg.trust_forwarded;
    flare_str_t xff = trust ? flare_req_header(req, "x-forwarded-for") : (flare_str_t){ 0 };
    flare_str_t fwd = trust ? flare_req_header(req, "forwarded") : (flare_str_t){ 0 };
    flare_str_t via = flare_req_header(req, "via");
    char fv[160];
    bool ip6 = memchr(peer.ptr, ':', peer.len) != NULL;
    int fl = snprintf(fv, sizeof(fv), "for=%s%.*s%s;proto=%.*s", ip6 ? "\"[" : "", (int)peer.len,
                      peer.ptr, ip6 ? "]\"" : "", (int)proto.len, proto.ptr);
    if (host.len > 0 && host.len < 100 && flare__field_value_ok(host) &&
        memchr(host.ptr, '"', host.len) == NULL)
        fl += snprintf(fv + fl, sizeof(fv) - (size_t)fl, ";host=\"%.*s\"", (int)host.len, host.ptr);
    f->headers[k++] = field(req, "X-Forwarded-For", xff, xff.len ? ", " : "", peer);
    f->headers[k++] = field(req, "X-Forwarded-Proto", proto, "", (flare_str_t){ 0 });
    if (host.len > 0)
        f->headers[k++] = field(req, "X-Forwarded-Host", host, "", (flare_str_t){ 0 });
    f->headers[k++] =
        field(req, "Forwarded", fwd, fwd.len ? ", " : "", (flare_str_t){ fv, (size_t)fl });
    f->headers[k++] = field(req, "Via", via, via.len ? ", " : "", FLARE_STR("1.1 flare"));
    f->headers[k] = NULL;
    for (size_t i = 0; i < k; i++) {
        if (f->headers[i] == NULL)
            return FLARE_ENOMEM;
    }
    if (f->p->cfg.keep_host && host.len > 0) {
        f->host = flare_req_alloc(req, host.len + 1);
        if (f->host == NULL)
            return FLARE_ENOMEM;
        memcpy(f->host, host.ptr, host.len);
        f->host[host.len] = '\0';
    }
    flare_str_t t = flare_req_target(req);
    f->target = flare_req_alloc(req, t.len + 1);
    if (f->target == NULL)
        return FLARE_ENOMEM;
    memcpy(f->target, t.ptr, t.len);
    f->target[t.len] = '\0';
    return 0;
}

/* The next upstream to try: up, not tried yet by this request (tries
 * counts from the round-robin start), least loaded when asked. -1: none. */
static int pick(fwd_t *f)
{
    unsigned start = f->start;
    flare_proxy_t *p = f->p;
    uint64_t now = flare__now_ms();
    int best = -1;
    for (unsigned k = f->tries; k < p->nups; k++) {
        unsigned i = (start + k) % p->nups;
        upstream_t *u = &p->ups[i];
        if (atomic_load_explicit(&u->down_until, memory_order_relaxed) > now)
            continue;
        if (p->cfg.balance != FLARE_PROXY_LEAST_CONN) {
            f->tries = k + 1;
            return (int)i;
        }
        if (best < 0 || atomic_load_explicit(&u->inflight, memory_order_relaxed) <
                            atomic_load_explicit(&p->ups[best].inflight, memory_order_relaxed))
            best = (int)i;
    }
    if (best >= 0)
        f->tries = p->nups; /* least-conn: one try (its order is not a ring) */
    return best;
}

static void answer_error(fwd_t *f, int status, const char *what)
{
    char body[256];
    int n = snprintf(body, sizeof(body), "%d %s: %s\n", status,
                     status == 504 ? "Gateway Timeout" : "Bad Gateway", what);
    flare_res_send(f->res, status, FLARE_STR("text/plain; charset=utf-8"),
                   (flare_str_t){ body, (size_t)n });
}

static void send_to(fwd_t *f);

static void done(int rc, const flare_client_res_t *r, void *ud)
{
    fwd_t *f = ud;
    flare_proxy_t *p = f->p;
    upstream_t *u = &p->ups[f->cur];
    atomic_fetch_sub_explicit(&u->inflight, 1, memory_order_relaxed);
    if (rc != 0) {
        bool before = flare_client_error_before_send();
        if (before) {
            unsigned fails = atomic_fetch_add_explicit(&u->fails, 1, memory_order_relaxed) + 1;
            if (fails >= p->cfg.max_fails)
                atomic_store_explicit(&u->down_until, flare__now_ms() + p->cfg.fail_timeout_ms,
                                      memory_order_relaxed);
            if (f->tries < p->nups && flare_req_connected(f->req)) {
                send_to(f);
                return;
            }
        }
        flare_log(flare_req_worker(f->req), FLARE_LOG_WARN, "proxy: %s: %s", u->base,
                  flare_client_error_text());
        answer_error(f, rc == FLARE_ETIMEDOUT && !before ? 504 : 502,
                     before ? "no upstream answered" : "the upstream failed");
        return;
    }
    atomic_store_explicit(&u->fails, 0, memory_order_relaxed);
    flare_str_t ctype = { 0 };
    flare_str_t conn = { 0 };
    for (size_t i = 0; i < r->nheaders; i++) {
        if (FLARE__IEQ(r->headers[i].name, "connection"))
            conn = r->headers[i].value;
    }
    bool via_done = false;
    for (size_t i = 0; i < r->nheaders; i++) {
        const flare_header_t *h = &r->headers[i];
        if (FLARE__IEQ(h->name, "content-type")) {
            ctype = h->value;
            continue;
        }
        if (hop_by_hop(h->name) || FLARE__IEQ(h->name, "date") ||
            (conn.len > 0 && named_by_connection(conn, h->name)))
            continue;
        if (FLARE__IEQ(h->name, "via")) {
            char v[512];
            int n = snprintf(v, sizeof(v), "%.*s, 1.1 flare", (int)h->value.len, h->value.ptr);
            flare_res_header(f->res, h->name, (flare_str_t){ v, (size_t)n });
            via_done = true;
            continue;
        }
        flare_res_header(f->res, h->name, h->value);
    }
    if (!via_done)
        flare_res_header(f->res, FLARE_STR("Via"), FLARE_STR("1.1 flare"));
    flare_res_send(f->res, r->status, ctype, r->body);
}

static void send_to(fwd_t *f)
{
    int i = pick(f);
    if (i < 0) {
        answer_error(f, 502, "no live upstream");
        return;
    }
    f->cur = i;
    upstream_t *u = &f->p->ups[i];
    size_t n = strlen(u->base) + strlen(f->target) + 2;
    char *url = flare_req_alloc(f->req, n);
    if (url == NULL) {
        answer_error(f, 502, "out of memory");
        return;
    }
    snprintf(url, n, "%s%s%s", u->base, f->target[0] == '/' ? "" : "/", f->target);
    atomic_fetch_add_explicit(&u->inflight, 1, memory_order_relaxed);
    flare_str_t method = flare_req_method_str(f->req);
    char m[32];
    snprintf(m, sizeof(m), "%.*s", (int)method.len, method.ptr);
    int rc = flare_client_request(f->p->client, flare_req_worker(f->req),
                                  &(flare_client_req_t){ .method = m,
                                                         .url = url,
                                                         .headers = f->headers,
                                                         .body = flare_req_body(f->req),
                                                         .host = f->host },
                                  done, f, NULL);
    if (rc != 0) {
        atomic_fetch_sub_explicit(&u->inflight, 1, memory_order_relaxed);
        flare_log(flare_req_worker(f->req), FLARE_LOG_WARN, "proxy: %s: %s", url,
                  flare_last_error());
        answer_error(f, 502, "the request cannot be forwarded");
    }
}

int flare_proxy_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    flare_proxy_t *p = ud;
    fwd_t *f = flare_req_alloc(req, sizeof(*f));
    if (f == NULL)
        return FLARE_ENOMEM;
    *f = (fwd_t){ .p = p, .req = req, .res = res };
    int rc = build_request(f);
    if (rc != 0)
        return rc;
    f->start = atomic_fetch_add_explicit(&p->rr, 1, memory_order_relaxed);
    send_to(f);
    return FLARE_ASYNC;
}
