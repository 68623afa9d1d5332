/* multipart/form-data: the RFC examples, quoted boundaries, preamble and
 * epilogue, transport padding, every split of the input (down to one byte
 * per call) giving the same events, every limit and error with its status,
 * filename* decoding, a linear scan on near-boundary input (counted steps),
 * and the buffered helper on a real server: small parts in memory, large
 * ones in temporary files removed at cleanup, kept files surviving. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "flare/flare.h"
#include "flare/multipart.h"
#include "harness.h"

#define S(lit) FLARE_STR(lit)

extern bool flare__multipart_no_tmpfile;

/* ---- an event log: the same text for the same events ------------------ */

typedef struct log {
    char *buf;
    size_t len, cap;
    bool views_inside; /* every DATA view lies inside the input or the parser */
} log_t;

/* The parser as "bytes used or a negative code", the shape these tables
 * were written for, through flare_multipart_next's 0/-E + *used. */
static int64_t mp_next(flare_multipart_t *mp, const char *data, size_t len,
                       flare_multipart_event_t *ev)
{
    size_t used = 12345;
    int rc = flare_multipart_next(mp, data, len, &used, ev);
    if (rc != 0) {
        assert_true(rc < 0);
        assert_int_equal(used, 0);
        return rc;
    }
    assert_true(used <= len);
    return (int64_t)used;
}
static void log_put(log_t *l, const char *p, size_t n)
{
    if (l->len + n + 1 > l->cap) {
        l->cap = (l->len + n + 1) * 2;
        l->buf = realloc(l->buf, l->cap);
        assert_non_null(l->buf);
    }
    memcpy(l->buf + l->len, p, n);
    l->len += n;
    l->buf[l->len] = '\0';
}

static void log_str(log_t *l, const char *tag, flare_str_t s)
{
    log_put(l, tag, strlen(tag));
    if (s.ptr == NULL)
        log_put(l, "(null)", 6);
    else
        log_put(l, s.ptr, s.len);
}

/* Feeds body in pieces of `step` bytes (0: whole). Returns the final code:
 * the first negative one, or flare_multipart_finish's. */
static int run(flare_multipart_t *mp, const char *body, size_t len, size_t step, log_t *l)
{
    size_t off = 0;
    l->views_inside = true;
    for (;;) {
        size_t n = step == 0 ? len - off : (len - off < step ? len - off : step);
        const char *p = body + off;
        size_t given = n;
        bool more = off + n < len;
        for (;;) {
            flare_multipart_event_t ev;
            int64_t used = mp_next(mp, p, n, &ev);
            if (used < 0)
                return (int)used;
            assert_true((size_t)used <= n);
            p += used;
            n -= (size_t)used;
            if (ev.type == FLARE_MULTIPART_NEED_MORE) {
                assert_int_equal(n, 0);
                break;
            }
            switch (ev.type) {
            case FLARE_MULTIPART_PART_BEGIN:
                log_str(l, "[name=", ev.part->name);
                log_str(l, " filename=", ev.part->filename);
                log_str(l, " type=", ev.part->content_type);
                log_put(l, "]", 1);
                break;
            case FLARE_MULTIPART_DATA: {
                bool in_input = ev.data.ptr >= body && ev.data.ptr + ev.data.len <= body + len;
                bool in_mp = ev.data.ptr >= (const char *)mp &&
                             ev.data.ptr + ev.data.len <= (const char *)(mp + 1);
                if (!in_input && !in_mp)
                    l->views_inside = false;
                assert_true(ev.data.len > 0);
                log_put(l, ev.data.ptr, ev.data.len);
                break;
            }
            case FLARE_MULTIPART_PART_END:
                log_put(l, "[end]", 5);
                break;
            case FLARE_MULTIPART_DONE:
                log_put(l, "[done]", 6);
                break;
            default:
                fail();
            }
        }
        off += given;
        if (!more)
            break;
    }
    return flare_multipart_finish(mp);
}

/* Parses body with boundary b whole, then one byte at a time, then split
 * at every position in two: same result every time; the whole-input log
 * is returned (caller frees) and its code in *rc. */
static char *parse_all_ways(const char *boundary, const char *body, size_t len,
                            const flare_multipart_limits_t *lim, int *rc,
                            flare_multipart_err_t *err)
{
    static flare_multipart_t mp;
    log_t whole = { 0 };
    assert_int_equal(flare_multipart_init_boundary(&mp, flare_str(boundary), lim), 0);
    *rc = run(&mp, body, len, 0, &whole);
    *err = mp.err;
    assert_true(whole.views_inside);
    log_put(&whole, "", 0);
    for (size_t step = 1; step <= 3; step++) {
        log_t l = { 0 };
        assert_int_equal(flare_multipart_init_boundary(&mp, flare_str(boundary), lim), 0);
        int r = run(&mp, body, len, step, &l);
        assert_int_equal(r, *rc);
        assert_int_equal(mp.err, *err);
        assert_true(l.views_inside);
        log_put(&l, "", 0);
        if (*rc == 0)
            assert_string_equal(l.buf, whole.buf);
        free(l.buf);
    }
    /* two pieces, split anywhere */
    for (size_t cut = 1; cut < len && len < 4096; cut++) {
        log_t l = { 0 };
        assert_int_equal(flare_multipart_init_boundary(&mp, flare_str(boundary), lim), 0);
        flare_multipart_event_t ev;
        int r = 0;
        const char *pieces[2] = { body, body + cut };
        size_t sizes[2] = { cut, len - cut };
        l.views_inside = true;
        for (int k = 0; k < 2 && r == 0; k++) {
            const char *p = pieces[k];
            size_t n = sizes[k];
            for (;;) {
                int64_t used = mp_next(&mp, p, n, &ev);
                if (used < 0) {
                    r = (int)used;
                    break;
                }
                p += used;
                n -= (size_t)used;
                if (ev.type == FLARE_MULTIPART_NEED_MORE)
                    break;
                if (ev.type == FLARE_MULTIPART_PART_BEGIN) {
                    log_str(&l, "[name=", ev.part->name);
                    log_str(&l, " filename=", ev.part->filename);
                    log_str(&l, " type=", ev.part->content_type);
                    log_put(&l, "]", 1);
                } else if (ev.type == FLARE_MULTIPART_DATA) {
                    log_put(&l, ev.data.ptr, ev.data.len);
                } else if (ev.type == FLARE_MULTIPART_PART_END) {
                    log_put(&l, "[end]", 5);
                } else {
                    log_put(&l, "[done]", 6);
                }
            }
        }
        if (r == 0)
            r = flare_multipart_finish(&mp);
        log_put(&l, "", 0);
        assert_int_equal(r, *rc);
        assert_int_equal(mp.err, *err);
        if (*rc == 0)
            assert_string_equal(l.buf, whole.buf);
        free(l.buf);
    }
    return whole.buf;
}

