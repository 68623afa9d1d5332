/* obs/log: the SPSC ring (exact bytes, wrap-around, full -> dropped), the
 * line formats (text, JSON escaping, the access log's combined and JSON
 * lines), level parsing and filtering, and the whole path through a
 * running app: lines reach the file on shutdown, request ids, reopen,
 * drops counted. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <flare/log.h>

#include "harness.h"
#include "obs/logfmt.h"
#include "obs/ring.h"

/* ---- the ring ---- */

static size_t ring_read(flare_ring_t *r, char *out)
{
    struct iovec iov[2];
    int n;
    size_t len = flare__ring_peek(r, iov, &n);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        memcpy(out + off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
    }
    assert_int_equal(off, len);
    flare__ring_consume(r, len);
    return len;
}

static void test_ring_exact_and_wrap(void **state)
{
    (void)state;
    flare_ring_t r;
    assert_int_equal(flare__ring_init(&r, 100), 0);
    assert_int_equal(r.cap, 128); /* rounded up to a power of two */
    char out[256];
    struct iovec iov[2];
    int n;
    assert_int_equal(flare__ring_peek(&r, iov, &n), 0);
    assert_int_equal(n, 0);
    size_t used;
    assert_true(flare__ring_put(&r, "hello\n", 6, &used));
    assert_int_equal(used, 6);
    assert_true(flare__ring_put(&r, "world\n", 6, &used));
    assert_int_equal(used, 12);
    assert_int_equal(ring_read(&r, out), 12);
    assert_memory_equal(out, "hello\nworld\n", 12);
    /* move to 100 bytes in, then a 60-byte record wraps: 28 + 32 */
    char fill[88];
    memset(fill, 'f', sizeof(fill));
    assert_true(flare__ring_put(&r, fill, sizeof(fill), NULL));
    assert_int_equal(ring_read(&r, out), 88);
    char rec[60];
    for (size_t i = 0; i < sizeof(rec); i++)
        rec[i] = (char)('A' + i % 26);
    assert_true(flare__ring_put(&r, rec, sizeof(rec), NULL));
    assert_int_equal(flare__ring_peek(&r, iov, &n), 60);
    assert_int_equal(n, 2);
    assert_int_equal(iov[0].iov_len, 28);
    assert_int_equal(iov[1].iov_len, 32);
    assert_int_equal(ring_read(&r, out), 60);
    assert_memory_equal(out, rec, 60);
    assert_int_equal(flare__ring_dropped(&r), 0);
    flare__ring_dispose(&r);
}

static void test_ring_full_drops(void **state)
{
    (void)state;
    flare_ring_t r;
    assert_int_equal(flare__ring_init(&r, 64), 0);
    char rec[30];
    memset(rec, 'x', sizeof(rec));
    assert_true(flare__ring_put(&r, rec, 30, NULL));
    assert_true(flare__ring_put(&r, rec, 30, NULL));
    /* 60 of 64 held: a 30-byte record does not fit, and is not split */
    assert_false(flare__ring_put(&r, rec, 30, NULL));
    assert_false(flare__ring_put(&r, rec, 5, NULL));
    assert_int_equal(flare__ring_dropped(&r), 2);
    assert_true(flare__ring_put(&r, rec, 4, NULL)); /* exactly full */
    assert_false(flare__ring_put(&r, rec, 1, NULL));
    assert_int_equal(flare__ring_dropped(&r), 3);
    char out[64];
    assert_int_equal(ring_read(&r, out), 64);
    assert_true(flare__ring_put(&r, rec, 30, NULL)); /* room again */
    assert_int_equal(ring_read(&r, out), 30);
    assert_int_equal(flare__ring_dropped(&r), 3);
    /* a record larger than the ring can never go in */
    char big[65] = { 0 };
    assert_false(flare__ring_put(&r, big, sizeof(big), NULL));
    assert_int_equal(flare__ring_dropped(&r), 4);
    flare__ring_dispose(&r);
}

/* used_after, which decides when the writer is woken, follows what the
 * consumer frees: after a ring's worth of traffic, a near-empty ring does
 * not report itself past half full */
