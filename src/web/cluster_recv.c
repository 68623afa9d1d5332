/* The receiving side of the Redis backplane (web/cluster_int.h), on worker
 * 0, the channel layer's sequencer in a cluster: the instance's one
 * subscriber connection (PSUBSCRIBE P c:*) hands every message here; this
 * file checks each tracked channel's offsets, fills gaps from the history,
 * tells the subscribers what could not be filled, follows the connection
 * going down and up, and runs the heartbeat.
 *
 * Every message is delivered (flare__chan_sequenced: to every worker, in
 * this order), tracked channel or not: a subscriber that has just joined
 * on another worker gets what arrives after its join even before its
 * interest reached this worker. A channel is tracked while the instance
 * has subscribers of it: its last offset and epoch are kept, so a gap (a
 * message lost between Redis and here: the connection dropped, Redis cut
 * it for a full output buffer) is seen at the next message, and after a
 * reconnection every tracked channel is read from its last offset. While a
 * gap is being filled, that channel's newer messages wait (in order). */
#include <stdlib.h>
#include <string.h>

#include "worker.h"
#include "web/cluster_int.h"

#define PENDING_MAX 65536 /* messages held for one channel while its gap is read */

typedef struct cl_pend {
    struct cl_pend *next;
    flare__chan_msg_t *m;
} cl_pend_t;

struct cl_track {
    cl_track_t *next; /* hash chain */
    uint64_t hash;
    int interest;      /* workers with subscribers of it */
    bool known;        /* last and epoch are the channel's */
    bool fetching;     /* its history is being read: newer messages wait */
    bool retry;        /* the read failed: again at the next chance */
    unsigned failures; /* reads failed in a row while Redis was up */
    /* last is a position read, not a delivery: messages up to it may still
     * be on their way (the reply and the pub/sub message come on two
     * connections), so the next one starts the count, whatever its offset
     * up to last + 1 */
    bool settling;
    uint64_t last; /* offset of the last message delivered */
    uint8_t elen;
    char epoch[FLARE_CHANNEL_EPOCH_MAX];
    cl_pend_t *phead, **ptail;
    unsigned npend;
    size_t nlen;
    char name[];
};

typedef struct cl_recv {
    cluster_t *cl;
    flare_worker_t *w;
    cl_track_t **tab; /* power-of-two buckets */
    size_t cap, n;
    bool down_said; /* FLARE_CHANNEL_DOWN went out; UP is owed */
    bool heartbeat_on;
    flare__timer_t heartbeat; /* embedded: armed before the thread runs */
    flare__timer_t retry;
} cl_recv_t;

static cl_track_t **track_slot(cl_recv_t *rv, flare_str_t name, uint64_t h)
{
    cl_track_t **p = &rv->tab[h & (rv->cap - 1)];
    while (*p != NULL && !((*p)->hash == h && (*p)->nlen == name.len &&
                           memcmp((*p)->name, name.ptr, name.len) == 0))
        p = &(*p)->next;
    return p;
}

static cl_track_t *track_find(cl_recv_t *rv, flare_str_t name)
{
    return rv->cap != 0 ? *track_slot(rv, name, flare__chan_hash(name)) : NULL;
}

static void track_free(cl_track_t *t)
{
    while (t->phead != NULL) {
        cl_pend_t *p = t->phead;
        t->phead = p->next;
        flare__chan_msg_unref(p->m);
        free(p);
    }
    free(t);
}

static bool same_epoch(const cl_track_t *t, const flare__chan_msg_t *m)
{
    return t->elen == m->epoch_len && memcmp(t->epoch, m->epoch, t->elen) == 0;
}

/* ---- delivering ---- */

static void forward(cl_recv_t *rv, flare__chan_msg_t *m)
{
    flare__chan_sequenced(rv->cl->app, m);
}

static void accept_msg(cl_recv_t *rv, cl_track_t *t, flare__chan_msg_t *m, bool recovered)
{
    cl_stats_t *st = flare__cl_stats(rv->cl, rv->w);
    if (t != NULL) {
        t->last = m->offset;
        t->elen = m->epoch_len;
        memcpy(t->epoch, m->epoch, m->epoch_len);
        t->known = true;
    }
    flare__cl_count(&st->delivered, 1);
    if (recovered)
        flare__cl_count(&st->recovered, 1);
    forward(rv, m);
}

/* Tells t's subscribers that what followed t->last up to `upto` is lost
 * (reason), and goes on from upto in epoch (e, elen). */
