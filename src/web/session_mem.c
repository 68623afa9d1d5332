/* The in-memory session store: 16 shards, each a chained hash table behind
 * a read-write lock. Loads (the common operation) take the read lock and
 * refresh the expiry with an atomic store; saves and removals take the
 * write lock of one shard only. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flare/session.h"
#include "server.h"

#define SHARDS 16
#define ID_MAX 64

typedef struct entry {
    struct entry *next;
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
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < id.len; i++)
        h = (h ^ (unsigned char)id.ptr[i]) * 1099511628211ull;
    return h;
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

static void ms_load(void *self, flare_worker_t *w, flare_str_t id,
                    void (*done)(void *ctx, int rc, flare_str_t data), void *ctx)
{
    (void)w;
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

/* Under the write lock: drop expired entries; if still over the bound, drop
 * the entries closest to expiry until a tenth of the room is free. */
static void purge(memstore_t *m, shard_t *s, uint64_t now)
{
    for (size_t b = 0; b < s->nbuckets; b++) {
        for (entry_t **pp = &s->buckets[b]; *pp != NULL;) {
            entry_t *e = *pp;
            if (atomic_load_explicit(&e->expires, memory_order_relaxed) <= now) {
                *pp = e->next;
                free(e);
                s->count--;
            } else {
                pp = &e->next;
            }
        }
    }
    while (s->count >= m->max_per_shard - m->max_per_shard / 10 && s->count > 0) {
        entry_t **victim = NULL;
        for (size_t b = 0; b < s->nbuckets; b++) {
            for (entry_t **pp = &s->buckets[b]; *pp != NULL; pp = &(*pp)->next) {
                if (victim == NULL || (*pp)->expires < (*victim)->expires)
                    victim = pp;
            }
        }
        entry_t *e = *victim;
        *victim = e->next;
        free(e);
        s->count--;
    }
}

static int ms_save(void *self, flare_worker_t *w, flare_str_t id, flare_str_t data, unsigned ttl)
{
    (void)w;
    memstore_t *m = self;
    if (id.len == 0 || id.len > ID_MAX)
        return FLARE_EINVAL;
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
        *pp = n;
        free(old);
    } else {
        if (s->count >= m->max_per_shard) {
            purge(m, s, now);
            pp = find(s, id, h);
        }
        n->next = NULL;
        *pp = n;
        s->count++;
    }
    pthread_rwlock_unlock(&s->lock);
    return 0;
}

static void ms_remove(void *self, flare_worker_t *w, flare_str_t id)
{
    (void)w;
    memstore_t *m = self;
    if (id.len == 0 || id.len > ID_MAX)
        return;
    uint64_t h = hash(id);
    shard_t *s = &m->shards[h % SHARDS];
    pthread_rwlock_wrlock(&s->lock);
    entry_t **pp = find(s, id, h);
    if (*pp != NULL) {
        entry_t *e = *pp;
        *pp = e->next;
        free(e);
        s->count--;
    }
    pthread_rwlock_unlock(&s->lock);
}

static void ms_destroy(void *self)
{
    memstore_t *m = self;
    for (int i = 0; i < SHARDS; i++) {
        shard_t *s = &m->shards[i];
        for (size_t b = 0; s->buckets != NULL && b < s->nbuckets; b++) {
            while (s->buckets[b] != NULL) {
                entry_t *e = s->buckets[b];
                s->buckets[b] = e->next;
                free(e);
            }
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
    memstore_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return FLARE_ENOMEM;
    if (max_sessions == 0)
        max_sessions = 100000;
    m->max_per_shard = max_sessions / SHARDS + 1;
    size_t nb = 64;
    while (nb < m->max_per_shard)
        nb *= 2;
    for (int i = 0; i < SHARDS; i++) {
        pthread_rwlock_init(&m->shards[i].lock, NULL);
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
