/* The HTTP/1.1 response-head parser (see resp_head.h). One pass over the
 * lines: the status line, then each field line checked and stored as it is
 * found, the framing fields interpreted on the way, the body's framing
 * decided at the empty line. Every limit is checked before the line it
 * concerns is looked at, so a prefix of the input gives the same error as
 * the whole or asks for more bytes. */
#include "http1/resp_head.h"

#include <string.h>

#include "core/core.h"

static int fail(flare_resp_head_t *h, const char *why)
{
    h->error = why;
    return FLARE_PARSE_ERROR;
}

/* reason-phrase = *( HTAB / SP / VCHAR / obs-text ) */
static bool reason_ok(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return false;
    }
    return true;
}

static flare_str_t trim_ows(const char *p, const char *end)
{
    while (p < end && flare__is_ows(*p))
        p++;
    while (end > p && flare__is_ows(end[-1]))
        end--;
    return (flare_str_t){ p, (size_t)(end - p) };
}

/* Calls fn on each non-empty element of a comma-separated list (RFC 9110
 * section 5.6.1: empty elements are allowed and ignored), OWS trimmed.
 * Stops at the first element fn refuses. */
typedef bool (*list_fn)(flare_resp_head_t *h, flare_str_t elem, void *ud);

static bool each_elem(flare_resp_head_t *h, flare_str_t v, list_fn fn, void *ud)
{
    const char *p = v.ptr, *end = v.ptr + v.len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        flare_str_t e = trim_ows(p, stop);
        if (e.len > 0 && !fn(h, e, ud))
            return false;
        p = comma ? comma + 1 : end;
    }
    return true;
}

/* Content-Length = 1*DIGIT; every element of every line the same value. */
static bool length_elem(flare_resp_head_t *h, flare_str_t e, void *ud)
{
    (void)ud;
    uint64_t v = 0;
    for (size_t i = 0; i < e.len; i++) {
        unsigned d = (unsigned char)e.ptr[i] - (unsigned)'0';
        if (d > 9) {
            h->error = "bad Content-Length";
            return false;
        }
        if (v > ((uint64_t)INT64_MAX - d) / 10) {
            h->error = "Content-Length too large";
            return false;
        }
        v = v * 10 + d;
    }
    if (h->content_length >= 0 && (uint64_t)h->content_length != v) {
        h->error = "conflicting Content-Length values";
        return false;
    }
    h->content_length = (int64_t)v;
    return true;
}

struct te_state {
    bool chunked; /* "chunked" seen */
};

/* Transfer-Encoding: "chunked", once: any other coding, or chunked twice,
 * cannot be read safely. */
static bool te_elem(flare_resp_head_t *h, flare_str_t e, void *ud)
{
    struct te_state *te = ud;
    if (!FLARE__IEQ(e, "chunked")) {
        h->error = "unsupported Transfer-Encoding";
        return false;
    }
    if (te->chunked) {
        h->error = "chunked applied twice";
        return false;
    }
    te->chunked = true;
    return true;
}

struct conn_state {
    bool close, keep_alive;
};

static bool conn_elem(flare_resp_head_t *h, flare_str_t e, void *ud)
{
    struct conn_state *cs = ud;
    if (FLARE__IEQ(e, "close"))
        cs->close = true;
    else if (FLARE__IEQ(e, "keep-alive"))
        cs->keep_alive = true;
    else if (FLARE__IEQ(e, "upgrade"))
        h->upgrade = true;
    return true;
}

/* "HTTP/1.x SP 3DIGIT [SP reason]" (the SP before an empty reason may be
 * missing: servers commonly send "HTTP/1.1 200\r\n"). */
static int status_line(flare_resp_head_t *h, const char *p, size_t n)
{
    if (n < 12 || memcmp(p, "HTTP/", 5) != 0)
        return fail(h, "not an HTTP/1.x status line");
    if (p[5] != '1' || p[6] != '.' || (unsigned)(p[7] - '0') > 9)
        return fail(h, "unsupported HTTP version");
    h->minor = p[7] == '0' ? 0 : 1;
    if (p[8] != ' ')
        return fail(h, "bad status line");
    int st = 0;
    for (int i = 9; i < 12; i++) {
        unsigned d = (unsigned char)p[i] - (unsigned)'0';
        if (d > 9)
            return fail(h, "bad status code");
        st = st * 10 + (int)d;
    }
    if (st < 100 || st > 599)
        return fail(h, "status code out of range");
    h->status = st;
    if (n == 12) {
        h->reason = (flare_str_t){ p + 12, 0 };
        return 0;
    }
    if (p[12] != ' ')
        return fail(h, "bad status code");
    if (!reason_ok(p + 13, n - 13))
        return fail(h, "bad reason phrase");
    h->reason = (flare_str_t){ p + 13, n - 13 };
    return 0;
}