static void report_lost(cl_recv_t *rv, cl_track_t *t, const char *reason, uint64_t upto,
                        const char *e, size_t elen)
{
    flare_str_t name = { t->name, t->nlen };
    cl_stats_t *st = flare__cl_stats(rv->cl, rv->w);
    bool epoch_changed = t->known && (elen != t->elen || memcmp(e, t->epoch, elen) != 0);
    if (epoch_changed)
        flare__cl_count(&st->epoch_changes, 1);
    else if (upto > t->last)
        flare__cl_count(&st->lost, upto - t->last);
    t->last = upto;
    t->elen = (uint8_t)elen;
    memcpy(t->epoch, e, elen);
    t->known = true;
    flare__chan_msg_t *n =
        flare__chan_msg_new(FLARE__CHAN_NLOST, name, FLARE_STR_NULL, FLARE_STR_NULL, false);
    if (n == NULL)
        return;
    n->reason = reason;
    n->offset = upto;
    n->epoch_len = (uint8_t)elen;
    memcpy(n->epoch, e, elen);
    forward(rv, n);
}

static void fetch(cl_recv_t *rv, cl_track_t *t);
static void replay_pending(cl_recv_t *rv, cl_track_t *t);

/* The gap cannot be read (too many messages wait, or the reads keep
 * failing while Redis answers): it is reported lost, what waited goes out. */
static void give_up(cl_recv_t *rv, cl_track_t *t)
{
    t->fetching = false;
    t->retry = false;
    t->failures = 0;
    if (t->phead != NULL)
        report_lost(rv, t, "gap", t->phead->m->offset - 1, t->phead->m->epoch,
                    t->phead->m->epoch_len);
    replay_pending(rv, t);
}

static void pend(cl_recv_t *rv, cl_track_t *t, flare__chan_msg_t *m)
{
    cl_pend_t *p = malloc(sizeof(*p));
    if (p == NULL) {
        flare__chan_msg_unref(m); /* the gap it leaves is seen and reported */
        return;
    }
    p->next = NULL;
    p->m = m;
    *t->ptail = p;
    t->ptail = &p->next;
    if (++t->npend > PENDING_MAX)
        give_up(rv, t); /* a bound on what one channel may hold */
}

/* One message of tracked channel t (its reference taken). */
static void on_tracked(cl_recv_t *rv, cl_track_t *t, flare__chan_msg_t *m)
{
    if (t->fetching) {
        pend(rv, t, m);
        return;
    }
    if (!t->known) {
        accept_msg(rv, t, m, false);
        return;
    }
    if (!same_epoch(t, m)) {
        if (t->elen == 0 && t->last == 0) {
            /* the channel had no history when its position was read: this
             * is its first epoch (its offsets start at 1) */
            t->elen = m->epoch_len;
            memcpy(t->epoch, m->epoch, m->epoch_len);
        } else {
            /* Redis lost the channel's history (restarted without its
             * data): whatever followed our last offset of the old epoch is
             * gone */
            report_lost(rv, t, "epoch", m->offset - 1, m->epoch, m->epoch_len);
            accept_msg(rv, t, m, false);
            return;
        }
    }
    if (t->settling && m->offset <= t->last + 1) {
        t->settling = false;
        accept_msg(rv, t, m, false);
        return;
    }
    t->settling = false;
    if (m->offset <= t->last) {
        flare__chan_msg_unref(m); /* had it (the history brought it) */
        return;
    }
    if (m->offset == t->last + 1) {
        accept_msg(rv, t, m, false);
        return;
    }
    pend(rv, t, m); /* a gap: read what is missing, this one waits */
    fetch(rv, t);
}

/* ---- filling a gap ---- */

typedef struct fetch_ctx {
    cluster_t *cl;
    cl_track_t *t;
} fetch_ctx_t;

static void replay_pending(cl_recv_t *rv, cl_track_t *t)
{
    cl_pend_t *p = t->phead;
    t->phead = NULL;
    t->ptail = &t->phead;
    t->npend = 0;
    while (p != NULL) {
        cl_pend_t *next = p->next;
        on_tracked(rv, t, p->m); /* may start another read: the rest waits again */
        free(p);
        p = next;
    }
}

