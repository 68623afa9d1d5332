/* JSON writer (exact output, escaping, numbers, nesting checks, buffers)
 * and parser (strictness, error positions, accessors). */
#include <locale.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flare/json.h"
#include "flare/rest.h"

static char buf[8192];
static flare_json_t w;

static void fresh(void)
{
    flare_json_init(&w, buf, sizeof(buf));
}

#define assert_out(expected)                                         \
    do {                                                             \
        flare_str_t o_ = flare_json_output(&w);                      \
        assert_int_equal(o_.len, sizeof(expected) - 1);              \
        assert_memory_equal(o_.ptr, expected, sizeof(expected) - 1); \
    } while (0)

/* Writes one string value and compares. */
static void check_str(const char *in, size_t n, const char *expected)
{
    fresh();
    assert_int_equal(flare_json_str(&w, (flare_str_t){ in, n }), 0);
    assert_int_equal(flare_json_finish(&w), 0);
    flare_str_t o = flare_json_output(&w);
    if (o.len != strlen(expected) || memcmp(o.ptr, expected, o.len) != 0)
        fail_msg("got [%.*s] expected [%s]", (int)o.len, o.ptr, expected);
}
#define CHECK_STR(lit, expected) check_str(lit, sizeof(lit) - 1, expected)

static void check_double(double v, const char *expected)
{
    fresh();
    assert_int_equal(flare_json_double(&w, v), 0);
    flare_str_t o = flare_json_output(&w);
    if (o.len != strlen(expected) || memcmp(o.ptr, expected, o.len) != 0)
        fail_msg("got [%.*s] expected [%s]", (int)o.len, o.ptr, expected);
}

/* ---- writer ---------------------------------------------------------------- */

static void test_document(void **state)
{
    (void)state;
    fresh();
    assert_int_equal(flare_json_object_begin(&w), 0);
    assert_int_equal(flare_json_kv_str(&w, "id", FLARE_STR("42")), 0);
    assert_int_equal(flare_json_kv_int(&w, "min", INT64_MIN), 0);
    assert_int_equal(flare_json_kv_int(&w, "max", INT64_MAX), 0);
    assert_int_equal(flare_json_key(&w, FLARE_STR("u")), 0);
    assert_int_equal(flare_json_uint(&w, UINT64_MAX), 0);
    assert_int_equal(flare_json_kv_double(&w, "d", 0.1), 0);
    assert_int_equal(flare_json_kv_bool(&w, "t", true), 0);
    assert_int_equal(flare_json_kv_bool(&w, "f", false), 0);
    assert_int_equal(flare_json_kv_null(&w, "z"), 0);
    assert_int_equal(flare_json_kv_cstr(&w, "c", NULL), 0);
    assert_int_equal(flare_json_kv_array(&w, "a"), 0);
    assert_int_equal(flare_json_int(&w, 1), 0);
    assert_int_equal(flare_json_int(&w, 0), 0);
    assert_int_equal(flare_json_int(&w, -7), 0);
    assert_int_equal(flare_json_object_begin(&w), 0);
    assert_int_equal(flare_json_kv_array(&w, "x"), 0);
    assert_int_equal(flare_json_array_end(&w), 0);
    assert_int_equal(flare_json_object_end(&w), 0);
    assert_int_equal(flare_json_array_begin(&w), 0);
    assert_int_equal(flare_json_array_end(&w), 0);
    assert_int_equal(flare_json_array_end(&w), 0);
    assert_int_equal(flare_json_kv_object(&w, "o"), 0);
    assert_int_equal(flare_json_object_end(&w), 0);
    assert_int_equal(flare_json_key(&w, FLARE_STR("r")), 0);
    assert_int_equal(flare_json_raw(&w, FLARE_STR("{\"pre\":1}")), 0);
    assert_int_equal(flare_json_kv_cstr(&w, "", "empty key"), 0);
    assert_int_equal(flare_json_object_end(&w), 0);
    assert_int_equal(flare_json_finish(&w), 0);
    assert_out("{\"id\":\"42\",\"min\":-9223372036854775808,\"max\":9223372036854775807,"
               "\"u\":18446744073709551615,\"d\":0.1,\"t\":true,\"f\":false,\"z\":null,"
               "\"c\":null,\"a\":[1,0,-7,{\"x\":[]},[]],\"o\":{},\"r\":{\"pre\":1},"
               "\"\":\"empty key\"}");
}

