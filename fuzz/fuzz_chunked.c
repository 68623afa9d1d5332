/* libFuzzer target: the chunked decoder.
 *
 * The input is a raw chunked body (and whatever follows it). It is decoded
 * whole, split in two at every point (a sample for long inputs) and byte by
 * byte, under two body limits; all must give the same result, decoded bytes
 * and (unless it is an error, which may be noticed at different bytes)
 * consumed count. Also checked (abort() on violation): consumed <= len,
 * PARTIAL consumes everything, DATA views are non-empty and inside the
 * input, the decoded total never passes max_body. Each piece is copied into
 * a buffer of its exact size so that ASan sees any read past the end. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http1/parser.h"

#define CHECK(x)     \
    do {             \
        if (!(x))    \
            abort(); \
    } while (0)

#define ALL_SPLITS 512

typedef struct result {
    int rc;
    int status;
    size_t consumed;
    size_t out_len;
    uint8_t *out; /* len + 1 bytes: the output never exceeds the input */
} result_t;

/* Feeds data cut every `every` bytes (0: whole), or at `cut` if nonzero. */
static void decode(const uint8_t *data, size_t len, size_t cut, size_t every, uint64_t max_body,
                   result_t *r)
{
    flare_chunked_t c;
    flare__chunked_init(&c);
    r->rc = FLARE_PARSE_PARTIAL;
    r->status = 0;
    r->consumed = 0;
    r->out_len = 0;

    size_t start = 0;
    while (start < len || (len == 0 && start == 0)) {
        size_t stop = len;
        if (every != 0 && start + every < len)
            stop = start + every;
        else if (cut != 0 && start < cut)
            stop = cut;
        size_t n = stop - start;
        char *piece = malloc(n != 0 ? n : 1);
        CHECK(piece != NULL);
        memcpy(piece, data + start, n);
        size_t off = 0;
        for (;;) {
            size_t used = (size_t)-1;
            flare_str_t view = { NULL, 0 };
            int status = 0;
            const char *error = NULL;
            int rc = flare__chunked_decode(&c, piece + off, n - off, max_body, &used, &view,
                                           &status, &error);
            CHECK(used <= n - off);
            r->consumed += used;
            if (rc == FLARE_CHUNKED_DATA) {
                CHECK(view.len > 0 && view.len <= used);
                CHECK(view.ptr >= piece + off && view.ptr + view.len <= piece + off + used);
                CHECK(r->out_len + view.len <= len);
                memcpy(r->out + r->out_len, view.ptr, view.len);
                r->out_len += view.len;
                CHECK(r->out_len <= max_body);
                off += used;
                continue;
            }
            if (rc == FLARE_PARSE_PARTIAL) {
                CHECK(used == n - off);
                break;
            }
            free(piece);
            r->rc = rc;
            if (rc == FLARE_PARSE_ERROR) {
                CHECK(error != NULL && error[0] != '\0');
                CHECK(status == 400 || status == 413 || status == 431);
                r->status = status;
            } else {
                CHECK(rc == FLARE_CHUNKED_DONE);
                /* DONE stays DONE */
                size_t again = 1;
                CHECK(flare__chunked_decode(&c, "x", 1, max_body, &again, &view, &status, &error) ==
                          FLARE_CHUNKED_DONE &&
                      again == 0);
            }
            return;
        }
        free(piece);
        start = stop;
        if (len == 0)
            break;
    }
}

static void same(const result_t *a, const result_t *b)
{
    CHECK(a->rc == b->rc && a->status == b->status);
    CHECK(a->out_len == b->out_len && memcmp(a->out, b->out, a->out_len) == 0);
    if (a->rc != FLARE_PARSE_ERROR)
        CHECK(a->consumed == b->consumed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint64_t max_bodies[] = { UINT64_MAX, 100 };
    result_t whole, other;
    whole.out = malloc(size + 1);
    other.out = malloc(size + 1);
    CHECK(whole.out != NULL && other.out != NULL);

    for (size_t m = 0; m < sizeof(max_bodies) / sizeof(max_bodies[0]); m++) {
        decode(data, size, 0, 0, max_bodies[m], &whole);
        if (whole.rc == FLARE_CHUNKED_DONE)
            CHECK(whole.consumed <= size);
        else if (whole.rc == FLARE_PARSE_PARTIAL)
            CHECK(whole.consumed == size);

        decode(data, size, 0, 1, max_bodies[m], &other);
        same(&whole, &other);
        decode(data, size, 0, 7, max_bodies[m], &other);
        same(&whole, &other);
        size_t step = size <= ALL_SPLITS ? 1 : size / 127 + 1;
        for (size_t cut = 1; cut < size; cut += step) {
            decode(data, size, cut, 0, max_bodies[m], &other);
            same(&whole, &other);
        }
    }
    free(whole.out);
    free(other.out);
    return 0;
}
