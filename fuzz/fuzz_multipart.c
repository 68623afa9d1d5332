/* libFuzzer target: the streaming multipart/form-data parser.
 *
 * The input's first line is the boundary, or a whole Content-Type value
 * when it starts with "multipart/"; the rest is the body. Checked (abort()
 * on violation), with the default limits and with tight ones:
 *   - the reference check: the body fed whole, one byte at a time, split at
 *     every position in two (short inputs) and in random pieces gives the
 *     same events (part headers, each part's content, part ends, done) and
 *     the same result and error;
 *   - every call uses at most what it was given, NEED_MORE only once it
 *     used everything, DATA views lie in the input or in the parser and
 *     are never empty, events follow (BEGIN DATA* END)* DONE;
 *   - no part's content holds the delimiter, part count and sizes stay
 *     within the limits, an error maps to a 4xx status;
 *   - the scan is linear: at most 3 steps per byte (plus the headers). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flare/multipart.h"

#define CHECK(x)     \
    do {             \
        if (!(x))    \
            abort(); \
    } while (0)

typedef struct out {
    char *buf;
    size_t len, cap;
} out_t;

static void put(out_t *o, const void *p, size_t n)
{
    if (o->len + n > o->cap) {
        o->cap = (o->len + n) * 2 + 64;
        o->buf = realloc(o->buf, o->cap);
        CHECK(o->buf != NULL);
    }
    if (n > 0)
        memcpy(o->buf + o->len, p, n);
    o->len += n;
}

static void put_str(out_t *o, char tag, flare_str_t s)
{
    put(o, &tag, 1);
    uint64_t n = s.ptr != NULL ? s.len : UINT64_MAX;
    put(o, &n, sizeof(n));
    if (s.ptr != NULL)
        put(o, s.ptr, s.len);
}

typedef struct run {
    flare_multipart_t mp;
    out_t log;
    bool in_part;
    bool done;
    uint64_t part_len;
    out_t content; /* the current part's content, to look for the delimiter */
} run_t;

static void init(run_t *r, flare_str_t first, const flare_multipart_limits_t *lim)
{
    r->log.len = 0;
    r->content.len = 0;
    r->in_part = r->done = false;
    r->part_len = 0;
    if (first.len >= 10 && memcmp(first.ptr, "multipart/", 10) == 0)
        flare_multipart_init(&r->mp, first, lim);
    else
        flare_multipart_init_boundary(&r->mp, first, lim);
}

/* Feeds one piece; returns a negative code on error, else 0. */
static int feed(run_t *r, const char *base, size_t total, const char *p, size_t n)
{
    flare_multipart_t *mp = &r->mp;
    for (;;) {
        flare_multipart_event_t ev;
        size_t used = 7;
        int mrc = flare_multipart_next(mp, p, n, &used, &ev);
        if (mrc != 0) {
            CHECK(mrc == FLARE_EINVAL || mrc == FLARE_ETOOBIG);
            CHECK(used == 0);
            int st = flare_multipart_err_status(mp->err);
            CHECK(st >= 400 && st < 500);
            return mrc;
        }
        CHECK(used <= n);
        p += used;
        n -= used;
        switch (ev.type) {
        case FLARE_MULTIPART_NEED_MORE:
            CHECK(n == 0);
            return 0;
        case FLARE_MULTIPART_PART_BEGIN:
            CHECK(!r->in_part && !r->done);
            CHECK(ev.part->name.ptr != NULL);
            CHECK(mp->parts <= mp->limits.max_parts);
            r->in_part = true;
            r->part_len = 0;
            r->content.len = 0;
            put_str(&r->log, 'B', ev.part->name);
            put_str(&r->log, 'F', ev.part->filename);
            put_str(&r->log, 'T', ev.part->content_type);
            for (size_t i = 0; i < ev.part->header_count; i++) {
                put_str(&r->log, 'h', ev.part->headers[i].name);
                put_str(&r->log, 'v', ev.part->headers[i].value);
            }
            break;
        case FLARE_MULTIPART_DATA: {
            CHECK(r->in_part && ev.data.len > 0);
            bool in_input = ev.data.ptr >= base && ev.data.ptr + ev.data.len <= base + total;
            bool in_mp = ev.data.ptr >= (const char *)mp &&
                         ev.data.ptr + ev.data.len <= (const char *)(mp + 1);
            CHECK(in_input || in_mp);
            r->part_len += ev.data.len;
            if (mp->limits.max_part_size != 0)
                CHECK(r->part_len <= mp->limits.max_part_size);
            put(&r->content, ev.data.ptr, ev.data.len);
            /* the data of one part is logged as a whole at its end */
            break;
        }
        case FLARE_MULTIPART_PART_END:
            CHECK(r->in_part);
            r->in_part = false;
            CHECK(r->content.len == r->part_len);
            CHECK(r->content.len < mp->dlen ||
                  memmem(r->content.buf, r->content.len, mp->delim, mp->dlen) == NULL);
            put_str(&r->log, 'D',
                    (flare_str_t){ r->content.buf != NULL ? r->content.buf : "", r->content.len });
            put(&r->log, "E", 1);
            break;
        case FLARE_MULTIPART_DONE:
            CHECK(!r->in_part && !r->done);
            r->done = true;
            put(&r->log, "Z", 1);
            break;
        default:
            abort();
        }
    }
}