static void expect_ok(const char *boundary, const char *body, const char *want)
{
    int rc;
    flare_multipart_err_t err;
    char *got = parse_all_ways(boundary, body, strlen(body), NULL, &rc, &err);
    assert_int_equal(rc, 0);
    assert_int_equal(err, FLARE_MULTIPART_ERR_NONE);
    assert_string_equal(got, want);
    free(got);
}

static void expect_err(const char *boundary, const char *body, const flare_multipart_limits_t *lim,
                       int want_rc, flare_multipart_err_t want_err, int want_status)
{
    int rc;
    flare_multipart_err_t err;
    char *got = parse_all_ways(boundary, body, strlen(body), lim, &rc, &err);
    assert_int_equal(rc, want_rc);
    assert_int_equal(err, want_err);
    assert_int_equal(flare_multipart_err_status(err), want_status);
    free(got);
}

/* ---- the parser --------------------------------------------------------- */

static void test_rfc7578_examples(void **state)
{
    (void)state;
    /* RFC 7578 section 4.4 */
    expect_ok("AaB03x",
              "--AaB03x\r\n"
              "content-disposition: form-data; name=\"field1\"\r\n"
              "content-type: text/plain;charset=UTF-8\r\n"
              "content-transfer-encoding: quoted-printable\r\n"
              "\r\n"
              "Joe owes =E2=82=AC100.\r\n"
              "--AaB03x--\r\n",
              "[name=field1 filename=(null) type=text/plain;charset=UTF-8]"
              "Joe owes =E2=82=AC100.[end][done]");
    /* the classic two-part form (RFC 2388 / HTML 4.01) */
    expect_ok("AaB03x",
              "--AaB03x\r\n"
              "Content-Disposition: form-data; name=\"submit-name\"\r\n"
              "\r\n"
              "Larry\r\n"
              "--AaB03x\r\n"
              "Content-Disposition: form-data; name=\"files\"; filename=\"file1.txt\"\r\n"
              "Content-Type: text/plain\r\n"
              "\r\n"
              "... contents of file1.txt ...\r\n"
              "--AaB03x--\r\n",
              "[name=submit-name filename=(null) type=(null)]Larry[end]"
              "[name=files filename=file1.txt type=text/plain]... contents of file1.txt ...[end]"
              "[done]");
}

static void test_quoted_boundary_preamble_epilogue(void **state)
{
    (void)state;
    /* RFC 2046 section 5.1.1, with the Content-Disposition RFC 7578 needs */
    const char *ct = "multipart/form-data; boundary=\"simple boundary\"";
    flare_str_t b;
    assert_int_equal(flare_multipart_boundary(flare_str(ct), &b, NULL), 0);
    assert_true(flare_str_eq(b, S("simple boundary")));
    expect_ok("simple boundary",
              "This is the preamble.  It is to be ignored, though it\r\n"
              "is a handy place for composition agents to include an\r\n"
              "explanatory note to non-MIME conformant readers.\r\n"
              "\r\n"
              "--simple boundary\r\n"
              "Content-Disposition: form-data; name=a\r\n"
              "\r\n"
              "This is implicitly typed plain US-ASCII text.\r\n"
              "It does NOT end with a linebreak.\r\n"
              "--simple boundary\r\n"
              "Content-Disposition: form-data; name=b\r\n"
              "Content-type: text/plain; charset=us-ascii\r\n"
              "\r\n"
              "This is explicitly typed plain US-ASCII text.\r\n"
              "It DOES end with a linebreak.\r\n"
              "\r\n"
              "--simple boundary--\r\n"
              "\r\n"
              "This is the epilogue.  It is also to be ignored.\r\n",
              "[name=a filename=(null) type=(null)]"
              "This is implicitly typed plain US-ASCII text.\r\n"
              "It does NOT end with a linebreak.[end]"
              "[name=b filename=(null) type=text/plain; charset=us-ascii]"
              "This is explicitly typed plain US-ASCII text.\r\n"
              "It DOES end with a linebreak.\r\n[end][done]");
    /* a preamble that looks like boundaries but is not one: "--simple
     * boundary" not at a line start, a near miss, then the real one */
    expect_ok("xyz",
              "a--xyz\r\n--xy\r\n\r\n--xyz\r\n"
              "Content-Disposition: form-data; name=\"k\"\r\n\r\n"
              "v\r\n--xy\r\n-\r\n--xyz--",
              "[name=k filename=(null) type=(null)]v\r\n--xy\r\n-[end][done]");
}