static void test_scalar_roots(void **state)
{
    (void)state;
    fresh();
    assert_int_equal(flare_json_int(&w, 5), 0);
    assert_int_equal(flare_json_finish(&w), 0);
    assert_out("5");
    fresh();
    assert_int_equal(flare_json_str(&w, FLARE_STR("")), 0);
    assert_out("\"\"");
    fresh();
    assert_int_equal(flare_json_str(&w, (flare_str_t){ NULL, 0 }), 0);
    assert_out("\"\"");
    fresh();
    assert_int_equal(flare_json_array_begin(&w), 0);
    assert_int_equal(flare_json_null(&w), 0);
    assert_int_equal(flare_json_cstr(&w, "s"), 0);
    assert_int_equal(flare_json_bool(&w, true), 0);
    assert_int_equal(flare_json_array_end(&w), 0);
    assert_int_equal(flare_json_finish(&w), 0);
    assert_out("[null,\"s\",true]");
}

static void test_escaping(void **state)
{
    (void)state;
    CHECK_STR("plain", "\"plain\"");
    CHECK_STR("q\"b\\s/", "\"q\\\"b\\\\s/\"");
    CHECK_STR("\b\f\n\r\t", "\"\\b\\f\\n\\r\\t\"");
    CHECK_STR("\x01\x1f\x7f", "\"\\u0001\\u001f\x7f\"");
    CHECK_STR("a\0b", "\"a\\u0000b\"");
    CHECK_STR("</script>", "\"</script>\"");
    /* valid UTF-8 is copied */
    CHECK_STR("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
    CHECK_STR("\xef\xbf\xbf\xf4\x8f\xbf\xbf", "\"\xef\xbf\xbf\xf4\x8f\xbf\xbf\"");
    /* U+2028, U+2029 escaped for JavaScript; U+202A copied */
    CHECK_STR("a\xe2\x80\xa8"
              "b\xe2\x80\xa9"
              "c\xe2\x80\xaa",
              "\"a\\u2028b\\u2029c\xe2\x80\xaa\"");
}

#define FFFD "\xef\xbf\xbd"

static void test_invalid_utf8(void **state)
{
    (void)state;
    CHECK_STR("\xff", "\"" FFFD "\"");
    CHECK_STR("a\x80z", "\"a" FFFD "z\"");
    CHECK_STR("\xc3", "\"" FFFD "\"");       /* truncated at the end */
    CHECK_STR("\xe2\x82x", "\"" FFFD "x\""); /* one maximal subpart */
    CHECK_STR("\xf0\x9f\x98", "\"" FFFD "\"");
    CHECK_STR("\xf0\x9f\x98\"", "\"" FFFD "\\\"\"");
    CHECK_STR("\xc0\xaf", "\"" FFFD FFFD "\""); /* overlong '/' */
    CHECK_STR("\xe0\x80\xaf", "\"" FFFD FFFD FFFD "\"");
    CHECK_STR("\xed\xa0\x80", "\"" FFFD FFFD FFFD "\"");          /* surrogate */
    CHECK_STR("\xf4\x90\x80\x80", "\"" FFFD FFFD FFFD FFFD "\""); /* > U+10FFFF */
    CHECK_STR("\xf5\xbf", "\"" FFFD FFFD "\"");
    CHECK_STR("\xc3\xa9\xc3", "\"\xc3\xa9" FFFD "\"");
}

static void test_doubles(void **state)
{
    (void)state;
    check_double(0.1, "0.1");
    check_double(0.5, "0.5");
    check_double(2.0, "2");
    check_double(-0.0, "-0");
    check_double(100.0, "100");
    check_double(1e21, "1e+21");
    check_double(1.5e-7, "1.5e-07");
    check_double(1.0 / 3.0, "0.3333333333333333");
    check_double(0.1 + 0.2, "0.30000000000000004");
    check_double(1.7976931348623157e308, "1.7976931348623157e+308");
    check_double(123456789.125, "123456789.125");
    /* round trip for awkward values */
    const double vals[] = { 5e-324,
                            2.2250738585072014e-308,
                            9007199254740993.0,
                            3.14159265358979,
                            -1e-10,
                            6.02214076e23,
                            0.000123 };
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        fresh();
        assert_int_equal(flare_json_double(&w, vals[i]), 0);
        flare_str_t o = flare_json_output(&w);
        char tmp[64];
        memcpy(tmp, o.ptr, o.len);
        tmp[o.len] = '\0';
        assert_true(strtod(tmp, NULL) == vals[i]);
        assert_true(o.len <= 24);
    }
    fresh();
    assert_int_equal(flare_json_double(&w, NAN), FLARE_EINVAL);
    fresh();
    assert_int_equal(flare_json_double(&w, INFINITY), FLARE_EINVAL);
    fresh();
    assert_int_equal(flare_json_double(&w, -INFINITY), FLARE_EINVAL);
    /* kv_double with NaN must not leave a dangling key */
    fresh();
    flare_json_object_begin(&w);
    assert_int_equal(flare_json_kv_double(&w, "x", NAN), FLARE_EINVAL);
    assert_out("{");
}