static void fetched(int err, uint64_t offset, flare_str_t epoch, flare__chan_msg_t **msgs, size_t n,
                    void *ud)
{
    fetch_ctx_t *c = ud;
    cluster_t *cl = c->cl;
    cl_track_t *t = c->t;
    free(c);
    cl_recv_t *rv = cl->rv;
    if (rv == NULL) { /* shutting down: the tracks are gone */
        for (size_t i = 0; i < n; i++)
            flare__chan_msg_unref(msgs[i]);
        return;
    }
    t->fetching = false;
    bool up = atomic_load_explicit(&cl->up, memory_order_relaxed);
    if (err != 0 && err != FLARE_ENOTFOUND && up && ++t->failures >= 5) {
        give_up(rv, t); /* Redis answers, but not this: do not hold the channel for ever */
    } else if (err != 0 && err != FLARE_ENOTFOUND) {
        /* Redis unreachable again: the messages wait for the next try (the
         * reconnection, or the retry timer) */
        t->fetching = true;
        t->retry = true;
        if (!rv->retry.active)
            flare__timer_start(&rv->w->loop, &rv->retry, 500);
    } else if (t->known && (t->elen != 0 || t->last != 0) &&
               (epoch.len != t->elen || memcmp(epoch.ptr, t->epoch, epoch.len) != 0)) {
        report_lost(rv, t, "epoch", offset, epoch.ptr, epoch.len);
    } else if (err == FLARE_ENOTFOUND) {
        /* more is missing than the history keeps: lost up to the first
         * message that waits (or the channel's offset now) */
        uint64_t upto = t->phead != NULL ? t->phead->m->offset - 1 : offset;
        report_lost(rv, t, "gap", upto, epoch.ptr, epoch.len);
    } else {
        for (size_t i = 0; i < n; i++) {
            flare__chan_msg_t *m = msgs[i];
            msgs[i] = NULL;
            if (m->offset <= t->last) {
                flare__chan_msg_unref(m);
                continue;
            }
            if (m->offset != t->last + 1) /* trimmed from the history meanwhile */
                report_lost(rv, t, "gap", m->offset - 1, epoch.ptr, epoch.len);
            accept_msg(rv, t, m, true);
        }
        if (!t->known) {
            /* the position: messages that waited for it may be older than
             * it (published before it was read): they go out first; with
             * none waiting, older ones may still be on their way */
            t->known = true;
            t->last = offset;
            if (t->phead != NULL && t->phead->m->offset - 1 < offset)
                t->last = t->phead->m->offset - 1;
            t->settling = t->phead == NULL;
        }
        if (t->elen == 0) {
            t->elen = (uint8_t)epoch.len;
            memcpy(t->epoch, epoch.ptr, epoch.len);
        }
    }
    for (size_t i = 0; i < n; i++)
        flare__chan_msg_unref(msgs[i]);
    if (err == 0 || err == FLARE_ENOTFOUND)
        t->failures = 0;
    if (!t->fetching)
        replay_pending(rv, t);
    if (t->interest <= 0 && !t->fetching) {
        *track_slot(rv, (flare_str_t){ t->name, t->nlen }, t->hash) = t->next;
        rv->n--;
        track_free(t);
    }
}

/* Reads t's history after t->last (unknown position: the position only). */
static void fetch(cl_recv_t *rv, cl_track_t *t)
{
    fetch_ctx_t *c = malloc(sizeof(*c));
    flare_channel_pos_t since = { .offset = t->last, .epoch_len = t->elen };
    memcpy(since.epoch, t->epoch, t->elen);
    t->fetching = true;
    t->retry = false;
    int rc = FLARE_ENOMEM;
    if (c != NULL) {
        *c = (fetch_ctx_t){ rv->cl, t };
        rc = flare__cl_history(rv->cl, rv->w, (flare_str_t){ t->name, t->nlen },
                               t->known ? &since : NULL, fetched, c);
        if (rc != 0)
            free(c);
    }
    if (rc != 0) {
        t->retry = true; /* tried again by the retry timer */
        if (!rv->retry.active)
            flare__timer_start(&rv->w->loop, &rv->retry, 500);
    }
}

static void retry_cb(void *ud)
{
    cl_recv_t *rv = ud;
    if (!atomic_load_explicit(&rv->cl->up, memory_order_relaxed))
        return; /* the reconnection will */
    for (size_t i = 0; i < rv->cap; i++)
        for (cl_track_t *t = rv->tab[i]; t != NULL; t = t->next)
            if (t->retry)
                fetch(rv, t);
}

/* ---- what the subscriber connection says ---- */