static void test_boundary_param(void **state)
{
    (void)state;
    flare_str_t b;
    flare_multipart_err_t why;
    assert_int_equal(flare_multipart_boundary(S("multipart/form-data; boundary=abc"), &b, &why), 0);
    assert_true(flare_str_eq(b, S("abc")));
    assert_int_equal(why, FLARE_MULTIPART_ERR_NONE);
    assert_int_equal(
        flare_multipart_boundary(S("Multipart/Form-Data ; charset=utf-8;BOUNDARY=x-1;"), &b, NULL),
        0);
    assert_true(flare_str_eq(b, S("x-1")));
    /* 70 characters is the most */
    char ct[160];
    snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%070d", 7);
    assert_int_equal(flare_multipart_boundary(flare_str(ct), &b, NULL), 0);
    assert_int_equal(b.len, 70);
    snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%071d", 7);
    assert_int_equal(flare_multipart_boundary(flare_str(ct), &b, &why), FLARE_EINVAL);
    assert_int_equal(why, FLARE_MULTIPART_ERR_BOUNDARY);
    static const char *const bad[] = {
        "multipart/form-data",
        "multipart/form-data; boundary=",
        "multipart/form-data; boundary=\"\"",
        "multipart/form-data; boundary=\"ends with space \"",
        "multipart/form-data; boundary=\"unterminated",
        "multipart/form-data; boundary=\"a\\\"b\"",
        "multipart/form-data; boundary=a@b",
        "multipart/form-data; boundary=a; boundary=b",
        "multipart/form-data; boundary=a junk",
        "multipart/form-data; =a",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why = FLARE_MULTIPART_ERR_NONE;
        assert_int_equal(flare_multipart_boundary(flare_str(bad[i]), &b, &why), FLARE_EINVAL);
        assert_int_equal(why, FLARE_MULTIPART_ERR_BOUNDARY);
        assert_int_equal(flare_multipart_err_status(why), 400);
    }
    static const char *const other[] = { "multipart/mixed; boundary=a", "text/plain",
                                         "application/x-www-form-urlencoded", "" };
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
        assert_int_equal(flare_multipart_boundary(flare_str(other[i]), &b, &why), FLARE_EINVAL);
        assert_int_equal(why, FLARE_MULTIPART_ERR_NOT_FORM_DATA);
        assert_int_equal(flare_multipart_err_status(why), 415);
    }
    assert_int_equal(flare_multipart_boundary(FLARE_STR_NULL, &b, &why), FLARE_EINVAL);
    /* init takes the Content-Type */
    flare_multipart_t mp;
    assert_int_equal(flare_multipart_init(&mp, S("text/plain"), NULL), FLARE_EINVAL);
    assert_int_equal(mp.err, FLARE_MULTIPART_ERR_NOT_FORM_DATA);
    flare_multipart_event_t ev;
    assert_true(mp_next(&mp, "x", 1, &ev) < 0);
    assert_int_equal(flare_multipart_init(&mp, S("multipart/form-data; boundary=\"q r\""), NULL),
                     0);
    assert_int_equal(mp.dlen, 4 + 3);
    assert_int_equal(flare_multipart_init_boundary(&mp, S("bad\x01"), NULL), FLARE_EINVAL);
    assert_int_equal(mp.err, FLARE_MULTIPART_ERR_BOUNDARY);
    assert_string_equal(flare_multipart_err_message(FLARE_MULTIPART_ERR_PARTS),
                        "multipart: too many parts");
}

static void test_padding_empty_and_edges(void **state)
{
    (void)state;
    /* transport padding after boundaries, an empty part, no headers at all
     * is a part without Content-Disposition (refused below) */
    expect_ok("b",
              "--b \t\r\nContent-Disposition: form-data; name=\"e\"\r\n\r\n\r\n--b\t\r\n"
              "Content-Disposition: form-data; name=\"f\"\r\n\r\nx\r\n--b--  trailing",
              "[name=e filename=(null) type=(null)][end]"
              "[name=f filename=(null) type=(null)]x[end][done]");
    /* only the closing boundary: zero parts */
    expect_ok("b", "--b--", "[done]");
    expect_ok("b", "preamble\r\n--b--\r\nepilogue\r\n--b\r\nignored", "[done]");
    /* content holding CR, LF, "--" and the boundary without its CRLF */
    expect_ok("b",
              "--b\r\nContent-Disposition: form-data; name=n\r\n\r\n"
              "\r\r\n\n--b-b\r-\r\n-\r\n--\r\n--c--b\r\n\r\n--b--",
              "[name=n filename=(null) type=(null)]\r\r\n\n--b-b\r-\r\n-\r\n--\r\n--c--b\r\n[end]"
              "[done]");
}

