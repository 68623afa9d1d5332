/* A bounded byte ring with one producer and one consumer (the log rings):
 * lock-free, the two positions on their own cache lines. The producer
 * appends whole records (a line) or nothing, so the consumer always sees
 * complete lines; a record that does not fit is dropped and counted. */
#ifndef FLARE_OBS_RING_H
#define FLARE_OBS_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

typedef struct flare_ring {
    /* written by the producer, read by the consumer */
    _Alignas(64) _Atomic uint64_t head; /* bytes ever appended */
    _Atomic uint64_t dropped;           /* records refused (producer only writes it) */
    uint64_t tail_cache;                /* the producer's last view of tail */
    /* written by the consumer, read by the producer */
    _Alignas(64) _Atomic uint64_t tail; /* bytes ever consumed */
    _Atomic bool kicked;                /* the producer woke the consumer and it has not drained */
    /* read-only after init */
    _Alignas(64) char *data;
    size_t cap; /* power of two */
} flare_ring_t;

/* cap is rounded up to a power of two (>= 64). 0 or FLARE_ENOMEM. */
int flare__ring_init(flare_ring_t *r, size_t cap);
void flare__ring_dispose(flare_ring_t *r);

/* Producer: appends len bytes as one record. false (and dropped + 1) when
 * it does not fit whole. *used_after gets the bytes held once it is in
 * (exact when more than half the ring; below that it may count bytes the
 * consumer has already freed). */
bool flare__ring_put(flare_ring_t *r, const void *p, size_t len, size_t *used_after);

/* Producer, in two steps, for a record written in place: the address of
 * max contiguous free bytes at the head (NULL when there are not that many
 * before the end of the buffer or before the consumer: then use put, which
 * wraps and drops), then commit the len <= max bytes written there, with
 * *used_after as put gives it. Nothing is visible to the consumer before
 * the commit. */
char *flare__ring_reserve(flare_ring_t *r, size_t max);
void flare__ring_commit(flare_ring_t *r, size_t len, size_t *used_after);

/* Consumer: what is there to read, as one or two iovecs (wrap-around);
 * returns the byte count (0: empty, iov untouched). */
size_t flare__ring_peek(flare_ring_t *r, struct iovec iov[2], int *niov);
/* Consumer: n bytes of what peek returned are done. */
void flare__ring_consume(flare_ring_t *r, size_t n);

static inline uint64_t flare__ring_dropped(const flare_ring_t *r)
{
    return atomic_load_explicit(&((flare_ring_t *)r)->dropped, memory_order_relaxed);
}

#endif