int flare__http_parse_resp_head(const char *buf, size_t len, const flare_http_limits_t *limits,
                                bool head_request, flare_resp_head_t *h)
{
    h->error = NULL;
    h->nheaders = 0;
    h->content_length = -1;
    h->upgrade = false;
    h->keep_alive = false;
    h->body = FLARE_RESP_BODY_NONE;

    size_t max_line = limits->max_request_line;
    size_t max_head = limits->max_head;

    /* the status line */
    size_t look = len < max_line + 2 ? len : max_line + 2;
    const char *lf = memchr(buf, '\n', look);
    if (lf == NULL)
        return len >= max_line + 2 ? fail(h, "status line too long") : FLARE_PARSE_PARTIAL;
    if (lf == buf || lf[-1] != '\r')
        return fail(h, "bare LF");
    size_t n = (size_t)(lf - 1 - buf);
    if (memchr(buf, '\r', n) != NULL)
        return fail(h, "bare CR");
    if (status_line(h, buf, n) < 0)
        return FLARE_PARSE_ERROR;

    struct te_state te = { false };
    struct conn_state cs = { false, false };
    bool has_te = false;
    const char *p = lf + 1, *end = buf + len;
    for (;;) {
        if (p == end)
            return len > max_head ? fail(h, "response head too large") : FLARE_PARSE_PARTIAL;
        if (*p == '\r') {
            if (p + 1 == end)
                return len > max_head ? fail(h, "response head too large") : FLARE_PARSE_PARTIAL;
            if (p[1] != '\n')
                return fail(h, "bare CR");
            p += 2;
            break;
        }
        lf = memchr(p, '\n', (size_t)(end - p));
        if (lf == NULL)
            return len > max_head ? fail(h, "response head too large") : FLARE_PARSE_PARTIAL;
        if ((size_t)(lf + 1 - buf) > max_head)
            return fail(h, "response head too large");
        if (*p == ' ' || *p == '\t')
            return fail(h, "obsolete line folding");
        if (lf[-1] != '\r')
            return fail(h, "bare LF");
        const char *eol = lf - 1;
        const char *q = p;
        while (q < eol && flare__is_tchar((unsigned char)*q))
            q++;
        if (q == p || q == eol || *q != ':')
            return fail(h, q < eol && flare__is_ows(*q) ? "whitespace before colon"
                                                        : "bad field name");
        flare_str_t name = { p, (size_t)(q - p) };
        flare_str_t value = trim_ows(q + 1, eol);
        if (!flare__field_value_ok(value))
            return fail(h, "bad field value");
        if (h->nheaders == limits->max_headers)
            return fail(h, "too many header fields");
        h->headers[h->nheaders++] = (flare_header_t){ name, value };

        bool ok = true;
        if (FLARE__IEQ(name, "content-length")) {
            if (value.len == 0)
                return fail(h, "bad Content-Length");
            ok = each_elem(h, value, length_elem, NULL);
        } else if (FLARE__IEQ(name, "transfer-encoding")) {
            has_te = true;
            ok = each_elem(h, value, te_elem, &te);
        } else if (FLARE__IEQ(name, "connection")) {
            ok = each_elem(h, value, conn_elem, &cs);
        }
        if (!ok)
            return FLARE_PARSE_ERROR;
        p = lf + 1;
    }
    if ((size_t)(p - buf) > max_head)
        return fail(h, "response head too large");

    if (has_te && !te.chunked)
        return fail(h, "empty Transfer-Encoding");
    if (has_te && h->minor == 0)
        return fail(h, "Transfer-Encoding in an HTTP/1.0 response");
    if (has_te && h->content_length >= 0)
        return fail(h, "both Transfer-Encoding and Content-Length");

    h->keep_alive = !cs.close && (h->minor == 1 || cs.keep_alive);
    if (head_request || h->status < 200 || h->status == 204 || h->status == 304)
        h->body = FLARE_RESP_BODY_NONE;
    else if (te.chunked)
        h->body = FLARE_RESP_BODY_CHUNKED;
    else if (h->content_length >= 0)
        h->body = FLARE_RESP_BODY_LENGTH;
    else {
        h->body = FLARE_RESP_BODY_CLOSE;
        h->keep_alive = false;
    }
    return (int)(p - buf);
}
