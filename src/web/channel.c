/* The channel layer (flare/channel.h, web/channel.h): channels of
 * subscribers of any kind on each worker, publishing from any thread, one
 * sequencer per channel, share-nothing fan-out, and the hooks a backplane
 * (the Redis cluster) plugs into.
 *
 * Invariants:
 * - Every message reaches the workers from one thread, the sequencer, and
 *   a worker's post queue keeps the order of what one thread posted: so
 *   every subscriber of a channel sees one order, and a thread's messages
 *   keep its order. Without a backplane the sequencer is worker 0 (a
 *   publish is encoded where it is made, then posted to it); with one, it
 *   is the backplane's receiving worker, in the order Redis gave.
 * - Deliveries run from the worker's queue, never inside a publish call:
 *   a callback that publishes does not overtake the message it is given.
 * - A worker's channels and subscribers are its own. A delivery never frees
 *   a subscriber or a channel: one that leaves meanwhile is marked and
 *   freed after the outermost delivery (reap), so walking a list while
 *   callbacks run is safe. */
#include <stdlib.h>
#include <string.h>

#include "app_svc.h"
#include "core/core.h"
#include "worker.h"
#include "module.h"
#include "web/channel.h"
#include "core/random.h"
#include "ws/frame.h"

#define PENDING_MAX 4096 /* live messages held for one subscriber while it resumes */

/* ---- messages ---- */

flare__chan_msg_t *flare__chan_msg_new(int type, flare_str_t name, flare_str_t event,
                                       flare_str_t data, bool binary)
{
    size_t n = name.len + event.len + data.len;
    if (n < name.len || n > SIZE_MAX - sizeof(flare__chan_msg_t) - 3)
        return NULL;
    flare__chan_msg_t *m = malloc(sizeof(*m) + n + 3);
    if (m == NULL)
        return NULL;
    memset(m, 0, sizeof(*m));
    atomic_init(&m->refs, 1);
    m->type = (uint8_t)type;
    m->binary = binary;
    char *p = m->bytes;
    m->name = p;
    m->name_len = name.len;
    if (name.len > 0)
        memcpy(p, name.ptr, name.len);
    p += name.len;
    *p++ = '\0';
    m->event = p;
    m->event_len = event.len;
    if (event.len > 0)
        memcpy(p, event.ptr, event.len);
    p += event.len;
    *p++ = '\0';
    m->data = p;
    m->data_len = data.len;
    if (data.len > 0)
        memcpy(p, data.ptr, data.len);
    p[data.len] = '\0';
    m->client = m->data; /* presence notices: the client id is the data */
    m->client_len = 0;
    m->hash = flare__chan_hash(name);
    return m;
}

void flare__chan_msg_ref(flare__chan_msg_t *m)
{
    atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
}

static const flare__chan_kind_t *kind_of(int id);