void flare__cl_on_message(flare_str_t pattern, flare_str_t channel, flare_str_t message, void *ud)
{
    (void)pattern;
    cluster_t *cl = ud;
    cl_recv_t *rv = cl->rv;
    if (rv == NULL || channel.len < cl->plen + 2)
        return;
    flare_str_t name = { channel.ptr + cl->plen + 2, channel.len - cl->plen - 2 };
    /* OFFSET ":" EPOCH ":" PAYLOAD */
    const char *p = message.ptr, *end = p + message.len;
    uint64_t offset = 0;
    size_t digits = 0;
    while (p < end && *p >= '0' && *p <= '9' && digits < 17) {
        offset = offset * 10 + (uint64_t)(*p++ - '0');
        digits++;
    }
    if (digits == 0 || p == end || *p != ':')
        return; /* not ours: ignored */
    const char *e = ++p;
    while (p < end && *p != ':')
        p++;
    if (p == end)
        return;
    flare_str_t epoch = { e, (size_t)(p - e) };
    flare_str_t payload = { p + 1, (size_t)(end - p - 1) };
    if (offset == 0) {
        /* presence: no offset, no history */
        flare__chan_msg_t *m = flare__cl_decode(name, 0, FLARE_STR_NULL, payload);
        if (m != NULL)
            forward(rv, m);
        return;
    }
    flare__chan_msg_t *m = flare__cl_decode(name, offset, epoch, payload);
    if (m == NULL)
        return;
    cl_track_t *t = track_find(rv, name);
    if (t == NULL)
        accept_msg(rv, NULL, m, false); /* nobody here tracks it: delivered as it comes */
    else
        on_tracked(rv, t, m);
}

static void say(cl_recv_t *rv, int type)
{
    flare__chan_msg_t *m =
        flare__chan_msg_new(type, FLARE_STR_NULL, FLARE_STR_NULL, FLARE_STR_NULL, false);
    if (m != NULL)
        forward(rv, m);
}

void flare__cl_on_sub_state(bool up, void *ud)
{
    cluster_t *cl = ud;
    cl_recv_t *rv = cl->rv;
    if (rv == NULL)
        return;
    if (!up) {
        atomic_store_explicit(&cl->up, false, memory_order_relaxed);
        if (!rv->down_said) {
            rv->down_said = true;
            say(rv, FLARE__CHAN_NDOWN);
        }
        return;
    }
    atomic_store_explicit(&cl->up, true, memory_order_relaxed);
    atomic_store_explicit(&cl->ever_up, true, memory_order_relaxed);
    if (rv->down_said) {
        rv->down_said = false;
        say(rv, FLARE__CHAN_NUP);
    }
    /* what was published while the connection was away: read every tracked
     * channel from its last offset (a channel whose position is not known
     * yet: its position) */
    for (size_t i = 0; i < rv->cap; i++)
        for (cl_track_t *t = rv->tab[i]; t != NULL; t = t->next)
            if (!t->fetching || t->retry)
                fetch(rv, t);
}

/* ---- interest: which channels this instance has subscribers of ---- */

static int tab_grow(cl_recv_t *rv)
{
    size_t cap = rv->cap != 0 ? rv->cap * 2 : 16;
    cl_track_t **v = calloc(cap, sizeof(*v));
    if (v == NULL)
        return FLARE_ENOMEM;
    for (size_t i = 0; i < rv->cap; i++) {
        cl_track_t *t = rv->tab[i];
        while (t != NULL) {
            cl_track_t *next = t->next;
            t->next = v[t->hash & (cap - 1)];
            v[t->hash & (cap - 1)] = t;
            t = next;
        }
    }
    free(rv->tab);
    rv->tab = v;
    rv->cap = cap;
    return 0;
}

static void interest_here(cluster_t *cl, flare_str_t name, int delta)
{
    cl_recv_t *rv = cl->rv;
    if (rv == NULL)
        return;
    if (rv->n + 1 > rv->cap / 2 * 3 && tab_grow(rv) != 0)
        return; /* out of memory: the channel goes untracked (delivered as it comes) */
    uint64_t h = flare__chan_hash(name);
    cl_track_t **slot = track_slot(rv, name, h);
    cl_track_t *t = *slot;
    if (t == NULL) {
        if (delta <= 0 || (t = calloc(1, sizeof(*t) + name.len)) == NULL)
            return;
        t->hash = h;
        t->nlen = name.len;
        memcpy(t->name, name.ptr, name.len);
        t->ptail = &t->phead;
        *slot = t;
        rv->n++;
        t->interest = delta;
        if (atomic_load_explicit(&cl->up, memory_order_relaxed))
            fetch(rv, t); /* its position */
        return;
    }
    t->interest += delta;
    if (t->interest <= 0 && !t->fetching) {
        *slot = t->next;
        rv->n--;
        track_free(t);
    }
}

