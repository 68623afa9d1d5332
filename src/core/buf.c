#include "core/buf.h"

int flare__buf_grow(flare_buf_t *b, size_t extra)
{
    size_t need = b->len + extra;
    if (need < b->len)
        return FLARE_ENOMEM;
    size_t cap = b->cap != 0 ? b->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return FLARE_ENOMEM;
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (p == NULL)
        return FLARE_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}