static void test_locale_independent(void **state)
{
    (void)state;
    if (setlocale(LC_NUMERIC, "de_DE.UTF-8") == NULL &&
        setlocale(LC_NUMERIC, "fr_FR.UTF-8") == NULL)
        skip();
    check_double(0.25, "0.25");
    check_double(-1.5e-7, "-1.5e-07");
    setlocale(LC_NUMERIC, "C");
}

static void test_nesting_errors(void **state)
{
    (void)state;
    /* key at the root */
    fresh();
    assert_int_equal(flare_json_key(&w, FLARE_STR("k")), FLARE_EINVAL);
    /* value in an object without a key */
    fresh();
    flare_json_object_begin(&w);
    assert_int_equal(flare_json_int(&w, 1), FLARE_EINVAL);
    assert_int_equal(flare_json_finish(&w), FLARE_EINVAL);
    /* key inside an array */
    fresh();
    flare_json_array_begin(&w);
    assert_int_equal(flare_json_key(&w, FLARE_STR("k")), FLARE_EINVAL);
    /* two keys in a row */
    fresh();
    flare_json_object_begin(&w);
    assert_int_equal(flare_json_key(&w, FLARE_STR("a")), 0);
    assert_int_equal(flare_json_key(&w, FLARE_STR("b")), FLARE_EINVAL);
    /* object closed while a value is due */
    fresh();
    flare_json_object_begin(&w);
    flare_json_key(&w, FLARE_STR("a"));
    assert_int_equal(flare_json_object_end(&w), FLARE_EINVAL);
    /* mismatched ends */
    fresh();
    flare_json_array_begin(&w);
    assert_int_equal(flare_json_object_end(&w), FLARE_EINVAL);
    fresh();
    flare_json_object_begin(&w);
    assert_int_equal(flare_json_array_end(&w), FLARE_EINVAL);
    /* end with nothing open */
    fresh();
    assert_int_equal(flare_json_array_end(&w), FLARE_EINVAL);
    /* a second root value */
    fresh();
    assert_int_equal(flare_json_int(&w, 1), 0);
    assert_int_equal(flare_json_int(&w, 2), FLARE_EINVAL);
    fresh();
    flare_json_object_begin(&w);
    flare_json_object_end(&w);
    assert_int_equal(flare_json_array_begin(&w), FLARE_EINVAL);
    /* unbalanced: finish reports it and it becomes sticky */
    fresh();
    flare_json_array_begin(&w);
    flare_json_array_begin(&w);
    flare_json_array_end(&w);
    assert_int_equal(flare_json_finish(&w), FLARE_EINVAL);
    assert_int_equal(flare_json_array_end(&w), FLARE_EINVAL);
    /* nothing written */
    fresh();
    assert_int_equal(flare_json_finish(&w), FLARE_EINVAL);
    /* NULL key */
    fresh();
    flare_json_object_begin(&w);
    assert_int_equal(flare_json_kv_int(&w, NULL, 1), FLARE_EINVAL);
    /* sticky: nothing is written after the first error */
    fresh();
    flare_json_array_begin(&w);
    flare_json_int(&w, 1);
    assert_int_equal(flare_json_object_end(&w), FLARE_EINVAL);
    assert_int_equal(flare_json_int(&w, 2), FLARE_EINVAL);
    assert_int_equal(flare_json_array_end(&w), FLARE_EINVAL);
    assert_int_equal(flare_json_finish(&w), FLARE_EINVAL);
    assert_out("[1");
    /* reset clears the error */
    flare_json_reset(&w);
    assert_int_equal(flare_json_bool(&w, false), 0);
    assert_int_equal(flare_json_finish(&w), 0);
    assert_out("false");
}

