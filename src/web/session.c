/* The session middleware and the flare_session_* handler API.
 *
 * Stored form of a session (opaque to stores): "<created unix seconds>\n"
 * then, per key, "<klen> <vlen>\n<key><value>". The request's copy lives in
 * its arena. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flare/session.h"
#include "app_svc.h"
#include "http/exchange.h"
#include "http/svc.h"
#include "core/random.h"

#define SID_LEN FLARE__SESSION_ID_HEX_LEN

typedef struct smw {
    char *cookie_name;
    char *path;
    unsigned idle, absolute;
    flare_session_secure_t secure;
    flare_same_site_t same_site;
    flare_session_store_t store;
} smw_t;

typedef struct kv {
    struct kv *next;
    flare_str_t k, v;
    bool dead;
} kv_t;

typedef struct sess {
    smw_t *mw;
    flare_req_t *req;
    flare_res_t *res;
    char id[SID_LEN + 1];
    char old_id[SID_LEN + 1];
    bool has_id, exists, dirty, regen, destroyed, loading, async_wait;
    bool skip;        /* answered 503 (load failed): nothing to save */
    bool holding;     /* the response waits for the store (flare__res_hold) */
    bool new_id;      /* a save under a new id: Set-Cookie once stored */
    bool clearing;    /* a removal: clear the cookie once removed */
    unsigned pending; /* store calls not answered yet, +1 while issuing */
    int failed;       /* the first error among them */
    uint64_t created;
    kv_t *kvs;
} sess_t;

static const char store_down[] = "session store unavailable";

static const char sess_tag[] = "flare.session";

static uint64_t now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return (uint64_t)ts.tv_sec;
}

static sess_t *get(flare_req_t *req)
{
    return flare_req_get_ptr(req, sess_tag, sess_tag);
}

static bool sid_ok(flare_str_t v)
{
    if (v.len != SID_LEN)
        return false;
    for (size_t i = 0; i < v.len; i++) {
        char c = v.ptr[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    }
    return true;
}

static bool read_num(const char **p, const char *end, char stop, uint64_t *out)
{
    uint64_t v = 0;
    const char *q = *p;
    if (q == end || *q < '0' || *q > '9')
        return false;
    while (q < end && *q >= '0' && *q <= '9') {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*q++ - '0');
    }
    if (q == end || *q != stop)
        return false;
    *p = q + 1;
    *out = v;
    return true;
}

/* Parses the stored form into the request arena; false if malformed. */
static bool parse(sess_t *s, flare_str_t data)
{
    const char *p = data.ptr, *end = data.ptr + data.len;
    uint64_t created;
    if (!read_num(&p, end, '\n', &created))
        return false;
    s->created = created;
    kv_t **tail = &s->kvs;
    while (p < end) {
        uint64_t kl, vl;
        if (!read_num(&p, end, ' ', &kl) || !read_num(&p, end, '\n', &vl) ||
            kl > (uint64_t)(end - p) || vl > (uint64_t)(end - p) - kl)
            return false;
        kv_t *kv = flare_req_alloc(s->req, sizeof(*kv) + kl + vl);
        if (kv == NULL)
            return false;
        char *b = (char *)(kv + 1);
        memcpy(b, p, kl + vl);
        kv->k = (flare_str_t){ b, kl };
        kv->v = (flare_str_t){ b + kl, vl };
        kv->dead = false;
        kv->next = NULL;
        *tail = kv;
        tail = &kv->next;
        p += kl + vl;
    }
    return true;
}

static void load_done(void *ctx, int rc, flare_str_t data)
{
    sess_t *s = ctx;
    s->loading = false;
    if (rc != 0 && rc != FLARE_ENOTFOUND) {
        /* the store is unreachable: not "no session" (that would log the
         * user out, or hand out a new one over the stored one) */
        s->skip = true;
        if (s->async_wait)
            flare_res_send(s->res, 503, FLARE_STR("text/plain; charset=utf-8"),
                           FLARE_STR("session store unavailable\n"));
        return;
    }
    if (rc == 0) {
        s->kvs = NULL;
        if (parse(s, data) && s->created + s->mw->absolute > now_s()) {
            s->exists = true;
        } else {
            /* expired or unreadable: start over under a new id */
            s->kvs = NULL;
            s->destroyed = false;
            memcpy(s->old_id, s->id, sizeof(s->id));
            s->regen = true;
            s->exists = false;
        }
    }
    if (!s->exists)
        s->created = now_s();
    if (s->async_wait)
        flare_next(s->req); /* a remote store answered later: resume */
}