static void test_ring_used_follows_consumer(void **state)
{
    (void)state;
    flare_ring_t r;
    assert_int_equal(flare__ring_init(&r, 64), 0);
    char rec[20], out[64];
    memset(rec, 'u', sizeof(rec));
    size_t used;
    for (int i = 0; i < 10; i++) {
        assert_true(flare__ring_put(&r, rec, sizeof(rec), &used));
        assert_int_equal(used, sizeof(rec)); /* the one just put: the rest was read */
        assert_int_equal(ring_read(&r, out), sizeof(rec));
    }
    assert_true(flare__ring_put(&r, rec, sizeof(rec), &used));
    assert_true(flare__ring_put(&r, rec, sizeof(rec), &used));
    assert_int_equal(used, 40); /* past half, unread: counted whole */
    assert_int_equal(flare__ring_dropped(&r), 0);
    flare__ring_dispose(&r);
}

/* a record written in place: reserved, invisible until committed; no
 * reservation across the end of the buffer or past the consumer */
static void test_ring_reserve_commit(void **state)
{
    (void)state;
    flare_ring_t r;
    assert_int_equal(flare__ring_init(&r, 64), 0);
    struct iovec iov[2];
    int n;
    char out[64];
    char *p = flare__ring_reserve(&r, 40);
    assert_non_null(p);
    memcpy(p, "in place\n", 9);
    assert_int_equal(flare__ring_peek(&r, iov, &n), 0); /* not committed yet */
    size_t used;
    flare__ring_commit(&r, 9, &used);
    assert_int_equal(used, 9);
    assert_int_equal(ring_read(&r, out), 9);
    assert_memory_equal(out, "in place\n", 9);
    /* at 9 of 64: 55 bytes before the end, so 56 cannot be reserved there */
    assert_null(flare__ring_reserve(&r, 56));
    assert_non_null(flare__ring_reserve(&r, 55));
    char rec[50];
    memset(rec, 'r', sizeof(rec));
    assert_true(flare__ring_put(&r, rec, sizeof(rec), NULL));
    assert_null(flare__ring_reserve(&r, 6)); /* at 59: 5 before the end (14 free) */
    assert_non_null(flare__ring_reserve(&r, 5));
    assert_int_equal(ring_read(&r, out), 50);
    /* wrapped to 45 (19 before the end), 50 held: only the 14 free */
    assert_true(flare__ring_put(&r, rec, sizeof(rec), NULL));
    assert_null(flare__ring_reserve(&r, 15));
    assert_non_null(flare__ring_reserve(&r, 14));
    assert_int_equal(ring_read(&r, out), 50);
    assert_int_equal(flare__ring_dropped(&r), 0); /* a failed reservation drops nothing */
    flare__ring_dispose(&r);
}

/* ---- formats ---- */

static const struct timespec T0 = { 1000000000, 123456789 }; /* 2001-09-09T01:46:40.123Z */

static char *fmt_line(int format, flare_log_level_t lvl, int worker, const char *id,
                      const char *msg, size_t msglen)
{
    static char buf[FLARE__LOG_LINE_MAX + 1];
    flare_logclock_t clk;
    flare__logclock_init(&clk);
    size_t n = flare__log_format(buf, FLARE__LOG_LINE_MAX, format, &clk, &T0, lvl, worker,
                                 id != NULL ? flare_str(id) : FLARE_STR_NULL, msg, msglen);
    assert_true(n <= FLARE__LOG_LINE_MAX);
    buf[n] = '\0';
    return buf;
}

static void test_text_format(void **state)
{
    (void)state;
    assert_string_equal(fmt_line(FLARE_LOG_TEXT, FLARE_LOG_INFO, 3, "abc123", "started", 7),
                        "2001-09-09T01:46:40.123Z INFO w3 req=abc123 started\n");
    assert_string_equal(fmt_line(FLARE_LOG_TEXT, FLARE_LOG_ERROR, -1, NULL, "x", 1),
                        "2001-09-09T01:46:40.123Z ERROR w- req=- x\n");
    /* one call, one line: control bytes escaped; UTF-8 kept */
    const char m[] = "a\nb\r\tc\x01 \xc3\xa9";
    assert_string_equal(fmt_line(FLARE_LOG_TEXT, FLARE_LOG_WARN, 0, NULL, m, sizeof(m) - 1),
                        "2001-09-09T01:46:40.123Z WARN w0 req=- a\\nb\\r\\tc\\x01 \xc3\xa9\n");
}