static void test_depth(void **state)
{
    (void)state;
    fresh();
    for (int i = 0; i < FLARE_JSON_MAX_DEPTH; i++)
        assert_int_equal(flare_json_array_begin(&w), 0);
    assert_int_equal(flare_json_array_begin(&w), FLARE_ETOOBIG);
    fresh();
    for (int i = 0; i < FLARE_JSON_MAX_DEPTH; i++) {
        if (i == 0)
            assert_int_equal(flare_json_object_begin(&w), 0);
        else
            assert_int_equal(flare_json_kv_object(&w, "o"), 0);
    }
    for (int i = 0; i < FLARE_JSON_MAX_DEPTH; i++)
        assert_int_equal(flare_json_object_end(&w), 0);
    assert_int_equal(flare_json_finish(&w), 0);
    flare_str_t o = flare_json_output(&w);
    assert_int_equal(o.len, 1 + 31 * 5 + 32);
    /* alternating object/array at every depth keeps the right kind */
    fresh();
    for (int i = 0; i < FLARE_JSON_MAX_DEPTH; i++) {
        if (i % 2 == 0)
            assert_int_equal(flare_json_array_begin(&w), 0);
        else
            assert_int_equal(flare_json_object_begin(&w), 0);
        if (i % 2 == 1 && i + 1 < FLARE_JSON_MAX_DEPTH)
            assert_int_equal(flare_json_key(&w, FLARE_STR("k")), 0);
    }
    for (int i = FLARE_JSON_MAX_DEPTH - 1; i >= 0; i--) {
        if (i % 2 == 0)
            assert_int_equal(flare_json_array_end(&w), 0);
        else
            assert_int_equal(flare_json_object_end(&w), 0);
    }
    assert_int_equal(flare_json_finish(&w), 0);
}

static void test_fixed_buffer_full(void **state)
{
    (void)state;
    char small[10];
    flare_json_init(&w, small, sizeof(small));
    assert_int_equal(flare_json_array_begin(&w), 0);
    assert_int_equal(flare_json_str(&w, FLARE_STR("abcdef")), 0); /* [\"abcdef\" = 9 */
    assert_int_equal(flare_json_int(&w, 1), FLARE_ETOOBIG);
    assert_int_equal(flare_json_array_end(&w), FLARE_ETOOBIG);
    assert_int_equal(flare_json_finish(&w), FLARE_ETOOBIG);
    assert_true(w.len <= sizeof(small));
    /* exactly full is fine */
    flare_json_init(&w, small, sizeof(small));
    assert_int_equal(flare_json_str(&w, FLARE_STR("abcdefgh")), 0);
    assert_int_equal(flare_json_finish(&w), 0);
    assert_int_equal(w.len, 10);
    /* no buffer at all */
    flare_json_init(&w, NULL, 0);
    assert_int_equal(flare_json_null(&w), FLARE_ETOOBIG);
}

/* A bump allocator standing in for the request arena. */
typedef struct arena {
    char mem[65536];
    size_t used;
    unsigned calls;
    bool fail;
} arena_t;

static void *arena_alloc(void *ctx, size_t n)
{
    arena_t *a = ctx;
    a->calls++;
    if (a->fail || n > sizeof(a->mem) - a->used)
        return NULL;
    void *p = a->mem + a->used;
    a->used += (n + 15) & ~(size_t)15;
    return p;
}

static void write_big(flare_json_t *j, int n)
{
    flare_json_array_begin(j);
    for (int i = 0; i < n; i++) {
        flare_json_object_begin(j);
        flare_json_kv_int(j, "i", i);
        flare_json_kv_str(j, "s", FLARE_STR("some text \"quoted\" \n"));
        flare_json_object_end(j);
    }
    flare_json_array_end(j);
}

static void test_alloc_growth(void **state)
{
    (void)state;
    static arena_t a;
    char start[16];
    /* big enough: zero allocations */
    a.used = 0;
    a.calls = 0;
    flare_json_init_alloc(&w, buf, sizeof(buf), arena_alloc, &a);
    write_big(&w, 10);
    assert_int_equal(flare_json_finish(&w), 0);
    assert_int_equal(a.calls, 0);
    flare_str_t expected = flare_json_output(&w);
    char copy[8192];
    memcpy(copy, expected.ptr, expected.len);
    size_t elen = expected.len;
    /* starts small and grows by doubling */
    flare_json_init_alloc(&w, start, sizeof(start), arena_alloc, &a);
    write_big(&w, 10);
    assert_int_equal(flare_json_finish(&w), 0);
    flare_str_t o = flare_json_output(&w);
    assert_int_equal(o.len, elen);
    assert_memory_equal(o.ptr, copy, elen);
    assert_true(a.calls >= 1 && a.calls <= 4);
    /* no initial buffer */
    a.calls = 0;
    flare_json_init_alloc(&w, NULL, 0, arena_alloc, &a);
    write_big(&w, 10);
    assert_int_equal(flare_json_finish(&w), 0);
    assert_int_equal(flare_json_output(&w).len, elen);
    /* allocation failure is FLARE_ENOMEM, sticky */
    a.fail = true;
    flare_json_init_alloc(&w, start, sizeof(start), arena_alloc, &a);
    write_big(&w, 10);
    assert_int_equal(flare_json_finish(&w), FLARE_ENOMEM);
    a.fail = false;
}

