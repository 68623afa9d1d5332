#include "core/arena.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define ARENA_CHUNK 4096
#define ARENA_ALIGN FLARE_ARENA_ALIGN

struct flare_arena_block {
    flare_arena_block_t *next;
    size_t size;
    max_align_t data[];
};

void flare__arena_init(flare_arena_t *a)
{
    memset(a, 0, sizeof(*a));
}

/* The largest request served: no object may be larger than PTRDIFF_MAX
 * (pointer differences inside it must be representable), and the block
 * header must fit in front of it without wrapping the malloc size. */
#define ARENA_MAX ((size_t)PTRDIFF_MAX - sizeof(flare_arena_block_t))

/* Off the fast path: one compare for a size the caller controls. */
static void *alloc_big(flare_arena_t *a, size_t size)
{
    if (size > ARENA_MAX)
        return NULL;
    flare_arena_block_t *b = malloc(sizeof(*b) + size);
    if (b == NULL)
        return NULL;
    b->size = size;
    b->next = a->big;
    a->big = b;
    return b->data;
}

void *flare__arena_alloc(flare_arena_t *a, size_t size)
{
    if (size == 0)
        size = 1;
#ifdef FLARE_ARENA_DEBUG
    return alloc_big(a, size);
#else
    size_t need = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (flare__unlikely(need < size))
        return NULL; /* the rounding wrapped: size > SIZE_MAX - 15 */
    if ((size_t)(a->end - a->cur) >= need) {
        void *p = a->cur;
        a->cur += need;
        return p;
    }
    if (need > ARENA_CHUNK / 4)
        return alloc_big(a, size);
    flare_arena_block_t *c = malloc(sizeof(*c) + ARENA_CHUNK);
    if (c == NULL)
        return NULL;
    c->size = ARENA_CHUNK;
    c->next = a->chunks;
    /* one chunk: "used" means cur moved; more: a reset has work to do */
    a->chunk0 = a->chunks == NULL ? (char *)c->data : NULL;
    a->chunks = c;
    a->cur = (char *)c->data + need;
    a->end = (char *)c->data + ARENA_CHUNK;
    return c->data;
#endif
}

void *flare__arena_dup(flare_arena_t *a, const void *src, size_t size)
{
    void *p = flare__arena_alloc(a, size);
    if (p != NULL && size > 0)
        memcpy(p, src, size);
    return p;
}

void flare__arena_reset(flare_arena_t *a)
{
    if (!flare__arena_used(a))
        return; /* untouched since the last reset */
    while (a->big != NULL) {
        flare_arena_block_t *b = a->big;
        a->big = b->next;
        free(b);
    }
    if (a->chunks == NULL)
        return;
    /* keep the oldest chunk: it is the one a typical request fits in */
    flare_arena_block_t *keep = a->chunks;
    while (keep->next != NULL) {
        flare_arena_block_t *n = keep->next;
        keep->next = n->next;
        free(keep);
        keep = n;
    }
    a->chunks = keep;
    a->chunk0 = (char *)keep->data;
    a->cur = (char *)keep->data;
    a->end = (char *)keep->data + keep->size;
}

void flare__arena_dispose(flare_arena_t *a)
{
    flare__arena_reset(a);
    free(a->chunks);
    memset(a, 0, sizeof(*a));
}