static void test_errors(void **state)
{
    (void)state;
    const int E = FLARE_EINVAL;
    expect_err("b", "", NULL, E, FLARE_MULTIPART_ERR_TRUNCATED, 400);
    expect_err("b", "no boundary at all", NULL, E, FLARE_MULTIPART_ERR_TRUNCATED, 400);
    expect_err("b", "--b\r\nContent-Disposition: form-data; name=a\r\n\r\nabc", NULL, E,
               FLARE_MULTIPART_ERR_TRUNCATED, 400);
    expect_err("b", "--b\r\nContent-Disposition: form-data; name=a\r\n", NULL, E,
               FLARE_MULTIPART_ERR_TRUNCATED, 400);
    expect_err("b", "--bX\r\n", NULL, E, FLARE_MULTIPART_ERR_DELIMITER, 400);
    expect_err("b", "--b\n", NULL, E, FLARE_MULTIPART_ERR_DELIMITER, 400);
    expect_err("b", "--b-x", NULL, E, FLARE_MULTIPART_ERR_DELIMITER, 400);
    expect_err("b", "--b \r\r", NULL, E, FLARE_MULTIPART_ERR_DELIMITER, 400);
    expect_err("b", "--b\r\nContent-Disposition: form-data; name=a\r\n\r\nx\r\n--bz", NULL, E,
               FLARE_MULTIPART_ERR_DELIMITER, 400);
    /* headers */
    expect_err("b", "--b\r\n\r\nx\r\n--b--", NULL, E, FLARE_MULTIPART_ERR_DISPOSITION, 400);
    expect_err("b", "--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--", NULL, E,
               FLARE_MULTIPART_ERR_DISPOSITION, 400);
    expect_err("b", "--b\r\nContent-Disposition: attachment; name=a\r\n\r\n\r\n--b--", NULL, E,
               FLARE_MULTIPART_ERR_DISPOSITION, 400);
    expect_err("b", "--b\r\nContent-Disposition: form-data\r\n\r\n\r\n--b--", NULL, E,
               FLARE_MULTIPART_ERR_DISPOSITION, 400);
    expect_err("b", "--b\r\nContent-Disposition: form-data; name=a; name=b\r\n\r\n\r\n--b--", NULL,
               E, FLARE_MULTIPART_ERR_DISPOSITION, 400);
    expect_err("b", "--b\r\nContent-Disposition: form-data; name=\"a\r\n\r\n\r\n--b--", NULL, E,
               FLARE_MULTIPART_ERR_DISPOSITION, 400);
    expect_err("b", "--b\r\nContent-Disposition: form-data; name\r\n\r\n\r\n--b--", NULL, E,
               FLARE_MULTIPART_ERR_DISPOSITION, 400);
    expect_err("b",
               "--b\r\nContent-Disposition: form-data; name=a\r\n"
               "Content-Disposition: form-data; name=b\r\n\r\n\r\n--b--",
               NULL, E, FLARE_MULTIPART_ERR_DISPOSITION, 400);
    expect_err("b", "--b\r\nContent-Disposition: form-data;\r\n name=a\r\n\r\n\r\n--b--", NULL, E,
               FLARE_MULTIPART_ERR_HEADER, 400);
    expect_err("b", "--b\r\nno colon here\r\n\r\n\r\n--b--", NULL, E, FLARE_MULTIPART_ERR_HEADER,
               400);
    expect_err("b", "--b\r\nA: 1\rB: 2\r\n\r\n\r\n--b--", NULL, E, FLARE_MULTIPART_ERR_HEADER, 400);
    expect_err("b", "--b\r\nA: 1\nB: 2\r\n\r\n\r\n--b--", NULL, E, FLARE_MULTIPART_ERR_HEADER, 400);
    expect_err("b",
               "--b\r\nContent-Disposition: form-data; name=a\r\nContent-Type: a/b\r\n"
               "Content-Type: c/d\r\n\r\n\r\n--b--",
               NULL, E, FLARE_MULTIPART_ERR_HEADER, 400);
    /* malformed filename* */
    static const char *const star[] = { "filename*=nothing",
                                        "filename*=UTF-8'only-one",
                                        "filename*=UTF-8''bad%zz",
                                        "filename*=UTF-8''cut%4",
                                        "filename*=UTF-8''star*",
                                        "filename*=UTF-8''sp ace",
                                        "filename*=UTF-8''a; filename*=UTF-8''b" };
    for (size_t i = 0; i < sizeof(star) / sizeof(star[0]); i++) {
        char body[256];
        snprintf(body, sizeof(body),
                 "--b\r\nContent-Disposition: form-data; name=f; %s\r\n\r\n\r\n--b--", star[i]);
        expect_err("b", body, NULL, E, FLARE_MULTIPART_ERR_DISPOSITION, 400);
    }
    /* the error is sticky */
    flare_multipart_t mp;
    flare_multipart_event_t ev;
    assert_int_equal(flare_multipart_init_boundary(&mp, S("b"), NULL), 0);
    assert_int_equal(mp_next(&mp, "--bX", 4, &ev), FLARE_EINVAL);
    assert_int_equal(mp_next(&mp, "--b--", 5, &ev), FLARE_EINVAL);
    assert_int_equal(flare_multipart_finish(&mp), FLARE_EINVAL);
    assert_int_equal(mp.err, FLARE_MULTIPART_ERR_DELIMITER);
}

static char *make_parts(size_t n, size_t each)
{
    size_t cap = n * (64 + each) + 16;
    char *body = malloc(cap);
    assert_non_null(body);
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(body + len, cap - len,
                                "--b\r\nContent-Disposition: form-data; name=\"p%zu\"\r\n\r\n", i);
        memset(body + len, 'x', each);
        len += each;
        memcpy(body + len, "\r\n", 2);
        len += 2;
    }
    memcpy(body + len, "--b--", 6);
    return body;
}

static int count_parts(const char *body, const flare_multipart_limits_t *lim, size_t *parts,
                       flare_multipart_err_t *err)
{
    static flare_multipart_t mp;
    assert_int_equal(flare_multipart_init_boundary(&mp, S("b"), lim), 0);
    log_t l = { 0 };
    int rc = run(&mp, body, strlen(body), 0, &l);
    *parts = mp.parts;
    *err = mp.err;
    free(l.buf);
    return rc;
}