static void test_json_format(void **state)
{
    (void)state;
    assert_string_equal(fmt_line(FLARE_LOG_JSON, FLARE_LOG_DEBUG, 1, "id-1", "hi", 2),
                        "{\"ts\":\"2001-09-09T01:46:40.123Z\",\"level\":\"debug\",\"worker\":1,"
                        "\"request_id\":\"id-1\",\"msg\":\"hi\"}\n");
    assert_string_equal(fmt_line(FLARE_LOG_JSON, FLARE_LOG_INFO, -1, NULL, "", 0),
                        "{\"ts\":\"2001-09-09T01:46:40.123Z\",\"level\":\"info\",\"worker\":null,"
                        "\"request_id\":null,\"msg\":\"\"}\n");
    /* quotes, backslash, control bytes, valid UTF-8 (2, 3, 4 bytes), then
     * invalid: a lone continuation byte, an overlong '/', a surrogate, a
     * truncated sequence at the end */
    const char m[] =
        "q\"b\\n\n\x1f\x7f \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \x80\xc0\xaf\xed\xa0\x80"
        "\xe2\x82";
    char *line = fmt_line(FLARE_LOG_JSON, FLARE_LOG_INFO, 0, NULL, m, sizeof(m) - 1);
    const char *msg = strstr(line, "\"msg\":\"");
    assert_non_null(msg);
    assert_string_equal(msg,
                        "\"msg\":\"q\\\"b\\\\n\\n\\u001f\x7f \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 "
                        "\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\"}\n");
}

static void test_long_message_cut(void **state)
{
    (void)state;
    static char big[3 * FLARE__LOG_LINE_MAX];
    memset(big, '"', sizeof(big)); /* each needs 2 bytes escaped */
    for (int f = 0; f < 2; f++) {
        char *line = fmt_line(f, FLARE_LOG_INFO, 0, "id", big, sizeof(big));
        size_t n = strlen(line);
        assert_true(n > FLARE__LOG_LINE_MAX - 100);
        assert_true(n <= FLARE__LOG_LINE_MAX);
        assert_int_equal(line[n - 1], '\n');
        assert_null(memchr(line, '\n', n - 1));
        if (f == FLARE_LOG_JSON) {
            assert_memory_equal(line + n - 3, "\"}\n", 3);
            assert_int_not_equal(line[n - 4], '\\'); /* not cut inside an escape */
        }
    }
    /* a request id longer than 128 bytes is cut to 128 */
    char id[300];
    memset(id, 'i', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    char *line = fmt_line(FLARE_LOG_TEXT, FLARE_LOG_INFO, 0, id, "m", 1);
    assert_int_equal(strlen(line), strlen("2001-09-09T01:46:40.123Z INFO w0 req= m\n") + 128);
}

/* The escaper (eight bytes at a time where it can) against a byte-by-byte
 * reference, on random strings of the bytes that matter. */
static size_t ref_escape_text(char *out, const unsigned char *s, size_t len, int quote)
{
    static const char hex[] = "0123456789abcdef";
    char *p = out;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = s[i];
        if (!quote && (c == '\n' || c == '\r' || c == '\t')) {
            *p++ = '\\';
            *p++ = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        } else if (c < 0x20 || c == 0x7f || (quote && (c == '"' || c == '\\'))) {
            *p++ = '\\';
            *p++ = 'x';
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
        } else {
            *p++ = (char)c;
        }
    }
    return (size_t)(p - out);
}