static void test_heap(void **state)
{
    (void)state;
    flare_json_t h;
    flare_json_init_heap(&h, 0);
    write_big(&h, 100);
    assert_int_equal(flare_json_finish(&h), 0);
    flare_json_t f;
    static char big[65536];
    flare_json_init(&f, big, sizeof(big));
    write_big(&f, 100);
    assert_int_equal(flare_json_output(&h).len, flare_json_output(&f).len);
    assert_memory_equal(h.buf, big, f.len);
    flare_json_reset(&h);
    assert_int_equal(flare_json_int(&h, 3), 0);
    assert_int_equal(flare_json_output(&h).len, 1);
    flare_json_dispose(&h);
    flare_json_init_heap(&h, 4);
    assert_int_equal(flare_json_str(&h, FLARE_STR("longer than four")), 0);
    flare_json_dispose(&h);
    /* an initial size no object can have is not asked of malloc: the
     * writer starts empty and grows as usual */
    static const size_t huge[] = { SIZE_MAX, (size_t)PTRDIFF_MAX + 1 };
    for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
        flare_json_init_heap(&h, huge[i]);
        assert_int_equal(h.cap, 0);
        write_big(&h, 10);
        assert_int_equal(flare_json_finish(&h), 0);
        flare_json_dispose(&h);
    }
}

/* A flushing grow callback: moves everything to a sink, as a chunked
 * response would, and keeps writing into the same small buffer. */
typedef struct sink {
    char data[65536];
    size_t len;
    unsigned flushes;
} sink_t;

static int flush_grow(flare_json_t *j, size_t need, void *ctx)
{
    sink_t *s = ctx;
    if (s->len + j->len > sizeof(s->data))
        return FLARE_ETOOBIG;
    memcpy(s->data + s->len, j->buf, j->len);
    s->len += j->len;
    s->flushes++;
    j->len = 0;
    (void)need;
    return 0;
}

static void test_grow_flush(void **state)
{
    (void)state;
    static sink_t s;
    char small[32];
    s.len = 0;
    flare_json_init_grow(&w, small, sizeof(small), flush_grow, &s);
    write_big(&w, 50);
    assert_int_equal(flare_json_finish(&w), 0);
    assert_int_equal(w.depth, 0);
    memcpy(s.data + s.len, w.buf, w.len);
    s.len += w.len;
    flare_json_t f;
    static char big[65536];
    flare_json_init(&f, big, sizeof(big));
    write_big(&f, 50);
    assert_int_equal(s.len, f.len);
    assert_memory_equal(s.data, big, f.len);
    assert_true(s.flushes > 10);
    /* a long string streams through a buffer smaller than itself */
    char longs[1000];
    memset(longs, 'x', sizeof(longs));
    s.len = 0;
    flare_json_init_grow(&w, small, sizeof(small), flush_grow, &s);
    assert_int_equal(flare_json_str(&w, (flare_str_t){ longs, sizeof(longs) }), 0);
    assert_int_equal(flare_json_finish(&w), 0);
    assert_int_equal(s.len + w.len, 1002);
}

static int bad_grow(flare_json_t *j, size_t need, void *ctx)
{
    (void)j;
    (void)need;
    (void)ctx;
    return 0; /* claims success without making room */
}

static void test_grow_contract(void **state)
{
    (void)state;
    char small[4];
    flare_json_init_grow(&w, small, sizeof(small), bad_grow, NULL);
    assert_int_equal(flare_json_str(&w, FLARE_STR("too long")), FLARE_ESTATE);
}

/* ---- parser ---------------------------------------------------------------- */

static flare_json_doc_t *parse_ok(const char *s)
{
    flare_json_doc_t *doc = NULL;
    flare_json_error_t err;
    int rc = flare_json_parse(s, strlen(s), &doc, &err);
    if (rc != 0)
        fail_msg("parse of [%s] failed: %s", s, err.reason);
    assert_non_null(doc);
    return doc;
}

static void parse_err(const char *s, size_t len, int line, int col, size_t pos, const char *reason)
{
    flare_json_doc_t *doc = (flare_json_doc_t *)1;
    flare_json_error_t err;
    assert_int_equal(flare_json_parse(s, len, &doc, &err), FLARE_EINVAL);
    assert_null(doc);
    if (line >= 0) {
        assert_int_equal(err.line, line);
        assert_int_equal(err.column, col);
        assert_int_equal(err.position, pos);
    }
    if (strstr(err.reason, reason) == NULL)
        fail_msg("reason [%s] lacks [%s]", err.reason, reason);
}
#define PARSE_ERR(lit, l, c, p, r) parse_err(lit, sizeof(lit) - 1, l, c, p, r)