static void test_limits(void **state)
{
    (void)state;
    size_t parts;
    flare_multipart_err_t err;
    /* the default allows 1,000 parts, not 1,001 */
    char *body = make_parts(1000, 1);
    assert_int_equal(count_parts(body, NULL, &parts, &err), 0);
    assert_int_equal(parts, 1000);
    free(body);
    body = make_parts(1001, 1);
    assert_int_equal(count_parts(body, NULL, &parts, &err), FLARE_ETOOBIG);
    assert_int_equal(err, FLARE_MULTIPART_ERR_PARTS);
    assert_int_equal(flare_multipart_err_status(err), 413);
    free(body);

    body = make_parts(3, 10);
    flare_multipart_limits_t lim = { .max_parts = 3 };
    assert_int_equal(count_parts(body, &lim, &parts, &err), 0);
    lim.max_parts = 2;
    expect_err("b", body, &lim, FLARE_ETOOBIG, FLARE_MULTIPART_ERR_PARTS, 413);
    /* part size: 10 bytes fit in 10, not in 9 */
    lim = (flare_multipart_limits_t){ .max_part_size = 10 };
    assert_int_equal(count_parts(body, &lim, &parts, &err), 0);
    lim.max_part_size = 9;
    expect_err("b", body, &lim, FLARE_ETOOBIG, FLARE_MULTIPART_ERR_PART_SIZE, 413);
    /* total size: the whole body, epilogue included */
    size_t len = strlen(body);
    lim = (flare_multipart_limits_t){ .max_total_size = len };
    assert_int_equal(count_parts(body, &lim, &parts, &err), 0);
    lim.max_total_size = len - 1;
    expect_err("b", body, &lim, FLARE_ETOOBIG, FLARE_MULTIPART_ERR_TOTAL_SIZE, 413);
    free(body);
    /* header block size: exactly the bound fits */
    const char *hb = "--b\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--b--";
    size_t block = strlen("Content-Disposition: form-data; name=a\r\n\r\n");
    lim = (flare_multipart_limits_t){ .max_header_size = block };
    expect_ok("b", hb, "[name=a filename=(null) type=(null)]v[end][done]");
    int rc;
    char *got = parse_all_ways("b", hb, strlen(hb), &lim, &rc, &err);
    assert_int_equal(rc, 0);
    free(got);
    lim.max_header_size = block - 1;
    expect_err("b", hb, &lim, FLARE_ETOOBIG, FLARE_MULTIPART_ERR_HEADER_SIZE, 431);
    /* the built-in bound applies to a larger limit too */
    size_t big = FLARE_MULTIPART_HEADER_MAX + 100;
    char *hbig = malloc(big + 64);
    assert_non_null(hbig);
    size_t n =
        (size_t)snprintf(hbig, big + 64, "--b\r\nContent-Disposition: form-data; name=a\r\nX: ");
    memset(hbig + n, 'y', big - n);
    strcpy(hbig + big, "\r\n\r\n\r\n--b--");
    lim.max_header_size = 1u << 20;
    expect_err("b", hbig, &lim, FLARE_ETOOBIG, FLARE_MULTIPART_ERR_HEADER_SIZE, 431);
    free(hbig);
    /* header count */
    char many[2048];
    size_t m =
        (size_t)snprintf(many, sizeof(many), "--b\r\nContent-Disposition: form-data; name=a\r\n");
    for (int i = 0; i < FLARE_MULTIPART_HEADERS_MAX; i++)
        m += (size_t)snprintf(many + m, sizeof(many) - m, "X-%d: v\r\n", i);
    snprintf(many + m, sizeof(many) - m, "\r\n\r\n--b--");
    expect_err("b", many, NULL, FLARE_ETOOBIG, FLARE_MULTIPART_ERR_HEADER_COUNT, 431);
}

static void test_filename_star(void **state)
{
    (void)state;
    /* filename* wins over filename, in either order */
    expect_ok("b",
              "--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"EURO rates.txt\"; "
              "filename*=UTF-8''%e2%82%ac%20rates.txt\r\n\r\nx\r\n--b--",
              "[name=f filename=\xe2\x82\xac rates.txt type=(null)]x[end][done]");
    expect_ok("b",
              "--b\r\nContent-Disposition: form-data; filename*=utf-8'en'a%2Fb; name=f; "
              "filename=\"plain\"\r\n\r\nx\r\n--b--",
              "[name=f filename=a/b type=(null)]x[end][done]");
    /* ISO-8859-1 becomes UTF-8 */
    expect_ok("b",
              "--b\r\nContent-Disposition: form-data; name=f; "
              "filename*=iso-8859-1'en'%A3%20rates\r\n\r\nx\r\n--b--",
              "[name=f filename=\xc2\xa3 rates type=(null)]x[end][done]");
    /* quoted (not RFC 8187, but sent by some clients) */
    expect_ok("b",
              "--b\r\nContent-Disposition: form-data; name=f; "
              "filename*=\"UTF-8''%c3%a9t%c3%a9.txt\"\r\n\r\nx\r\n--b--",
              "[name=f filename=\xc3\xa9t\xc3\xa9.txt type=(null)]x[end][done]");
    /* an unknown charset: ignored, filename stays */
    expect_ok("b",
              "--b\r\nContent-Disposition: form-data; name=f; filename=\"fallback.txt\"; "
              "filename*=KOI8-R''%c1\r\n\r\nx\r\n--b--",
              "[name=f filename=fallback.txt type=(null)]x[end][done]");
    /* quoted-string escapes, an empty filename, case-insensitive names */
    expect_ok("b",
              "--b\r\ncontent-DISPOSITION: Form-Data; NAME=\"a\\\"b\\\\c\"; FileName=\"\"\r\n"
              "CONTENT-TYPE:  image/png  \r\n\r\nx\r\n--b--",
              "[name=a\"b\\c filename= type=image/png]x[end][done]");
}

/* A body of n bytes of repeated `unit` inside one part, then the end. */
static char *adversarial(const char *boundary, const char *unit, size_t n, size_t *len)
{
    char head[256];
    int h = snprintf(head, sizeof(head),
                     "--%s\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n", boundary);
    size_t ul = strlen(unit), bl = strlen(boundary);
    char *body = malloc((size_t)h + n + bl + 16);
    assert_non_null(body);
    memcpy(body, head, (size_t)h);
    for (size_t i = 0; i < n; i++)
        body[(size_t)h + i] = unit[i % ul];
    size_t t = (size_t)h + n;
    t += (size_t)sprintf(body + t, "\r\n--%s--", boundary);
    *len = t;
    return body;
}

