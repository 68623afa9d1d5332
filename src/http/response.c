/* The response API (flare_res_*), protocol-neutral: state and argument
 * checks, the after hooks (once), headers, automatic answers. The bytes are
 * the wire protocol's business: every response ends in one of ex->ops. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "http/exchange.h"
#include "http/svc.h"
#include "worker.h"
#include "mw/chain.h"

int flare__res_orphan_done(struct flare_req *ex)
{
    ex->flags |= EX_SENT;
    if (!(ex->flags & EX_IN_HANDLER))
        flare__ex_put(ex->worker, ex);
    return 0;
}

/* No control bytes (CR, LF, NUL, DEL) in a Content-Type, checked on every
 * response. The common lengths (8 to 32 bytes) are checked inline without a
 * branch per block: two overlapping loads whose findings are OR-ed (eight
 * bytes each with SWAR, sixteen with SSE2), one test at the end. Anything
 * flagged, and other lengths, get the exact byte-by-byte look (HTAB is
 * allowed in a field value). "text/plain": 50 -> 24 instructions. */
#if !defined(__SSE2__)
static inline uint64_t ctl_bits8(const char *p)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t x;
    memcpy(&x, p, 8);
    uint64_t lt20 = (x - ones * 0x20) & ~x & highs; /* a byte < 0x20 */
    uint64_t d = x ^ (ones * 0x7f);
    uint64_t del = (d - ones) & ~d & highs; /* a byte == 0x7f */
    return lt20 | del;
}
#endif

#if defined(__SSE2__)
static inline int ctl_bits16(const char *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i lt20 = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v); /* <= 0x1f */
    __m128i del = _mm_cmpeq_epi8(v, _mm_set1_epi8(0x7f));
    return _mm_movemask_epi8(_mm_or_si128(lt20, del));
}
#endif

static __attribute__((noinline)) bool ctype_ok_slow(flare_str_t s)
{
    return flare__field_value_ok(s);
}

static inline bool ctype_ok(flare_str_t s)
{
    if (s.len >= 8 && s.len <= 16) {
#if defined(__SSE2__)
        /* both halves in one vector: one test instead of two SWAR blocks
         * ("text/plain": -10 instructions per response, callgrind) */
        __m128i v =
            _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(const void *)s.ptr),
                               _mm_loadl_epi64((const __m128i *)(const void *)(s.ptr + s.len - 8)));
        __m128i lt20 = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
        __m128i del = _mm_cmpeq_epi8(v, _mm_set1_epi8(0x7f));
        if (flare__likely(_mm_movemask_epi8(_mm_or_si128(lt20, del)) == 0))
            return true;
#else
        if (flare__likely((ctl_bits8(s.ptr) | ctl_bits8(s.ptr + s.len - 8)) == 0))
            return true;
#endif
    }
#if defined(__SSE2__)
    else if (s.len > 16 && s.len <= 32) {
        if (flare__likely((ctl_bits16(s.ptr) | ctl_bits16(s.ptr + s.len - 16)) == 0))
            return true;
    }
#endif
    return ctype_ok_slow(s);
}

static int run_after(struct flare_req *ex, int status)
{
    if (ex->flags & EX_AFTER_DONE)
        return status;
    ex->flags |= EX_AFTER_DONE;
    ex->res.status = status;
    flare__chain_after(ex);
    return ex->res.status;
}

int flare_res_status(const flare_res_t *res)
{
    return res->status;
}

int flare_res_set_status(flare_res_t *res, int status)
{
    if (flare__res_ex(res)->flags & (EX_SENT | EX_STREAM))
        return FLARE_ESTATE;
    if (status < 200 || status > 999)
        return FLARE_EINVAL;
    res->status = status;
    return 0;
}

enum { SEND_GO = 1, SEND_ORPHAN = 2, SEND_HOLD = 3 };

/* What every complete response goes through first: state and argument
 * checks (invalid: the caller's own extra ones), then the after hooks,
 * which may change *status or answer themselves. Returns SEND_GO, or
 * SEND_ORPHAN / a result once the caller has released its body. */
