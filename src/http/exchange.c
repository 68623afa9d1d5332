/* Dispatch, protocol-neutral: exchanges (recycled per worker), routing,
 * the middleware chain and the handler, asynchronous completion, flare_next
 * and orphans. The wire protocol parses, calls flare__http_route and
 * flare__http_dispatch, and is called back through ex->ops. */
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "http/exchange.h"
#include "http/svc.h"
#include "worker.h"
#include "mw/chain.h"
#include "router/router.h"

/* ---- observers ---- */

/* Each event's list of hooks, from the observers in installation order. */
static void observers_index(flare_ex_observers_t *t)
{
    t->nstart = t->nanswered = t->nstream = t->ndone = 0;
    for (unsigned i = 0; i < t->n; i++) {
        const flare_ex_observer_t *o = t->e[i].o;
        void *ud = t->e[i].ud;
        if (o->start != NULL) {
            t->start[t->nstart].fn = o->start;
            t->start[t->nstart++].ud = ud;
        }
        if (o->answered != NULL) {
            t->answered[t->nanswered].fn = o->answered;
            t->answered[t->nanswered++].ud = ud;
        }
        if (o->stream != NULL) {
            t->stream[t->nstream].fn = o->stream;
            t->stream[t->nstream++].ud = ud;
        }
        if (o->done != NULL) {
            t->done[t->ndone].fn = o->done;
            t->done[t->ndone++].ud = ud;
        }
    }
}

int flare__ex_observe(flare_worker_t *w, const flare_ex_observer_t *o, void *ud)
{
    flare_ex_observers_t *t = w->ex_obs;
    if (t == NULL && (t = calloc(1, sizeof(*t))) == NULL)
        return FLARE_ENOMEM;
    w->ex_obs = t;
    for (unsigned i = 0; i < t->n; i++)
        if (t->e[i].o == o)
            return FLARE_EEXIST;
    if (t->n == FLARE__EX_OBSERVERS_MAX)
        return FLARE_ETOOBIG;
    t->e[t->n].o = o;
    t->e[t->n].ud = ud;
    t->n++;
    observers_index(t);
    return 0;
}

void flare__ex_unobserve(flare_worker_t *w, const flare_ex_observer_t *o)
{
    flare_ex_observers_t *t = w->ex_obs;
    if (t == NULL)
        return;
    unsigned j = 0;
    for (unsigned i = 0; i < t->n; i++)
        if (t->e[i].o != o)
            t->e[j++] = t->e[i];
    t->n = j;
    if (j == 0) {
        w->ex_obs = NULL;
        free(t);
        return;
    }
    observers_index(t);
}

void flare__ex_observe_answered(struct flare_req *ex, int status, uint64_t bytes)
{
    flare_ex_observers_t *t = ex->worker->ex_obs;
    for (unsigned i = 0; i < t->nanswered; i++)
        t->answered[i].fn(t->answered[i].ud, ex, status, bytes);
}

void flare__ex_long(struct flare_req *ex)
{
    ex->flags |= EX_LONG;
    flare_ex_observers_t *t = ex->worker->ex_obs;
    for (unsigned i = 0; t != NULL && i < t->nstream; i++)
        t->stream[i].fn(t->stream[i].ud, ex);
}

/* ---- the exchange's life ---- */

/* A recycled or new exchange's per-request state, cleared. */
static inline __attribute__((always_inline)) void ex_reset(struct flare_req *ex)
{
    ex->next = NULL;
    ex->flags = 0;
    ex->route = NULL;
    ex->head.headers = ex->headers;
    ex->body.ptr = NULL;
    ex->body.len = 0;
    ex->match.nparams = 0;
    ex->match.route = NULL;
    ex->match.allowed = 0;
    ex->chain = NULL;
    ex->nchain = ex->mw_pos = 0;
    ex->res.status = 0;
    ex->res.hdrs = NULL;
    ex->res.hdrs_tail = &ex->res.hdrs;
    ex->cleanups = NULL;
    ex->attrs = NULL;
    ex->bodybuf.len = 0;
    ex->out.len = 0;
    ex->log_id = 0;
}

