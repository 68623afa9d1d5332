/* core/: strings, error and status tables, arena, buffers, numbers, dates. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/arena.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/core.h"
#include "flare/common.h"

static void test_str(void **state)
{
    (void)state;
    flare_str_t a = FLARE_STR("Content-Length");
    assert_int_equal(a.len, 14);
    assert_true(flare_str_eq(a, flare_str("Content-Length")));
    assert_false(flare_str_eq(a, flare_str("content-length")));
    assert_true(flare_str_ieq(a, flare_str("content-LENGTH")));
    assert_false(flare_str_ieq(a, flare_str("content-lengtx")));
    assert_false(flare_str_ieq(a, flare_str("content-lengt")));
    assert_true(flare_str_eq(FLARE_STR_NULL, flare_str(NULL)));
    assert_true(FLARE__IEQ(flare_str("KeEp-AlIvE"), "keep-alive"));
    /* non-letters are not folded: '@' (0x40) vs '`' (0x60) */
    assert_false(flare_str_ieq(flare_str("@"), flare_str("`")));
}

static void test_tables(void **state)
{
    (void)state;
    assert_string_equal(flare_strerror(0), "success");
    assert_string_equal(flare_strerror(FLARE_ENOMEM), "out of memory");
    assert_string_equal(flare_strerror(-9999), "unknown error");
    assert_true(flare_str_eq(flare_method_name(FLARE_METHOD_PATCH), flare_str("PATCH")));
    assert_int_equal(flare_method_name(FLARE_METHOD_OTHER).len, 0);
    assert_int_equal(flare_method_name((flare_method_t)99).len, 0);
    assert_true(flare_str_eq(flare_status_reason(404), flare_str("Not Found")));
    assert_true(
        flare_str_eq(flare_status_reason(431), flare_str("Request Header Fields Too Large")));
    assert_true(flare_str_eq(flare_status_reason(299), flare_str("Unknown")));
}

static void test_u64toa(void **state)
{
    (void)state;
    static const struct {
        uint64_t v;
        const char *s;
    } cases[] = { { 0, "0" },
                  { 7, "7" },
                  { 10, "10" },
                  { 13, "13" },
                  { 99, "99" },
                  { 100, "100" },
                  { 1000, "1000" },
                  { 65536, "65536" },
                  { 1048576, "1048576" },
                  { UINT64_MAX, "18446744073709551615" } };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[32];
        size_t n = flare__u64toa(buf, cases[i].v);
        buf[n] = '\0';
        assert_string_equal(buf, cases[i].s);
    }
}

static void test_date(void **state)
{
    (void)state;
    char out[64];
    flare__format_date_line(out, 784111777); /* RFC 9110's example */
    assert_int_equal(FLARE_DATE_LINE_LEN, 37);
    assert_memory_equal(out, "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n", FLARE_DATE_LINE_LEN);
    flare__format_http_date(out, 0);
    assert_memory_equal(out, "Thu, 01 Jan 1970 00:00:00 GMT", 29);
    flare__format_http_date(out, 4102444799); /* 2099-12-31 23:59:59 */
    assert_memory_equal(out, "Thu, 31 Dec 2099 23:59:59 GMT", 29);
}

static void test_arena(void **state)
{
    (void)state;
    flare_arena_t a;
    flare__arena_init(&a);
    char *p = flare__arena_alloc(&a, 1);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 16, 0);
    char *q = flare__arena_alloc(&a, 100);
    assert_non_null(q);
    assert_int_equal((uintptr_t)q % 16, 0);
    assert_true(q >= p + 16);
    memset(q, 'x', 100);
    /* many small allocations span chunks */
    for (int i = 0; i < 1000; i++) {
        char *r = flare__arena_alloc(&a, 24);
        assert_non_null(r);
        memset(r, i & 0xff, 24);
    }
    /* oversize goes to its own block */
    char *big = flare__arena_alloc(&a, 1 << 20);
    assert_non_null(big);
    memset(big, 0, 1 << 20);
    char *dup = flare__arena_dup(&a, "hello", 5);
    assert_memory_equal(dup, "hello", 5);
    flare__arena_reset(&a);
    /* after reset the kept chunk is reused: no new memory for small ones */
    char *again = flare__arena_alloc(&a, 8);
    assert_non_null(again);
    assert_null(flare__arena_alloc(&a, SIZE_MAX - 4));
    flare__arena_dispose(&a);
    flare__arena_dispose(&a); /* idempotent */
}

