/* The Redis backplane of the channel layer (flare/cluster.h,
 * web/cluster_int.h): its settings and module, the Lua scripts (one call
 * per publish), publishing from any worker on that worker's own
 * connection, reading a channel's history, the wire form of a message, the
 * figures.
 *
 * A publish never waits on the worker loop: it is one EVALSHA pipelined on
 * the publishing worker's connection (no lock, nothing shared), answered
 * later on that worker; while Redis is known to be down it is refused at
 * once (FLARE_EUNAVAIL) instead. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "core/core.h"
#include "module.h"
#include "data/redis_int.h"
#include "flare/metrics.h"
#include "web/cluster_int.h"
#include "core/random.h"

/* ---- the scripts ---- */

/* KEYS: meta, history. ARGV: pub/sub channel, payload, an epoch for a new
 * history, its cap (count), age (ms, 0: none), the keys' lifetime (ms).
 * Returns {offset, epoch}. */
static const char script_publish[] =
    "local e = redis.call('HGET', KEYS[1], 'e')\n"
    "if not e then\n"
    "  e = ARGV[3]\n"
    "  redis.call('HSET', KEYS[1], 'e', e)\n"
    "end\n"
    "local o = redis.call('HINCRBY', KEYS[1], 'o', 1)\n"
    "redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'o', o, 'm', ARGV[2])\n"
    "local age = tonumber(ARGV[5])\n"
    "if age > 0 then\n"
    "  local t = redis.call('TIME')\n"
    "  local min = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - age\n"
    "  if min > 0 then redis.call('XTRIM', KEYS[2], 'MINID', '~', min) end\n"
    "end\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[6])\n"
    "redis.call('PEXPIRE', KEYS[2], ARGV[6])\n"
    "redis.call('PUBLISH', ARGV[1], o .. ':' .. e .. ':' .. ARGV[2])\n"
    "return {o, e}\n";

/* KEYS: meta, history. ARGV: since (-1: the position only), the most to
 * return. Returns {offset, epoch ("" when the channel has no history),
 * then offset, payload pairs after since}, or {offset, epoch, -1} when more
 * than the most are missing. */
static const char script_history[] =
    "local e = redis.call('HGET', KEYS[1], 'e') or ''\n"
    "local o = tonumber(redis.call('HGET', KEYS[1], 'o') or '0')\n"
    "local since = tonumber(ARGV[1])\n"
    "local out = {o, e}\n"
    "if since < 0 or o <= since then return out end\n"
    "local n = o - since\n"
    "if n > tonumber(ARGV[2]) then out[3] = -1 return out end\n"
    "local r = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', n)\n"
    "for i = #r, 1, -1 do\n"
    "  local f = r[i][2]\n"
    "  out[#out + 1] = f[2]\n"
    "  out[#out + 1] = f[4]\n"
    "end\n"
    "return out\n";

/* KEYS: presence. ARGV: INSTANCE/CLIENT, info, pub/sub channel, the join
 * event, the key's lifetime (ms). */
static const char script_pres_add[] = "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])\n"
                                      "redis.call('PEXPIRE', KEYS[1], ARGV[5])\n"
                                      "redis.call('PUBLISH', ARGV[3], ARGV[4])\n"
                                      "return 1\n";

/* KEYS: presence. ARGV: INSTANCE/CLIENT, pub/sub channel, the leave event. */
static const char script_pres_del[] = "if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then\n"
                                      "  redis.call('PUBLISH', ARGV[2], ARGV[3])\n"
                                      "end\n"
                                      "return 1\n";

/* KEYS: presence. ARGV: the instance keys' prefix, pub/sub channel.
 * Returns client, info pairs of the live instances; removes the others'
 * entries, each with a leave event. */
static const char script_pres_list[] =
    "local h = redis.call('HGETALL', KEYS[1])\n"
    "local alive, out = {}, {}\n"
    "for i = 1, #h, 2 do\n"
    "  local f = h[i]\n"
    "  local s = string.find(f, '/', 1, true)\n"
    "  local inst = s and string.sub(f, 1, s - 1) or ''\n"
    "  local client = s and string.sub(f, s + 1) or f\n"
    "  local ok = alive[inst]\n"
    "  if ok == nil then\n"
    "    ok = redis.call('EXISTS', ARGV[1] .. inst) == 1\n"
    "    alive[inst] = ok\n"
    "  end\n"
    "  if ok then\n"
    "    out[#out + 1] = client\n"
    "    out[#out + 1] = h[i + 1]\n"
    "  else\n"
    "    redis.call('HDEL', KEYS[1], f)\n"
    "    redis.call('PUBLISH', ARGV[2], '0:-:l' .. #client .. ',0,0:' .. client)\n"
    "  end\n"
    "end\n"
    "return out\n";