static inline __attribute__((always_inline)) int send_prologue(struct flare_req *ex, int *status,
                                                               flare_str_t ctype, bool invalid)
{
    if (ex->flags & EX_ORPHAN)
        return SEND_ORPHAN;
    if (ex->flags & (EX_SENT | EX_STREAM))
        return FLARE_ESTATE;
    if ((unsigned)(*status - 200) > 799u || !ctype_ok(ctype) || invalid)
        return FLARE_EINVAL;
    if (ex->flags & EX_HAS_AFTER) {
        *status = run_after(ex, *status);
        if (ex->flags & EX_ORPHAN)
            return SEND_ORPHAN;
        if (ex->flags & (EX_SENT | EX_STREAM | EX_HELD))
            return ex->flags & (EX_SENT | EX_STREAM) ? 0 : SEND_HOLD;
    }
    return SEND_GO;
}

/* The observers' answered hooks (the access log), when one is installed:
 * before the protocol op, which may recycle the exchange once the response
 * is queued. */
static inline void observe_done(struct flare_req *ex, int status, uint64_t bytes)
{
    flare_ex_observers_t *t = ex->worker->ex_obs;
    if (flare__unlikely(t != NULL) && t->nanswered > 0)
        flare__ex_observe_answered(ex, status, bytes);
}

/* ---- held responses (flare__res_hold) ---- */

enum { HOLD_COPY, HOLD_REF, HOLD_FILE };

struct flare_res_hold {
    unsigned count; /* holds not yet released */
    bool stashed;   /* the response is kept below */
    bool oom;       /* it could not be: answer 500 */
    int kind, status;
    flare_str_t ctype, body;
    flare_release_t ref;
    int fd;
    uint64_t off, len;
    int err_status; /* the first release with an error */
    const char *err_msg;
};

int flare__res_hold(flare_res_t *res)
{
    struct flare_req *ex = flare__res_ex(res);
    if (!(ex->flags & EX_AFTER_DONE) || (ex->flags & (EX_SENT | EX_STREAM | EX_BEGINNING)))
        return FLARE_ESTATE;
    if (ex->flags & EX_HELD) {
        if (ex->hold->stashed)
            return FLARE_ESTATE; /* the after hooks are over */
        ex->hold->count++;
        return 0;
    }
    struct flare_res_hold *h = flare__arena_alloc(&ex->arena, sizeof(*h));
    if (h == NULL)
        return FLARE_ENOMEM;
    memset(h, 0, sizeof(*h));
    h->count = 1;
    h->fd = -1;
    ex->hold = h;
    ex->flags |= EX_HELD;
    return 0;
}

static void hold_drop_body(struct flare_res_hold *h)
{
    if (h->kind == HOLD_REF)
        h->ref.fn(h->ref.ud);
    else if (h->kind == HOLD_FILE && h->fd >= 0)
        close(h->fd);
    h->fd = -1;
}

/* Hands the kept response to the protocol, or its replacement. */
static int hold_go(struct flare_req *ex)
{
    struct flare_res_hold *h = ex->hold;
    ex->flags &= ~(uint32_t)EX_HELD;
    if (ex->flags & EX_ORPHAN) {
        hold_drop_body(h);
        return flare__res_orphan_done(ex);
    }
    if (h->err_status != 0 || h->oom) {
        hold_drop_body(h);
        return flare__res_error(ex, h->oom ? 500 : h->err_status,
                                h->oom ? "out of memory" : h->err_msg);
    }
    observe_done(ex, h->status, h->kind == HOLD_FILE ? h->len : h->body.len);
    if (h->kind == HOLD_COPY)
        return ex->ops->respond(ex, h->status, h->ctype, h->body);
    if (h->kind == HOLD_REF)
        return ex->ops->respond_ref(ex, h->status, h->ctype, h->body, &h->ref);
    int rc = ex->ops->respond_file(ex, h->status, h->ctype, h->fd, h->off, h->len);
    if (rc != 0)
        return rc;
    ex->flags |= EX_SENT;
    if (!(ex->flags & EX_IN_HANDLER))
        flare__ex_complete(ex);
    return 0;
}

