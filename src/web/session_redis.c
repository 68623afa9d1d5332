/* The session store on Redis (flare_session_redis_store, flare/redis.h):
 * one key per session, prefix + id; SET key value EX ttl, GETEX key EX ttl
 * (the idle time slides with each load), DEL key. Every call completes from
 * a Redis callback on the worker's loop, never inside the call.
 *
 * The store keeps no per-request state of its own: the middleware's
 * callback and context ride in a small record that lives from the command
 * until its reply (Redis answers every accepted command exactly once, also
 * at shutdown), so nothing here is freed twice or too early. Session ids
 * go to Redis only: nothing here logs or reports them. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "flare/redis.h"

typedef struct rstore {
    flare_redis_t *r;
    size_t plen;
    char prefix[];
} rstore_t;

typedef struct rop {
    void (*load_done)(void *ctx, int rc, flare_str_t data);
    flare_session_done_fn done;
    void *ctx;
} rop_t;

#define KEY_MAX 256 /* prefix + id: ids are 32 hex digits, prefixes short */

/* "EX" needs the seconds as text; no printf on this path. */
static flare_str_t u32_text(unsigned v, char buf[12])
{
    char *p = buf + 12;
    do
        *--p = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    return (flare_str_t){ p, (size_t)(buf + 12 - p) };
}

static bool make_key(const rstore_t *s, flare_str_t id, char *key, flare_str_t *out)
{
    if (id.len == 0 || s->plen + id.len > KEY_MAX)
        return false;
    memcpy(key, s->prefix, s->plen);
    memcpy(key + s->plen, id.ptr, id.len);
    *out = (flare_str_t){ key, s->plen + id.len };
    return true;
}

static void got_load(int err, const flare_redis_reply_t *rep, void *ud)
{
    rop_t *op = ud;
    if (err != 0)
        op->load_done(op->ctx, err, FLARE_STR_NULL);
    else if (rep->type == FLARE_REDIS_STRING)
        op->load_done(op->ctx, 0, rep->str);
    else if (rep->type == FLARE_REDIS_NIL)
        op->load_done(op->ctx, FLARE_ENOTFOUND, FLARE_STR_NULL);
    else
        op->load_done(op->ctx, FLARE_EUNAVAIL, FLARE_STR_NULL); /* an error reply */
    free(op);
}

static void got_write(int err, const flare_redis_reply_t *rep, void *ud)
{
    rop_t *op = ud;
    if (err == 0 && rep->type == FLARE_REDIS_ERROR)
        err = FLARE_EUNAVAIL; /* OOM, READONLY replica, ...: not stored */
    if (op->done != NULL)
        op->done(op->ctx, err);
    free(op);
}

static void rs_load(void *self, flare_worker_t *w, flare_str_t id, unsigned ttl,
                    void (*done)(void *ctx, int rc, flare_str_t data), void *ctx)
{
    rstore_t *s = self;
    char key[KEY_MAX], num[12];
    flare_str_t k;
    if (!make_key(s, id, key, &k)) {
        done(ctx, FLARE_ENOTFOUND, FLARE_STR_NULL);
        return;
    }
    rop_t *op = malloc(sizeof(*op));
    if (op == NULL) {
        done(ctx, FLARE_ENOMEM, FLARE_STR_NULL);
        return;
    }
    *op = (rop_t){ .load_done = done, .ctx = ctx };
    flare_str_t args[] = { FLARE_STR("GETEX"), k, FLARE_STR("EX"), u32_text(ttl ? ttl : 1, num) };
    int rc = flare_redis_cmd_str(s->r, w, args, 4, got_load, op);
    if (rc != 0) {
        free(op);
        done(ctx, rc == FLARE_ENOMEM ? rc : FLARE_EUNAVAIL, FLARE_STR_NULL);
    }
}

static void write_cmd(rstore_t *s, flare_worker_t *w, const flare_str_t *args, size_t n,
                      flare_session_done_fn done, void *ctx)
{
    rop_t *op = malloc(sizeof(*op));
    if (op == NULL) {
        if (done != NULL)
            done(ctx, FLARE_ENOMEM);
        return;
    }
    *op = (rop_t){ .done = done, .ctx = ctx };
    int rc = flare_redis_cmd_str(s->r, w, args, n, got_write, op);
    if (rc != 0) {
        free(op);
        if (done != NULL)
            done(ctx, rc == FLARE_ENOMEM ? rc : FLARE_EUNAVAIL);
    }
}

static void rs_save(void *self, flare_worker_t *w, flare_str_t id, flare_str_t data, unsigned ttl,
                    flare_session_done_fn done, void *ctx)
{
    rstore_t *s = self;
    char key[KEY_MAX], num[12];
    flare_str_t k;
    if (!make_key(s, id, key, &k)) {
        if (done != NULL)
            done(ctx, FLARE_EINVAL);
        return;
    }
    flare_str_t args[] = { FLARE_STR("SET"), k, data, FLARE_STR("EX"),
                           u32_text(ttl ? ttl : 1, num) };
    write_cmd(s, w, args, 5, done, ctx);
}

static void rs_remove(void *self, flare_worker_t *w, flare_str_t id, flare_session_done_fn done,
                      void *ctx)
{
    rstore_t *s = self;
    char key[KEY_MAX];
    flare_str_t k;
    if (!make_key(s, id, key, &k)) {
        if (done != NULL)
            done(ctx, 0); /* nothing could be stored under it */
        return;
    }
    flare_str_t args[] = { FLARE_STR("DEL"), k };
    write_cmd(s, w, args, 2, done, ctx);
}

static void rs_destroy(void *self)
{
    free(self);
}

int flare_session_redis_store(flare_redis_t *r, const char *prefix, flare_session_store_t *out)
{
    if (r == NULL || out == NULL)
        return FLARE_EINVAL;
    if (prefix == NULL)
        prefix = "flare:sess:";
    size_t plen = strlen(prefix);
    if (plen > KEY_MAX - 64)
        return flare__fail(FLARE_EINVAL, 0, "flare_session_redis_store: prefix longer than %d",
                           KEY_MAX - 64);
    rstore_t *s = malloc(sizeof(*s) + plen + 1);
    if (s == NULL)
        return FLARE_ENOMEM;
    s->r = r;
    s->plen = plen;
    memcpy(s->prefix, prefix, plen + 1);
    *out = (flare_session_store_t){ rs_load, rs_save, rs_remove, rs_destroy, s };
    return 0;
}