/* Sizes a caller controls, near SIZE_MAX: refused before any malloc (a
 * wrapped header + size used to make a tiny block, written past its end),
 * and the arena goes on working. */
static void test_arena_huge(void **state)
{
    (void)state;
    flare_arena_t a;
    flare__arena_init(&a);
    static const size_t huge[] = {
        SIZE_MAX,
        SIZE_MAX - 1,
        SIZE_MAX - 15, /* rounds to itself: no wrap in the alignment */
        SIZE_MAX - 16,
        SIZE_MAX - 31,
        SIZE_MAX - 32,
        SIZE_MAX - 4096,
        (size_t)PTRDIFF_MAX + 1,
        (size_t)PTRDIFF_MAX,
        (size_t)PTRDIFF_MAX - 15, /* plus the block header: past PTRDIFF_MAX */
        SIZE_MAX / 2 + 1,
    };
    for (size_t i = 0; i < FLARE__ARRAY_SIZE(huge); i++) {
        assert_null(flare__arena_alloc(&a, huge[i]));
        assert_null(flare__arena_dup(&a, "x", huge[i]));
        /* nothing was taken: the arena is as it was */
        assert_false(flare__arena_used(&a));
    }
    for (size_t n = 1; n <= 4096 + 64; n += 7) {
        char *p = flare__arena_alloc(&a, n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 16, 0);
        memset(p, 0xab, n);
        assert_null(flare__arena_alloc(&a, SIZE_MAX - n));
    }
    flare__arena_dispose(&a);
}

static void test_buf_huge(void **state)
{
    (void)state;
    flare_buf_t b = { 0 };
    assert_int_equal(flare__buf_append(&b, "abc", 3), 0);
    static const size_t huge[] = {
        SIZE_MAX,         SIZE_MAX - 2, SIZE_MAX - 3, (size_t)PTRDIFF_MAX, (size_t)PTRDIFF_MAX - 2,
        SIZE_MAX / 2 + 1,
    };
    for (size_t i = 0; i < FLARE__ARRAY_SIZE(huge); i++) {
        assert_int_equal(flare__buf_reserve(&b, huge[i]), FLARE_ENOMEM);
        assert_int_equal(flare__buf_grow(&b, huge[i]), FLARE_ENOMEM);
        assert_int_equal(b.len, 3);
        assert_memory_equal(b.data, "abc", 3);
    }
    /* growth from empty, and exact doubling */
    flare__buf_free(&b);
    assert_int_equal(flare__buf_reserve(&b, 1), 0);
    assert_int_equal(b.cap, 256);
    assert_int_equal(flare__buf_reserve(&b, 257), 0);
    assert_int_equal(b.cap, 512);
    assert_int_equal(flare__buf_reserve(&b, 5000), 0);
    assert_int_equal(b.cap, 8192);
    flare__buf_free(&b);
}

static void test_buf(void **state)
{
    (void)state;
    flare_buf_t b = { 0 };
    for (int i = 0; i < 10000; i++)
        assert_int_equal(flare__buf_append(&b, "abc", 3), 0);
    assert_int_equal(b.len, 30000);
    assert_true(b.cap >= b.len);
    assert_memory_equal(b.data + 29997, "abc", 3);
    assert_int_equal(flare__buf_reserve(&b, SIZE_MAX), FLARE_ENOMEM);
    assert_int_equal(b.len, 30000);
    flare__buf_free(&b);
    assert_null(b.data);
    assert_int_equal(flare__buf_append(&b, "", 0), 0);
    flare__buf_free(&b);
}

