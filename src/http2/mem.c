/* nghttp2's memory, and our streams', from per-worker free lists.
 *
 * A session allocates and frees several small blocks per stream (the
 * stream, its outbound items, header copies, HPACK buffers). With many
 * streams in flight glibc's per-thread cache (7 blocks a size) overflows
 * and every allocation takes its slow path; measured, malloc and free were
 * about 1,500 instructions per request. Here blocks of a size class are
 * kept on the worker's list (bounded) and reused; larger ones go to
 * malloc. Every session and stream lives on one worker thread, so no
 * locking.
 *
 * Under AddressSanitizer the lists are bypassed, so its checks (use after
 * free, overflow) still see every block. */
#include <stdlib.h>
#include <string.h>

#include "http2/h2_int.h"

#ifdef FLARE__ASAN
#define H2M_PASSTHROUGH 1
#endif

#define H2M_MIN_SHIFT 5            /* 32 bytes */
#define H2M_CLASSES   8            /* up to 4 KiB */
#define H2M_KEEP      (256u << 10) /* bytes kept per class at most */
#define H2M_BIG       0xff
#define H2M_TRIM_KEEP (16u << 10) /* bytes a class keeps through the sweep's trim */

/* Precedes every block: its class (H2M_BIG: malloc'd as it is). 16 bytes
 * keep the block as aligned as malloc's. */
typedef union h2m_hdr {
    struct {
        union h2m_hdr *next; /* on a free list */
        uint32_t cls;
        uint32_t size; /* H2M_BIG: the block's size */
    } h;
    max_align_t align;
} h2m_hdr_t;

/* room: blocks a class's list may still take before frees go to free()
 * (cls_keep less those on it: one test when a block comes back); peak:
 * the most room since the last trim (the fewest blocks free then) */
struct flare_h2_mem {
    h2m_hdr_t *free[H2M_CLASSES];
    uint32_t room[H2M_CLASSES];
    uint32_t peak[H2M_CLASSES];
};

/* the blocks a class keeps on its list at most */
static uint32_t cls_keep(unsigned cls)
{
    return H2M_KEEP >> (cls + H2M_MIN_SHIFT);
}

#ifndef H2M_PASSTHROUGH
#define H2M_MAX_SIZE ((size_t)1 << (H2M_MIN_SHIFT + H2M_CLASSES - 1))

static size_t cls_size(unsigned cls)
{
    return (size_t)1 << (cls + H2M_MIN_SHIFT);
}

/* size <= H2M_MAX_SIZE: the class of the smallest power of two holding it */
static inline unsigned size_cls(size_t size)
{
    if (size <= ((size_t)1 << H2M_MIN_SHIFT))
        return 0;
    return (unsigned)(64 - __builtin_clzll((unsigned long long)(size - 1))) - H2M_MIN_SHIFT;
}

/* A block from a class's list, or NULL: the hot path, a few instructions
 * (nghttp2 asks for about five blocks per request and frees as many).
 * m is never NULL: the worker's lists exist before its first session. */
static inline void *take(flare_h2_mem_t *m, size_t size)
{
    if (flare__unlikely(size > H2M_MAX_SIZE))
        return NULL;
    unsigned cls = size_cls(size);
    h2m_hdr_t *b = m->free[cls];
    if (flare__unlikely(b == NULL))
        return NULL;
    m->free[cls] = b->h.next;
    if (++m->room[cls] > m->peak[cls])
        m->peak[cls] = m->room[cls];
    return b + 1;
}

/* The worker's lists, empty, each with room for cls_keep blocks. */
static flare_h2_mem_t *lists_new(void)
{
    flare_h2_mem_t *m = calloc(1, sizeof(*m));
    if (m != NULL)
        for (unsigned i = 0; i < H2M_CLASSES; i++)
            m->room[i] = m->peak[i] = cls_keep(i);
    return m;
}

/* A new block: of its class's size (kept on the list once freed), or, too
 * large for a class, of its own size. Out of line: the callers of take()
 * stay leaves. */
__attribute__((cold, noinline)) static void *fresh(flare_worker_t *w, size_t size)
{
    unsigned cls = w->h2mem != NULL && size <= H2M_MAX_SIZE ? size_cls(size) : H2M_BIG;
    size_t real = cls != H2M_BIG ? cls_size(cls) : size;
    if (real > UINT32_MAX - sizeof(h2m_hdr_t))
        return NULL;
    h2m_hdr_t *b = malloc(sizeof(*b) + real);
    if (b == NULL)
        return NULL;
    b->h.cls = cls;
    b->h.size = (uint32_t)real;
    return b + 1;
}