const char *const flare__cl_scripts[CL_SCRIPTS] = {
    [CL_PUBLISH] = script_publish,     [CL_HISTORY] = script_history,
    [CL_PRES_ADD] = script_pres_add,   [CL_PRES_DEL] = script_pres_del,
    [CL_PRES_LIST] = script_pres_list,
};

/* ---- small helpers ---- */

static size_t put_u64(char *out, uint64_t v, int base)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v % (unsigned)base];
        v /= (unsigned)base;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

flare_str_t flare__cl_key(const cluster_t *cl, char kind, flare_str_t name, char *buf)
{
    memcpy(buf, cl->prefix, cl->plen);
    buf[cl->plen] = kind;
    buf[cl->plen + 1] = ':';
    if (name.len > 0)
        memcpy(buf + cl->plen + 2, name.ptr, name.len);
    return (flare_str_t){ buf, cl->plen + 2 + name.len };
}

cl_stats_t *flare__cl_stats(cluster_t *cl, flare_worker_t *w)
{
    return &cl->st[flare_worker_id(w) < cl->nst ? flare_worker_id(w) : 0];
}

/* ---- running a script ---- */

typedef struct eval_ctx {
    cluster_t *cl;
    flare_worker_t *w;
    int which;
    bool again; /* sent as EVAL after NOSCRIPT */
    flare_redis_fn cb;
    void *ud;
    size_t nargs;
    flare_str_t *args; /* EVALSHA sha nkeys keys... args...; bytes below */
    char bytes[];
} eval_ctx_t;

static void eval_done(int err, const flare_redis_reply_t *rep, void *ud)
{
    eval_ctx_t *c = ud;
    if (err == 0 && rep->type == FLARE_REDIS_ERROR && !c->again && rep->str.len >= 8 &&
        memcmp(rep->str.ptr, "NOSCRIPT", 8) == 0) {
        /* a Redis without the script (restarted, flushed): once with its text */
        c->again = true;
        c->args[0] = FLARE_STR("EVAL");
        c->args[1] = flare_str(flare__cl_scripts[c->which]);
        if (flare_redis_cmd_str(c->cl->r, c->w, c->args, c->nargs, eval_done, c) == 0)
            return;
        err = FLARE_EUNAVAIL;
    }
    c->cb(err, err == 0 ? rep : NULL, c->ud);
    free(c);
}

int flare__cl_eval(cluster_t *cl, flare_worker_t *w, int which, const flare_str_t *keys,
                   size_t nkeys, const flare_str_t *args, size_t nargs, flare_redis_fn cb, void *ud)
{
    size_t total = 0, n = 3 + nkeys + nargs;
    for (size_t i = 0; i < nkeys; i++)
        total += keys[i].len;
    for (size_t i = 0; i < nargs; i++)
        total += args[i].len;
    eval_ctx_t *c = malloc(sizeof(*c) + n * sizeof(flare_str_t) + total + 4);
    if (c == NULL)
        return FLARE_ENOMEM;
    *c = (eval_ctx_t){ .cl = cl, .w = w, .which = which, .cb = cb, .ud = ud, .nargs = n };
    c->args = (flare_str_t *)(void *)(c->bytes);
    char *p = c->bytes + n * sizeof(flare_str_t);
    c->args[0] = FLARE_STR("EVALSHA");
    c->args[1] = (flare_str_t){ cl->sha[which], 40 };
    p[0] = (char)('0' + nkeys); /* at most 2 keys */
    c->args[2] = (flare_str_t){ p, 1 };
    p++;
    for (size_t i = 0; i < nkeys + nargs; i++) {
        flare_str_t s = i < nkeys ? keys[i] : args[i - nkeys];
        if (s.len > 0)
            memcpy(p, s.ptr, s.len);
        c->args[3 + i] = (flare_str_t){ p, s.len };
        p += s.len;
    }
    int rc = flare_redis_cmd_str(cl->r, w, c->args, n, eval_done, c);
    if (rc != 0)
        free(c);
    return rc;
}