static int session_before(flare_req_t *req, flare_res_t *res, void *ud)
{
    smw_t *m = ud;
    sess_t *s = flare_req_alloc(req, sizeof(*s));
    if (s == NULL)
        return FLARE_ENOMEM;
    memset(s, 0, sizeof(*s));
    s->mw = m;
    s->req = req;
    s->res = res;
    s->created = now_s();
    int rc = flare_req_set_ptr(req, sess_tag, sess_tag, s);
    if (rc != 0)
        return rc;
    flare_str_t cookie = flare_req_header(req, "Cookie");
    if (cookie.ptr == NULL)
        return 0;
    flare_str_t sid = flare_cookie_get(cookie, flare_str(m->cookie_name));
    if (!sid_ok(sid))
        return 0;
    memcpy(s->id, sid.ptr, SID_LEN);
    s->id[SID_LEN] = '\0';
    s->has_id = true;
    s->loading = true;
    m->store.load(m->store.self, flare_req_worker(req), (flare_str_t){ s->id, SID_LEN }, m->idle,
                  load_done, s);
    if (s->loading) {
        s->async_wait = true;
        return FLARE_ASYNC;
    }
    if (s->skip)
        return flare_res_send(res, 503, FLARE_STR("text/plain; charset=utf-8"),
                              FLARE_STR("session store unavailable\n"));
    return 0;
}

static void set_cookie(flare_res_t *res, const smw_t *m, flare_str_t value, int64_t max_age)
{
    flare_cookie_t c;
    flare_cookie_init(&c, flare_str(m->cookie_name), value);
    c.path = flare_str(m->path);
    c.max_age = max_age;
    /* AUTO: Secure exactly when this request came over TLS, so a cookie
     * set over https is never sent back in clear, and plain HTTP (local
     * development) still works */
    c.secure = m->secure == FLARE_SESSION_SECURE_ALWAYS ||
               (m->secure == FLARE_SESSION_SECURE_AUTO && flare_req_secure(flare__res_ex(res)));
    c.same_site = m->same_site;
    char buf[512];
    size_t len;
    if (flare_cookie_format(&c, buf, sizeof(buf), &len) == 0)
        flare_res_header(res, FLARE_STR("Set-Cookie"), (flare_str_t){ buf, len });
}

static flare_str_t serialize(sess_t *s)
{
    size_t need = 24;
    for (kv_t *kv = s->kvs; kv != NULL; kv = kv->next) {
        /* lengths of arena copies, but summed: checked all the same */
        if (!kv->dead && (__builtin_add_overflow(need, kv->k.len + 44, &need) ||
                          __builtin_add_overflow(need, kv->v.len, &need)))
            return FLARE_STR_NULL;
    }
    char *b = flare_req_alloc(s->req, need);
    if (b == NULL)
        return FLARE_STR_NULL;
    size_t n = (size_t)snprintf(b, need, "%llu\n", (unsigned long long)s->created);
    for (kv_t *kv = s->kvs; kv != NULL; kv = kv->next) {
        if (kv->dead)
            continue;
        n += (size_t)snprintf(b + n, need - n, "%zu %zu\n", kv->k.len, kv->v.len);
        memcpy(b + n, kv->k.ptr, kv->k.len);
        n += kv->k.len;
        memcpy(b + n, kv->v.ptr, kv->v.len);
        n += kv->v.len;
    }
    return (flare_str_t){ b, n };
}

static void set_id_cookie(sess_t *s)
{
    smw_t *m = s->mw;
    uint64_t age = now_s() - s->created;
    int64_t left = age < m->absolute ? (int64_t)(m->absolute - age) : 0;
    set_cookie(s->res, m, (flare_str_t){ s->id, SID_LEN }, left);
}

