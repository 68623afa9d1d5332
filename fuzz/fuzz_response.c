/* libFuzzer target: the HTTP/1.1 response-head parser (http1/resp_head.h),
 * which a client reads upstream servers' answers with.
 *
 * The first input byte picks the options (HEAD request or not, small or
 * large limits); the rest is the response. It is parsed whole and at every
 * prefix (a sample for long inputs), each copy of its exact size so ASan
 * sees any read past the end. Checked (abort() on violation):
 * - a prefix gives PARTIAL, the whole's error (same text) or, once the head
 *   is complete, the same length;
 * - a success is a head ending in CRLFCRLF within max_head, every view
 *   inside the input, no more fields than the limit, a status 100..599;
 * - the framing is never ambiguous: chunked has no Content-Length, a
 *   length body has one, a body read until close never keeps the
 *   connection, HEAD/1xx/204/304 have no body;
 * - an error names itself. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http1/resp_head.h"

#define CHECK(x)     \
    do {             \
        if (!(x))    \
            abort(); \
    } while (0)

#define MAX_FIELDS   64
#define ALL_PREFIXES 512

static bool inside(flare_str_t v, const char *buf, size_t len)
{
    if (v.len == 0)
        return true;
    return v.ptr >= buf && v.ptr + v.len <= buf + len;
}

static int parse(const uint8_t *data, size_t len, const flare_http_limits_t *lim, bool head,
                 flare_resp_head_t *h, flare_header_t *fields)
{
    char *copy = malloc(len ? len : 1);
    CHECK(copy != NULL);
    memcpy(copy, data, len);
    *h = (flare_resp_head_t){ .headers = fields };
    int rc = flare__http_parse_resp_head(copy, len, lim, head, h);
    if (rc > 0) {
        CHECK((size_t)rc <= len && (size_t)rc <= lim->max_head);
        CHECK(rc >= 4 && memcmp(copy + rc - 4, "\r\n\r\n", 4) == 0);
        CHECK(h->nheaders <= lim->max_headers);
        CHECK(h->status >= 100 && h->status <= 599);
        CHECK(h->minor == 0 || h->minor == 1);
        CHECK(inside(h->reason, copy, len));
        for (size_t i = 0; i < h->nheaders; i++) {
            CHECK(h->headers[i].name.len > 0);
            CHECK(inside(h->headers[i].name, copy, len));
            CHECK(inside(h->headers[i].value, copy, len));
        }
        switch (h->body) {
        case FLARE_RESP_BODY_CHUNKED:
            CHECK(h->content_length == -1);
            break;
        case FLARE_RESP_BODY_LENGTH:
            CHECK(h->content_length >= 0);
            break;
        case FLARE_RESP_BODY_CLOSE:
            CHECK(!h->keep_alive && h->content_length == -1);
            break;
        case FLARE_RESP_BODY_NONE:
            CHECK(head || h->status < 200 || h->status == 204 || h->status == 304);
            break;
        default:
            abort();
        }
        CHECK(h->error == NULL);
    } else if (rc == FLARE_PARSE_ERROR) {
        CHECK(h->error != NULL && h->error[0] != '\0');
    } else {
        CHECK(rc == FLARE_PARSE_PARTIAL);
    }
    free(copy);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t opt = data[0];
    data++;
    size--;
    flare_http_limits_t lim = { .max_request_line = (opt & 2) ? 64 : 8192,
                                .max_head = (opt & 2) ? 256 : 65536,
                                .max_headers = (opt & 4) ? 4 : MAX_FIELDS };
    bool head = opt & 1;
    static flare_header_t fields[MAX_FIELDS];
    flare_resp_head_t whole, part;
    int rc = parse(data, size, &lim, head, &whole, fields);
    const char *err = whole.error;

    size_t step = size <= ALL_PREFIXES ? 1 : size / ALL_PREFIXES;
    for (size_t cut = 0; cut < size; cut += step) {
        static flare_header_t pf[MAX_FIELDS];
        int prc = parse(data, cut, &lim, head, &part, pf);
        if (prc == FLARE_PARSE_PARTIAL)
            continue;
        if (prc == FLARE_PARSE_ERROR) {
            CHECK(rc == FLARE_PARSE_ERROR && strcmp(part.error, err) == 0);
        } else {
            CHECK(prc == rc && part.status == whole.status && part.body == whole.body &&
                  part.nheaders == whole.nheaders && part.keep_alive == whole.keep_alive);
        }
    }
    return 0;
}