static void test_escape_random(void **state)
{
    (void)state;
    static const unsigned char alphabet[] = { 'a',  '/',  '"',  '\\', 0x01, '\n',
                                              0x7f, 0xc3, 0xa9, 0x80, 0x1f, ' ' };
    unsigned seed = 12345;
    for (int iter = 0; iter < 40000; iter++) {
        unsigned char in[64];
        seed = seed * 1103515245u + 12345u;
        size_t len = (seed >> 16) % sizeof(in);
        /* mostly plain bytes, so the eight-byte path runs too; every other
         * string with a special byte only rarely, so that whole strings of
         * every length are plain (the one-memcpy path) or have one special
         * byte anywhere, the last one included */
        unsigned spread = iter % 2 ? 64 : 64 * 40;
        for (size_t i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            unsigned r = (seed >> 16) % spread;
            in[i] = r < sizeof(alphabet) ? alphabet[r] : (unsigned char)('a' + r % 26);
        }
        for (int quote = 0; quote < 2; quote++) {
            char want[64 * 4], got[64 * 4];
            size_t wn = ref_escape_text(want, in, len, quote);
            char *e = flare__log_escape_text(got, got + sizeof(got), (const char *)in, len, quote);
            assert_int_equal((size_t)(e - got), wn);
            assert_memory_equal(got, want, wn);
            /* too little room: a prefix of the same, never past the end */
            size_t room = wn / 2;
            e = flare__log_escape_text(got, got + room, (const char *)in, len, quote);
            assert_true((size_t)(e - got) <= room);
            assert_memory_equal(got, want, (size_t)(e - got));
        }
    }
}

static void test_access_formats(void **state)
{
    (void)state;
    flare_access_rec_t r = {
        .peer = FLARE_STR("127.0.0.1"),
        .method = FLARE_STR("GET"),
        .target = FLARE_STR("/a?b=\"c\""),
        .protocol = FLARE_STR("HTTP/1.1"),
        .user_agent = FLARE_STR("curl/7.88 \"x\"\n"),
        .referer = FLARE_STR_NULL,
        .request_id = FLARE_STR("00000000000000ff"),
        .status = 200,
        .bytes = 13,
        .dur_us = 42,
    };
    char buf[FLARE__LOG_LINE_MAX + 1];
    flare_logclock_t clk;
    flare__logclock_init(&clk);
    size_t n = flare__access_format(buf, FLARE__LOG_LINE_MAX, FLARE_ACCESS_COMBINED, &clk, &T0, &r);
    buf[n] = '\0';
    assert_string_equal(buf, "127.0.0.1 - - [09/Sep/2001:01:46:40 +0000] \"GET /a?b=\\x22c\\x22 "
                             "HTTP/1.1\" 200 13 \"-\" \"curl/7.88 \\x22x\\x22\\x0a\" "
                             "\"00000000000000ff\" 42\n");
    n = flare__access_format(buf, FLARE__LOG_LINE_MAX, FLARE_ACCESS_JSON, &clk, &T0, &r);
    buf[n] = '\0';
    assert_string_equal(buf,
                        "{\"ts\":\"2001-09-09T01:46:40.123Z\",\"request_id\":\"00000000000000ff\","
                        "\"peer\":\"127.0.0.1\",\"method\":\"GET\",\"path\":\"/a?b=\\\"c\\\"\","
                        "\"protocol\":\"HTTP/1.1\",\"status\":200,\"bytes\":13,"
                        "\"duration_us\":42,\"user_agent\":\"curl/7.88 \\\"x\\\"\\n\","
                        "\"referer\":\"\"}\n");
    /* an id the logger made is written as given: the same bytes */
    char want[FLARE__LOG_LINE_MAX + 1];
    for (int f = 0; f < 2; f++) {
        r.request_id_plain = false;
        n = flare__access_format(want, FLARE__LOG_LINE_MAX, f, &clk, &T0, &r);
        want[n] = '\0';
        r.request_id_plain = true;
        n = flare__access_format(buf, FLARE__LOG_LINE_MAX, f, &clk, &T0, &r);
        buf[n] = '\0';
        assert_string_equal(buf, want);
    }
    r.request_id_plain = false;
    /* a framing error: no request line */
    flare_access_rec_t e = {
        .peer = FLARE_STR("::1"), .status = 400, .bytes = 12, .request_id = FLARE_STR("id")
    };
    n = flare__access_format(buf, FLARE__LOG_LINE_MAX, FLARE_ACCESS_COMBINED, &clk, &T0, &e);
    buf[n] = '\0';
    assert_string_equal(buf,
                        "::1 - - [09/Sep/2001:01:46:40 +0000] \"-\" 400 12 \"-\" \"-\" \"id\" 0\n");
    /* a huge target is cut, the line still ends well (and the combined line
     * keeps its fields after the request) */
    static char target[3 * FLARE__LOG_LINE_MAX];
    memset(target, '\x01', sizeof(target));
    r.target = (flare_str_t){ target, sizeof(target) };
    for (int f = 0; f < 2; f++) {
        n = flare__access_format(buf, FLARE__LOG_LINE_MAX, f, &clk, &T0, &r);
        assert_true(n <= FLARE__LOG_LINE_MAX);
        assert_int_equal(buf[n - 1], '\n');
        assert_null(memchr(buf, '\n', n - 1));
        if (f == FLARE_ACCESS_JSON)
            assert_memory_equal(buf + n - 2, "}\n", 2);
        else
            assert_non_null(strstr(buf, " HTTP/1.1\" 200 13 \"-\" \"curl/7.88 "));
    }
}