/* Every store call has answered: the cookie goes on the response, which
 * is let go; or, if one failed, the response becomes a 503 without it. */
static void store_answered(sess_t *s)
{
    if (s->failed == 0) {
        if (s->clearing)
            set_cookie(s->res, s->mw, FLARE_STR(""), 0);
        else if (s->new_id)
            set_id_cookie(s);
    }
    if (s->holding)
        flare__res_release(s->res, s->failed != 0 ? 503 : 0, store_down);
}

static void op_done(void *ctx, int rc)
{
    sess_t *s = ctx;
    if (rc != 0 && s->failed == 0)
        s->failed = rc;
    if (--s->pending == 0)
        store_answered(s);
}

static void session_after(flare_req_t *req, flare_res_t *res, void *ud)
{
    smw_t *m = ud;
    sess_t *s = get(req);
    if (s == NULL || s->skip)
        return;
    flare_worker_t *w = flare_req_worker(req);
    bool rm_cur = false, rm_old = false, save = false;
    flare_str_t blob = FLARE_STR_NULL;
    if (s->destroyed) {
        rm_cur = s->has_id;
        s->clearing = s->has_id || s->exists;
    } else {
        rm_old = s->regen && s->old_id[0] != '\0';
        if (s->dirty || s->regen) {
            s->new_id = s->regen || !s->exists || !s->has_id;
            if (s->new_id && flare__session_id_hex(s->id) != 0)
                s->new_id = false; /* no id: nothing can be stored */
            else if ((blob = serialize(s)).ptr != NULL)
                save = true;
        }
    }
    if (!rm_cur && !rm_old && !save) {
        if (s->clearing)
            set_cookie(res, m, FLARE_STR(""), 0);
        return;
    }
    /* Hold the response until the store answers. A stream cannot be held:
     * nobody waits then (the callbacks must not reach this request, whose
     * memory may be gone by the time they run). */
    int hr = flare__res_hold(res);
    s->holding = hr == 0;
    flare_session_done_fn done = s->holding ? op_done : NULL;
    void *ctx = s->holding ? s : NULL;
    s->pending = 1; /* until every call is issued: one answering at once
                       must not finish early */
    if (rm_cur) {
        s->pending += s->holding;
        m->store.remove(m->store.self, w, (flare_str_t){ s->id, SID_LEN }, done, ctx);
    }
    if (rm_old) {
        s->pending += s->holding;
        m->store.remove(m->store.self, w, (flare_str_t){ s->old_id, SID_LEN }, done, ctx);
    }
    if (save) {
        s->pending += s->holding;
        m->store.save(m->store.self, w, (flare_str_t){ s->id, SID_LEN }, blob, m->idle, done, ctx);
    }
    if (!s->holding && hr != FLARE_ESTATE)
        s->failed = hr; /* out of memory for the hold: no cookie */
    if (--s->pending == 0)
        store_answered(s);
}

static void smw_free(void *p)
{
    smw_t *m = p;
    if (m->store.destroy != NULL)
        m->store.destroy(m->store.self);
    free(m->cookie_name);
    free(m->path);
    free(m);
}