/* Taken up: the start on the loop's clock (the metrics' duration: no clock
 * read per request), then the start hooks (the access log's). */
static __attribute__((noinline)) struct flare_req *observe_start(flare_worker_t *w,
                                                                 struct flare_req *ex)
{
    flare_ex_observers_t *obs = w->ex_obs;
    ex->t_start_ms = w->loop.now;
    for (unsigned i = 0; i < obs->nstart; i++)
        obs->start[i].fn(obs->start[i].ud, ex);
    return ex;
}

/* flare__ex_get when the free list is empty. */
static __attribute__((noinline)) struct flare_req *ex_new(flare_worker_t *w)
{
    struct flare_req *ex = calloc(1, sizeof(*ex));
    if (ex == NULL)
        return NULL;
    ex->headers = malloc(w->app->limits.max_headers * sizeof(flare_header_t));
    if (ex->headers == NULL) {
        free(ex);
        return NULL;
    }
    flare__arena_init(&ex->arena);
    ex->worker = w;
    ex->file_fd = -1;
    ex_reset(ex);
    return w->ex_obs != NULL ? observe_start(w, ex) : ex;
}

/* The common case, a recycled exchange, calls nothing (or, observed, ends
 * in a tail call): no registers to save (-8 instructions per request,
 * callgrind). */
struct flare_req *flare__ex_get(flare_worker_t *w)
{
    struct flare_req *ex = w->free_ex;
    if (flare__unlikely(ex == NULL))
        return ex_new(w);
    w->free_ex = ex->next;
    w->nfree_ex--;
    ex_reset(ex);
    if (flare__unlikely(w->ex_obs != NULL))
        return observe_start(w, ex);
    return ex;
}

void flare__ex_orphan(flare_worker_t *w, struct flare_req *ex)
{
    ex->conn = NULL;
    ex->flags |= EX_ORPHAN;
    /* its abort hooks (flare_req_on_abort), once; they may not end the
     * exchange (the list is walked), only arrange for it to end */
    for (flare_cleanup_t *cl = ex->cleanups; cl != NULL; cl = cl->next) {
        if (cl->abort && cl->fn != NULL) {
            flare_task_fn fn = cl->fn;
            cl->fn = NULL;
            fn(cl->ud);
        }
    }
    ex->oprev = NULL;
    ex->next = w->orphans;
    if (w->orphans != NULL)
        w->orphans->oprev = ex;
    w->orphans = ex;
}

/* flare__ex_put with observers, cleanups, an arena or big buffers to let
 * go, or a full free list. */
static __attribute__((noinline)) void ex_put_slow(flare_worker_t *w, struct flare_req *ex)
{
    /* exchange finished: its observers (the metrics); each event's hooks in
     * a list of their own (a loop over every observer, testing for NULL
     * hooks, measured 16 instructions more per request, callgrind) */
    flare_ex_observers_t *obs = w->ex_obs;
    if (flare__unlikely(obs != NULL) && obs->ndone > 0) {
        obs->done[0].fn(obs->done[0].ud, ex);
        for (unsigned i = 1; i < obs->ndone; i++)
            obs->done[i].fn(obs->done[i].ud, ex);
    }
    if (ex->flags & EX_ORPHAN) {
        if (ex->oprev != NULL)
            ex->oprev->next = ex->next;
        else
            w->orphans = ex->next;
        if (ex->next != NULL)
            ex->next->oprev = ex->oprev;
        ex->flags &= ~(uint32_t)EX_ORPHAN;
    }
    while (ex->cleanups != NULL) {
        flare_cleanup_t *cl = ex->cleanups;
        ex->cleanups = cl->next;
        if (!cl->abort)
            cl->fn(cl->ud);
    }
    if (flare__arena_used(&ex->arena))
        flare__arena_reset(&ex->arena);
    /* keep small buffers for the next exchange; give big ones back */
    if (ex->bodybuf.cap > 65536)
        flare__buf_free(&ex->bodybuf);
    if (ex->out.cap > 65536)
        flare__buf_free(&ex->out);
    ex->conn = NULL;
    if (w->nfree_ex >= 256) {
        flare__arena_dispose(&ex->arena);
        flare__buf_free(&ex->bodybuf);
        flare__buf_free(&ex->out);
        free(ex->headers);
        free(ex);
        return;
    }
    ex->next = w->free_ex;
    w->free_ex = ex;
    w->nfree_ex++;
}