/* The send call of a held response: keeps what it needs past the call. */
static __attribute__((noinline)) int hold_stash(struct flare_req *ex, int kind, int status,
                                                flare_str_t ctype, flare_str_t body,
                                                const flare_release_t *ref, int fd, uint64_t off,
                                                uint64_t len)
{
    struct flare_res_hold *h = ex->hold;
    h->kind = kind;
    h->status = status;
    h->ctype = FLARE_STR_NULL;
    if (ctype.len > 0) {
        char *c = flare__arena_dup(&ex->arena, ctype.ptr, ctype.len);
        h->ctype = (flare_str_t){ c, ctype.len };
        h->oom |= c == NULL;
    }
    h->body = body;
    if (kind == HOLD_COPY && body.len > 0) {
        char *b = flare__arena_dup(&ex->arena, body.ptr, body.len);
        h->body.ptr = b;
        h->oom |= b == NULL;
    }
    if (kind == HOLD_REF)
        h->ref = *ref;
    h->fd = fd;
    h->off = off;
    h->len = len;
    h->stashed = true;
    if (h->count == 0) /* released during the after hooks already */
        return hold_go(ex);
    return 0;
}

void flare__res_release(flare_res_t *res, int status, const char *msg)
{
    struct flare_req *ex = flare__res_ex(res);
    if (!(ex->flags & EX_HELD))
        return;
    struct flare_res_hold *h = ex->hold;
    if (status != 0 && h->err_status == 0) {
        h->err_status = status;
        h->err_msg = msg != NULL ? msg : "unavailable";
    }
    if (--h->count > 0 || !h->stashed)
        return; /* more holds, or the send call is still in its after hooks */
    if (hold_go(ex) != 0 && !(ex->flags & EX_SENT)) {
        ex->flags |= EX_CLOSE;
        flare__res_error(ex, 500, "cannot send the response");
    }
}

static int send_common(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body,
                       const flare_release_t *ref)
{
    int rc = send_prologue(ex, &status, ctype, false);
    if (flare__unlikely(rc != SEND_GO)) {
        if (rc == SEND_HOLD)
            return hold_stash(ex, ref != NULL ? HOLD_REF : HOLD_COPY, status, ctype, body, ref, -1,
                              0, 0);
        if (ref != NULL)
            ref->fn(ref->ud);
        return rc == SEND_ORPHAN ? flare__res_orphan_done(ex) : rc;
    }
    observe_done(ex, status, body.len);
    if (ref != NULL)
        return ex->ops->respond_ref(ex, status, ctype, body, ref);
    return ex->ops->respond(ex, status, ctype, body);
}

int flare_res_send(flare_res_t *res, int status, flare_str_t content_type, flare_str_t body)
{
    return send_common(flare__res_ex(res), status, content_type, body, NULL);
}

int flare_res_redirect(flare_res_t *res, int status, flare_str_t location)
{
    static const char lead[] = "Redirecting to ";
    struct flare_req *ex = flare__res_ex(res);
    if (status != 301 && status != 302 && status != 303 && status != 307 && status != 308)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_res_redirect: status %d is not 301, 302, 303, 307 or 308",
                           status);
    if (location.ptr == NULL || location.len == 0)
        return flare__fail(FLARE_EINVAL, 0, "flare_res_redirect: the location is empty");
    if (!flare__field_value_ok(location) || memchr(location.ptr, '\t', location.len) != NULL)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_res_redirect: the location holds CR, LF, NUL or another "
                           "control character");
    if (location.len > SIZE_MAX / 2)
        return flare__fail(FLARE_EINVAL, 0, "flare_res_redirect: the location is too long");
    if (ex->flags & (EX_SENT | EX_STREAM))
        return flare__fail(FLARE_ESTATE, 0, "flare_res_redirect: a response was already sent");
    int rc = flare_res_header(res, FLARE_STR("Location"), location);
    if (rc != 0)
        return rc == FLARE_ENOMEM ? flare__fail(rc, 0, "flare_res_redirect: out of memory") : rc;
    /* the body, for clients that do not follow: "Redirecting to <location>\n" */
    size_t n = sizeof(lead) - 1 + location.len + 1;
    char *body = flare__arena_alloc(&ex->arena, n);
    if (body == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_res_redirect: out of memory");
    memcpy(body, lead, sizeof(lead) - 1);
    memcpy(body + sizeof(lead) - 1, location.ptr, location.len);
    body[n - 1] = '\n';
    return send_common(ex, status, FLARE_STR("text/plain; charset=utf-8"), (flare_str_t){ body, n },
                       NULL);
}

