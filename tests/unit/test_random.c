/* Randomness: session id formats and uniqueness, the per-thread generator
 * (distinct streams per thread, no repeats), bounded draws. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flare/common.h"
#include "core/random.h"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(a, b);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

#define N 4096

static void test_random_bytes(void **state)
{
    (void)state;
    unsigned char a[64], b[64];
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    assert_int_equal(flare__random_bytes(a, sizeof(a)), 0);
    assert_int_equal(flare__random_bytes(b, sizeof(b)), 0);
    assert_memory_not_equal(a, b, sizeof(a));
    assert_int_equal(flare__random_bytes(a, 0), 0);
    static unsigned char big[1 << 20]; /* more than one getrandom call may return */
    assert_int_equal(flare__random_bytes(big, sizeof(big)), 0);
    size_t zeros = 0;
    for (size_t i = 0; i < sizeof(big); i++)
        zeros += big[i] == 0;
    assert_true(zeros > 3000 && zeros < 5200); /* ~4096 expected */
}

static void test_session_id_hex(void **state)
{
    (void)state;
    static char ids[N][FLARE__SESSION_ID_HEX_LEN + 1];
    unsigned counts[16] = { 0 };
    for (int i = 0; i < N; i++) {
        memset(ids[i], 'X', sizeof(ids[i]));
        assert_int_equal(flare__session_id_hex(ids[i]), 0);
        assert_int_equal(strlen(ids[i]), FLARE__SESSION_ID_HEX_LEN);
        for (int k = 0; k < FLARE__SESSION_ID_HEX_LEN; k++) {
            const char *p = strchr("0123456789abcdef", ids[i][k]);
            assert_non_null(p);
            counts[p - "0123456789abcdef"]++;
        }
    }
    /* every digit shows up about equally often (N*32/16 = 8192 each) */
    for (int d = 0; d < 16; d++)
        assert_true(counts[d] > 7400 && counts[d] < 9000);
    qsort(ids, N, sizeof(ids[0]), cmp_str);
    for (int i = 1; i < N; i++)
        assert_string_not_equal(ids[i - 1], ids[i]);
}

static void test_session_id_b64(void **state)
{
    (void)state;
    static char ids[N][FLARE__SESSION_ID_B64_LEN + 1];
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for (int i = 0; i < N; i++) {
        assert_int_equal(flare__session_id_b64(ids[i]), 0);
        assert_int_equal(strlen(ids[i]), FLARE__SESSION_ID_B64_LEN);
        for (int k = 0; k < FLARE__SESSION_ID_B64_LEN; k++)
            assert_non_null(strchr(alphabet, ids[i][k]));
        /* 128 bits: the last character carries 2 bits, the rest zero */
        const char *last = strchr(alphabet, ids[i][21]);
        assert_int_equal((last - alphabet) & 15, 0);
    }
    qsort(ids, N, sizeof(ids[0]), cmp_str);
    for (int i = 1; i < N; i++)
        assert_string_not_equal(ids[i - 1], ids[i]);
}

static void test_rand64(void **state)
{
    (void)state;
    static uint64_t v[1 << 16];
    unsigned bits[64] = { 0 };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        v[i] = flare__rand64();
        for (int b = 0; b < 64; b++)
            bits[b] += (unsigned)(v[i] >> b & 1);
    }
    /* each bit is set about half the time (32768 +- a few hundred) */
    for (int b = 0; b < 64; b++)
        assert_true(bits[b] > 31800 && bits[b] < 33700);
    qsort(v, sizeof(v) / sizeof(v[0]), sizeof(v[0]), cmp_u64);
    for (size_t i = 1; i < sizeof(v) / sizeof(v[0]); i++)
        assert_true(v[i - 1] != v[i]);
}

static void test_rand_below(void **state)
{
    (void)state;
    unsigned hist[6] = { 0 };
    for (int i = 0; i < 60000; i++) {
        uint64_t r = flare__rand_below(6);
        assert_true(r < 6);
        hist[r]++;
    }
    for (int i = 0; i < 6; i++)
        assert_true(hist[i] > 9400 && hist[i] < 10600);
    assert_int_equal(flare__rand_below(1), 0);
    assert_int_equal(flare__rand_below(0), 0);
    for (int i = 0; i < 1000; i++)
        assert_true(flare__rand_below(UINT64_MAX / 2 + 2) < UINT64_MAX / 2 + 2);
}

static void test_request_id(void **state)
{
    (void)state;
    static char ids[N][FLARE__REQUEST_ID_LEN + 1];
    for (int i = 0; i < N; i++) {
        flare__request_id(ids[i]);
        assert_int_equal(strlen(ids[i]), FLARE__REQUEST_ID_LEN);
        assert_int_equal(strspn(ids[i], "0123456789abcdef"), FLARE__REQUEST_ID_LEN);
    }
    qsort(ids, N, sizeof(ids[0]), cmp_str);
    for (int i = 1; i < N; i++)
        assert_string_not_equal(ids[i - 1], ids[i]);
}

/* Each thread has its own stream: no value repeats across threads. */
#define PER_THREAD 4096
static uint64_t thread_vals[4][PER_THREAD];

static void *draw(void *arg)
{
    uint64_t *out = arg;
    for (int i = 0; i < PER_THREAD; i++)
        out[i] = flare__rand64();
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, draw, thread_vals[i]), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    static uint64_t all[4 * PER_THREAD];
    memcpy(all, thread_vals, sizeof(all));
    qsort(all, 4 * PER_THREAD, sizeof(all[0]), cmp_u64);
    for (size_t i = 1; i < 4 * PER_THREAD; i++)
        assert_true(all[i - 1] != all[i]);
}

static void test_reseed(void **state)
{
    (void)state;
    uint64_t a = flare__rand64();
    flare__rand_reseed();
    uint64_t b = flare__rand64();
    assert_true(a != b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_bytes),   cmocka_unit_test(test_session_id_hex),
        cmocka_unit_test(test_session_id_b64), cmocka_unit_test(test_rand64),
        cmocka_unit_test(test_rand_below),     cmocka_unit_test(test_request_id),
        cmocka_unit_test(test_threads),        cmocka_unit_test(test_reseed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