/* flare_json_end on writers that flare_res_json did not make: refused
 * without reading past them. The writer is exactly a flare_json_t on the
 * heap, so ASan reports any read beyond it (the old check read a field of
 * the bigger response writer). */
static void test_json_end_foreign(void **state)
{
    (void)state;
    assert_int_equal(flare_json_end(NULL), FLARE_EINVAL);
    flare_json_t *f = malloc(sizeof(*f));
    assert_non_null(f);
    char small[64];
    flare_json_init(f, small, sizeof(small));
    assert_int_equal(flare_json_null(f), 0);
    assert_int_equal(flare_json_end(f), FLARE_EINVAL);
    flare_json_init_heap(f, 0);
    assert_int_equal(flare_json_end(f), FLARE_EINVAL);
    flare_json_dispose(f);
    flare_json_init_alloc(f, NULL, 0, arena_alloc, NULL);
    assert_int_equal(flare_json_end(f), FLARE_EINVAL);
    flare_json_init_grow(f, small, sizeof(small), flush_grow, NULL);
    assert_int_equal(flare_json_end(f), FLARE_EINVAL);
    /* a writer reset or reinitialised stays what its constructor made */
    flare_json_reset(f);
    assert_int_equal(flare_json_end(f), FLARE_EINVAL);
    free(f);
}

static void test_parse_accessors(void **state)
{
    (void)state;
    flare_json_doc_t *doc =
        parse_ok("{\"s\":\"h\\u00e9llo\",\"i\":-42,\"d\":2.5,\"t\":true,\"f\":false,"
                 "\"n\":null,\"a\":[1,\"x\",[]],\"o\":{\"k\":7},\"big\":1e2}");
    const flare_json_val_t *root = flare_json_doc_root(doc);
    assert_int_equal(flare_json_val_type(root), FLARE_JSON_OBJECT);
    assert_int_equal(flare_json_val_len(root), 9);

    flare_str_t s;
    assert_int_equal(flare_json_val_str(flare_json_val_get(root, "s"), &s), 0);
    assert_int_equal(s.len, 6);
    assert_memory_equal(s.ptr, "h\xc3\xa9llo", 6);
    assert_int_equal(s.ptr[s.len], '\0');

    int64_t i;
    double d;
    bool b;
    assert_int_equal(flare_json_val_int(flare_json_val_get(root, "i"), &i), 0);
    assert_int_equal(i, -42);
    assert_int_equal(flare_json_val_double(flare_json_val_get(root, "i"), &d), 0);
    assert_true(d == -42.0);
    assert_int_equal(flare_json_val_double(flare_json_val_get(root, "d"), &d), 0);
    assert_true(d == 2.5);
    assert_int_equal(flare_json_val_int(flare_json_val_get(root, "d"), &i), FLARE_EINVAL);
    assert_int_equal(flare_json_val_type(flare_json_val_get(root, "big")), FLARE_JSON_DOUBLE);
    assert_int_equal(flare_json_val_bool(flare_json_val_get(root, "t"), &b), 0);
    assert_true(b);
    assert_int_equal(flare_json_val_bool(flare_json_val_get(root, "f"), &b), 0);
    assert_false(b);
    assert_true(flare_json_val_is_null(flare_json_val_get(root, "n")));
    assert_false(flare_json_val_is_null(flare_json_val_get(root, "absent")));
    assert_int_equal(flare_json_val_type(flare_json_val_get(root, "absent")), FLARE_JSON_NONE);
    assert_int_equal(flare_json_val_str(flare_json_val_get(root, "i"), &s), FLARE_EINVAL);

    const flare_json_val_t *a = flare_json_val_getn(root, FLARE_STR("a"));
    assert_int_equal(flare_json_val_type(a), FLARE_JSON_ARRAY);
    assert_int_equal(flare_json_val_len(a), 3);
    assert_int_equal(flare_json_val_type(flare_json_val_at(a, 1)), FLARE_JSON_STRING);
    assert_null(flare_json_val_at(a, 3));
    assert_null(flare_json_val_at(root, 0));
    assert_null(flare_json_val_get(a, "x"));
    assert_int_equal(flare_json_val_len(flare_json_val_at(a, 2)), 0);

    const flare_json_val_t *o = flare_json_val_get(root, "o");
    assert_int_equal(flare_json_val_int(flare_json_val_get(o, "k"), &i), 0);
    assert_int_equal(i, 7);
    /* chained lookups through NULL */
    assert_null(flare_json_val_get(flare_json_val_get(root, "x"), "y"));
    assert_int_equal(flare_json_val_len(NULL), 0);

    /* iteration in document order */
    const char *order[] = { "s", "i", "d", "t", "f", "n", "a", "o", "big" };
    void *it = NULL;
    flare_str_t key;
    const flare_json_val_t *m;
    size_t k = 0;
    int rc;
    while ((rc = flare_json_val_next(root, &it, &key, &m)) == 0) {
        assert_true(k < 9);
        assert_int_equal(key.len, strlen(order[k]));
        assert_memory_equal(key.ptr, order[k], key.len);
        assert_non_null(m);
        k++;
    }
    assert_int_equal(rc, FLARE_EEND);
    assert_int_equal(k, 9);
    it = NULL;
    assert_int_equal(flare_json_val_next(a, &it, &key, &m), FLARE_EINVAL);

    assert_string_equal(flare_json_type_name(FLARE_JSON_INT), "integer");
    assert_string_equal(flare_json_type_name(FLARE_JSON_OBJECT), "object");
    flare_json_doc_free(doc);
    flare_json_doc_free(NULL);
}