static void no_release(void *ud)
{
    (void)ud;
}

int flare_res_send_ref(flare_res_t *res, int status, flare_str_t content_type, flare_str_t body,
                       flare_task_fn release, void *ud)
{
    flare_release_t ref = { release != NULL ? release : no_release, ud };
    return send_common(flare__res_ex(res), status, content_type, body, &ref);
}

int flare_res_sendfile(flare_res_t *res, int status, flare_str_t content_type, int fd, uint64_t off,
                       uint64_t len)
{
    struct flare_req *ex = flare__res_ex(res);
    if (fd < 0)
        return FLARE_EINVAL;
    int rc = send_prologue(ex, &status, content_type, off > INT64_MAX || len > INT64_MAX - off);
    if (rc == SEND_HOLD)
        return hold_stash(ex, HOLD_FILE, status, content_type, FLARE_STR_NULL, NULL, fd, off, len);
    if (rc != SEND_GO) {
        close(fd);
        return rc == SEND_ORPHAN ? flare__res_orphan_done(ex) : rc;
    }
    observe_done(ex, status, len);
    rc = ex->ops->respond_file(ex, status, content_type, fd, off, len);
    if (rc != 0)
        return rc;
    ex->flags |= EX_SENT;
    if (!(ex->flags & EX_IN_HANDLER))
        flare__ex_complete(ex);
    return 0;
}

int flare_res_begin(flare_res_t *res, int status, flare_str_t content_type)
{
    struct flare_req *ex = flare__res_ex(res);
    if (ex->flags & EX_ORPHAN)
        return 0;
    if (ex->flags & (EX_SENT | EX_STREAM))
        return FLARE_ESTATE;
    if (status < 200 || status > 999 || !ctype_ok(content_type))
        return FLARE_EINVAL;
    if (ex->flags & EX_HAS_AFTER) {
        ex->flags |= EX_BEGINNING; /* a stream cannot be held */
        status = run_after(ex, status);
        ex->flags &= ~(uint32_t)EX_BEGINNING;
        if (ex->flags & (EX_SENT | EX_STREAM | EX_ORPHAN))
            return 0;
    }
    int rc = ex->ops->stream_begin(ex, status, content_type);
    if (rc != 0)
        return rc;
    ex->res.status = status; /* for the observer at flare_res_end */
    ex->stream_bytes = 0;
    ex->flags |= EX_STREAM;
    flare__ex_complete(ex);
    return 0;
}

/* flare_res_on_drain's settings, in the exchange's arena. */
struct flare_res_drain {
    size_t high_water;
    flare_res_drain_fn fn;
    void *ud;
};

static size_t res_high_water(const struct flare_req *ex)
{
    return (ex->flags & EX_DRAIN_CB) ? ex->drain->high_water : FLARE_RES_HIGH_WATER;
}

static size_t res_unsent(const struct flare_req *ex)
{
    return ex->ops->unsent != NULL ? ex->ops->unsent(ex) : 0;
}

int flare_res_write(flare_res_t *res, flare_str_t data)
{
    struct flare_req *ex = flare__res_ex(res);
    if (ex->flags & EX_ORPHAN)
        return 0;
    if (!(ex->flags & EX_STREAM) || (ex->flags & EX_SENT))
        return FLARE_ESTATE;
    if (data.len == 0 || (ex->flags & EX_HEAD_ONLY))
        return 0;
    int rc = ex->ops->stream_write(ex, data);
    if (rc != 0)
        return rc;
    ex->stream_bytes += data.len;
    flare__ex_complete(ex);
    /* Measured after the protocol moved the bytes toward the wire: what
     * the socket took at once is not backpressure. The protocol saw a
     * streamed response in that call and checks it after its next I/O. */
    if (!(ex->flags & (EX_BACKPRESSURED | EX_ORPHAN)) && res_unsent(ex) > res_high_water(ex))
        ex->flags |= EX_BACKPRESSURED;
    return 0;
}

