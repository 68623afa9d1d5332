/* Streaming request bodies (flare/body.h), protocol-neutral.
 *
 * A streaming route is an ordinary route whose handler is
 * flare__body_handler and whose ud is the route's record (callbacks, limit,
 * the user's ud): the router, the middleware chain and dispatch need
 * nothing new, and the buffered path pays nothing. The handler runs at the
 * head (the chain's before hooks ran), calls on_start and returns
 * FLARE_ASYNC: the exchange is detached from the protocol's buffers, as
 * for any asynchronous handler, and stays open while the body arrives.
 *
 * Two ways the body reaches the callbacks:
 * - the protocol streams it (ops->body_read set, EX_BODY_STREAM): it feeds
 *   flare__ex_body_data / flare__ex_body_end as it decodes the body, and
 *   body_read(on/off) follows the handler's pause/resume;
 * - it does not (ops->body_read NULL): the body it buffered is delivered
 *   here as one chunk and the end, with a pause only delaying the end. */
#include <string.h>

#include "mw/chain.h"
#include "http/exchange.h"
#include "http/svc.h"

typedef struct body_route {
    flare_body_route_t r;
    void *ud;
} body_route_t;

static const body_route_t *route_of(const struct flare_req *ex)
{
    return ex->route->ud;
}

bool flare__ex_body_route(const struct flare_req *ex)
{
    return ex->route != NULL && ex->route->fn == flare__body_handler;
}

uint64_t flare__ex_body_limit(const struct flare_req *ex, uint64_t app_limit)
{
    if (!flare__ex_body_route(ex))
        return app_limit;
    uint64_t own = route_of(ex)->r.max_body;
    return own != 0 ? own : app_limit;
}

int flare__body_route_new(const char *who, const flare_body_route_t *r, void *ud, void **out)
{
    if (r == NULL || r->on_chunk == NULL || r->on_end == NULL)
        return flare__fail(FLARE_EINVAL, 0, "%s: %s is NULL", who,
                           r == NULL             ? "the callbacks"
                           : r->on_chunk == NULL ? "on_chunk"
                                                 : "on_end");
    if (r->max_body > ((uint64_t)1 << 62))
        return flare__fail(FLARE_EINVAL, 0, "%s: max_body is more than 2^62", who);
    body_route_t *br = malloc(sizeof(*br));
    if (br == NULL)
        return FLARE_ENOMEM;
    br->r = *r;
    br->ud = ud;
    *out = br;
    return 0;
}

/* Calls into the handler the way dispatch does: a response sent during
 * the call completes when the call returns (EX_IN_HANDLER). */
static int call_chunk(struct flare_req *ex, flare_str_t data)
{
    const body_route_t *br = route_of(ex);
    ex->flags |= EX_IN_HANDLER;
    int rc = br->r.on_chunk(ex, &ex->res, data, br->ud);
    ex->flags &= ~(uint32_t)EX_IN_HANDLER;
    return rc;
}

static int call_end(struct flare_req *ex, int err)
{
    const body_route_t *br = route_of(ex);
    ex->flags &= ~(uint32_t)(EX_BODY_OPEN | EX_BODY_LIVE | EX_BODY_PAUSED | EX_BODY_ENDING);
    ex->flags |= EX_IN_HANDLER;
    int rc = br->r.on_end(ex, &ex->res, err, br->ud);
    ex->flags &= ~(uint32_t)EX_IN_HANDLER;
    return rc;
}

/* on_end(0) returned rc: settle as dispatch settles a handler's return.
 * The error answer is made as if inside the handler, so the exchange is
 * completed exactly once, here. */
static void settle_end(struct flare_req *ex, int rc)
{
    if (ex->flags & EX_ORPHAN) {
        if (ex->flags & EX_SENT)
            flare__ex_put(ex->worker, ex);
        return;
    }
    if (!(ex->flags & (EX_SENT | EX_STREAM | EX_HELD)) && rc != FLARE_ASYNC) {
        ex->flags |= EX_CLOSE | EX_IN_HANDLER;
        flare__res_error(ex, 500,
                         rc < 0 ? flare_strerror(rc) : "handler returned without a response");
        ex->flags &= ~(uint32_t)EX_IN_HANDLER;
    }
    flare__ex_complete(ex);
}

