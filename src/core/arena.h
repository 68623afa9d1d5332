/* Per-request arena: bump allocation from chunks, reset (not freed) after
 * each response so a warm worker allocates nothing per request.
 *
 * The first chunk is kept across resets; oversize allocations get their own
 * malloc block, freed on reset. Built with -DFLARE_ARENA_DEBUG every
 * allocation is a separate malloc so ASan sees overflows (nginx's
 * NGX_DEBUG_PALLOC idea). */
#ifndef FLARE_ARENA_H
#define FLARE_ARENA_H

#include <stdbool.h>
#include <stddef.h>

typedef struct flare_arena_block flare_arena_block_t;

typedef struct flare_arena {
    char *cur;                   /* next free byte in the current chunk */
    char *end;                   /* end of the current chunk */
    flare_arena_block_t *chunks; /* list of chunks; the last one is kept on reset */
    flare_arena_block_t *big;    /* oversize allocations, freed on reset */
    char *chunk0;                /* start of the kept chunk's data */
} flare_arena_t;

void flare__arena_init(flare_arena_t *a);
/* size bytes, 16-byte aligned (size 0 counts as 1). NULL when out of
 * memory or when size is beyond any object (more than PTRDIFF_MAX minus a
 * block header): a size near SIZE_MAX never wraps into a small block. */
void *flare__arena_alloc(flare_arena_t *a, size_t size);
void *flare__arena_dup(flare_arena_t *a, const void *src, size_t size);

#define FLARE_ARENA_ALIGN 16

/* flare__arena_alloc's fast path, inline, for 0 < size <= a few KiB: the
 * bytes from the current chunk, or NULL when it has not room for them
 * (flare__arena_alloc then). */
static inline void *flare__arena_try(flare_arena_t *a, size_t size)
{
#ifdef FLARE_ARENA_DEBUG
    (void)a, (void)size;
    return NULL;
#else
    size_t need = (size + FLARE_ARENA_ALIGN - 1) & ~(size_t)(FLARE_ARENA_ALIGN - 1);
    if ((size_t)(a->end - a->cur) < need)
        return NULL;
    void *p = a->cur;
    a->cur += need;
    return p;
#endif
}
/* Frees everything but the first chunk. */
void flare__arena_reset(flare_arena_t *a);

/* True when something was allocated since the last reset (the common
 * request allocates nothing: the reset call is skipped). */
static inline bool flare__arena_used(const flare_arena_t *a)
{
    return a->big != NULL || (a->chunks != NULL && a->cur != a->chunk0);
}
void flare__arena_dispose(flare_arena_t *a);

#endif