bool flare_res_backpressured(const flare_res_t *res)
{
    const struct flare_req *ex = (const struct flare_req *)(const void *)res;
    return (ex->flags & (EX_BACKPRESSURED | EX_ORPHAN)) == EX_BACKPRESSURED;
}

int flare_res_on_drain(flare_res_t *res, size_t high_water, flare_res_drain_fn fn, void *ud)
{
    struct flare_req *ex = flare__res_ex(res);
    if (ex->flags & EX_SENT)
        return FLARE_ESTATE;
    if (!(ex->flags & EX_DRAIN_CB)) {
        struct flare_res_drain *d = flare__arena_alloc(&ex->arena, sizeof(*d));
        if (d == NULL)
            return FLARE_ENOMEM;
        ex->drain = d;
        ex->flags |= EX_DRAIN_CB;
    }
    ex->drain->high_water = high_water != 0 ? high_water : FLARE_RES_HIGH_WATER;
    ex->drain->fn = fn;
    ex->drain->ud = ud;
    return 0;
}

bool flare__res_drain_check(struct flare_req *ex)
{
    if (!(ex->flags & EX_BACKPRESSURED) || (ex->flags & (EX_ORPHAN | EX_SENT)))
        return false;
    if (res_unsent(ex) > res_high_water(ex) / 2)
        return false;
    ex->flags &= ~(uint32_t)EX_BACKPRESSURED;
    if ((ex->flags & EX_DRAIN_CB) && ex->drain->fn != NULL)
        ex->drain->fn(&ex->res, ex->drain->ud);
    return true;
}

int flare_res_end(flare_res_t *res)
{
    struct flare_req *ex = flare__res_ex(res);
    if (ex->flags & EX_ORPHAN)
        return flare__res_orphan_done(ex);
    if (!(ex->flags & EX_STREAM) || (ex->flags & EX_SENT))
        return FLARE_ESTATE;
    observe_done(ex, ex->res.status, ex->stream_bytes);
    int rc = ex->ops->stream_end(ex);
    if (rc != 0)
        return rc;
    ex->flags |= EX_SENT;
    flare__ex_complete(ex);
    return 0;
}

void flare_res_close(flare_res_t *res)
{
    flare__res_ex(res)->flags |= EX_CLOSE;
}

static void append_hdr(struct flare_req *ex, flare_res_hdr_t *h)
{
    h->next = NULL;
    *ex->res.hdrs_tail = h;
    ex->res.hdrs_tail = &h->next;
}

int flare_res_header(flare_res_t *res, flare_str_t name, flare_str_t value)
{
    struct flare_req *ex = flare__res_ex(res);
    if (ex->flags & (EX_SENT | EX_STREAM))
        return FLARE_ESTATE;
    if (!flare__is_token(name) || !flare__field_value_ok(value))
        return FLARE_EINVAL;
    if (FLARE__IEQ(name, "content-length") || FLARE__IEQ(name, "transfer-encoding") ||
        FLARE__IEQ(name, "date") || FLARE__IEQ(name, "connection") || FLARE__IEQ(name, "server") ||
        FLARE__IEQ(name, "content-type"))
        return FLARE_EINVAL;
    flare_res_hdr_t *h = flare__arena_alloc(&ex->arena, sizeof(*h) + name.len + value.len);
    if (h == NULL)
        return FLARE_ENOMEM;
    char *s = (char *)(h + 1);
    memcpy(s, name.ptr, name.len);
    if (value.len > 0)
        memcpy(s + name.len, value.ptr, value.len);
    h->name = (flare_str_t){ s, name.len };
    h->value = (flare_str_t){ s + name.len, value.len };
    append_hdr(ex, h);
    return 0;
}