static void test_level_parse(void **state)
{
    (void)state;
    flare_log_level_t l = FLARE_LOG_INFO;
    assert_int_equal(flare_log_level_parse("error", &l), 0);
    assert_int_equal(l, FLARE_LOG_ERROR);
    assert_int_equal(flare_log_level_parse("warn", &l), 0);
    assert_int_equal(l, FLARE_LOG_WARN);
    assert_int_equal(flare_log_level_parse("info", &l), 0);
    assert_int_equal(l, FLARE_LOG_INFO);
    assert_int_equal(flare_log_level_parse("debug", &l), 0);
    assert_int_equal(l, FLARE_LOG_DEBUG);
    assert_int_equal(flare_log_level_parse("DEBUG", &l), FLARE_EINVAL);
    assert_int_equal(flare_log_level_parse("", &l), FLARE_EINVAL);
    assert_int_equal(flare_log_level_parse(NULL, &l), FLARE_EINVAL);
    assert_int_equal(l, FLARE_LOG_DEBUG); /* unchanged on failure */
    assert_string_equal(flare_log_level_name(FLARE_LOG_WARN), "warn");
    assert_string_equal(flare_log_level_name((flare_log_level_t)9), "?");
}

/* ---- through a running app ---- */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return strdup("");
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

static size_t count_str(const char *s, const char *needle)
{
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static void tmpname(char *out, size_t cap, const char *what)
{
    snprintf(out, cap, "/tmp/flare_test_log_%d_%s", (int)getpid(), what);
    unlink(out);
}

/* GET /say?n=K logs "say i" K times at info and once at debug. */
static int say(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t n = flare_req_query_param(req, "n");
    int k = n.len > 0 ? atoi(n.ptr) : 1;
    for (int i = 0; i < k; i++)
        flare_req_log(req, FLARE_LOG_INFO, "say %d %-80s", i, "padding");
    flare_req_log(req, FLARE_LOG_DEBUG, "debug line");
    flare_log(flare_req_worker(req), FLARE_LOG_WARN, "worker line");
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("ok\n"));
}

static flare_app_t *log_app(const flare_log_config_t *lc)
{
    flare_config_t cfg = { .workers = 2 };
    flare_app_t *app = flare_app_new(&cfg);
    assert_non_null(app);
    assert_int_equal(flare_get(app, "/say", say, NULL), 0);
    assert_int_equal(flare_log_setup(app, lc), 0);
    return app;
}

