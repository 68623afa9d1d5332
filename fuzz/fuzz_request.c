/* libFuzzer target: the request-head parser and head_ready.
 *
 * The input is raw bytes as a client would send them. Parsed under two sets
 * of limits (roomy, and tight enough that 414/431 are reached), with these
 * invariants (abort() on violation):
 * - the result is a length in 1..len, PARTIAL, or ERROR with a known status
 *   and a message;
 * - on success every view lies inside the head (the path may be the static
 *   "/"), the head ends in CRLFCRLF, parsing exactly that many bytes gives
 *   the same result, and every shorter prefix is PARTIAL; an origin-form
 *   path has path_pct set exactly when it holds a '%', and then every '%'
 *   in it starts "%" HEXDIG HEXDIG;
 * - on error, no prefix gives another error;
 * - a slow client fed byte by byte and parsed only when head_ready says so
 *   (or when a limit is crossed, as documented) finds the head at the same
 *   length.
 * Prefixes are copied into buffers of their exact size so that ASan sees
 * any read past the end. */
#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http1/parser.h"

#define CHECK(x)     \
    do {             \
        if (!(x))    \
            abort(); \
    } while (0)

/* Inputs up to this size have every prefix checked; longer ones a sample. */
#define ALL_PREFIXES 1024

static const flare_http_limits_t limits[] = {
    { 8192, 65536, 64 },
    { 40, 200, 4 },
};

typedef struct outcome {
    int rc;
    int status;
} outcome_t;

static outcome_t parse_copy(const uint8_t *data, size_t n, const flare_http_limits_t *lim,
                            flare_http_head_t *head)
{
    static flare_header_t hdrs[64];
    char *copy = malloc(n != 0 ? n : 1);
    CHECK(copy != NULL);
    memcpy(copy, data, n);
    head->headers = hdrs;
    outcome_t o = { flare__http_parse_head(copy, n, lim, head), 0 };
    if (o.rc == FLARE_PARSE_ERROR)
        o.status = head->status;
    free(copy);
    return o;
}

static bool inside(flare_str_t v, const char *b, size_t n)
{
    return v.ptr != NULL && v.ptr >= b && v.ptr <= b + n && v.len <= (size_t)(b + n - v.ptr);
}

static void check_success(const char *b, size_t n, const flare_http_head_t *h,
                          const flare_http_limits_t *lim)
{
    CHECK(n >= 4 && memcmp(b + n - 4, "\r\n\r\n", 4) == 0);
    CHECK(n <= lim->max_head);
    CHECK(inside(h->method, b, n) && h->method.len > 0);
    CHECK(inside(h->target, b, n) && h->target.len > 0);
    CHECK(h->target.ptr > h->method.ptr + h->method.len - 1);
    CHECK((size_t)(h->target.ptr + h->target.len - h->method.ptr) <= lim->max_request_line);
    CHECK(inside(h->path, b, n) || (h->path.len == 1 && h->path.ptr[0] == '/'));
    CHECK(inside(h->query, b, n));
    CHECK(h->minor == 0 || h->minor == 1);
    CHECK((unsigned)h->method_id < FLARE_METHOD_COUNT);
    if (h->method_id != FLARE_METHOD_OTHER) {
        flare_str_t name = flare_method_name(h->method_id);
        CHECK(flare_str_eq(name, h->method));
    }
    CHECK(h->nheaders <= lim->max_headers);
    for (size_t i = 0; i < h->nheaders; i++) {
        CHECK(inside(h->headers[i].name, b, n) && h->headers[i].name.len > 0);
        CHECK(inside(h->headers[i].value, b, n));
        const char *v = h->headers[i].value.ptr;
        size_t vl = h->headers[i].value.len;
        CHECK(vl == 0 || (v[0] != ' ' && v[0] != '\t' && v[vl - 1] != ' ' && v[vl - 1] != '\t'));
        for (size_t k = 0; k < vl; k++)
            CHECK(v[k] != '\r' && v[k] != '\n' && v[k] != '\0');
    }
    CHECK(h->content_length >= -1 && h->content_length <= ((int64_t)1 << 62));
    if (h->chunked)
        CHECK(h->content_length == -1 && h->minor == 1);
    if (h->minor == 1)
        CHECK(inside(h->host, b, n));
    else
        CHECK(h->host.ptr == NULL ? h->host.len == 0 : inside(h->host, b, n));
    CHECK(h->status == 0 && h->error == NULL);
    if (h->target.ptr[0] == '/') {
        const char *p = h->path.ptr;
        size_t pl = h->path.len;
        CHECK(h->path_pct == (memchr(p, '%', pl) != NULL));
        for (size_t i = 0; i < pl; i++) {
            if (p[i] == '%')
                CHECK(i + 2 < pl && isxdigit((unsigned char)p[i + 1]) &&
                      isxdigit((unsigned char)p[i + 2]));
        }
    }
}

