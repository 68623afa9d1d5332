#include "core/buf.h"

#include <stdint.h>

int flare__buf_grow(flare_buf_t *b, size_t extra)
{
    /* extra is often a length a caller or a client chose: no object may be
     * larger than PTRDIFF_MAX, so neither may the buffer */
    size_t need;
    if (__builtin_add_overflow(b->len, extra, &need) || need > (size_t)PTRDIFF_MAX)
        return FLARE_ENOMEM;
    size_t cap = b->cap != 0 ? b->cap : 256;
    while (cap < need)
        cap = cap <= (size_t)PTRDIFF_MAX / 2 ? cap * 2 : need;
    char *p = realloc(b->data, cap);
    if (p == NULL)
        return FLARE_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}