/* Parses body in pieces of step bytes, checks the content comes back whole
 * and that the scan took at most 3 steps per byte. */
static void check_linear(const char *boundary, const char *unit, size_t n, size_t step)
{
    static flare_multipart_t mp;
    size_t len;
    char *body = adversarial(boundary, unit, n, &len);
    assert_int_equal(flare_multipart_init_boundary(&mp, flare_str(boundary), NULL), 0);
    size_t content = 0, off = 0;
    bool same = true;
    const char *expect = body + (len - n - strlen(boundary) - 6);
    while (off < len) {
        size_t k = len - off < step ? len - off : step;
        const char *p = body + off;
        size_t left = k;
        for (;;) {
            flare_multipart_event_t ev;
            int64_t used = mp_next(&mp, p, left, &ev);
            assert_true(used >= 0);
            p += used;
            left -= (size_t)used;
            if (ev.type == FLARE_MULTIPART_DATA) {
                if (content + ev.data.len > n ||
                    memcmp(ev.data.ptr, expect + content, ev.data.len) != 0)
                    same = false;
                content += ev.data.len;
            }
            if (ev.type == FLARE_MULTIPART_NEED_MORE)
                break;
        }
        off += k;
    }
    assert_int_equal(flare_multipart_finish(&mp), 0);
    assert_true(same);
    assert_int_equal(content, n);
    if (mp.work > 3 * (uint64_t)len)
        fail_msg("boundary %s unit %s step %zu: %llu steps for %zu bytes", boundary, unit, step,
                 (unsigned long long)mp.work, len);
    free(body);
}

static void test_near_boundaries_linear(void **state)
{
    (void)state;
    /* a naive search restarting at each CR costs ~dlen steps per near
     * miss; these bodies are made of nothing else */
    const size_t n = 1 << 20;
    static const size_t steps[] = { 1, 7, 64, 4096, (size_t)1 << 21 };
    for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
        size_t step = steps[s], size = step == 1 ? n / 8 : n;
        check_linear("boundary", "\r\n--bounda", size, step);
        check_linear("boundary", "\r\n--boundar\r", size, step);
        /* self-overlapping delimiters: the KMP fallbacks */
        char as[71];
        memset(as, 'a', 70);
        as[70] = '\0';
        char unit[80];
        snprintf(unit, sizeof(unit), "\r\n--%.69s", as);
        check_linear(as, unit, size, step);
        check_linear("--", "\r\n---\r\n--\r\n-\r\n", size, step);
        check_linear("-", "\r\n--\r\n-\r\r\n-", size, step);
    }
}

static void test_views_and_epilogue(void **state)
{
    (void)state;
    flare_multipart_t mp;
    flare_multipart_event_t ev;
    const char *body = "--b\r\nContent-Disposition: form-data; name=a\r\n\r\nhello\r\n--b--\r\nx";
    size_t len = strlen(body);
    assert_int_equal(flare_multipart_init_boundary(&mp, S("b"), NULL), 0);
    int64_t u = mp_next(&mp, body, len, &ev);
    assert_int_equal(ev.type, FLARE_MULTIPART_PART_BEGIN);
    assert_true(flare_str_eq(ev.part->name, S("a")));
    body += u;
    len -= (size_t)u;
    u = mp_next(&mp, body, len, &ev);
    assert_int_equal(ev.type, FLARE_MULTIPART_DATA);
    /* the content is a view into the input, no copy */
    assert_ptr_equal(ev.data.ptr, body);
    assert_int_equal(ev.data.len, 5);
    body += u;
    len -= (size_t)u;
    u = mp_next(&mp, body, len, &ev);
    assert_int_equal(ev.type, FLARE_MULTIPART_PART_END);
    body += u;
    len -= (size_t)u;
    u = mp_next(&mp, body, len, &ev);
    assert_int_equal(ev.type, FLARE_MULTIPART_DONE);
    body += u;
    len -= (size_t)u;
    assert_int_equal(mp_next(&mp, body, len, &ev), (int64_t)len);
    assert_int_equal(ev.type, FLARE_MULTIPART_NEED_MORE);
    assert_int_equal(mp_next(&mp, "--b\r\nmore epilogue", 18, &ev), 18);
    assert_int_equal(flare_multipart_finish(&mp), 0);
    /* a held-back near boundary that was content comes back from the
     * parser's own copy, before the next bytes */
    assert_int_equal(flare_multipart_init_boundary(&mp, S("bnd"), NULL), 0);
    const char *h = "--bnd\r\nContent-Disposition: form-data; name=a\r\n\r\nab\r\n--b";
    u = mp_next(&mp, h, strlen(h), &ev);
    assert_int_equal(ev.type, FLARE_MULTIPART_PART_BEGIN);
    u = mp_next(&mp, h + u, strlen(h) - (size_t)u, &ev);
    assert_int_equal(ev.type, FLARE_MULTIPART_DATA);
    assert_int_equal(ev.data.len, 2); /* "ab"; "\r\n--b" is held */
    assert_int_equal(mp_next(&mp, "", 0, &ev), 0);
    assert_int_equal(ev.type, FLARE_MULTIPART_NEED_MORE);
    u = mp_next(&mp, "x\r\n--bnd--", 10, &ev);
    assert_int_equal(ev.type, FLARE_MULTIPART_DATA);
    assert_int_equal(u, 0);
    assert_true(flare_str_eq(ev.data, S("\r\n--b")));
    u = mp_next(&mp, "x\r\n--bnd--", 10, &ev);
    assert_int_equal(ev.type, FLARE_MULTIPART_DATA);
    assert_true(flare_str_eq(ev.data, S("x")));
}

