/* A worker's pool of equal-sized buffers (read buffers, first output
 * buffers): the type and its inline get/put, so that a worker can hold one
 * without the stream layer (net/stream.h: dispose, trim). */
#ifndef FLARE_CORE_BUFPOOL_H
#define FLARE_CORE_BUFPOOL_H

#include <stdlib.h>

#include "core/core.h"

/* Buffer pool entry size (read buffers, the first output buffer). */
#define FLARE_CONN_BUF 16384

/* A worker's pool of FLARE_CONN_BUF-byte buffers (read buffers, first
 * output buffers): a free list, so a warm worker never mallocs one. */
typedef struct flare_pool_buf {
    struct flare_pool_buf *next;
} flare_pool_buf_t;

typedef struct flare_bufpool {
    flare_pool_buf_t *head;
    unsigned n;
} flare_bufpool_t;

#define FLARE_BUFPOOL_KEEP 1024 /* free buffers kept; more go back to malloc */

/* A buffer, NULL when out of memory. */
static inline char *flare__bufpool_get(flare_bufpool_t *p)
{
    flare_pool_buf_t *b = p->head;
    if (flare__likely(b != NULL)) {
        p->head = b->next;
        p->n--;
        return (char *)b;
    }
    return malloc(FLARE_CONN_BUF);
}

static inline void flare__bufpool_put(flare_bufpool_t *p, char *buf)
{
    if (flare__unlikely(p->n >= FLARE_BUFPOOL_KEEP)) {
        free(buf);
        return;
    }
    flare_pool_buf_t *b = (flare_pool_buf_t *)(void *)buf;
    b->next = p->head;
    p->head = b;
    p->n++;
}

#endif
