/* The in-memory session store: 16 shards, each a chained hash table behind
 * a read-write lock. Loads (the common operation) take the read lock and
 * refresh the expiry with an atomic store; saves and removals take the
 * write lock of one shard only.
 *
 * Expired sessions are reclaimed by a sweep with bounded work under that
 * write lock: each shard keeps its entries on a ring (the "age list") and
 * every save examines the next few entries of it, freeing the expired ones
 * and moving the others to the back. A save into a full shard examines up
 * to SWEEP_FULL entries and, when none of them had expired, drops the one
 * among them that expires first. So no save holds the lock for more than a
 * fixed number of entries, however many sessions there are (the purge
 * used to rescan the whole shard once per evicted entry: quadratic). The
 * ring order cannot follow the expiry (a load slides it under the read
 * lock), hence a sweep rather than an expiry-ordered list. */
#include "web/session_mem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flare/session.h"
#include "core/core.h"

#define SHARDS       16
#define ID_MAX       64
#define MAX_SESSIONS ((size_t)1 << 24) /* the bucket arrays: 16 x 1 Mi pointers at most */
#define DEFAULT_MAX  100000
#define SWEEP_STEP   FLARE__SESSION_SWEEP_STEP /* every save: expired ones go early */
#define SWEEP_FULL   FLARE__SESSION_SWEEP_FULL /* a save into a full shard */

typedef struct entry {
    struct entry *next;       /* hash chain */
    struct entry **pprev;     /* the pointer to this entry in its chain */
    struct entry *age_prev;   /* the shard's ring, oldest first */
    struct entry *age_next;   /* (NULL at the ends) */
    _Atomic uint64_t expires; /* unix seconds */
    unsigned ttl;
    size_t idlen, len;
    char id[ID_MAX];
    char data[];
} entry_t;

typedef struct shard {
    pthread_rwlock_t lock;
    entry_t **buckets;
    size_t nbuckets, count;
    entry_t *age_head, *age_tail;
    uint64_t visited; /* entries examined by sweeps (tests: the work is bounded) */
    char pad[64];
} shard_t;

typedef struct memstore {
    size_t max_per_shard;
    shard_t shards[SHARDS];
} memstore_t;

static uint64_t now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return (uint64_t)ts.tv_sec;
}

static uint64_t hash(flare_str_t id)
{
    return flare__hash(id.ptr, id.len);
}

static entry_t **find(shard_t *s, flare_str_t id, uint64_t h)
{
    entry_t **pp = &s->buckets[(h / SHARDS) & (s->nbuckets - 1)];
    for (; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->idlen == id.len && memcmp((*pp)->id, id.ptr, id.len) == 0)
            return pp;
    }
    return pp;
}

/* ---- the age ring (write lock held) ---- */

static void age_push(shard_t *s, entry_t *e)
{
    e->age_next = NULL;
    e->age_prev = s->age_tail;
    if (s->age_tail != NULL)
        s->age_tail->age_next = e;
    else
        s->age_head = e;
    s->age_tail = e;
}

static void age_unlink(shard_t *s, entry_t *e)
{
    if (e->age_prev != NULL)
        e->age_prev->age_next = e->age_next;
    else
        s->age_head = e->age_next;
    if (e->age_next != NULL)
        e->age_next->age_prev = e->age_prev;
    else
        s->age_tail = e->age_prev;
}

/* Out of the hash chain and the ring, and freed. */
static void drop(shard_t *s, entry_t *e)
{
    *e->pprev = e->next;
    if (e->next != NULL)
        e->next->pprev = e->pprev;
    age_unlink(s, e);
    free(e);
    s->count--;
}

/* Examines at most `budget` entries from the front of the ring: expired
 * ones are freed, the others go to the back. With make_room, when nothing
 * expired, the examined entry that expires first is dropped, so that the
 * caller may insert. */
static void sweep(shard_t *s, uint64_t now, size_t budget, bool make_room)
{
    size_t freed = 0, n = budget < s->count ? budget : s->count;
    entry_t *victim = NULL;
    uint64_t victim_exp = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        entry_t *e = s->age_head;
        uint64_t exp = atomic_load_explicit(&e->expires, memory_order_relaxed);
        s->visited++;
        if (exp <= now) {
            drop(s, e);
            freed++;
            continue;
        }
        if (exp < victim_exp) {
            victim = e;
            victim_exp = exp;
        }
        if (e != s->age_tail) {
            age_unlink(s, e);
            age_push(s, e);
        }
    }
    if (make_room && freed == 0 && victim != NULL)
        drop(s, victim);
}

static void ms_load(void *self, flare_worker_t *w, flare_str_t id, unsigned ttl,
                    void (*done)(void *ctx, int rc, flare_str_t data), void *ctx)
{
    (void)w;
    (void)ttl; /* the entry's own, as saved */
    memstore_t *m = self;
    if (id.len == 0 || id.len > ID_MAX) {
        done(ctx, FLARE_ENOTFOUND, FLARE_STR_NULL);
        return;
    }
    uint64_t h = hash(id), now = now_s();
    shard_t *s = &m->shards[h % SHARDS];
    pthread_rwlock_rdlock(&s->lock);
    entry_t *e = *find(s, id, h);
    if (e == NULL || atomic_load_explicit(&e->expires, memory_order_relaxed) <= now) {
        pthread_rwlock_unlock(&s->lock);
        done(ctx, FLARE_ENOTFOUND, FLARE_STR_NULL);
        return;
    }
    atomic_store_explicit(&e->expires, now + e->ttl, memory_order_relaxed); /* sliding */
    /* done runs under the read lock: it must not call back into the store
     * (the session middleware only copies the data) */
    done(ctx, 0, (flare_str_t){ e->data, e->len });
    pthread_rwlock_unlock(&s->lock);
}