typedef struct interest_task {
    cluster_t *cl;
    int delta;
    size_t nlen;
    char name[];
} interest_task_t;

static void interest_run(void *ud)
{
    interest_task_t *t = ud;
    interest_here(t->cl, (flare_str_t){ t->name, t->nlen }, t->delta);
    free(t);
}

void flare__cl_interest(cluster_t *cl, flare_worker_t *w, flare_str_t name, int delta)
{
    flare_app_t *app = cl->app;
    if (flare_worker_id(w) == 0) {
        interest_here(cl, name, delta);
        return;
    }
    interest_task_t *t = malloc(sizeof(*t) + name.len);
    if (t == NULL)
        return; /* untracked: its messages still come, gaps are not seen */
    *t = (interest_task_t){ cl, delta, name.len };
    memcpy(t->name, name.ptr, name.len);
    /* a worker thread may post to any worker (every loop exists while any
     * worker runs) */
    if (flare__loop_post(&flare_app_worker(app, 0)->loop, interest_run, t) != 0)
        free(t);
}

/* ---- the heartbeat ---- */

static void ignore(int err, const flare_redis_reply_t *rep, void *ud)
{
    (void)err;
    (void)rep;
    (void)ud;
}

static void heartbeat_cb(void *ud)
{
    cl_recv_t *rv = ud;
    cluster_t *cl = rv->cl;
    unsigned every = cl->cfg.presence_ttl_ms / 3;
    flare__timer_start(&rv->w->loop, &rv->heartbeat, every);
    /* this instance is alive for presence_ttl_ms more */
    char key[FLARE__CL_KEY_MAX], ttl[24];
    flare_str_t k = flare__cl_key(cl, 'i', flare_str(cl->inst), key);
    int n = 0;
    for (unsigned v = cl->cfg.presence_ttl_ms; v != 0 || n == 0; v /= 10)
        ttl[n++] = (char)('0' + v % 10);
    for (int i = 0; i < n / 2; i++) {
        char c = ttl[i];
        ttl[i] = ttl[n - 1 - i];
        ttl[n - 1 - i] = c;
    }
    flare_str_t args[5] = {
        FLARE_STR("SET"), k, FLARE_STR("1"), FLARE_STR("PX"), { ttl, (size_t)n }
    };
    flare_redis_cmd_str(cl->r, rv->w, args, 5, ignore, NULL);
    /* the presence of dead instances in the channels we serve: removed,
     * with their leave events */
    for (size_t i = 0; i < rv->cap; i++)
        for (cl_track_t *t = rv->tab[i]; t != NULL; t = t->next)
            flare__cl_presence_sweep(cl, rv->w, (flare_str_t){ t->name, t->nlen });
}

/* ---- life ---- */

int flare__cl_recv_init(cluster_t *cl, flare_worker_t *w0)
{
    cl_recv_t *rv = calloc(1, sizeof(*rv));
    if (rv == NULL)
        return FLARE_ENOMEM;
    rv->cl = cl;
    rv->w = w0;
    rv->down_said = true; /* down until subscribed: who joins meanwhile is told (the layer) */
    flare__timer_init(&rv->heartbeat, heartbeat_cb, rv);
    flare__timer_init(&rv->retry, retry_cb, rv);
    flare__timer_start(&w0->loop, &rv->heartbeat, 0);
    cl->rv = rv;
    return 0;
}

void flare__cl_recv_drain(cluster_t *cl)
{
    cl_recv_t *rv = cl->rv;
    /* going: this instance's presence is over now, not at its expiry */
    char key[FLARE__CL_KEY_MAX];
    flare_str_t args[2] = { FLARE_STR("DEL"), flare__cl_key(cl, 'i', flare_str(cl->inst), key) };
    flare_redis_cmd_str(cl->r, rv->w, args, 2, ignore, NULL);
    flare__timer_stop(&rv->w->loop, &rv->heartbeat);
}

void flare__cl_recv_dispose(cluster_t *cl)
{
    cl_recv_t *rv = cl->rv;
    cl->rv = NULL;
    flare__timer_stop(&rv->w->loop, &rv->heartbeat);
    flare__timer_stop(&rv->w->loop, &rv->retry);
    for (size_t i = 0; i < rv->cap; i++) {
        while (rv->tab[i] != NULL) {
            cl_track_t *t = rv->tab[i];
            rv->tab[i] = t->next;
            track_free(t);
        }
    }
    free(rv->tab);
    free(rv);
}