int flare__body_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    struct flare_req *ex = req;
    const body_route_t *br = ud;
    ex->body_rx = 0;
    ex->flags |= EX_BODY_LIVE;
    int rc = 0;
    if (br->r.on_start != NULL) {
        rc = br->r.on_start(req, res, br->ud);
        if ((ex->flags & EX_SENT) || rc < 0)
            goto stop; /* answered early (EX_BODY_OPEN made it close), or a 500 */
    }
    if (ex->flags & EX_BODY_STREAM) {
        /* the protocol feeds the body; reading starts now unless paused */
        if (!(ex->flags & EX_BODY_PAUSED)) {
            ex->flags |= EX_BODY_READING;
            ex->ops->body_read(ex, true);
        }
        return FLARE_ASYNC;
    }
    /* buffered (a protocol without streaming input, or a body that came
     * whole): one chunk and the end, inside this call, so dispatch settles
     * the outcome as for any handler */
    ex->flags |= EX_BODY_READING;
    if (ex->body.len > 0) {
        ex->body_rx = ex->body.len;
        rc = br->r.on_chunk(req, res, ex->body, br->ud);
        if ((ex->flags & EX_SENT) || rc < 0)
            goto stop;
    }
    if (ex->flags & EX_BODY_PAUSED) {
        ex->flags |= EX_BODY_ENDING; /* the resume ends it; dispatch detaches */
        return FLARE_ASYNC;
    }
    ex->flags &= ~(uint32_t)(EX_BODY_LIVE | EX_BODY_ENDING);
    return br->r.on_end(req, res, 0, br->ud);
stop:
    ex->flags &= ~(uint32_t)(EX_BODY_OPEN | EX_BODY_LIVE | EX_BODY_PAUSED);
    if (rc == FLARE_ASYNC)
        rc = FLARE_EINVAL; /* only on_end may answer later */
    return (ex->flags & EX_SENT) ? 0 : rc;
}

int flare__ex_body_data(struct flare_req *ex, flare_str_t data)
{
    ex->body_rx += data.len;
    int rc = call_chunk(ex, data);
    if (!(ex->flags & EX_SENT) && rc >= 0)
        return 0;
    if (!(ex->flags & EX_SENT)) {
        ex->flags |= EX_CLOSE | EX_IN_HANDLER; /* the caller completes it */
        flare__res_error(ex, 500, flare_strerror(rc));
        ex->flags &= ~(uint32_t)EX_IN_HANDLER;
    }
    ex->flags &= ~(uint32_t)(EX_BODY_OPEN | EX_BODY_LIVE | EX_BODY_PAUSED);
    return 1;
}

bool flare__ex_body_end(struct flare_req *ex, int err)
{
    int rc = call_end(ex, err);
    if (err == 0) {
        settle_end(ex, rc);
        return true;
    }
    if (ex->flags & EX_ORPHAN) {
        /* the client is gone: nothing can be answered; free it */
        if (ex->flags & EX_SENT)
            flare__ex_put(ex->worker, ex);
        else
            flare__res_orphan_done(ex);
        return true;
    }
    return (ex->flags & EX_SENT) != 0;
}

void flare_req_body_pause(flare_req_t *req)
{
    struct flare_req *ex = req;
    if (ex == NULL || !(ex->flags & EX_BODY_LIVE) || (ex->flags & EX_BODY_PAUSED))
        return;
    ex->flags |= EX_BODY_PAUSED;
    if ((ex->flags & EX_BODY_STREAM) && (ex->flags & EX_BODY_READING) && !(ex->flags & EX_ORPHAN))
        ex->ops->body_read(ex, false);
}

void flare_req_body_resume(flare_req_t *req)
{
    struct flare_req *ex = req;
    if (ex == NULL || !(ex->flags & EX_BODY_LIVE) || !(ex->flags & EX_BODY_PAUSED))
        return;
    ex->flags &= ~(uint32_t)EX_BODY_PAUSED;
    if (ex->flags & EX_BODY_STREAM) {
        ex->flags |= EX_BODY_READING;
        if (!(ex->flags & EX_ORPHAN))
            ex->ops->body_read(ex, true);
        return;
    }
    if ((ex->flags & EX_BODY_ENDING) && !(ex->flags & EX_IN_HANDLER))
        settle_end(ex, call_end(ex, 0));
}

uint64_t flare_req_body_received(const flare_req_t *req)
{
    return req != NULL ? req->body_rx : 0;
}
