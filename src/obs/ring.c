/* The single-producer single-consumer byte ring (ring.h).
 *
 * head and tail only grow (64 bits: they never wrap in practice); the index
 * in data is the position modulo cap. The producer publishes head with a
 * release store after the bytes are copied, the consumer reads it with an
 * acquire load, and the other way round for tail, so each side sees the
 * other's bytes or space complete. */
#include "obs/ring.h"

#include <stdlib.h>
#include <string.h>

#include "flare/common.h"

int flare__ring_init(flare_ring_t *r, size_t cap)
{
    size_t c = 64;
    while (c < cap)
        c <<= 1;
    memset(r, 0, sizeof(*r));
    r->data = malloc(c);
    if (r->data == NULL)
        return FLARE_ENOMEM;
    r->cap = c;
    return 0;
}

void flare__ring_dispose(flare_ring_t *r)
{
    free(r->data);
    r->data = NULL;
    r->cap = 0;
}

bool flare__ring_put(flare_ring_t *r, const void *p, size_t len, size_t *used_after)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    /* the cached tail saves the shared cache line while there is room */
    if (head + len - r->tail_cache > r->cap) {
        r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (head + len - r->tail_cache > r->cap) {
            atomic_store_explicit(&r->dropped,
                                  atomic_load_explicit(&r->dropped, memory_order_relaxed) + 1,
                                  memory_order_relaxed);
            return false;
        }
    }
    size_t at = (size_t)(head & (r->cap - 1));
    size_t first = r->cap - at < len ? r->cap - at : len;
    memcpy(r->data + at, p, first);
    if (first < len)
        memcpy(r->data, (const char *)p + first, len - first);
    atomic_store_explicit(&r->head, head + len, memory_order_release);
    if (used_after != NULL) {
        /* measured against a fresh tail once the cached one says more than
         * half: the cache is only refreshed when the ring looks full, so a
         * stale one would report "past half full" on every record after the
         * first half ring of traffic (and the log writer got woken, and
         * wrote, once per line) */
        uint64_t used = head + len - r->tail_cache;
        if (used > r->cap / 2) {
            r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
            used = head + len - r->tail_cache;
        }
        *used_after = (size_t)used;
    }
    return true;
}

char *flare__ring_reserve(flare_ring_t *r, size_t max)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    size_t at = (size_t)(head & (r->cap - 1));
    if (r->cap - at < max)
        return NULL;
    if (head + max - r->tail_cache > r->cap) {
        r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (head + max - r->tail_cache > r->cap)
            return NULL;
    }
    return r->data + at;
}

void flare__ring_commit(flare_ring_t *r, size_t len, size_t *used_after)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    atomic_store_explicit(&r->head, head + len, memory_order_release);
    if (used_after != NULL) {
        uint64_t used = head + len - r->tail_cache;
        if (used > r->cap / 2) { /* as in put */
            r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
            used = head + len - r->tail_cache;
        }
        *used_after = (size_t)used;
    }
}

size_t flare__ring_peek(flare_ring_t *r, struct iovec iov[2], int *niov)
{
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    size_t n = (size_t)(head - tail);
    if (n == 0) {
        *niov = 0;
        return 0;
    }
    size_t at = (size_t)(tail & (r->cap - 1));
    size_t first = r->cap - at < n ? r->cap - at : n;
    iov[0] = (struct iovec){ r->data + at, first };
    *niov = 1;
    if (first < n) {
        iov[1] = (struct iovec){ r->data, n - first };
        *niov = 2;
    }
    return n;
}

void flare__ring_consume(flare_ring_t *r, size_t n)
{
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    atomic_store_explicit(&r->tail, tail + n, memory_order_release);
}