/* A text built piece by piece stays a C string after every append, and a
 * refused append leaves it as it was. */
static void test_buf_cstr(void **state)
{
    (void)state;
    flare_buf_t b = { 0 };
    assert_int_equal(flare__buf_append_cstr(&b, "", 0), 0);
    assert_non_null(b.data);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    assert_int_equal(flare__buf_append_cstr(&b, "ab", 2), 0);
    assert_int_equal(flare__buf_append_cstr(&b, "cdef", 3), 0);
    assert_int_equal(b.len, 5);
    assert_string_equal(b.data, "abcde");
    /* exactly at the capacity: the NUL needs a byte more */
    char big[300];
    memset(big, 'x', sizeof(big));
    assert_int_equal(flare__buf_append_cstr(&b, big, 256 - 5), 0);
    assert_int_equal(b.len, 256);
    assert_true(b.cap > 256);
    assert_int_equal(b.data[256], '\0');
    assert_int_equal(strlen(b.data), 256);
    static const size_t huge[] = { SIZE_MAX, SIZE_MAX - 1, (size_t)PTRDIFF_MAX,
                                   (size_t)PTRDIFF_MAX - 1 };
    for (size_t i = 0; i < FLARE__ARRAY_SIZE(huge); i++) {
        assert_int_equal(flare__buf_append_cstr(&b, big, huge[i]), FLARE_ENOMEM);
        assert_int_equal(b.len, 256);
        assert_int_equal(strlen(b.data), 256);
    }
    /* consumed from the front: the rest moves there */
    flare__buf_consume(&b, 2);
    assert_int_equal(b.len, 254);
    assert_memory_equal(b.data, "cdexx", 5);
    flare__buf_consume(&b, 0);
    assert_int_equal(b.len, 254);
    flare__buf_consume(&b, b.len);
    assert_int_equal(b.len, 0);
    flare__buf_consume(&b, 0);
    assert_int_equal(b.len, 0);
    flare__buf_free(&b);
}

/* The copy holds its own bytes, each a C string, in the order given. */
static void test_fields_copy(void **state)
{
    (void)state;
    char src[] = "Content-TypetextX-Emptyk";
    flare_header_t in[] = {
        { { src, 12 }, { src + 12, 4 } },
        { { src + 16, 7 }, { NULL, 0 } }, /* an empty value */
        { { src + 23, 1 }, { src, 7 } },  /* views may overlap */
    };
    flare_header_t *out = NULL;
    assert_int_equal(flare__fields_copy(in, 3, &out), 0);
    memset(src, '#', sizeof(src) - 1); /* the source buffer is reused */
    assert_string_equal(out[0].name.ptr, "Content-Type");
    assert_int_equal(out[0].name.len, 12);
    assert_string_equal(out[0].value.ptr, "text");
    assert_int_equal(out[0].value.len, 4);
    assert_string_equal(out[1].name.ptr, "X-Empty");
    assert_non_null(out[1].value.ptr);
    assert_string_equal(out[1].value.ptr, "");
    assert_int_equal(out[1].value.len, 0);
    assert_string_equal(out[2].name.ptr, "k");
    assert_string_equal(out[2].value.ptr, "Content");
    free(out);
    /* no fields: still a block to free */
    out = NULL;
    assert_int_equal(flare__fields_copy(NULL, 0, &out), 0);
    assert_non_null(out);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_str),        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_u64toa),     cmocka_unit_test(test_date),
        cmocka_unit_test(test_arena),      cmocka_unit_test(test_buf),
        cmocka_unit_test(test_arena_huge), cmocka_unit_test(test_buf_huge),
        cmocka_unit_test(test_buf_cstr),   cmocka_unit_test(test_fields_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
