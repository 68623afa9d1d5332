/* Presence in a cluster (flare/cluster.h): a Redis hash per channel,
 * INSTANCE/CLIENT -> info, and one key per live instance refreshed by its
 * heartbeat (cluster_recv.c). Reading the members leaves out (and removes,
 * with a leave event) the entries of instances whose key expired; each
 * live instance's heartbeat does the same for the channels it serves, so a
 * dead instance's members are gone within presence_ttl_ms plus one
 * heartbeat. Join and leave events are pub/sub messages without an offset
 * ("0:-:j..."), delivered to the channel's C subscribers as notices. */
#include <stdlib.h>
#include <string.h>

#include "worker.h"
#include "web/cluster_int.h"

static cluster_t *cluster_of(flare_worker_t *w)
{
    return flare__cl_of(w->app);
}

static void ignore(int err, const flare_redis_reply_t *rep, void *ud)
{
    (void)err;
    (void)rep;
    (void)ud;
}

static int check(flare_worker_t *w, flare_str_t channel, flare_str_t client, cluster_t **out)
{
    if (w == NULL || w != flare__worker_self || !flare__chan_name_ok(channel) ||
        client.ptr == NULL || client.len == 0 || client.len > FLARE__CL_CLIENT_MAX)
        return FLARE_EINVAL;
    cluster_t *cl = cluster_of(w);
    if (cl == NULL || cl->r == NULL)
        return FLARE_ESTATE;
    if (!atomic_load_explicit(&cl->up, memory_order_relaxed))
        return FLARE_EUNAVAIL;
    *out = cl;
    return 0;
}

/* "0:-:" KIND LEN ",0,0:" CLIENT [INFO] into a new buffer. */
static char *event(char kind, flare_str_t client, flare_str_t info, size_t *len)
{
    char head[40];
    size_t n = 0;
    memcpy(head, "0:-:", 4);
    n = 4;
    head[n++] = kind;
    char tmp[12];
    size_t k = 0, v = client.len;
    do {
        tmp[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (k > 0)
        head[n++] = tmp[--k];
    memcpy(head + n, ",0,0:", 5);
    n += 5;
    char *e = malloc(n + client.len + info.len);
    if (e == NULL)
        return NULL;
    memcpy(e, head, n);
    memcpy(e + n, client.ptr, client.len);
    if (info.len > 0)
        memcpy(e + n + client.len, info.ptr, info.len);
    *len = n + client.len + info.len;
    return e;
}

static int change(flare_worker_t *w, flare_str_t channel, flare_str_t client, flare_str_t info,
                  bool add)
{
    cluster_t *cl;
    int rc = check(w, channel, client, &cl);
    if (rc != 0)
        return rc;
    if (add && (info.len > FLARE__CL_INFO_MAX || (info.len > 0 && info.ptr == NULL)))
        return FLARE_EINVAL;
    char pk[FLARE__CL_KEY_MAX], ck[FLARE__CL_KEY_MAX];
    size_t ilen = strlen(cl->inst);
    char *field = malloc(ilen + 1 + client.len);
    size_t elen;
    char *ev = event(add ? 'j' : 'l', client, add ? info : FLARE_STR_NULL, &elen);
    if (field == NULL || ev == NULL) {
        free(field);
        free(ev);
        return FLARE_ENOMEM;
    }
    memcpy(field, cl->inst, ilen);
    field[ilen] = '/';
    memcpy(field + ilen + 1, client.ptr, client.len);
    flare_str_t key = flare__cl_key(cl, 'p', channel, pk);
    flare_str_t chan = flare__cl_key(cl, 'c', channel, ck);
    char ttl[24];
    size_t tn = 0;
    uint64_t v = (uint64_t)cl->cfg.meta_ttl_s * 1000;
    char tmp[24];
    do {
        tmp[tn++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (size_t i = 0; i < tn; i++)
        ttl[i] = tmp[tn - 1 - i];
    flare_str_t f = { field, ilen + 1 + client.len };
    if (add) {
        flare_str_t args[5] = { f, info, chan, { ev, elen }, { ttl, tn } };
        rc = flare__cl_eval(cl, w, CL_PRES_ADD, &key, 1, args, 5, ignore, NULL);
    } else {
        flare_str_t args[3] = { f, chan, { ev, elen } };
        rc = flare__cl_eval(cl, w, CL_PRES_DEL, &key, 1, args, 3, ignore, NULL);
    }
    free(field);
    free(ev);
    return rc;
}

int flare_channel_presence_add(flare_worker_t *w, flare_str_t channel, flare_str_t client,
                               flare_str_t info)
{
    return change(w, channel, client, info, true);
}

int flare_channel_presence_remove(flare_worker_t *w, flare_str_t channel, flare_str_t client)
{
    return change(w, channel, client, FLARE_STR_NULL, false);
}

typedef struct list_ctx {
    flare_channel_presence_fn cb;
    void *ud;
} list_ctx_t;

static void listed(int err, const flare_redis_reply_t *rep, void *ud)
{
    list_ctx_t *c = ud;
    flare_channel_member_t *m = NULL;
    size_t n = 0;
    if (err == 0 && rep->type != FLARE_REDIS_ARRAY)
        err = FLARE_EUNAVAIL; /* an error reply */
    if (err == 0 && rep->n >= 2) {
        m = calloc(rep->n / 2, sizeof(*m));
        if (m == NULL)
            err = FLARE_ENOMEM;
        for (size_t i = 0; m != NULL && i + 1 < rep->n; i += 2)
            m[n++] = (flare_channel_member_t){ rep->elem[i].str, rep->elem[i + 1].str };
    }
    c->cb(err, m, n, c->ud);
    free(m);
    free(c);
}

static int list(cluster_t *cl, flare_worker_t *w, flare_str_t channel, flare_redis_fn cb, void *ud)
{
    char pk[FLARE__CL_KEY_MAX], ck[FLARE__CL_KEY_MAX], ik[FLARE__CL_KEY_MAX];
    flare_str_t key = flare__cl_key(cl, 'p', channel, pk);
    flare_str_t args[2] = { flare__cl_key(cl, 'i', FLARE_STR_NULL, ik),
                            flare__cl_key(cl, 'c', channel, ck) };
    return flare__cl_eval(cl, w, CL_PRES_LIST, &key, 1, args, 2, cb, ud);
}

int flare_channel_presence(flare_worker_t *w, flare_str_t channel, flare_channel_presence_fn cb,
                           void *ud)
{
    if (w == NULL || w != flare__worker_self || cb == NULL || !flare__chan_name_ok(channel))
        return FLARE_EINVAL;
    cluster_t *cl = cluster_of(w);
    if (cl == NULL || cl->r == NULL)
        return FLARE_ESTATE;
    list_ctx_t *c = malloc(sizeof(*c));
    if (c == NULL)
        return FLARE_ENOMEM;
    *c = (list_ctx_t){ cb, ud };
    int rc = list(cl, w, channel, listed, c);
    if (rc != 0)
        free(c);
    return rc;
}

void flare__cl_presence_sweep(cluster_t *cl, flare_worker_t *w, flare_str_t name)
{
    list(cl, w, name, ignore, NULL);
}