/* ---- the wire form ---- */

/* KIND LEN "," EXCEPT_INSTANCE "," EXCEPT_ID ":" into out (64 bytes). */
static size_t encode_head(char *out, char kind, size_t hlen, uint64_t exinst, uint64_t exid)
{
    size_t n = 0;
    out[n++] = kind;
    n += put_u64(out + n, hlen, 10);
    out[n++] = ',';
    n += put_u64(out + n, exid != 0 ? exinst : 0, 16);
    out[n++] = ',';
    n += put_u64(out + n, exid, 16);
    out[n++] = ':';
    return n;
}

static bool take_num(flare_str_t *s, int base, char end, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    for (; i < s->len && s->ptr[i] != end; i++) {
        char c = s->ptr[i];
        int d = c >= '0' && c <= '9'                 ? c - '0'
                : base == 16 && c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                     : -1;
        if (d < 0 || i >= 16 + (base == 10 ? 3 : 0))
            return false;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    if (i == 0 || i == s->len)
        return false;
    s->ptr += i + 1;
    s->len -= i + 1;
    *out = v;
    return true;
}

flare__chan_msg_t *flare__cl_decode(flare_str_t name, uint64_t offset, flare_str_t epoch,
                                    flare_str_t payload)
{
    if (payload.len < 2 || epoch.len > FLARE_CHANNEL_EPOCH_MAX || !flare__chan_name_ok(name))
        return NULL;
    char kind = payload.ptr[0];
    flare_str_t p = { payload.ptr + 1, payload.len - 1 };
    uint64_t hlen, exinst, exid;
    if (!take_num(&p, 10, ',', &hlen) || !take_num(&p, 16, ',', &exinst) ||
        !take_num(&p, 16, ':', &exid) || hlen > p.len)
        return NULL;
    flare__chan_msg_t *m;
    if (kind == 't' || kind == 'b') {
        m = flare__chan_msg_new(FLARE__CHAN_DATA, name, (flare_str_t){ p.ptr, hlen },
                                (flare_str_t){ p.ptr + hlen, p.len - hlen }, kind == 'b');
    } else if (kind == 'j' || kind == 'l') {
        if (hlen == 0)
            return NULL;
        m = flare__chan_msg_new(kind == 'j' ? FLARE__CHAN_NJOIN : FLARE__CHAN_NLEAVE, name,
                                FLARE_STR_NULL, p, false);
        if (m != NULL)
            m->client_len = hlen;
    } else {
        return NULL;
    }
    if (m == NULL)
        return NULL;
    m->offset = offset;
    m->epoch_len = (uint8_t)epoch.len;
    if (epoch.len > 0) /* none after an epoch change with no message yet */
        memcpy(m->epoch, epoch.ptr, epoch.len);
    m->except_inst = exinst;
    m->except_id = exid;
    return m;
}

/* ---- publishing ---- */

typedef struct pub_ctx {
    cluster_t *cl;
    flare_worker_t *w;
    flare_channel_published_fn cb;
    void *ud;
} pub_ctx_t;

static void pub_done(int err, const flare_redis_reply_t *rep, void *ud)
{
    pub_ctx_t *c = ud;
    uint64_t offset = 0;
    flare_str_t epoch = FLARE_STR_NULL;
    if (err == 0) {
        if (rep->type == FLARE_REDIS_ARRAY && rep->n == 2 && rep->elem[0].type == FLARE_REDIS_INT &&
            rep->elem[1].type == FLARE_REDIS_STRING) {
            offset = (uint64_t)rep->elem[0].integer;
            epoch = rep->elem[1].str;
        } else {
            err = FLARE_EUNAVAIL; /* an error reply (out of memory, ...): not published */
        }
    }
    if (err != 0)
        flare__cl_count(&flare__cl_stats(c->cl, c->w)->publish_errors, 1);
    if (c->cb != NULL)
        c->cb(err, offset, epoch, c->ud);
    free(c);
}

static int cl_publish(void *bp, flare_worker_t *w, flare__chan_msg_t *m,
                      flare_channel_published_fn cb, void *ud)
{
    cluster_t *cl = bp;
    if (cl->r == NULL)
        return FLARE_ESTATE;
    if (!atomic_load_explicit(&cl->up, memory_order_relaxed)) {
        /* failing fast: Redis is known to be down */
        flare__cl_count(&flare__cl_stats(cl, w)->publish_errors, 1);
        return FLARE_EUNAVAIL;
    }
    flare_str_t name = { m->name, m->name_len };
    char mk[FLARE__CL_KEY_MAX], hk[FLARE__CL_KEY_MAX], ck[FLARE__CL_KEY_MAX];
    flare_str_t keys[2] = { flare__cl_key(cl, 'm', name, mk), flare__cl_key(cl, 'h', name, hk) };
    char head[64];
    size_t hl =
        encode_head(head, m->binary ? 'b' : 't', m->event_len, m->except_inst, m->except_id);
    size_t plen = hl + m->event_len + m->data_len;
    char stackbuf[2048], *payload = plen <= sizeof(stackbuf) ? stackbuf : malloc(plen);
    if (payload == NULL)
        return FLARE_ENOMEM;
    memcpy(payload, head, hl);
    memcpy(payload + hl, m->event, m->event_len);
    memcpy(payload + hl + m->event_len, m->data, m->data_len);
    char epoch[17], maxlen[24], age[24], ttl[24];
    uint64_t e = flare__rand64();
    for (int i = 0; i < 16; i++)
        epoch[i] = "0123456789abcdef"[(e >> (4 * i)) & 15];
    flare_str_t args[6] = {
        flare__cl_key(cl, 'c', name, ck),
        { payload, plen },
        { epoch, 16 },
        { maxlen, put_u64(maxlen, cl->cfg.history_size, 10) },
        { age, put_u64(age, cl->cfg.history_age_ms, 10) },
        { ttl, put_u64(ttl, (uint64_t)cl->cfg.meta_ttl_s * 1000, 10) },
    };
    pub_ctx_t *c = malloc(sizeof(*c));
    int rc = FLARE_ENOMEM;
    if (c != NULL) {
        *c = (pub_ctx_t){ cl, w, cb, ud };
        rc = flare__cl_eval(cl, w, CL_PUBLISH, keys, 2, args, 6, pub_done, c);
        if (rc != 0)
            free(c);
    }
    if (payload != stackbuf)
        free(payload);
    return rc;
}

/* ---- the history ---- */

int flare__cl_history_parse(const flare_redis_reply_t *rep, flare_str_t name, uint64_t *offset,
                            flare_str_t *epoch, flare__chan_msg_t ***msgs, size_t *n)
{
    *msgs = NULL;
    *n = 0;
    if (rep->type != FLARE_REDIS_ARRAY || rep->n < 2 || rep->elem[0].type != FLARE_REDIS_INT ||
        rep->elem[1].type != FLARE_REDIS_STRING || rep->elem[1].str.len > FLARE_CHANNEL_EPOCH_MAX)
        return FLARE_EUNAVAIL;
    *offset = (uint64_t)rep->elem[0].integer;
    *epoch = rep->elem[1].str;
    if (rep->n == 3 && rep->elem[2].type == FLARE_REDIS_INT)
        return FLARE_ENOTFOUND; /* more is missing than the history keeps */
    size_t k = (rep->n - 2) / 2;
    if (k == 0)
        return 0;
    flare__chan_msg_t **v = calloc(k, sizeof(*v));
    if (v == NULL)
        return FLARE_EUNAVAIL;
    size_t got = 0;
    for (size_t i = 0; i < k; i++) {
        const flare_redis_reply_t *o = &rep->elem[2 + 2 * i], *p = &rep->elem[3 + 2 * i];
        flare_str_t os = o->str;
        uint64_t off;
        if (o->type != FLARE_REDIS_STRING || p->type != FLARE_REDIS_STRING)
            continue;
        char tmp[24];
        if (os.len == 0 || os.len >= sizeof(tmp))
            continue;
        memcpy(tmp, os.ptr, os.len);
        tmp[os.len] = ':';
        flare_str_t t = { tmp, os.len + 1 };
        if (!take_num(&t, 10, ':', &off))
            continue;
        flare__chan_msg_t *m = flare__cl_decode(name, off, *epoch, p->str);
        if (m != NULL && m->type == FLARE__CHAN_DATA)
            v[got++] = m;
        else
            flare__chan_msg_unref(m);
    }
    *msgs = v;
    *n = got;
    return 0;
}

typedef struct hist_ctx {
    flare__chan_history_fn cb;
    void *ud;
    size_t nlen;
    char name[];
} hist_ctx_t;

static void hist_done(int err, const flare_redis_reply_t *rep, void *ud)
{
    hist_ctx_t *c = ud;
    uint64_t offset = 0;
    flare_str_t epoch = FLARE_STR_NULL;
    flare__chan_msg_t **msgs = NULL;
    size_t n = 0;
    if (err == 0)
        err = flare__cl_history_parse(rep, (flare_str_t){ c->name, c->nlen }, &offset, &epoch,
                                      &msgs, &n);
    c->cb(err, offset, epoch, msgs, n, c->ud); /* unrefs the messages */
    free(msgs);
    free(c);
}

int flare__cl_history(cluster_t *cl, flare_worker_t *w, flare_str_t name,
                      const flare_channel_pos_t *since, flare__chan_history_fn cb, void *ud)
{
    if (cl->r == NULL)
        return FLARE_ESTATE;
    char mk[FLARE__CL_KEY_MAX], hk[FLARE__CL_KEY_MAX], s[24], lim[24];
    flare_str_t keys[2] = { flare__cl_key(cl, 'm', name, mk), flare__cl_key(cl, 'h', name, hk) };
    flare_str_t args[2] = {
        since != NULL ? (flare_str_t){ s, put_u64(s, since->offset, 10) } : FLARE_STR("-1"),
        { lim, put_u64(lim, cl->cfg.history_size, 10) },
    };
    hist_ctx_t *c = malloc(sizeof(*c) + name.len);
    if (c == NULL)
        return FLARE_ENOMEM;
    *c = (hist_ctx_t){ cb, ud, name.len };
    memcpy(c->name, name.ptr, name.len);
    int rc = flare__cl_eval(cl, w, CL_HISTORY, keys, 2, args, 2, hist_done, c);
    if (rc != 0)
        free(c);
    return rc;
}

static int cl_history(void *bp, flare_worker_t *w, flare_str_t name,
                      const flare_channel_pos_t *since, flare__chan_history_fn cb, void *ud)
{
    return flare__cl_history(bp, w, name, since, cb, ud);
}

/* ---- the layer's hooks ---- */

static void cl_subscribe(void *bp, flare_worker_t *w, flare_str_t name)
{
    flare__cl_interest(bp, w, name, 1);
}

static void cl_unsubscribe(void *bp, flare_worker_t *w, flare_str_t name)
{
    flare__cl_interest(bp, w, name, -1);
}

static bool cl_up(void *bp, bool refusing)
{
    cluster_t *cl = bp;
    bool up = cl->r != NULL && atomic_load_explicit(&cl->up, memory_order_relaxed);
    if (!up && refusing) /* another thread's publish: not a worker's counter */
        atomic_fetch_add_explicit(&cl->refused, 1, memory_order_relaxed);
    return up;
}

static const flare__chan_backplane_t cl_ops = {
    .publish = cl_publish,
    .subscribe = cl_subscribe,
    .unsubscribe = cl_unsubscribe,
    .history = cl_history,
    .up = cl_up,
};

/* ---- the module ---- */

static int cl_init_worker(flare_worker_t *w, void *state)
{
    cluster_t *cl = state;
    if (cl->r == NULL || flare_worker_id(w) != 0)
        return 0;
    memset(cl->st, 0, cl->nst * sizeof(*cl->st));
    /* down until the subscriber connection has subscribed: what other
     * instances publish meanwhile would not reach this one */
    atomic_store(&cl->up, false);
    atomic_store(&cl->ever_up, false);
    return flare__cl_recv_init(cl, w);
}

static void cl_drain_worker(flare_worker_t *w, void *state)
{
    cluster_t *cl = state;
    if (flare_worker_id(w) == 0 && cl->rv != NULL)
        flare__cl_recv_drain(cl);
}

static void cl_dispose_worker(flare_worker_t *w, void *state)
{
    cluster_t *cl = state;
    if (flare_worker_id(w) == 0 && cl->rv != NULL)
        flare__cl_recv_dispose(cl);
}

static void cl_free_app(flare_app_t *app, void *state)
{
    (void)app;
    cluster_t *cl = state;
    free(cl->st);
    free(cl);
}

static const flare_module_t cl_module = {
    .name = "cluster",
    .init_worker = cl_init_worker,
    .drain_worker = cl_drain_worker,
    .dispose_worker = cl_dispose_worker,
    .free_app = cl_free_app,
};

/* /readyz: not before the subscriber connection has subscribed once (a
 * balancer then sends no client to an instance that would miss messages
 * at its start); a later outage does not make it unready (it serves on). */
static bool ready_check(void *ud)
{
    return atomic_load_explicit(&((cluster_t *)ud)->ever_up, memory_order_relaxed);
}

cluster_t *flare__cl_of(const flare_app_t *app)
{
    return flare__app_module_state(app, &cl_module);
}

/* ---- the figures ---- */

int flare_cluster_stats(const flare_app_t *app, flare_cluster_stats_t *out)
{
    if (app == NULL || out == NULL)
        return FLARE_EINVAL;
    const cluster_t *cl = flare__app_module_state(app, &cl_module);
    *out = (flare_cluster_stats_t){ 0 };
    if (cl == NULL || cl->r == NULL)
        return FLARE_ESTATE;
    for (unsigned i = 0; i < cl->nst; i++) {
#define LD(f) out->f += atomic_load_explicit(&cl->st[i].f, memory_order_relaxed)
        LD(delivered);
        LD(lost);
        LD(recovered);
        LD(publish_errors);
        LD(epoch_changes);
#undef LD
    }
    out->publish_errors += atomic_load_explicit(&cl->refused, memory_order_relaxed);
    out->up = atomic_load_explicit(&cl->up, memory_order_relaxed);
    return 0;
}

static void collect(flare_metrics_writer_t *mw, void *ud)
{
    flare_cluster_stats_t s;
    if (flare_cluster_stats(((cluster_t *)ud)->app, &s) != 0)
        return;
    static const struct {
        const char *name, *type, *help;
        size_t off;
    } series[] = {
        { "flare_cluster_up", "gauge", "1 while the Redis subscriber connection is up", 0 },
        { "flare_cluster_messages_delivered_total", "counter",
          "channel messages received from Redis in order and delivered",
          offsetof(flare_cluster_stats_t, delivered) },
        { "flare_cluster_messages_recovered_total", "counter",
          "of those, read back from a channel's history after a gap",
          offsetof(flare_cluster_stats_t, recovered) },
        { "flare_cluster_messages_lost_total", "counter",
          "channel messages reported lost to subscribers (gone from the history)",
          offsetof(flare_cluster_stats_t, lost) },
        { "flare_cluster_publish_errors_total", "counter",
          "publishes that failed (Redis unreachable, timed out)",
          offsetof(flare_cluster_stats_t, publish_errors) },
        { "flare_cluster_epoch_changes_total", "counter",
          "channels whose history was found lost (a new epoch)",
          offsetof(flare_cluster_stats_t, epoch_changes) },
    };
    for (size_t i = 0; i < sizeof(series) / sizeof(series[0]); i++) {
        double v =
            i == 0 ? (s.up ? 1 : 0)
                   : (double)*(const uint64_t *)(const void *)((const char *)&s + series[i].off);
        flare_metrics_family(mw, series[i].name, series[i].type, series[i].help);
        flare_metrics_sample(mw, series[i].name, NULL, v);
    }
}

/* ---- setting it up ---- */

static int config(flare_cluster_config_t *c)
{
#define CL_FIELD(f, def, min, max)                                                             \
    do {                                                                                       \
        if (c->f == 0)                                                                         \
            c->f = (def);                                                                      \
        else if (c->f < (min) || c->f > (max))                                                 \
            return flare__fail(FLARE_EINVAL, 0,                                                \
                               "flare_cluster_config_t." #f " is %u, expected %u to %u", c->f, \
                               (unsigned)(min), (unsigned)(max));                              \
    } while (0)
    CL_FIELD(history_size, 1000, 1, 1000000);
    CL_FIELD(history_age_ms, 300000, 1000, INT_MAX);
    CL_FIELD(meta_ttl_s, 86400, 1, INT_MAX / 1000);
    CL_FIELD(presence_ttl_ms, 15000, 300, INT_MAX);
    CL_FIELD(command_timeout_ms, 2000, 1, INT_MAX);
#undef CL_FIELD
    return 0;
}

static bool prefix_ok(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > FLARE__CL_PREFIX_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == ':' || c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

static int sha1_hex(const char *text, char out[41])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    if (EVP_Digest(text, strlen(text), md, &mdlen, EVP_sha1(), NULL) != 1 || mdlen != 20)
        return FLARE_ENOMEM;
    for (unsigned i = 0; i < 20; i++) {
        out[2 * i] = "0123456789abcdef"[md[i] >> 4];
        out[2 * i + 1] = "0123456789abcdef"[md[i] & 15];
    }
    out[40] = '\0';
    return 0;
}

int flare_app_cluster(flare_app_t *app, const char *url, const flare_cluster_config_t *cfg)
{
    if (app == NULL || url == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_app_cluster: NULL argument");
    if (flare__app_running(app))
        return flare__fail(FLARE_ESTATE, 0, "flare_app_cluster: the app is running");
    cluster_t *cl = flare__app_module_state(app, &cl_module);
    if (cl != NULL && cl->r != NULL)
        return flare__fail(FLARE_EEXIST, 0, "flare_app_cluster: the app has a cluster already");
    flare_cluster_config_t c = cfg != NULL ? *cfg : (flare_cluster_config_t){ 0 };
    int rc = config(&c);
    if (rc != 0)
        return rc;
    const char *prefix = c.prefix != NULL ? c.prefix : "flare:";
    if (!prefix_ok(prefix))
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_cluster_config_t.prefix \"%.80s\": 1 to %d bytes of "
                           "[A-Za-z0-9:_.-]",
                           prefix, FLARE__CL_PREFIX_MAX);
    if (strncmp(url, "redis://", 8) != 0)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_app_cluster: \"%.80s\" is not a redis://HOST:PORT[/DB] URL", url);
    if (cl == NULL) {
        /* the module first: it is disposed after the Redis connections,
         * whose last callbacks (failing, at shutdown) still find it */
        cl = calloc(1, sizeof(*cl));
        unsigned n = flare_app_workers(app);
        cl_stats_t *st = calloc(n, sizeof(*st));
        if (cl == NULL || st == NULL) {
            free(cl);
            free(st);
            return flare__fail(FLARE_ENOMEM, 0, "flare_app_cluster: out of memory");
        }
        cl->st = st;
        cl->nst = n;
        cl->app = app;
        if ((rc = flare_channel_enable(app)) != 0 ||
            (rc = flare__app_module(app, &cl_module, cl, &cl->slot)) != 0) {
            free(st);
            free(cl);
            return flare__fail(rc, 0, "flare_app_cluster: cannot register the module");
        }
    }
    cl->cfg = c;
    cl->cfg.prefix = NULL;
    cl->plen = strlen(prefix);
    memcpy(cl->prefix, prefix, cl->plen + 1);
    for (int i = 0; i < CL_SCRIPTS; i++) {
        if (sha1_hex(flare__cl_scripts[i], cl->sha[i]) != 0)
            return flare__fail(FLARE_ENOMEM, 0, "flare_app_cluster: SHA-1 unavailable");
    }
    cl->instance = flare__chan_instance(app);
    cl->inst[put_u64(cl->inst, cl->instance, 16)] = '\0';
    flare_redis_config_t rcfg = {
        .conns = 1, /* one connection per worker: a worker's publishes keep their order */
        .command_timeout_ms = c.command_timeout_ms,
        .connect_timeout_ms = c.command_timeout_ms < 2000 ? c.command_timeout_ms : 2000,
        .reconnect_min_ms = 100,
        .reconnect_max_ms = 2000,
    };
    flare_redis_t *r;
    if ((rc = flare_redis_open(app, url, &rcfg, &r)) != 0)
        return rc;
    char pattern[FLARE__CL_PREFIX_MAX + 4];
    memcpy(pattern, cl->prefix, cl->plen);
    memcpy(pattern + cl->plen, "c:*", 4);
    /* one subscriber connection for the instance, on worker 0 */
    if ((rc = flare_redis_subscribe(r, 0, flare_str(pattern), true, flare__cl_on_message, cl)) !=
            0 ||
        (rc = flare__redis_sub_state(r, flare__cl_on_sub_state, cl)) != 0 ||
        (rc = flare_metrics_collector(app, collect, cl)) != 0 ||
        (rc = flare_health_check(app, "cluster", ready_check, cl)) != 0)
        return rc;
    if ((rc = flare__chan_backplane_set(app, &cl_ops, cl)) != 0)
        return flare__fail(rc, 0, "flare_app_cluster: the channel layer has a backplane already");
    cl->r = r;
    return 0;
}