static inline void give(flare_worker_t *w, void *ptr)
{
    if (ptr == NULL)
        return;
    h2m_hdr_t *b = (h2m_hdr_t *)ptr - 1;
    flare_h2_mem_t *m = w->h2mem;
    unsigned cls = b->h.cls;
    if (flare__unlikely(cls == H2M_BIG || m == NULL || m->room[cls] == 0)) {
        free(b);
        return;
    }
    b->h.next = m->free[cls];
    m->free[cls] = b;
    m->room[cls]--;
}
#endif

void *flare__h2_malloc(flare_worker_t *w, size_t size)
{
#ifdef H2M_PASSTHROUGH
    (void)w;
    return malloc(size);
#else
    void *p = take(w->h2mem, size);
    return flare__likely(p != NULL) ? p : fresh(w, size);
#endif
}

void flare__h2_mfree(flare_worker_t *w, void *ptr)
{
#ifdef H2M_PASSTHROUGH
    (void)w;
    free(ptr);
#else
    give(w, ptr);
#endif
}

void *flare__h2_calloc(flare_worker_t *w, size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    void *p = flare__h2_malloc(w, n * size);
    if (p != NULL)
        memset(p, 0, n * size);
    return p;
}

void *flare__h2_realloc(flare_worker_t *w, void *ptr, size_t size)
{
#ifdef H2M_PASSTHROUGH
    (void)w;
    return realloc(ptr, size);
#else
    if (ptr == NULL)
        return flare__h2_malloc(w, size);
    h2m_hdr_t *b = (h2m_hdr_t *)ptr - 1;
    if (size <= b->h.size)
        return ptr;
    void *n = flare__h2_malloc(w, size);
    if (n == NULL)
        return NULL;
    memcpy(n, ptr, b->h.size);
    flare__h2_mfree(w, ptr);
    return n;
#endif
}

void flare__h2_mem_dispose(flare_worker_t *w)
{
    flare_h2_mem_t *m = w->h2mem;
    if (m == NULL)
        return;
    for (unsigned i = 0; i < H2M_CLASSES; i++) {
        while (m->free[i] != NULL) {
            h2m_hdr_t *b = m->free[i];
            m->free[i] = b->h.next;
            free(b);
        }
    }
    free(m);
    w->h2mem = NULL;
}

size_t flare__h2_mem_trim(flare_worker_t *w)
{
    flare_h2_mem_t *m = w->h2mem;
    size_t freed = 0;
    if (m == NULL)
        return 0;
    for (unsigned i = 0; i < H2M_CLASSES; i++) {
        /* a few blocks stay for the next connection; of the others, those
         * no request needed since the last trim go */
        uint32_t keep = H2M_TRIM_KEEP / (uint32_t)((size_t)1 << (i + H2M_MIN_SHIFT));
        uint32_t nfree = cls_keep(i) - m->room[i], low = cls_keep(i) - m->peak[i];
        uint32_t drop = nfree > keep ? nfree - keep : 0;
        if (drop > low)
            drop = low;
        for (uint32_t k = 0; k < drop; k++) {
            h2m_hdr_t *b = m->free[i];
            m->free[i] = b->h.next;
            free(b);
        }
        m->room[i] += drop;
        m->peak[i] = m->room[i];
        freed += (size_t)drop << (i + H2M_MIN_SHIFT);
    }
    return freed;
}

/* nghttp2_mem's shape: the worker is the user data */
static void *ng_malloc(size_t size, void *ud)
{
    return flare__h2_malloc(ud, size);
}

static void ng_free(void *ptr, void *ud)
{
    flare__h2_mfree(ud, ptr);
}

static void *ng_calloc(size_t n, size_t size, void *ud)
{
    return flare__h2_calloc(ud, n, size);
}

static void *ng_realloc(void *ptr, size_t size, void *ud)
{
    return flare__h2_realloc(ud, ptr, size);
}

int flare__h2_nghttp2_mem(flare_worker_t *w, nghttp2_mem *out)
{
#ifndef H2M_PASSTHROUGH
    if (w->h2mem == NULL && (w->h2mem = lists_new()) == NULL)
        return FLARE_ENOMEM;
#endif
    *out = (nghttp2_mem){ w, ng_malloc, ng_free, ng_calloc, ng_realloc };
    return 0;
}