static void get_status(harness_t *h, const char *path, const char *status)
{
    char req[256];
    snprintf(req, sizeof(req),
             "GET %s HTTP/1.1\r\nHost: x\r\nUser-Agent: t\r\nConnection: close\r\n\r\n", path);
    char *r = harness_roundtrip(h, req);
    assert_non_null(strstr(r, status));
    free(r);
}

static void get(harness_t *h, const char *path)
{
    get_status(h, path, "HTTP/1.1 200 ");
}

static void test_app_lines_and_levels(void **state)
{
    (void)state;
    char elog[128], alog[128];
    tmpname(elog, sizeof(elog), "err");
    tmpname(alog, sizeof(alog), "acc");
    flare_log_config_t lc = { .path = elog, .level = FLARE_LOG_INFO, .access_path = alog };
    flare_app_t *app = log_app(&lc);
    flare_app_log(app, FLARE_LOG_INFO, "before the run");
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    get(&h, "/say?n=3");
    flare_log_set_level(app, FLARE_LOG_DEBUG);
    assert_int_equal(flare_log_get_level(app), FLARE_LOG_DEBUG);
    get(&h, "/say?n=1");
    flare_app_log(app, FLARE_LOG_ERROR, "off-worker %s", "line");
    get_status(&h, "/nothere", "HTTP/1.1 404 ");
    assert_int_equal(harness_stop(&h), 0);
    /* everything is written once the run has returned */
    char *e = slurp(elog), *a = slurp(alog);
    assert_int_equal(count_str(e, " INFO w- req=- before the run\n"), 1);
    assert_int_equal(count_str(e, " say "), 4);
    assert_int_equal(count_str(e, "debug line"), 1); /* only after the level went to debug */
    assert_int_equal(count_str(e, " WARN w"), 2);
    assert_int_equal(count_str(e, " ERROR w- req=- off-worker line\n"), 1);
    /* the lines of one request share its id, and its access line has it:
     * two requests, one with 3 "say" lines (+ nothing at debug), one with 1
     * "say" line and the debug line */
    size_t counts[2] = { 0, 0 };
    char ids[2][17] = { "", "" };
    for (const char *p = e; (p = strstr(p, " say ")) != NULL; p++) {
        const char *ls = p;
        while (ls > e && ls[-1] != '\n')
            ls--;
        const char *r = strstr(ls, "req=");
        assert_true(r != NULL && r < p);
        char id[17];
        memcpy(id, r + 4, 16);
        id[16] = '\0';
        assert_int_equal(strspn(id, "0123456789abcdef"), 16);
        int k = ids[0][0] == '\0' || strcmp(ids[0], id) == 0 ? 0 : 1;
        if (k == 1 && ids[1][0] != '\0')
            assert_string_equal(ids[1], id);
        memcpy(ids[k], id, 17);
        counts[k]++;
    }
    assert_int_equal(counts[0] + counts[1], 4);
    assert_true((counts[0] == 3 && counts[1] == 1) || (counts[0] == 1 && counts[1] == 3));
    const char *one = counts[0] == 1 ? ids[0] : ids[1];
    char needle[64];
    snprintf(needle, sizeof(needle), "req=%s debug line", one);
    assert_int_equal(count_str(e, needle), 1);
    for (int k = 0; k < 2; k++) {
        snprintf(needle, sizeof(needle), "\"%s\"", ids[k]);
        assert_int_equal(count_str(a, needle), 1);
    }
    assert_int_equal(count_str(a, "\n"), 3);
    assert_int_equal(count_str(a, "\"GET /say?n=3 HTTP/1.1\" 200 3 \"-\" \"t\" \""), 1);
    assert_int_equal(count_str(a, "\"GET /nothere HTTP/1.1\" 404 "), 1);
    assert_int_equal(count_str(a, "127.0.0.1 - - ["), 3);
    free(e);
    free(a);
    assert_int_equal(flare_log_dropped(app), 0);
    flare_app_free(app);
    unlink(elog);
    unlink(alog);
}