int flare_sessions(flare_app_t *app, const flare_session_config_t *cfg, flare_middleware_t *out)
{
    if (app == NULL || out == NULL)
        return FLARE_EINVAL;
    memset(out, 0, sizeof(*out));
    flare_session_config_t def = { 0 };
    if (cfg == NULL)
        cfg = &def;
    const char *name = cfg->cookie_name != NULL ? cfg->cookie_name : "flare_sid";
    const char *path = cfg->path != NULL ? cfg->path : "/";
    /* validate name and path the way Set-Cookie will */
    flare_cookie_t probe;
    flare_cookie_init(&probe, flare_str(name), FLARE_STR("x"));
    probe.path = flare_str(path);
    char tmp[FLARE_COOKIE_FORMAT_MAX];
    size_t tl;
    if (flare_cookie_format(&probe, tmp, sizeof(tmp), &tl) != 0)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_session_config_t.cookie_name or path: \"%s\", \"%s\" cannot "
                           "go in a Set-Cookie",
                           name, path);
    if ((unsigned)cfg->secure > FLARE_SESSION_SECURE_NEVER)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_session_config_t.secure: %d is not a flare_session_secure_t",
                           (int)cfg->secure);
    smw_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return FLARE_ENOMEM;
    m->cookie_name = strdup(name);
    m->path = strdup(path);
    m->idle = cfg->idle_timeout != 0 ? cfg->idle_timeout : 1800;
    m->absolute = cfg->absolute_timeout != 0 ? cfg->absolute_timeout : 86400;
    m->secure = cfg->secure;
    m->same_site = cfg->same_site;
    int rc = 0;
    if (cfg->store.load != NULL)
        m->store = cfg->store;
    else
        rc = flare_session_memory_store(0, &m->store);
    if (rc == 0 && (m->cookie_name == NULL || m->path == NULL))
        rc = FLARE_ENOMEM;
    if (rc != 0) {
        smw_free(m);
        return rc;
    }
    rc = flare__app_own(app, m, smw_free);
    if (rc != 0)
        return rc;
    *out = (flare_middleware_t){ "session", session_before, session_after, m };
    return 0;
}

/* ---- handler API ---- */

flare_str_t flare_session_get(flare_req_t *req, const char *key)
{
    sess_t *s = get(req);
    if (s == NULL || key == NULL || s->destroyed)
        return FLARE_STR_NULL;
    flare_str_t k = flare_str(key);
    for (kv_t *kv = s->kvs; kv != NULL; kv = kv->next) {
        if (!kv->dead && flare_str_eq(kv->k, k))
            return kv->v;
    }
    return FLARE_STR_NULL;
}

int flare_session_set(flare_req_t *req, const char *key, flare_str_t value)
{
    sess_t *s = get(req);
    if (s == NULL)
        return FLARE_ESTATE;
    if (key == NULL || key[0] == '\0')
        return FLARE_EINVAL;
    flare_str_t k = flare_str(key);
    size_t size;
    if (__builtin_add_overflow(sizeof(kv_t) + k.len, value.len, &size))
        return FLARE_ETOOBIG;
    kv_t *kv = flare_req_alloc(req, size);
    if (kv == NULL)
        return FLARE_ENOMEM; /* the old value stays */
    for (kv_t *o = s->kvs; o != NULL; o = o->next) {
        if (!o->dead && flare_str_eq(o->k, k))
            o->dead = true;
    }
    char *b = (char *)(kv + 1);
    memcpy(b, k.ptr, k.len);
    if (value.len > 0)
        memcpy(b + k.len, value.ptr, value.len);
    kv->k = (flare_str_t){ b, k.len };
    kv->v = (flare_str_t){ b + k.len, value.len };
    kv->dead = false;
    kv->next = s->kvs;
    s->kvs = kv;
    s->dirty = true;
    s->destroyed = false;
    return 0;
}

int flare_session_unset(flare_req_t *req, const char *key)
{
    sess_t *s = get(req);
    if (s == NULL)
        return FLARE_ESTATE;
    flare_str_t k = flare_str(key);
    for (kv_t *kv = s->kvs; kv != NULL; kv = kv->next) {
        if (!kv->dead && flare_str_eq(kv->k, k)) {
            kv->dead = true;
            s->dirty = true;
        }
    }
    return 0;
}

bool flare_session_exists(flare_req_t *req)
{
    sess_t *s = get(req);
    return s != NULL && s->exists && !s->destroyed;
}

int flare_session_regenerate(flare_req_t *req)
{
    sess_t *s = get(req);
    if (s == NULL)
        return FLARE_ESTATE;
    if (s->has_id && s->exists)
        memcpy(s->old_id, s->id, sizeof(s->id));
    s->regen = true;
    s->destroyed = false;
    return 0;
}

int flare_session_destroy(flare_req_t *req)
{
    sess_t *s = get(req);
    if (s == NULL)
        return FLARE_ESTATE;
    s->destroyed = true;
    s->kvs = NULL;
    return 0;
}