/* The common case, nothing to run or give back, calls nothing: no
 * registers to save (-8 instructions per request, callgrind). */
void flare__ex_put(flare_worker_t *w, struct flare_req *ex)
{
    if (flare__unlikely(w->ex_obs != NULL || (ex->flags & EX_ORPHAN) || ex->cleanups != NULL ||
                        flare__arena_used(&ex->arena) || ex->bodybuf.cap > 65536 ||
                        ex->out.cap > 65536 || w->nfree_ex >= 256)) {
        ex_put_slow(w, ex);
        return;
    }
    ex->conn = NULL;
    ex->next = w->free_ex;
    w->free_ex = ex;
    w->nfree_ex++;
}

/* ---- routing and dispatch ---- */

static void rebase(flare_str_t *s, const char *old, size_t len, const char *new)
{
    if (s->ptr >= old && s->ptr <= old + len)
        s->ptr = new + (s->ptr - old);
}

int flare__ex_detach(struct flare_req *ex)
{
    if (ex->flags & EX_DETACHED)
        return 0;
    const char *old = ex->raw;
    size_t len = ex->raw_len;
    char *copy = flare__arena_dup(&ex->arena, old, len);
    if (copy == NULL)
        return FLARE_ENOMEM;
    flare_http_head_t *h = &ex->head;
    rebase(&h->method, old, len, copy);
    rebase(&h->target, old, len, copy);
    rebase(&h->path, old, len, copy);
    rebase(&h->query, old, len, copy);
    rebase(&h->host, old, len, copy);
    for (size_t i = 0; i < h->nheaders; i++) {
        rebase(&h->headers[i].name, old, len, copy);
        rebase(&h->headers[i].value, old, len, copy);
    }
    for (unsigned i = 0; i < ex->match.nparams; i++)
        rebase(&ex->match.params[i].value, old, len, copy);
    if (ex->body.len > 0 && ex->bodybuf.data != ex->body.ptr) {
        char *b = flare__arena_dup(&ex->arena, ex->body.ptr, ex->body.len);
        if (b == NULL)
            return FLARE_ENOMEM;
        ex->body.ptr = b;
    }
    ex->raw = copy;
    ex->flags |= EX_DETACHED;
    return 0;
}

static void set_chain(flare_app_t *app, struct flare_req *ex)
{
    if (ex->route != NULL) {
        ex->chain = ex->route->chain;
        ex->nchain = ex->route->nchain;
        if (ex->route->has_after)
            ex->flags |= EX_HAS_AFTER;
    } else {
        ex->chain = app->mws.v;
        ex->nchain = (uint32_t)app->mws.n;
        if (app->mws_have_after)
            ex->flags |= EX_HAS_AFTER;
    }
}

/* A path with %-escapes is routed, and seen by handlers, in its normal
 * form (unreserved characters decoded, hex upper-cased: `/pl%61intext` is
 * `/plaintext`, `/a%2fb` one segment `/a%2Fb`), copied into the arena. The
 * parser flags such paths while it scans the target: the others pay one
 * test. Out of memory: routed as sent. */
__attribute__((noinline)) static void normalize_path(struct flare_req *ex)
{
    flare_str_t p = ex->head.path;
    char *out = p.ptr[0] == '/' ? flare__arena_alloc(&ex->arena, p.len) : NULL;
    if (out != NULL)
        ex->head.path = (flare_str_t){ out, flare__router_normalize_path(p, out) };
}