static void test_reopen(void **state)
{
    (void)state;
    char elog[128], moved[128];
    tmpname(elog, sizeof(elog), "rot");
    tmpname(moved, sizeof(moved), "rot.1");
    flare_log_config_t lc = { .path = elog, .level = FLARE_LOG_INFO, .format = FLARE_LOG_JSON };
    flare_app_t *app = log_app(&lc);
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    get(&h, "/say?n=5");
    usleep(100000); /* the writer drains every 10 ms */
    assert_int_equal(rename(elog, moved), 0);
    get(&h, "/say?n=2"); /* may still land in the moved file: the same inode */
    assert_int_equal(flare_log_reopen(app), 0);
    usleep(100000);
    get(&h, "/say?n=4");
    assert_int_equal(harness_stop(&h), 0);
    char *old = slurp(moved), *cur = slurp(elog);
    size_t o = count_str(old, "\"msg\":\"say "), c = count_str(cur, "\"msg\":\"say ");
    assert_true(o >= 5);
    assert_int_equal(o + c, 11); /* none lost */
    assert_true(c >= 4);
    assert_int_equal(count_str(cur, "\"level\":\"info\""), c);
    free(old);
    free(cur);
    /* not running: reopen swaps at once; an unopenable path is an error */
    assert_int_equal(flare_log_reopen(app), 0);
    /* another name: created 0640 (under umask 022); a bad one changes
     * nothing; no access log to move; "" refused */
    char other[128];
    tmpname(other, sizeof(other), "other");
    mode_t um = umask(022);
    assert_int_equal(flare_log_reopen_as(app, other, NULL), 0);
    umask(um);
    struct stat sb;
    assert_int_equal(stat(other, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0640);
    assert_int_equal(flare_log_reopen_as(app, "/nonexistent-dir/x.log", NULL), FLARE_ESYS);
    assert_non_null(strstr(flare_last_error(), "/nonexistent-dir/x.log"));
    assert_int_equal(flare_log_reopen_as(app, NULL, "/tmp/never-flare-access.log"), FLARE_ESTATE);
    assert_int_equal(flare_log_reopen_as(app, "", NULL), FLARE_EINVAL);
    flare_app_log(app, FLARE_LOG_ERROR, "to the other file");
    assert_int_equal(flare_log_reopen(app), 0); /* the new name again */
    flare_app_log(app, FLARE_LOG_ERROR, "still there");
    char *o2 = slurp(other);
    assert_int_equal(count_str(o2, "to the other file"), 1);
    assert_int_equal(count_str(o2, "still there"), 1);
    free(o2);
    flare_app_free(app);
    unlink(elog);
    unlink(moved);
    unlink(other);
}

/* The reading end of the drop test's log (a FIFO): read until the writer
 * closes its end (flare_app_free), into a buffer the test then counts. */
typedef struct fifo_reader {
    int fd;
    char *buf;
    size_t len, cap;
} fifo_reader_t;

static void *fifo_read_all(void *arg)
{
    fifo_reader_t *r = arg;
    int fl = fcntl(r->fd, F_GETFL);
    fcntl(r->fd, F_SETFL, fl & ~O_NONBLOCK);
    for (;;) {
        if (r->cap - r->len < 65536) {
            r->cap = r->cap * 2 + 65536;
            r->buf = realloc(r->buf, r->cap);
            if (r->buf == NULL)
                return NULL;
        }
        ssize_t n = read(r->fd, r->buf + r->len, r->cap - r->len - 1);
        if (n <= 0)
            break; /* 0: the writer closed its end */
        r->len += (size_t)n;
    }
    r->buf[r->len] = '\0';
    return NULL;
}

static void test_drops_counted(void **state)
{
    (void)state;
    /* the log goes to a FIFO nobody reads until the handler is done: once
     * its (shrunk) pipe buffer is full the writer blocks, so the worker's
     * 4 KiB ring fills and lines are dropped whatever the timing (a file
     * let a fast enough writer keep up, e.g. under ThreadSanitizer, whose
     * slowed-down worker then dropped nothing) */
    char elog[128];
    tmpname(elog, sizeof(elog), "drop");
    assert_int_equal(mkfifo(elog, 0600), 0);
    fifo_reader_t rd = { .fd = open(elog, O_RDONLY | O_NONBLOCK | O_CLOEXEC) };
    assert_true(rd.fd >= 0);
    fcntl(rd.fd, F_SETPIPE_SZ, 4096);
    flare_log_config_t lc = { .path = elog, .level = FLARE_LOG_INFO, .ring_bytes = 4096 };
    flare_app_t *app = log_app(&lc);
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    get(&h, "/say?n=1000"); /* ~140 KB in one handler: far more than 4 + 4 KiB */
    pthread_t reader;
    assert_int_equal(pthread_create(&reader, NULL, fifo_read_all, &rd), 0);
    assert_int_equal(harness_stop(&h), 0);
    uint64_t dropped = flare_log_dropped(app);
    flare_app_free(app); /* closes the log: the reader sees the end */
    assert_int_equal(pthread_join(reader, NULL), 0);
    close(rd.fd);
    assert_non_null(rd.buf);
    size_t kept = count_str(rd.buf, " say ");
    /* the worker line and the debug line: the worker line may be dropped too */
    size_t kept_worker = count_str(rd.buf, "worker line");
    assert_true(dropped > 0);
    assert_int_equal(kept + kept_worker + dropped, 1001);
    assert_non_null(strstr(rd.buf, " lines dropped (log rings full; "));
    free(rd.buf);
    unlink(elog);
}

static void test_setup_errors(void **state)
{
    (void)state;
    flare_app_t *app = flare_app_new(NULL);
    assert_non_null(app);
    flare_log_config_t lc = { .path = "/nonexistent-dir/x.log" };
    assert_int_equal(flare_log_setup(app, &lc), FLARE_ESYS);
    assert_non_null(strstr(flare_last_error(), "/nonexistent-dir/x.log"));
    lc = (flare_log_config_t){ .level = (flare_log_level_t)7 };
    assert_int_equal(flare_log_setup(app, &lc), FLARE_EINVAL);
    lc = (flare_log_config_t){ .format = 5 };
    assert_int_equal(flare_log_setup(app, &lc), FLARE_EINVAL);
    lc = (flare_log_config_t){ .access_path = "-", .access_format = 2 };
    assert_int_equal(flare_log_setup(app, &lc), FLARE_EINVAL);
    lc = (flare_log_config_t){ .ring_bytes = 100 };
    assert_int_equal(flare_log_setup(app, &lc), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "ring_bytes"));
    lc = (flare_log_config_t){ .path = "" };
    assert_int_equal(flare_log_setup(app, &lc), FLARE_EINVAL);
    /* nothing was kept: logging is off, every call a no-op */
    flare_app_log(app, FLARE_LOG_ERROR, "nowhere");
    assert_int_equal(flare_log_reopen(app), 0);
    assert_int_equal(flare_log_reopen_as(app, "/tmp/x.log", NULL), FLARE_ESTATE);
    assert_int_equal(flare_log_dropped(app), 0);
    /* zeroed: stderr, error level; set up twice replaces */
    assert_int_equal(flare_log_setup(app, NULL), 0);
    lc = (flare_log_config_t){ .level = FLARE_LOG_WARN };
    assert_int_equal(flare_log_setup(app, &lc), 0);
    assert_int_equal(flare_log_get_level(app), FLARE_LOG_WARN);
    assert_int_equal(flare_log_setup(NULL, &lc), FLARE_EINVAL);
    flare_app_free(app);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_exact_and_wrap),
        cmocka_unit_test(test_ring_full_drops),
        cmocka_unit_test(test_ring_used_follows_consumer),
        cmocka_unit_test(test_ring_reserve_commit),
        cmocka_unit_test(test_text_format),
        cmocka_unit_test(test_json_format),
        cmocka_unit_test(test_long_message_cut),
        cmocka_unit_test(test_escape_random),
        cmocka_unit_test(test_access_formats),
        cmocka_unit_test(test_level_parse),
        cmocka_unit_test(test_app_lines_and_levels),
        cmocka_unit_test(test_reopen),
        cmocka_unit_test(test_drops_counted),
        cmocka_unit_test(test_setup_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