static int ms_put(void *self, flare_str_t id, flare_str_t data, unsigned ttl)
{
    memstore_t *m = self;
    if (id.len == 0 || id.len > ID_MAX)
        return FLARE_EINVAL;
    if (data.len > SIZE_MAX - sizeof(entry_t))
        return FLARE_ETOOBIG;
    entry_t *n = malloc(sizeof(*n) + data.len);
    if (n == NULL)
        return FLARE_ENOMEM;
    uint64_t h = hash(id), now = now_s();
    atomic_init(&n->expires, now + ttl);
    n->ttl = ttl;
    n->idlen = id.len;
    memcpy(n->id, id.ptr, id.len);
    n->len = data.len;
    if (data.len > 0)
        memcpy(n->data, data.ptr, data.len);
    shard_t *s = &m->shards[h % SHARDS];
    pthread_rwlock_wrlock(&s->lock);
    entry_t **pp = find(s, id, h);
    if (*pp != NULL) {
        entry_t *old = *pp;
        n->next = old->next;
        if (n->next != NULL)
            n->next->pprev = &n->next;
        n->pprev = pp;
        *pp = n;
        age_unlink(s, old);
        free(old);
    } else {
        if (s->count >= m->max_per_shard) {
            sweep(s, now, SWEEP_FULL, true);
            pp = find(s, id, h); /* the chain may have changed */
        }
        n->next = NULL;
        n->pprev = pp;
        *pp = n;
        s->count++;
    }
    age_push(s, n);
    sweep(s, now, SWEEP_STEP, false); /* n is at the back: examined last */
    pthread_rwlock_unlock(&s->lock);
    return 0;
}

/* Completes at once: done runs before the call returns. */
static void ms_save(void *self, flare_worker_t *w, flare_str_t id, flare_str_t data, unsigned ttl,
                    flare_session_done_fn done, void *ctx)
{
    (void)w;
    int rc = ms_put(self, id, data, ttl);
    if (done != NULL)
        done(ctx, rc);
}

static void ms_remove(void *self, flare_worker_t *w, flare_str_t id, flare_session_done_fn done,
                      void *ctx)
{
    (void)w;
    memstore_t *m = self;
    if (id.len > 0 && id.len <= ID_MAX) {
        uint64_t h = hash(id);
        shard_t *s = &m->shards[h % SHARDS];
        pthread_rwlock_wrlock(&s->lock);
        entry_t **pp = find(s, id, h);
        if (*pp != NULL)
            drop(s, *pp);
        pthread_rwlock_unlock(&s->lock);
    }
    if (done != NULL)
        done(ctx, 0);
}

static void ms_destroy(void *self)
{
    memstore_t *m = self;
    for (int i = 0; i < SHARDS; i++) {
        shard_t *s = &m->shards[i];
        while (s->age_head != NULL) {
            entry_t *e = s->age_head;
            s->age_head = e->age_next;
            free(e);
        }
        free(s->buckets);
        pthread_rwlock_destroy(&s->lock);
    }
    free(m);
}

int flare_session_memory_store(size_t max_sessions, flare_session_store_t *out)
{
    if (out == NULL)
        return FLARE_EINVAL;
    if (max_sessions > MAX_SESSIONS)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_session_memory_store: max_sessions %zu is more than %zu",
                           max_sessions, MAX_SESSIONS);
    memstore_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return FLARE_ENOMEM;
    if (max_sessions == 0)
        max_sessions = DEFAULT_MAX;
    m->max_per_shard = max_sessions / SHARDS + 1;
    size_t nb = 64;
    while (nb < m->max_per_shard)
        nb *= 2;
    for (int i = 0; i < SHARDS; i++)
        pthread_rwlock_init(&m->shards[i].lock, NULL); /* all: ms_destroy destroys all */
    for (int i = 0; i < SHARDS; i++) {
        m->shards[i].nbuckets = nb;
        m->shards[i].buckets = calloc(nb, sizeof(entry_t *));
        if (m->shards[i].buckets == NULL) {
            ms_destroy(m);
            return FLARE_ENOMEM;
        }
    }
    *out = (flare_session_store_t){ ms_load, ms_save, ms_remove, ms_destroy, m };
    return 0;
}

void flare__session_mem_stats(void *self, size_t *count, uint64_t *visited)
{
    memstore_t *m = self;
    *count = 0;
    *visited = 0;
    for (int i = 0; i < SHARDS; i++) {
        shard_t *s = &m->shards[i];
        pthread_rwlock_rdlock(&s->lock);
        *count += s->count;
        *visited += s->visited;
        pthread_rwlock_unlock(&s->lock);
    }
}

size_t flare__session_mem_max_per_shard(void *self)
{
    return ((memstore_t *)self)->max_per_shard;
}