void flare__chan_msg_unref(flare__chan_msg_t *m)
{
    if (m == NULL || atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (int k = 0; k < FLARE__CHAN_KINDS; k++) {
        if (m->rep[k] != NULL)
            kind_of(k)->release(m->rep[k]);
    }
    free(m);
}

flare_channel_msg_t flare__chan_msg_view(const flare__chan_msg_t *m)
{
    return (flare_channel_msg_t){
        .channel = { m->name, m->name_len },
        .event = { m->event, m->event_len },
        .data = { m->data, m->data_len },
        .binary = m->binary,
        .offset = m->offset,
        .epoch = { m->epoch, m->epoch_len },
    };
}

/* ---- the app's and the workers' state ---- */

typedef struct chan_app {
    flare_app_t *app;
    unsigned slot;
    uint64_t instance;
    const flare__chan_kind_t *kinds[FLARE__CHAN_KINDS];
    /* subscribers of each kind in the app, and of those wanting positions:
     * the sequencer makes only the shared forms someone will use */
    _Atomic unsigned nsubs[FLARE__CHAN_KINDS];
    _Atomic unsigned npositions;
    const flare__chan_backplane_t *bp;
    void *bps;
} chan_app_t;

typedef struct chan_worker {
    flare_worker_t *w;
    chan_app_t *ca;
    flare__chan_t **tab; /* power-of-two buckets */
    size_t cap, n;
    unsigned delivering;     /* depth of deliveries in progress */
    flare__chan_sub_t *dead; /* left during a delivery, freed after it (onext) */
    bool disposing;
} chan_worker_t;

static void chan_dispose_worker(flare_worker_t *w, void *state);
static void chan_free_app(flare_app_t *app, void *state);

static const flare_module_t chan_module = {
    .name = "channel",
    .dispose_worker = chan_dispose_worker,
    .free_app = chan_free_app,
};

static const flare__chan_kind_t *kind_of(int id)
{
    return id == FLARE__CHAN_WS    ? &flare__ws_chan_kind
           : id == FLARE__CHAN_SSE ? &flare__sse_chan_kind
                                   : &flare__fn_chan_kind;
}

static chan_app_t *app_state(const flare_app_t *app)
{
    return flare__app_module_state(app, &chan_module);
}

static int app_make(flare_app_t *app, chan_app_t **out)
{
    chan_app_t *ca = app_state(app);
    if (ca == NULL) {
        if (flare__app_running(app))
            return FLARE_ESTATE;
        ca = calloc(1, sizeof(*ca));
        if (ca == NULL)
            return FLARE_ENOMEM;
        ca->app = app;
        do
            ca->instance = flare__rand64();
        while (ca->instance == 0);
        ca->kinds[FLARE__CHAN_FN] = &flare__fn_chan_kind;
        int rc = flare__app_module(app, &chan_module, ca, &ca->slot);
        if (rc != 0) {
            free(ca);
            return rc;
        }
    }
    *out = ca;
    return 0;
}

int flare__chan_use(flare_app_t *app, const flare__chan_kind_t *k)
{
    chan_app_t *ca;
    int rc = app_make(app, &ca);
    if (rc == 0)
        ca->kinds[k->id] = k;
    return rc;
}

int flare_channel_enable(flare_app_t *app)
{
    if (app == NULL)
        return FLARE_EINVAL;
    chan_app_t *ca;
    return app_make(app, &ca);
}

int flare__chan_backplane_set(flare_app_t *app, const flare__chan_backplane_t *ops, void *bp)
{
    chan_app_t *ca;
    int rc = app_make(app, &ca);
    if (rc != 0)
        return rc;
    if (ca->bp != NULL)
        return FLARE_EEXIST;
    ca->bp = ops;
    ca->bps = bp;
    return 0;
}

uint64_t flare__chan_instance(const flare_app_t *app)
{
    const chan_app_t *ca = app_state(app);
    return ca != NULL ? ca->instance : 0;
}

static void chan_free_app(flare_app_t *app, void *state)
{
    (void)app;
    free(state);
}

/* w's state (on w's thread), made at its first subscription. */
static chan_worker_t *worker_state(chan_app_t *ca, flare_worker_t *w, bool make)
{
    chan_worker_t *cw = flare__worker_module_state(w, ca->slot);
    if (cw != NULL || !make)
        return cw;
    cw = calloc(1, sizeof(*cw));
    if (cw == NULL)
        return NULL;
    cw->w = w;
    cw->ca = ca;
    flare__worker_module_set(w, ca->slot, cw);
    return cw;
}

/* ---- a worker's channels ---- */

uint64_t flare__chan_hash(flare_str_t s)
{
    return flare__hash(s.ptr, s.len);
}

static flare__chan_t **chan_slot(chan_worker_t *cw, flare_str_t name, uint64_t h)
{
    flare__chan_t **p = &cw->tab[h & (cw->cap - 1)];
    while (*p != NULL && !((*p)->hash == h && (*p)->nlen == name.len &&
                           memcmp((*p)->name, name.ptr, name.len) == 0))
        p = &(*p)->next;
    return p;
}

static flare__chan_t *chan_find(chan_worker_t *cw, flare_str_t name, uint64_t h)
{
    return cw->cap != 0 ? *chan_slot(cw, name, h) : NULL;
}

static int tab_grow(chan_worker_t *cw)
{
    size_t cap = cw->cap != 0 ? cw->cap * 2 : 16;
    flare__chan_t **t = calloc(cap, sizeof(*t));
    if (t == NULL)
        return FLARE_ENOMEM;
    for (size_t i = 0; i < cw->cap; i++) {
        flare__chan_t *c = cw->tab[i];
        while (c != NULL) {
            flare__chan_t *next = c->next;
            c->next = t[c->hash & (cap - 1)];
            t[c->hash & (cap - 1)] = c;
            c = next;
        }
    }
    free(cw->tab);
    cw->tab = t;
    cw->cap = cap;
    return 0;
}

bool flare__chan_name_ok(flare_str_t name)
{
    return name.ptr != NULL && name.len > 0 && name.len <= FLARE_CHANNEL_NAME_MAX;
}

flare_str_t flare__chan_prefixed(char *buf, const char *prefix, flare_str_t room)
{
    size_t pl = strlen(prefix);
    if (room.len > FLARE_CHANNEL_NAME_MAX - pl)
        return FLARE_STR_NULL;
    memcpy(buf, prefix, pl);
    if (room.len > 0)
        memcpy(buf + pl, room.ptr, room.len);
    return (flare_str_t){ buf, pl + room.len };
}

bool flare__chan_sub_is(const flare__chan_sub_t *s, flare_str_t name)
{
    const flare__chan_t *c = s->ch;
    return c != NULL && c->nlen == name.len && memcmp(c->name, name.ptr, name.len) == 0;
}

/* ---- subscribing ---- */

typedef struct flare__chan_pending {
    flare__chan_pending_t *next;
    flare__chan_msg_t *m;
} flare__chan_pending_t;

struct flare__chan_recovery {
    flare__chan_sub_t *sub; /* NULL once it left */
    chan_worker_t *cw;
};

static void on_history(int err, uint64_t offset, flare_str_t epoch, flare__chan_msg_t **msgs,
                       size_t n, void *ud);

int flare__chan_join(flare_worker_t *w, const flare__chan_kind_t *k, void *owner, flare_str_t name,
                     unsigned flags, flare__chan_sub_t **out)
{
    if (!flare__chan_name_ok(name))
        return FLARE_EINVAL;
    chan_app_t *ca = app_state(w->app);
    if (ca == NULL)
        return FLARE_ESTATE;
    chan_worker_t *cw = worker_state(ca, w, true);
    if (cw == NULL)
        return FLARE_ENOMEM;
    if (cw->disposing)
        return FLARE_ESTATE;
    if (cw->n + 1 > cw->cap / 2 * 3 && tab_grow(cw) != 0)
        return FLARE_ENOMEM;
    uint64_t h = flare__chan_hash(name);
    flare__chan_t **slot = chan_slot(cw, name, h);
    flare__chan_sub_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return FLARE_ENOMEM;
    flare__chan_t *c = *slot;
    bool first = c == NULL;
    if (first) {
        c = malloc(sizeof(*c) + name.len);
        if (c == NULL) {
            free(s);
            return FLARE_ENOMEM;
        }
        *c = (flare__chan_t){ .hash = h, .nlen = name.len };
        memcpy(c->name, name.ptr, name.len);
        *slot = c;
        cw->n++;
    }
    s->kind = k;
    s->owner = owner;
    s->cw = cw;
    s->ch = c;
    s->flags = flags & FLARE__SUB_POSITIONS;
    s->ptail = &s->phead;
    s->next = c->subs;
    if (c->subs != NULL)
        c->subs->prev = s;
    c->subs = s;
    c->nsubs++;
    atomic_fetch_add_explicit(&ca->nsubs[k->id], 1, memory_order_relaxed);
    if (s->flags & FLARE__SUB_POSITIONS)
        atomic_fetch_add_explicit(&ca->npositions, 1, memory_order_relaxed);
    if (first && ca->bp != NULL)
        ca->bp->subscribe(ca->bps, w, name);
    *out = s;
    return 0;
}

static void lost_notice(flare__chan_sub_t *s, const char *reason, uint64_t offset,
                        flare_str_t epoch);

void flare__chan_resume(flare__chan_sub_t *s, const flare_channel_pos_t *since)
{
    chan_worker_t *cw = s->cw;
    chan_app_t *ca = cw->ca;
    if (ca->bp != NULL && !ca->bp->up(ca->bps, false)) {
        /* joining while the backplane is down: said now, as to the others
         * when it went (UP follows when it is back) */
        flare__chan_msg_t *n = flare__chan_msg_new(FLARE__CHAN_NDOWN, FLARE_STR_NULL,
                                                   FLARE_STR_NULL, FLARE_STR_NULL, false);
        if (n != NULL) {
            s->kind->notice(s, n);
            flare__chan_msg_unref(n);
        }
    }
    if (since == NULL || ca->bp == NULL || s->rec != NULL)
        return; /* outside a cluster there is no history: from now on */
    s->since = *since;
    s->last = since->offset;
    flare__chan_recovery_t *r = malloc(sizeof(*r));
    int rc = FLARE_ENOMEM;
    if (r != NULL) {
        *r = (flare__chan_recovery_t){ s, cw };
        s->rec = r;
        s->flags |= FLARE__SUB_RECOVERING;
        rc = ca->bp->history(ca->bps, cw->w, flare_channel_sub_name(s), since, on_history, r);
        if (rc != 0) {
            s->rec = NULL;
            s->flags &= ~(uint32_t)FLARE__SUB_RECOVERING;
            free(r);
        }
    }
    if (rc != 0)
        lost_notice(s, "unavailable", 0, FLARE_STR_NULL);
}

static void pending_free(flare__chan_sub_t *s)
{
    while (s->phead != NULL) {
        flare__chan_pending_t *p = s->phead;
        s->phead = p->next;
        flare__chan_msg_unref(p->m);
        free(p);
    }
    s->ptail = &s->phead;
    s->npending = 0;
}

/* Unlinks s from its channel (freeing the channel when it was the last). */
static void unlink_sub(chan_worker_t *cw, flare__chan_sub_t *s)
{
    flare__chan_t *c = s->ch;
    if (c == NULL)
        return;
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        c->subs = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    s->ch = NULL;
    if (c->subs == NULL) {
        flare_str_t name = { c->name, c->nlen };
        if (cw->ca->bp != NULL && !cw->disposing)
            cw->ca->bp->unsubscribe(cw->ca->bps, cw->w, name);
        *chan_slot(cw, name, c->hash) = c->next;
        cw->n--;
        free(c);
    }
}

void flare__chan_leave(flare__chan_sub_t *s)
{
    if (s == NULL || (s->flags & FLARE__SUB_DEAD))
        return;
    chan_worker_t *cw = s->cw;
    chan_app_t *ca = cw->ca;
    if (s->rec != NULL) {
        s->rec->sub = NULL; /* the history reply finds nobody */
        s->rec = NULL;
    }
    pending_free(s);
    s->flags |= FLARE__SUB_DEAD;
    atomic_fetch_sub_explicit(&ca->nsubs[s->kind->id], 1, memory_order_relaxed);
    if (s->flags & FLARE__SUB_POSITIONS)
        atomic_fetch_sub_explicit(&ca->npositions, 1, memory_order_relaxed);
    if (s->ch != NULL)
        s->ch->nsubs--;
    if (cw->delivering > 0) {
        s->onext = cw->dead;
        cw->dead = s;
        return;
    }
    unlink_sub(cw, s);
    free(s);
}

static void reap(chan_worker_t *cw)
{
    while (cw->dead != NULL) {
        flare__chan_sub_t *s = cw->dead;
        cw->dead = s->onext;
        unlink_sub(cw, s);
        free(s);
    }
}

/* ---- delivering on a worker ---- */

static void notice_to(flare__chan_sub_t *s, const flare__chan_msg_t *m)
{
    if (m->type == FLARE__CHAN_NLOST) {
        s->last = m->offset;
        s->since.epoch_len = m->epoch_len;
        memcpy(s->since.epoch, m->epoch, m->epoch_len);
    }
    s->kind->notice(s, m);
}

static void data_to(flare__chan_sub_t *s, const flare__chan_msg_t *m, void *rep)
{
    if (m->offset != 0) {
        if (m->offset <= s->last)
            return; /* had it (from the history, or twice after a gap was filled) */
        s->last = m->offset;
    }
    s->kind->deliver(s, m, rep);
}

static void hold(flare__chan_sub_t *s, flare__chan_msg_t *m);

static void deliver_channel(flare__chan_t *c, flare__chan_msg_t *m)
{
    for (flare__chan_sub_t *s = c->subs; s != NULL; s = s->next) {
        if (s->flags & FLARE__SUB_DEAD)
            continue;
        if (s->flags & FLARE__SUB_RECOVERING)
            hold(s, m);
        else if (m->type != FLARE__CHAN_DATA)
            notice_to(s, m);
        else
            data_to(s, m, m->rep[s->kind->id]); /* NULL: joined after the sequencer looked */
    }
}

/* m on this worker, to its subscribers of m's channel (every channel for
 * the DOWN and UP notices). */
static void deliver_here(chan_worker_t *cw, flare__chan_msg_t *m)
{
    cw->delivering++;
    if (m->type == FLARE__CHAN_NDOWN || m->type == FLARE__CHAN_NUP) {
        /* channels are only unlinked by the reap: the table holds still */
        for (size_t i = 0; i < cw->cap; i++)
            for (flare__chan_t *c = cw->tab[i]; c != NULL; c = c->next)
                deliver_channel(c, m);
    } else {
        flare__chan_t *c = chan_find(cw, (flare_str_t){ m->name, m->name_len }, m->hash);
        if (c != NULL)
            deliver_channel(c, m);
    }
    if (--cw->delivering == 0)
        reap(cw);
}

/* ---- resuming: the history, then what waited ---- */

/* One message m (data or notice) to s, whatever its state. */
static void one_to(flare__chan_sub_t *s, const flare__chan_msg_t *m)
{
    if (m->type == FLARE__CHAN_DATA)
        data_to(s, m, m->rep[s->kind->id]);
    else
        notice_to(s, m);
}

/* Sends what waited for the history, in order (what it had is skipped by
 * its offset); a hole between the two is reported. */
static void release_pending(flare__chan_sub_t *s)
{
    while (s->phead != NULL && !(s->flags & FLARE__SUB_DEAD)) {
        flare__chan_pending_t *p = s->phead;
        s->phead = p->next;
        s->npending--;
        const flare__chan_msg_t *m = p->m;
        if (m->type == FLARE__CHAN_DATA && m->offset > s->last + 1 && s->last != 0)
            lost_notice(s, "gap", m->offset - 1, (flare_str_t){ m->epoch, m->epoch_len });
        if (!(s->flags & FLARE__SUB_DEAD))
            one_to(s, m);
        flare__chan_msg_unref(p->m);
        free(p);
    }
    pending_free(s);
}

static void hold(flare__chan_sub_t *s, flare__chan_msg_t *m)
{
    if (s->npending >= PENDING_MAX) {
        /* too much arrived while the history was read: give up on it; what
         * it would have brought is lost, what waited goes out now */
        s->rec->sub = NULL;
        s->rec = NULL;
        s->flags &= ~(uint32_t)FLARE__SUB_RECOVERING;
        const flare__chan_msg_t *first = s->phead->m;
        lost_notice(s, "overflow", first->offset > 0 ? first->offset - 1 : 0,
                    (flare_str_t){ first->epoch, first->epoch_len });
        release_pending(s);
        if (!(s->flags & FLARE__SUB_DEAD))
            one_to(s, m);
        return;
    }
    flare__chan_pending_t *p = malloc(sizeof(*p));
    if (p == NULL)
        return; /* out of memory: reported as a gap when the history is in */
    p->next = NULL;
    p->m = m;
    flare__chan_msg_ref(m);
    *s->ptail = p;
    s->ptail = &p->next;
    s->npending++;
}

static void lost_notice(flare__chan_sub_t *s, const char *reason, uint64_t offset,
                        flare_str_t epoch)
{
    flare__chan_msg_t *n = flare__chan_msg_new(FLARE__CHAN_NLOST, flare_channel_sub_name(s),
                                               FLARE_STR_NULL, FLARE_STR_NULL, false);
    if (n == NULL)
        return;
    n->reason = reason;
    n->offset = offset;
    n->epoch_len = (uint8_t)(epoch.len <= FLARE_CHANNEL_EPOCH_MAX ? epoch.len : 0);
    memcpy(n->epoch, epoch.ptr, n->epoch_len);
    notice_to(s, n);
    flare__chan_msg_unref(n);
}

static void on_history(int err, uint64_t offset, flare_str_t epoch, flare__chan_msg_t **msgs,
                       size_t n, void *ud)
{
    flare__chan_recovery_t *r = ud;
    flare__chan_sub_t *s = r->sub;
    chan_worker_t *cw = r->cw;
    free(r);
    if (s != NULL && !(s->flags & FLARE__SUB_DEAD)) {
        s->rec = NULL;
        s->flags &= ~(uint32_t)FLARE__SUB_RECOVERING;
        cw->delivering++;
        bool same = epoch.len == s->since.epoch_len &&
                    (epoch.len == 0 || memcmp(epoch.ptr, s->since.epoch, epoch.len) == 0);
        if (err != 0 || !same || s->since.offset > offset) {
            const char *why = err == FLARE_ENOTFOUND ? "history"
                              : err != 0             ? "unavailable"
                                                     : "epoch";
            /* unavailable: the position now is unknown, take what comes */
            lost_notice(s, why, err == 0 || err == FLARE_ENOTFOUND ? offset : 0, epoch);
        } else {
            for (size_t i = 0; i < n && !(s->flags & FLARE__SUB_DEAD); i++) {
                if (msgs[i]->offset <= s->last)
                    continue;
                if (msgs[i]->offset != s->last + 1)
                    lost_notice(s, "history", msgs[i]->offset - 1, epoch);
                if (!(s->flags & FLARE__SUB_DEAD))
                    data_to(s, msgs[i], NULL);
            }
        }
        release_pending(s);
        if (--cw->delivering == 0)
            reap(cw);
    }
    for (size_t i = 0; i < n; i++)
        flare__chan_msg_unref(msgs[i]);
}

/* ---- the sequencer and the fan-out ---- */

void flare__chan_prepare(flare_app_t *app, flare__chan_msg_t *m)
{
    chan_app_t *ca = app_state(app);
    if (ca == NULL || m->type != FLARE__CHAN_DATA)
        return;
    bool positions = atomic_load_explicit(&ca->npositions, memory_order_relaxed) > 0;
    for (int k = 0; k < FLARE__CHAN_KINDS; k++) {
        const flare__chan_kind_t *kd = ca->kinds[k];
        if (kd == NULL || m->rep[k] != NULL)
            continue;
        /* a message to every subscriber of one kind needs that kind's form
         * only; a channel's needs each kind that has subscribers */
        if (m->all_kind != 0 ? m->all_kind == k + 1
                             : atomic_load_explicit(&ca->nsubs[k], memory_order_relaxed) > 0)
            m->rep[k] = kd->prepare(app, m, positions);
    }
}

typedef struct fan_task {
    flare_post_node_t node; /* embedded: one allocation per worker and message */
    chan_app_t *ca;
    flare_worker_t *w;
    flare__chan_msg_t *m;
} fan_task_t;

static void fan_run(void *ud)
{
    fan_task_t *t = ud;
    /* on t->w's thread, or in its loop's dispose (worker states gone then:
     * nothing to deliver) */
    if (t->m->all_kind != 0) {
        const flare__chan_kind_t *k = t->ca->kinds[t->m->all_kind - 1];
        if (k != NULL && k->all != NULL)
            k->all(t->w, t->m, t->m->rep[t->m->all_kind - 1]);
    } else {
        chan_worker_t *cw = worker_state(t->ca, t->w, false);
        if (cw != NULL && !cw->disposing)
            deliver_here(cw, t->m);
    }
    flare__chan_msg_unref(t->m);
    free(t);
}

/* On the sequencer: m to every worker (itself included, through its own
 * queue like the others, so that a delivery never runs inside a publish
 * call). A worker thread may post to any worker: every loop exists from
 * before the first worker starts until after the last one ended. Takes
 * the caller's reference. */
static void fanout(chan_app_t *ca, flare__chan_msg_t *m)
{
    flare_app_t *app = ca->app;
    flare_worker_t *w;
    for (unsigned i = 0; (w = flare_app_worker(app, i)) != NULL; i++) {
        fan_task_t *t = malloc(sizeof(*t));
        if (t == NULL)
            continue; /* out of memory: that worker's subscribers miss it */
        *t = (fan_task_t){ .ca = ca, .w = w, .m = m };
        t->node.fn = fan_run;
        t->node.ud = t;
        t->node.heap = false;
        flare__chan_msg_ref(m);
        flare__loop_post_node(&w->loop, &t->node);
    }
    flare__chan_msg_unref(m);
}

void flare__chan_sequenced(flare_app_t *app, flare__chan_msg_t *m)
{
    chan_app_t *ca = app_state(app);
    if (ca == NULL) {
        flare__chan_msg_unref(m);
        return;
    }
    flare__chan_prepare(app, m);
    fanout(ca, m);
}

/* A publish on its way to the sequencer. */
typedef struct seq_task {
    chan_app_t *ca;
    flare_worker_t *seq;    /* where it runs */
    flare_worker_t *origin; /* the publishing worker (NULL: another thread) */
    flare__chan_msg_t *m;
    flare_channel_published_fn cb;
    void *ud;
} seq_task_t;

typedef struct done_task {
    flare_channel_published_fn cb;
    void *ud;
} done_task_t;

static void done_run(void *ud)
{
    done_task_t *d = ud;
    d->cb(0, 0, FLARE_STR_NULL, d->ud);
    free(d);
}

static void seq_run(void *ud)
{
    seq_task_t *t = ud;
    if (t->ca->bp != NULL && t->m->all_kind == 0) {
        /* another thread's publish to the backplane, made on a worker (a
         * worker has the connection) */
        int rc = t->ca->bp->publish(t->ca->bps, t->seq, t->m, t->cb, t->ud);
        if (rc != 0 && t->cb != NULL)
            t->cb(rc, 0, FLARE_STR_NULL, t->ud);
        flare__chan_msg_unref(t->m);
        free(t);
        return;
    }
    fanout(t->ca, t->m);
    if (t->cb != NULL) {
        /* taken: said on the publishing worker (or here, for another thread) */
        done_task_t *d = t->origin != NULL && t->origin != t->seq ? malloc(sizeof(*d)) : NULL;
        if (d != NULL) {
            *d = (done_task_t){ t->cb, t->ud };
            if (flare__loop_post(&t->origin->loop, done_run, d) != 0) {
                free(d);
                d = NULL;
            }
        }
        if (d == NULL)
            t->cb(0, 0, FLARE_STR_NULL, t->ud);
    }
    free(t);
}

int flare__chan_submit(flare_app_t *app, flare__chan_msg_t *m, flare_channel_published_fn cb,
                       void *ud)
{
    chan_app_t *ca = app_state(app);
    if (ca == NULL) {
        flare__chan_msg_unref(m);
        return FLARE_ESTATE;
    }
    bool cluster = ca->bp != NULL && m->all_kind == 0;
    m->except_inst = ca->instance;
    flare_worker_t *self = flare__worker_self;
    if (self != NULL && self->app != app)
        self = NULL;
    if (cluster && self == NULL && !ca->bp->up(ca->bps, true)) {
        flare__chan_msg_unref(m);
        return FLARE_EUNAVAIL; /* failing fast: Redis is known to be down */
    }
    if (cluster && self != NULL) {
        /* on a worker: to Redis on this worker's own connection; the message
         * comes back through the subscriber, in Redis's order */
        int rc = ca->bp->publish(ca->bps, self, m, cb, ud);
        flare__chan_msg_unref(m);
        return rc;
    }
    if (!cluster)
        flare__chan_prepare(app, m); /* encoded here, once: the sequencer only posts */
    /* the sequencer: worker 0, for every channel (one queue: a thread's
     * messages keep their order across channels too); in a cluster, a
     * worker that publishes for this thread, chosen by the channel */
    seq_task_t *t = malloc(sizeof(*t));
    if (t == NULL) {
        flare__chan_msg_unref(m);
        return FLARE_ENOMEM;
    }
    *t = (seq_task_t){ ca, NULL, self, m, cb, ud };
    int rc;
    if (self != NULL) {
        t->seq = flare_app_worker(app, cluster ? m->hash % flare__app_nworkers(app) : 0);
        rc = flare__loop_post(&t->seq->loop, seq_run, t);
    } else {
        /* the workers stay while we are inside, and exist only then (not
         * before the run, nor after it) */
        rc = flare__app_enter(app);
        if (rc == 0) {
            t->seq = flare_app_worker(app, cluster ? m->hash % flare__app_nworkers(app) : 0);
            rc = flare__loop_post(&t->seq->loop, seq_run, t);
            flare__app_leave(app);
        }
    }
    if (rc != 0) {
        flare__chan_msg_unref(m);
        free(t);
    }
    return rc;
}

int flare__chan_publish(flare_app_t *app, flare_str_t name, const flare_channel_msg_t *msg,
                        uint64_t except_id, flare_channel_published_fn cb, void *ud)
{
    if (app == NULL || msg == NULL || !flare__chan_name_ok(name) ||
        (msg->data.len > 0 && msg->data.ptr == NULL) ||
        (msg->event.len > 0 && msg->event.ptr == NULL))
        return FLARE_EINVAL;
    for (size_t i = 0; i < msg->event.len; i++) {
        if (msg->event.ptr[i] == '\r' || msg->event.ptr[i] == '\n')
            return FLARE_EINVAL;
    }
    if (!msg->binary && !flare__utf8_valid(msg->data.ptr, msg->data.len))
        return FLARE_EINVAL;
    if (app_state(app) == NULL)
        return FLARE_ESTATE;
    flare__chan_msg_t *m =
        flare__chan_msg_new(FLARE__CHAN_DATA, name, msg->event, msg->data, msg->binary);
    if (m == NULL)
        return FLARE_ENOMEM;
    m->except_id = except_id;
    return flare__chan_submit(app, m, cb, ud);
}

int flare_channel_publish(flare_app_t *app, flare_str_t channel, const flare_channel_msg_t *msg,
                          flare_channel_published_fn cb, void *ud)
{
    return flare__chan_publish(app, channel, msg, 0, cb, ud);
}

/* ---- shutdown ---- */

static void chan_dispose_worker(flare_worker_t *w, void *state)
{
    chan_app_t *ca = state;
    chan_worker_t *cw = worker_state(ca, w, false);
    if (cw == NULL)
        return;
    cw->disposing = true;
    /* the WebSocket and SSE owners have left by now (their modules were
     * disposed first); C subscribers are told, then freed */
    for (size_t i = 0; i < cw->cap; i++) {
        while (cw->tab[i] != NULL) {
            flare__chan_t *c = cw->tab[i];
            flare__chan_sub_t *s = c->subs;
            if (!(s->flags & FLARE__SUB_DEAD)) {
                flare__chan_msg_t *n =
                    flare__chan_msg_new(FLARE__CHAN_NCLOSED, (flare_str_t){ c->name, c->nlen },
                                        FLARE_STR_NULL, FLARE_STR_NULL, false);
                if (n != NULL) {
                    s->kind->notice(s, n);
                    flare__chan_msg_unref(n);
                }
            }
            if (!(s->flags & FLARE__SUB_DEAD)) {
                flare__chan_leave(s); /* unlinks and frees it (and c after the last) */
            } else {
                unlink_sub(cw, s);
                free(s);
            }
        }
    }
    reap(cw);
    free(cw->tab);
    flare__worker_module_set(w, ca->slot, NULL);
    free(cw);
}