/* ---- the buffered helper on a real server ------------------------------ */

static char tmpdir[64];
static char keep_path[128];

typedef struct seen {
    int rc;
    flare_multipart_err_t err;
    size_t count;
    char names[8][32];
    char filenames[8][64];
    uint64_t sizes[8];
    bool in_file[8];
    char content[8][128];
    int open_tmp; /* descriptors open on files of tmpdir during the handler */
    int keep_rc;
} seen_t;

/* The handler (on the worker) and the test (on the main thread) share seen,
 * tmpdir, keep_path and flare__multipart_no_tmpfile. The response reaching
 * the client orders them in fact, but through a socket, which no tool sees
 * as synchronisation: the handler runs under seen_mu, and the test reads
 * seen and changes the rest under it too. */
static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;
static seen_t seen;

/* What the last request's handler saw. */
static seen_t seen_get(void)
{
    pthread_mutex_lock(&seen_mu);
    seen_t s = seen;
    pthread_mutex_unlock(&seen_mu);
    return s;
}

static void set_no_tmpfile(bool on)
{
    pthread_mutex_lock(&seen_mu);
    flare__multipart_no_tmpfile = on;
    pthread_mutex_unlock(&seen_mu);
}

static void set_tmpdir(const char *dir)
{
    pthread_mutex_lock(&seen_mu);
    snprintf(tmpdir, sizeof(tmpdir), "%s", dir);
    snprintf(keep_path, sizeof(keep_path), "%s/kept.bin", tmpdir);
    pthread_mutex_unlock(&seen_mu);
}

/* Descriptors of this process that point into tmpdir (a temporary file
 * shows as "tmpdir/#123 (deleted)" or by its name). */
static int fds_in_tmpdir(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    char link[PATH_MAX], path[PATH_MAX + 32];
    while ((e = readdir(d)) != NULL) {
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t r = readlink(path, link, sizeof(link) - 1);
        if (r <= 0)
            continue;
        link[r] = '\0';
        if (strncmp(link, tmpdir, strlen(tmpdir)) == 0)
            n++;
    }
    closedir(d);
    return n;
}

static int entries_in_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

static int upload(flare_req_t *req, flare_res_t *res)
{
    flare_multipart_opts_t o = { .file_threshold = 16, .tmpdir = tmpdir };
    o.limits.max_parts = 4;
    flare_multipart_form_t form;
    memset(&seen, 0, sizeof(seen));
    seen.rc = flare_multipart_parse_req(req, &o, &form);
    seen.err = form.err;
    if (seen.rc != 0) {
        const char *msg = flare_multipart_err_message(form.err);
        return flare_res_send(res, flare_multipart_err_status(form.err), S("text/plain"),
                              flare_str(msg));
    }
    seen.count = form.count;
    for (size_t i = 0; i < form.count && i < 8; i++) {
        const flare_multipart_field_t *f = &form.fields[i];
        snprintf(seen.names[i], sizeof(seen.names[i]), "%.*s", (int)f->name.len, f->name.ptr);
        snprintf(seen.filenames[i], sizeof(seen.filenames[i]), "%.*s",
                 f->filename.ptr ? (int)f->filename.len : 6,
                 f->filename.ptr ? f->filename.ptr : "(null)");
        seen.sizes[i] = f->size;
        seen.in_file[i] = f->fd >= 0;
        if (f->fd >= 0) {
            ssize_t r = pread(f->fd, seen.content[i], sizeof(seen.content[i]) - 1, 0);
            if (r > 0)
                seen.content[i][r] = '\0';
        } else {
            snprintf(seen.content[i], sizeof(seen.content[i]), "%.*s", (int)f->data.len,
                     f->data.ptr);
        }
    }
    seen.open_tmp = fds_in_tmpdir();
    const flare_multipart_field_t *keep = flare_multipart_field(&form, S("keepme"));
    seen.keep_rc = keep != NULL ? flare_multipart_keep(keep, keep_path) : 1;
    /* never replaces a file (no cmocka assert here: this is the worker) */
    if (keep != NULL && seen.keep_rc == 0 && flare_multipart_keep(keep, keep_path) != FLARE_EEXIST)
        seen.keep_rc = -200;
    const flare_multipart_field_t *small = flare_multipart_field(&form, S("small"));
    if (small != NULL) {
        char p2[160];
        snprintf(p2, sizeof(p2), "%s.small", keep_path);
        if (flare_multipart_keep(small, p2) != 0)
            seen.keep_rc = -100;
    }
    return flare_res_send(res, 200, S("text/plain"), S("ok"));
}

static int h_upload(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    pthread_mutex_lock(&seen_mu);
    int rc = upload(req, res);
    pthread_mutex_unlock(&seen_mu);
    return rc;
}

static char *post(const harness_t *h, const char *ct, const char *body)
{
    char *req = malloc(strlen(body) + 512);
    assert_non_null(req);
    sprintf(req,
            "POST /upload HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: %s\r\n"
            "Content-Length: %zu\r\n\r\n%s",
            ct, strlen(body), body);
    char *r = harness_roundtrip(h, req);
    free(req);
    return r;
}

static void wait_no_fds(void)
{
    for (int i = 0; i < 200 && fds_in_tmpdir() != 0; i++)
        usleep(5000);
    assert_int_equal(fds_in_tmpdir(), 0);
}

static void read_file(const char *path, char *out, size_t cap)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t r = read(fd, out, cap - 1);
    assert_true(r >= 0);
    out[r] = '\0';
    close(fd);
}