static bool known_status(int s)
{
    return s == 400 || s == 414 || s == 417 || s == 431 || s == 501 || s == 505;
}

static void run(const uint8_t *data, size_t len, const flare_http_limits_t *lim)
{
    flare_http_head_t head;
    outcome_t full = parse_copy(data, len, lim, &head);

    CHECK(full.rc == FLARE_PARSE_PARTIAL || full.rc == FLARE_PARSE_ERROR ||
          (full.rc > 0 && (size_t)full.rc <= len));
    if (full.rc == FLARE_PARSE_ERROR)
        CHECK(known_status(full.status) && head.error != NULL && head.error[0] != '\0');

    if (full.rc > 0) {
        /* the views must be checked against a live buffer */
        static flare_header_t hdrs[64];
        head.headers = hdrs;
        int rc = flare__http_parse_head((const char *)data, len, lim, &head);
        CHECK(rc == full.rc);
        check_success((const char *)data, (size_t)rc, &head, lim);
        outcome_t exact = parse_copy(data, (size_t)rc, lim, &head);
        CHECK(exact.rc == full.rc);
    }

    /* prefixes never contradict the whole */
    size_t upto = full.rc > 0 ? (size_t)full.rc : len;
    size_t step = upto <= ALL_PREFIXES ? 1 : upto / 257 + 1;
    for (size_t k = 0; k < upto; k += step) {
        outcome_t o = parse_copy(data, k, lim, &head);
        if (full.rc == FLARE_PARSE_ERROR)
            CHECK(o.rc == FLARE_PARSE_PARTIAL ||
                  (o.rc == FLARE_PARSE_ERROR && o.status == full.status));
        else
            CHECK(o.rc == FLARE_PARSE_PARTIAL);
    }

    /* a slow client gated by head_ready finds the same head */
    size_t scanned = 0;
    outcome_t slow = { FLARE_PARSE_PARTIAL, 0 };
    size_t at = 0;
    for (size_t k = 1; k <= len && slow.rc == FLARE_PARSE_PARTIAL; k++) {
        size_t before = scanned;
        bool ready = flare__http_head_ready((const char *)data, k, &scanned);
        CHECK(scanned >= before && scanned <= k);
        if (!ready && k != lim->max_request_line + 1 && k != lim->max_head + 1)
            continue;
        /* parse in place: the copy-per-prefix check above covers overreads */
        static flare_header_t hdrs[64];
        head.headers = hdrs;
        slow.rc = flare__http_parse_head((const char *)data, k, lim, &head);
        slow.status = slow.rc == FLARE_PARSE_ERROR ? head.status : 0;
        at = k;
    }
    if (full.rc > 0)
        CHECK(slow.rc == full.rc && at == (size_t)full.rc);
    else if (slow.rc == FLARE_PARSE_ERROR)
        CHECK(full.rc == FLARE_PARSE_ERROR && slow.status == full.status);
    else
        CHECK(slow.rc == FLARE_PARSE_PARTIAL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++)
        run(data, size, &limits[i]);
    return 0;
}