int flare__res_header_block(flare_res_t *res, flare_str_t block)
{
    struct flare_req *ex = flare__res_ex(res);
    if (ex->flags & (EX_SENT | EX_STREAM))
        return FLARE_ESTATE;
    flare_res_hdr_t *h = flare__arena_alloc(&ex->arena, sizeof(*h));
    if (h == NULL)
        return FLARE_ENOMEM;
    h->name = (flare_str_t){ "", 0 };
    h->value = block;
    append_hdr(ex, h);
    return 0;
}

int flare__res_upgrade(flare_res_t *res, flare_str_t token, flare_upgrade_fn fn, void *ud)
{
    struct flare_req *ex = flare__res_ex(res);
    if (ex->flags & (EX_SENT | EX_STREAM))
        return FLARE_ESTATE;
    if (ex->flags & EX_ORPHAN) {
        flare__res_orphan_done(ex);
        return FLARE_ECLOSED; /* fn will never be called: the caller releases its state */
    }
    if (fn == NULL || token.len == 0 || !ctype_ok(token))
        return FLARE_EINVAL;
    if (ex->ops->upgrade == NULL)
        return FLARE_ESTATE; /* this protocol does not switch */
    int rc = ex->ops->upgrade(ex, token, fn, ud);
    if (rc != 0)
        return rc;
    flare__ex_long(ex); /* what follows is a stream, not this request's time */
    ex->flags |= EX_SENT;
    if (!(ex->flags & EX_IN_HANDLER))
        flare__ex_complete(ex);
    return 0;
}

int flare__res_error(struct flare_req *ex, int status, const char *msg)
{
    char body[160];
    size_t n = strlen(msg);
    if (n > sizeof(body) - 2)
        n = sizeof(body) - 2;
    memcpy(body, msg, n);
    body[n++] = '\n';
    /* headers set so far stay: a middleware's (request id, CORS) belong on
     * error answers too */
    ex->flags &= ~(uint32_t)EX_STREAM;
    if (ex->flags & EX_SENT)
        return 0;
    return send_common(ex, status, FLARE_STR("text/plain; charset=utf-8"), (flare_str_t){ body, n },
                       NULL);
}

/* "GET, HEAD, POST, OPTIONS": HEAD whenever GET is there, OPTIONS always. */
static flare_str_t allow_value(uint32_t bits, char *buf)
{
    if (bits & (1u << FLARE_METHOD_GET))
        bits |= 1u << FLARE_METHOD_HEAD;
    bits |= 1u << FLARE_METHOD_OPTIONS;
    char *p = buf;
    for (int m = 1; m < FLARE_METHOD_COUNT; m++) {
        if (!(bits & (1u << m)))
            continue;
        if (p != buf) {
            *p++ = ',';
            *p++ = ' ';
        }
        flare_str_t name = flare_method_name((flare_method_t)m);
        memcpy(p, name.ptr, name.len);
        p += name.len;
    }
    return (flare_str_t){ buf, (size_t)(p - buf) };
}

int flare__res_auto(struct flare_req *ex)
{
    uint32_t allowed = ex->match.allowed;
    flare_method_t m = ex->head.method_id;
    char allow[128];
    if (m == FLARE_METHOD_OPTIONS && ex->head.path.len == 1 && ex->head.path.ptr[0] == '*') {
        flare_res_header(&ex->res, FLARE_STR("Allow"), allow_value(~0u & ~1u, allow));
        return flare_res_send(&ex->res, 204, FLARE_STR_NULL, FLARE_STR_NULL);
    }
    if (allowed == 0)
        return flare__res_error(ex, 404, "not found");
    flare_res_header(&ex->res, FLARE_STR("Allow"), allow_value(allowed, allow));
    if (m == FLARE_METHOD_OPTIONS)
        return flare_res_send(&ex->res, 204, FLARE_STR_NULL, FLARE_STR_NULL);
    return send_common(ex, 405, FLARE_STR("text/plain; charset=utf-8"),
                       FLARE_STR("method not allowed\n"), NULL);
}