static void test_parse_scalars_and_numbers(void **state)
{
    (void)state;
    int64_t i;
    double d;
    flare_json_doc_t *doc = parse_ok("  42 ");
    assert_int_equal(flare_json_val_int(flare_json_doc_root(doc), &i), 0);
    assert_int_equal(i, 42);
    flare_json_doc_free(doc);

    doc = parse_ok("[9223372036854775807,-9223372036854775808,1e308,-0,1e-400,0.1]");
    const flare_json_val_t *r = flare_json_doc_root(doc);
    assert_int_equal(flare_json_val_int(flare_json_val_at(r, 0), &i), 0);
    assert_true(i == INT64_MAX);
    assert_int_equal(flare_json_val_int(flare_json_val_at(r, 1), &i), 0);
    assert_true(i == INT64_MIN);
    assert_int_equal(flare_json_val_double(flare_json_val_at(r, 2), &d), 0);
    assert_true(d == 1e308);
    assert_int_equal(flare_json_val_type(flare_json_val_at(r, 3)), FLARE_JSON_INT);
    assert_int_equal(flare_json_val_double(flare_json_val_at(r, 4), &d), 0);
    assert_true(d == 0.0); /* underflow reads as zero */
    flare_json_doc_free(doc);

    PARSE_ERR("9223372036854775808", 1, 19, 19, "too big integer");
    PARSE_ERR("[-9223372036854775809]", 1, 21, 21, "too big negative integer");
    PARSE_ERR("1e400", 1, 5, 5, "real number overflow");
    PARSE_ERR("01", -1, 0, 0, "");
    PARSE_ERR("1.", -1, 0, 0, "");
    PARSE_ERR("NaN", -1, 0, 0, "");
    PARSE_ERR("[Infinity]", -1, 0, 0, "");
    PARSE_ERR("+1", -1, 0, 0, "");
}

static void test_parse_strictness(void **state)
{
    (void)state;
    PARSE_ERR("{\"a\":1,\"a\":2}", 1, 10, 10, "duplicate object key");
    PARSE_ERR("{\"a\":{\"b\":1,\"b\":1}}", 1, 15, 15, "duplicate");
    PARSE_ERR("{\"a\":1}x", 1, 8, 8, "end of file expected");
    PARSE_ERR("{\"a\":1} {}", 1, 9, 9, "end of file expected");
    PARSE_ERR("{\"a\":1,}", 1, 8, 8, "string or '}' expected");
    PARSE_ERR("[1,\n2,\n  x]", 3, 3, 10, "invalid token");
    PARSE_ERR("\"\xc3\xa9\xc3\xa9\" x", 1, 6, 8,
              "end of file expected"); /* columns in characters */
    PARSE_ERR("", 1, 1, 0, "end of file");
    PARSE_ERR("   ", 1, 3, 3, "end of file");
    PARSE_ERR("{'a':1}", -1, 0, 0, "");
    PARSE_ERR("[1,2", -1, 0, 0, "");
    PARSE_ERR("{\"a\" 1}", -1, 0, 0, "':' expected");
    PARSE_ERR("\"tab\there\"", -1, 0, 0, "control character");
    PARSE_ERR("// c\n1", -1, 0, 0, "");
    /* input need not be NUL-terminated and may contain NUL */
    PARSE_ERR("1\0", 1, 2, 2, "NUL byte");
    PARSE_ERR("[\n \"\xc3\xa9\0\"]", 2, 4, 7, "NUL byte");
    flare_json_doc_t *doc;
    assert_int_equal(flare_json_parse("[1]garbage", 3, &doc, NULL), 0);
    flare_json_doc_free(doc);
    assert_int_equal(flare_json_parse(NULL, 0, &doc, NULL), FLARE_EINVAL);
}