static void helper_round(const harness_t *h)
{
    const char *body =
        "--XyZ\r\n"
        "Content-Disposition: form-data; name=\"small\"\r\n\r\n"
        "tiny\r\n"
        "--XyZ\r\n"
        "Content-Disposition: form-data; name=\"big\"; filename=\"../../etc/passwd\"\r\n"
        "Content-Type: application/octet-stream\r\n\r\n"
        "0123456789abcdefghijklmnopqrstuvwxyz\r\n"
        "--XyZ\r\n"
        "Content-Disposition: form-data; name=\"keepme\"; filename*=UTF-8''k%C3%A9p.bin\r\n\r\n"
        "this content is kept after the request\r\n"
        "--XyZ--\r\n";
    char *r = post(h, "multipart/form-data; boundary=XyZ", body);
    assert_non_null(strstr(r, "200 OK"));
    free(r);
    seen_t got = seen_get();
    assert_int_equal(got.rc, 0);
    assert_int_equal(got.count, 3);
    assert_string_equal(got.names[0], "small");
    assert_false(got.in_file[0]);
    assert_string_equal(got.content[0], "tiny");
    assert_string_equal(got.names[1], "big");
    assert_string_equal(got.filenames[1], "../../etc/passwd");
    assert_true(got.in_file[1]);
    assert_int_equal(got.sizes[1], 36);
    assert_string_equal(got.content[1], "0123456789abcdefghijklmnopqrstuvwxyz");
    assert_string_equal(got.filenames[2], "k\xc3\xa9p.bin");
    assert_true(got.in_file[2]);
    assert_int_equal(got.open_tmp, 2); /* two temporary files while handling */
    assert_int_equal(got.keep_rc, 0);
    /* after the request: the temporary files are gone, the kept one stays
     * with its content, the in-memory part kept too, nothing else in the
     * directory (the client's filename was never a path) */
    wait_no_fds();
    char buf[256];
    read_file(keep_path, buf, sizeof(buf));
    assert_string_equal(buf, "this content is kept after the request");
    char p2[160];
    snprintf(p2, sizeof(p2), "%s.small", keep_path);
    read_file(p2, buf, sizeof(buf));
    assert_string_equal(buf, "tiny");
    for (int i = 0; i < 200 && entries_in_tmpdir() != 2; i++)
        usleep(5000);
    assert_int_equal(entries_in_tmpdir(), 2);
    struct stat st;
    assert_int_equal(stat(keep_path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    unlink(keep_path);
    unlink(p2);
}

static void test_req_helper(void **state)
{
    (void)state;
    char dir[64] = "/tmp/flare-mp-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    set_tmpdir(dir);
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 1;
    harness_t h = { .app = flare_app_new(&cfg) };
    assert_non_null(h.app);
    assert_int_equal(flare_post(h.app, "/upload", h_upload, NULL), 0);
    assert_int_equal(harness_start(&h), 0);

    /* O_TMPFILE (where the file system has it), then named mkstemp files */
    helper_round(&h);
    set_no_tmpfile(true);
    helper_round(&h);
    set_no_tmpfile(false);

    /* bad input: the precise status, the files made so far released */
    char *r = post(&h, "text/plain", "x");
    assert_non_null(strstr(r, "415 "));
    assert_non_null(strstr(r, "not multipart/form-data"));
    free(r);
    r = post(&h, "multipart/form-data; boundary=q",
             "--q\r\nContent-Disposition: form-data; name=a\r\n\r\n"
             "more than sixteen bytes, to a file\r\n--q\r\n");
    assert_non_null(strstr(r, "400 "));
    assert_non_null(strstr(r, "before the closing boundary"));
    assert_int_equal(seen_get().err, FLARE_MULTIPART_ERR_TRUNCATED);
    free(r);
    wait_no_fds();
    set_no_tmpfile(true);
    r = post(&h, "multipart/form-data; boundary=q",
             "--q\r\nContent-Disposition: form-data; name=a\r\n\r\n"
             "more than sixteen bytes, to a file\r\n--q\r\n"
             "Content-Disposition: form-data; name=b\r\n\r\n\r\n--q\r\n"
             "Content-Disposition: form-data; name=c\r\n\r\n\r\n--q\r\n"
             "Content-Disposition: form-data; name=d\r\n\r\n\r\n--q\r\n"
             "Content-Disposition: form-data; name=e\r\n\r\n\r\n--q--");
    set_no_tmpfile(false);
    assert_non_null(strstr(r, "413 "));
    assert_int_equal(seen_get().err, FLARE_MULTIPART_ERR_PARTS);
    free(r);
    wait_no_fds();
    for (int i = 0; i < 200 && entries_in_tmpdir() != 0; i++)
        usleep(5000);
    assert_int_equal(entries_in_tmpdir(), 0);
    /* a missing temporary directory is a 500, not a crash */
    set_tmpdir("/nonexistent-flare-dir");
    r = post(&h, "multipart/form-data; boundary=q",
             "--q\r\nContent-Disposition: form-data; name=a\r\n\r\n"
             "more than sixteen bytes, to a file\r\n--q--");
    assert_non_null(strstr(r, "500 "));
    seen_t got = seen_get();
    assert_int_equal(got.rc, FLARE_EIO);
    assert_int_equal(got.err, FLARE_MULTIPART_ERR_IO);
    free(r);
    set_tmpdir(dir);

    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc7578_examples),
        cmocka_unit_test(test_quoted_boundary_preamble_epilogue),
        cmocka_unit_test(test_boundary_param),
        cmocka_unit_test(test_padding_empty_and_edges),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_filename_star),
        cmocka_unit_test(test_near_boundaries_linear),
        cmocka_unit_test(test_views_and_epilogue),
        cmocka_unit_test(test_req_helper),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