void flare__http_route(flare_app_t *app, struct flare_req *ex)
{
    flare_method_t m = ex->head.method_id;
    if (flare__unlikely(ex->head.path_pct))
        normalize_path(ex);
    if (m == FLARE_METHOD_HEAD)
        ex->flags |= EX_HEAD_ONLY;
    if (flare__router_match(app->router, m, ex->head.path, &ex->match)) {
        ex->route = ex->match.route;
    } else if (m == FLARE_METHOD_HEAD &&
               flare__router_match(app->router, FLARE_METHOD_GET, ex->head.path, &ex->match)) {
        ex->route = ex->match.route;
    } else {
        ex->route = NULL;
        ex->match.nparams = 0;
        uint32_t allowed = ex->match.allowed;
        if (allowed != 0) {
            /* 405 or automatic OPTIONS on a path that has routes: run the
             * middlewares of that path's routes (a group's CORS must see
             * its preflights), then the automatic answer */
            flare_route_match_t other;
            flare_method_t om = (flare_method_t)__builtin_ctz(allowed);
            if (flare__router_match(app->router, om, ex->head.path, &other)) {
                const flare_route_t *r = other.route;
                ex->chain = r->chain;
                ex->nchain = r->nchain;
                if (r->has_after)
                    ex->flags |= EX_HAS_AFTER;
                return;
            }
        }
    }
    set_chain(app, ex);
}

/* Runs the chain from where it stands (start, or a paused before hook) and
 * settles the outcome: answered, asynchronous (detach), or an error. */
static void run_chain(struct flare_req *ex)
{
    ex->flags |= EX_IN_HANDLER;
    int rc = flare__chain_run(ex);
    ex->flags &= ~EX_IN_HANDLER;
    if (ex->flags & EX_ORPHAN) {
        if (ex->flags & EX_SENT)
            flare__ex_put(ex->worker, ex);
        return;
    }
    if (!(ex->flags & EX_SENT)) {
        if (rc == FLARE_ASYNC || (ex->flags & EX_HELD)) {
            /* answered later, or answered and held by an after hook (the
             * session store's save): the request must outlive the buffer */
            if (flare__ex_detach(ex) != 0 && !(ex->flags & EX_HELD)) {
                ex->flags |= EX_CLOSE;
                flare__res_error(ex, 500, "out of memory");
            }
        } else if (!(ex->flags & EX_STREAM)) {
            ex->flags |= EX_CLOSE;
            flare__res_error(ex, 500,
                             rc < 0 ? flare_strerror(rc) : "handler returned without a response");
            if (ex->flags & EX_HELD)
                flare__ex_detach(ex);
        } else if (flare__ex_detach(ex) != 0) {
            flare_res_close(&ex->res);
            flare_res_end(&ex->res);
        }
    }
    flare__ex_complete(ex);
}

void flare__http_dispatch(struct flare_req *ex)
{
    if (ex->flags & EX_SENT)
        return;
    run_chain(ex);
}

void flare_next(flare_req_t *req)
{
    struct flare_req *ex = req;
    if (ex->flags & (EX_SENT | EX_STREAM | EX_IN_HANDLER | EX_HELD))
        return;
    if (ex->flags & EX_ORPHAN) {
        /* the client is gone: nothing to resume; free the exchange */
        ex->flags |= EX_SENT;
        flare__ex_put(ex->worker, ex);
        return;
    }
    run_chain(ex);
}

/* ---- the worker's recycled exchanges (its trim and its shutdown) ---- */

static size_t ex_free(struct flare_req *ex)
{
    size_t n = sizeof(*ex) + ex->bodybuf.cap + ex->out.cap;
    flare__arena_dispose(&ex->arena);
    flare__buf_free(&ex->bodybuf);
    flare__buf_free(&ex->out);
    free(ex->headers);
    free(ex);
    return n;
}

size_t flare__ex_trim(flare_worker_t *w, unsigned keep)
{
    size_t freed = 0;
    unsigned drop = w->nfree_ex > keep ? w->nfree_ex - keep : 0;
    for (unsigned i = 0; i < drop; i++) {
        struct flare_req *ex = w->free_ex;
        w->free_ex = ex->next;
        freed += ex_free(ex);
    }
    w->nfree_ex -= drop;
    return freed;
}

void flare__ex_dispose_all(flare_worker_t *w)
{
    while (w->orphans != NULL) {
        struct flare_req *ex = w->orphans;
        ex->flags |= EX_SENT;
        flare__ex_put(w, ex);
    }
    while (w->free_ex != NULL) {
        struct flare_req *ex = w->free_ex;
        w->free_ex = ex->next;
        ex_free(ex);
    }
    w->nfree_ex = 0;
}
