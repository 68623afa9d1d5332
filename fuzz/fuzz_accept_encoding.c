/* libFuzzer target: Accept-Encoding negotiation (flare_accept_encoding).
 *
 * The whole input is the header value, in a buffer of exactly its size (so
 * a read past the view is an ASan report). For every set of offered codings:
 *   - the answer is FLARE_EINVAL or a flare_coding_t, and a coding only when
 *     it was offered;
 *   - malformed is malformed whatever is offered;
 *   - offering less never turns a refusal into a coding: when br wins with
 *     both offered, offering br alone still gives br (the same for gzip);
 *   - an empty list element more (", " appended) changes nothing.
 * Violations abort(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flare/compress.h"

#define CHECK(x)     \
    do {             \
        if (!(x))    \
            abort(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *v = malloc(size + 2);
    if (v == NULL)
        return 0;
    if (size > 0)
        memcpy(v, data, size);
    flare_str_t s = { v, size };
    const unsigned GZ = FLARE_CODING_GZIP_BIT, BR = FLARE_CODING_BR_BIT;
    int both = flare_accept_encoding(s, GZ | BR);
    int gz = flare_accept_encoding(s, GZ), br = flare_accept_encoding(s, BR);
    int none = flare_accept_encoding(s, 0);
    CHECK(both == FLARE_EINVAL || (both >= FLARE_CODING_IDENTITY && both <= FLARE_CODING_NONE));
    CHECK((both == FLARE_EINVAL) == (gz == FLARE_EINVAL));
    CHECK((both == FLARE_EINVAL) == (br == FLARE_EINVAL));
    CHECK((both == FLARE_EINVAL) == (none == FLARE_EINVAL));
    CHECK(gz != FLARE_CODING_BR && br != FLARE_CODING_GZIP);
    CHECK(none == FLARE_EINVAL || none == FLARE_CODING_IDENTITY || none == FLARE_CODING_NONE);
    if (both == FLARE_CODING_BR)
        CHECK(br == FLARE_CODING_BR);
    if (both == FLARE_CODING_GZIP)
        CHECK(gz == FLARE_CODING_GZIP);
    if (both != FLARE_EINVAL) {
        memcpy(v + size, ", ", 2);
        flare_str_t s2 = { v, size + 2 };
        CHECK(flare_accept_encoding(s2, GZ | BR) == both);
    }
    free(v);
    return 0;
}