static void test_parse_unicode(void **state)
{
    (void)state;
    flare_json_doc_t *doc = parse_ok("[\"\\u00e9\",\"\\ud83d\\ude00\",\"\\u2028\",\"\xe2\x82\xac\","
                                     "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"]");
    const flare_json_val_t *r = flare_json_doc_root(doc);
    flare_str_t s;
    assert_int_equal(flare_json_val_str(flare_json_val_at(r, 0), &s), 0);
    assert_int_equal(s.len, 2);
    assert_memory_equal(s.ptr, "\xc3\xa9", 2);
    assert_int_equal(flare_json_val_str(flare_json_val_at(r, 1), &s), 0);
    assert_int_equal(s.len, 4);
    assert_memory_equal(s.ptr, "\xf0\x9f\x98\x80", 4);
    assert_int_equal(flare_json_val_str(flare_json_val_at(r, 2), &s), 0);
    assert_memory_equal(s.ptr, "\xe2\x80\xa8", 3);
    assert_int_equal(flare_json_val_str(flare_json_val_at(r, 3), &s), 0);
    assert_memory_equal(s.ptr, "\xe2\x82\xac", 3);
    assert_int_equal(flare_json_val_str(flare_json_val_at(r, 4), &s), 0);
    assert_int_equal(s.len, 8);
    assert_memory_equal(s.ptr, "\"\\/\b\f\n\r\t", 8);
    flare_json_doc_free(doc);

    PARSE_ERR("\"\\ud800\"", 1, 8, 8, "invalid Unicode");
    PARSE_ERR("\"\\udc00x\"", -1, 0, 0, "invalid Unicode");
    PARSE_ERR("\"\\u0000\"", -1, 0, 0, "\\u0000 is not allowed");
    PARSE_ERR("\"\\u12\"", -1, 0, 0, "");
    PARSE_ERR("\"\xff\"", 1, 1, 1, "unable to decode byte 0xff");
    PARSE_ERR("\"\xc0\xaf\"", -1, 0, 0, "");
    PARSE_ERR("\"\xed\xa0\x80\"", -1, 0, 0, "");
    PARSE_ERR("\"\\x41\"", -1, 0, 0, "");
}

static void test_parse_depth(void **state)
{
    (void)state;
    static char deep[2 * 4200 + 1];
    size_t n = 2048;
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    flare_json_doc_t *doc;
    flare_json_error_t err;
    assert_int_equal(flare_json_parse(deep, 2 * n, &doc, &err), 0);
    flare_json_doc_free(doc);
    n = 4200;
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    assert_int_equal(flare_json_parse(deep, 2 * n, &doc, &err), FLARE_EINVAL);
    assert_non_null(strstr(err.reason, "maximum parsing depth"));
    assert_int_equal(err.line, 1);
    assert_int_equal(err.column, 2049);
}

static void test_error_body(void **state)
{
    (void)state;
    flare_json_doc_t *doc;
    flare_json_error_t err;
    assert_int_equal(flare_json_parse("{\"a\":1,\"a\":2}", 13, &doc, &err), FLARE_EINVAL);
    fresh();
    assert_int_equal(flare_json_error_write(&err, &w), 0);
    assert_int_equal(flare_json_finish(&w), 0);
    assert_out("{\"error\":\"invalid JSON\",\"line\":1,\"column\":10,\"position\":10,"
               "\"reason\":\"duplicate object key near '\\\"a\\\"'\"}");
    /* reasons quoting hostile bytes stay valid JSON */
    assert_int_equal(flare_json_parse("[\"\x01\xff", 5, &doc, &err), FLARE_EINVAL);
    fresh();
    assert_int_equal(flare_json_error_write(&err, &w), 0);
    flare_str_t o = flare_json_output(&w);
    flare_json_doc_t *back;
    assert_int_equal(flare_json_parse(o.ptr, o.len, &back, NULL), 0);
    flare_json_doc_free(back);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_document),
        cmocka_unit_test(test_scalar_roots),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_doubles),
        cmocka_unit_test(test_locale_independent),
        cmocka_unit_test(test_nesting_errors),
        cmocka_unit_test(test_depth),
        cmocka_unit_test(test_fixed_buffer_full),
        cmocka_unit_test(test_alloc_growth),
        cmocka_unit_test(test_heap),
        cmocka_unit_test(test_json_end_foreign),
        cmocka_unit_test(test_grow_flush),
        cmocka_unit_test(test_grow_contract),
        cmocka_unit_test(test_parse_accessors),
        cmocka_unit_test(test_parse_scalars_and_numbers),
        cmocka_unit_test(test_parse_strictness),
        cmocka_unit_test(test_parse_unicode),
        cmocka_unit_test(test_parse_depth),
        cmocka_unit_test(test_error_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
