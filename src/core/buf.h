/* Growable byte buffer (heap). Used for output and de-chunked bodies. */
#ifndef FLARE_BUF_H
#define FLARE_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

typedef struct flare_buf {
    char *data;
    size_t len;
    size_t cap;
} flare_buf_t;

/* Makes room for `extra` more bytes (the capacity doubles, from 256);
 * 0 or FLARE_ENOMEM, also when len + extra would wrap or pass PTRDIFF_MAX
 * (realloc is never asked for such a size). */
int flare__buf_grow(flare_buf_t *b, size_t extra);

static inline int flare__buf_reserve(flare_buf_t *b, size_t extra)
{
    if (flare__likely(b->cap - b->len >= extra))
        return 0;
    return flare__buf_grow(b, extra);
}

static inline int flare__buf_append(flare_buf_t *b, const void *p, size_t n)
{
    if (flare__buf_reserve(b, n) != 0)
        return FLARE_ENOMEM;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

/* Appends n bytes and keeps a NUL after them (not counted in len), so that
 * data can be handed out as a C string: bodies and texts built piece by
 * piece. 0 or FLARE_ENOMEM (b unchanged), also when n + 1 would wrap. */
static inline int flare__buf_append_cstr(flare_buf_t *b, const void *p, size_t n)
{
    if (n >= (size_t)PTRDIFF_MAX || flare__buf_reserve(b, n + 1) != 0)
        return FLARE_ENOMEM;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

/* Drops the first n bytes (n <= len): what a parser consumed from a buffer
 * that more bytes are read into. The rest moves to the front. */
static inline void flare__buf_consume(flare_buf_t *b, size_t n)
{
    if (n < b->len)
        memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

static inline void flare__buf_free(flare_buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

#endif