static int finish(run_t *r, int rc)
{
    if (rc == 0)
        rc = flare_multipart_finish(&r->mp);
    CHECK(rc == 0 ? r->done : r->mp.err != FLARE_MULTIPART_ERR_NONE);
    /* the result is part of what must match */
    put(&r->log, &rc, sizeof(rc));
    put(&r->log, &r->mp.err, sizeof(r->mp.err));
    return rc;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Same events and result. Past max_total_size the whole input fails at
 * once while pieces get events (and may meet another error first) until
 * the one that crosses it: then the pieces must fail too. */
static void same(const run_t *a, const run_t *b)
{
    if (a->mp.err == FLARE_MULTIPART_ERR_TOTAL_SIZE) {
        CHECK(b->mp.err != FLARE_MULTIPART_ERR_NONE);
        return;
    }
    CHECK(a->mp.err == b->mp.err);
    CHECK(a->log.len == b->log.len &&
          (a->log.len == 0 || memcmp(a->log.buf, b->log.buf, a->log.len) == 0));
}

static void check_mode(flare_str_t first, const char *body, size_t n,
                       const flare_multipart_limits_t *lim)
{
    static run_t ref, r;
    init(&ref, first, lim);
    int rc = feed(&ref, body, n, body, n);
    finish(&ref, rc);
    /* linear: at most 3 scan steps per byte */
    CHECK(ref.mp.work <= 3 * (uint64_t)n + 16);

    /* one byte at a time */
    init(&r, first, lim);
    rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = feed(&r, body, n, body + i, 1);
    finish(&r, rc);
    same(&ref, &r);

    /* every split in two, for short inputs */
    for (size_t cut = 1; cut < n && n <= 512; cut++) {
        init(&r, first, lim);
        rc = feed(&r, body, n, body, cut);
        if (rc == 0)
            rc = feed(&r, body, n, body + cut, n - cut);
        finish(&r, rc);
        same(&ref, &r);
    }

    /* random pieces, seeded by the input */
    uint64_t seed = 0x9e3779b97f4a7c15ULL ^ n;
    for (size_t i = 0; i < n && i < 64; i++)
        seed = seed * 31 + (unsigned char)body[i];
    for (int round = 0; round < 4; round++) {
        init(&r, first, lim);
        rc = 0;
        size_t off = 0;
        while (off < n && rc == 0) {
            size_t k = 1 + (size_t)(rng_next(&seed) % (round == 0 ? 4 : 97));
            if (k > n - off)
                k = n - off;
            /* empty calls in between change nothing */
            if (rng_next(&seed) % 8 == 0)
                rc = feed(&r, body, n, body + off, 0);
            if (rc == 0)
                rc = feed(&r, body, n, body + off, k);
            off += k;
        }
        finish(&r, rc);
        same(&ref, &r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *nl = memchr(data, '\n', size);
    size_t fl = nl != NULL ? (size_t)(nl - (const char *)data) : size;
    /* the body in its own buffer of exactly its size, so ASan sees overruns */
    size_t n = nl != NULL ? size - fl - 1 : 0;
    char *first = malloc(fl + 1), *body = malloc(n + 1);
    CHECK(first != NULL && body != NULL);
    memcpy(first, data, fl);
    if (n > 0)
        memcpy(body, nl + 1, n);
    flare_str_t f = { first, fl };

    check_mode(f, body, n, NULL);
    flare_multipart_limits_t tight = {
        .max_parts = 3, .max_header_size = 96, .max_part_size = 40, .max_total_size = n / 2 + 8
    };
    check_mode(f, body, n, &tight);

    free(first);
    free(body);
    return 0;
}
