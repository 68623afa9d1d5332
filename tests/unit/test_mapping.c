/* Struct mapping: every type, every validator, all errors at once, unknown
 * fields, partial updates, encode/decode round trip, schema, table checks. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flare/mapping.h"

typedef struct address {
    char city[32];
    int32_t zip;
} address_t;

typedef struct item {
    char name[16];
    int qty;
} item_t;

typedef struct rec {
    char title[64];
    flare_str_t note;
    bool done;
    int64_t prio;
    signed char tiny;
    short mid;
    double score;
    float ratio;
    address_t addr;
    int64_t nums[4];
    size_t nnums;
    flare_str_t tags[3];
    size_t ntags;
    char codes[2][4];
    size_t ncodes;
    bool bits[2];
    size_t nbits;
    double ds[2];
    size_t nds;
    item_t items[2];
    size_t nitems;
} rec_t;

static const flare_field_t address_fields[] = {
    FLARE_FIELD_STR(address_t, city, "city", FLARE_REQUIRED, FLARE_LEN(1, 0)),
    FLARE_FIELD_INT(address_t, zip, "zip", FLARE_MIN(0), FLARE_MAX(99999)),
};

static const flare_field_t item_fields[] = {
    FLARE_FIELD_STR(item_t, name, "name", FLARE_REQUIRED),
    FLARE_FIELD_INT(item_t, qty, "qty", FLARE_MIN(1)),
};

static const flare_field_t rec_fields[] = {
    FLARE_FIELD_STR(rec_t, title, "title", FLARE_REQUIRED, FLARE_LEN(1, 20),
                    FLARE_DESCRIPTION("what to do")),
    FLARE_FIELD_STR(rec_t, note, "note", FLARE_PATTERN("[a-z ]*")),
    FLARE_FIELD_BOOL(rec_t, done, "done"),
    FLARE_FIELD_INT(rec_t, prio, "priority", FLARE_MIN(1), FLARE_MAX(5)),
    FLARE_FIELD_INT(rec_t, tiny, "tiny"),
    FLARE_FIELD_INT(rec_t, mid, "mid", FLARE_MAX(1000)),
    FLARE_FIELD_DOUBLE(rec_t, score, "score", FLARE_DMIN(0.5), FLARE_DMAX(9.5)),
    FLARE_FIELD_DOUBLE(rec_t, ratio, "ratio", FLARE_MIN(0), FLARE_MAX(1)),
    FLARE_FIELD_OBJECT(rec_t, addr, "address", address_fields),
    FLARE_FIELD_ARRAY(rec_t, nums, nnums, "nums", FLARE_MIN(0), FLARE_ITEMS(1, 0)),
    FLARE_FIELD_ARRAY(rec_t, tags, ntags, "tags", FLARE_LEN(1, 5)),
    FLARE_FIELD_ARRAY(rec_t, codes, ncodes, "codes", FLARE_PATTERN("[A-Z]{3}")),
    FLARE_FIELD_ARRAY(rec_t, bits, nbits, "bits"),
    FLARE_FIELD_ARRAY(rec_t, ds, nds, "ds", FLARE_ITEMS(0, 1)),
    FLARE_FIELD_ARRAY_OF(rec_t, items, nitems, "items", item_fields),
};
#define NREC FLARE_MAP_N(rec_fields)

/* A bump allocator standing in for the request arena. */
static char arena[16384];
static size_t arena_used;
static bool arena_fail;

static void *arena_alloc(void *ctx, size_t n)
{
    (void)ctx;
    if (arena_fail || n > sizeof(arena) - arena_used)
        return NULL;
    void *p = arena + arena_used;
    arena_used += (n + 15) & ~(size_t)15;
    return p;
}

static const flare_map_opts_t opts = { 0, arena_alloc, NULL };

static flare_map_errors_t errs;
static char out[8192];

static int decode(const char *json, rec_t *r, const flare_map_opts_t *o)
{
    memset(r, 0, sizeof(*r));
    return flare_map_decode(rec_fields, NREC, json, strlen(json), r, o, &errs);
}

/* The errors body, as a C string. */
static const char *errors_body(void)
{
    flare_json_t w;
    flare_json_init(&w, out, sizeof(out) - 1);
    assert_int_equal(flare_map_errors_write(&errs, &w), 0);
    assert_int_equal(flare_json_finish(&w), 0);
    out[w.len] = '\0';
    return out;
}

static void expect_error(const char *json, const char *field, const char *reason)
{
    rec_t r;
    int rc = decode(json, &r, &opts);
    if (rc != FLARE_EINVAL)
        fail_msg("%s: rc %d", json, rc);
    for (size_t i = 0; i < errs.count; i++) {
        if (strcmp(errs.items[i].field, field) == 0 && strcmp(errs.items[i].reason, reason) == 0)
            return;
    }
    fail_msg("%s: no error %s: %s in %s", json, field, reason, errors_body());
}

#define VALID "\"title\":\"t\""

static void test_decode_all_types(void **state)
{
    (void)state;
    rec_t r;
    const char *json =
        "{\"title\":\"Buy milk\",\"note\":\"two litres\",\"done\":true,\"priority\":3,"
        "\"tiny\":-128,\"mid\":-32768,\"score\":2.25,\"ratio\":0.5,"
        "\"address\":{\"city\":\"Z\xc3\xbcrich\",\"zip\":8001},"
        "\"nums\":[1,2,3],\"tags\":[\"a\",\"bb\"],\"codes\":[\"ABC\",\"XYZ\"],"
        "\"bits\":[true,false],\"ds\":[1],"
        "\"items\":[{\"name\":\"x\",\"qty\":2},{\"name\":\"y\",\"qty\":1}]}";
    arena_used = 0;
    assert_int_equal(decode(json, &r, &opts), 0);
    assert_int_equal(errs.count, 0);
    assert_string_equal(r.title, "Buy milk");
    assert_int_equal(r.note.len, 10);
    assert_memory_equal(r.note.ptr, "two litres", 10);
    assert_int_equal(r.note.ptr[10], '\0');
    assert_true(r.note.ptr >= arena && r.note.ptr < arena + sizeof(arena));
    assert_true(r.done);
    assert_int_equal(r.prio, 3);
    assert_int_equal(r.tiny, -128);
    assert_int_equal(r.mid, -32768);
    assert_true(r.score == 2.25);
    assert_true(r.ratio == 0.5f);
    assert_string_equal(r.addr.city, "Z\xc3\xbcrich");
    assert_int_equal(r.addr.zip, 8001);
    assert_int_equal(r.nnums, 3);
    assert_int_equal(r.nums[2], 3);
    assert_int_equal(r.ntags, 2);
    assert_int_equal(r.tags[1].len, 2);
    assert_memory_equal(r.tags[1].ptr, "bb", 2);
    assert_int_equal(r.ncodes, 2);
    assert_string_equal(r.codes[1], "XYZ");
    assert_int_equal(r.nbits, 2);
    assert_true(r.bits[0] && !r.bits[1]);
    assert_int_equal(r.nds, 1);
    assert_true(r.ds[0] == 1.0);
    assert_int_equal(r.nitems, 2);
    assert_string_equal(r.items[1].name, "y");
    assert_int_equal(r.items[0].qty, 2);
    assert_int_equal(errs.present, (1u << NREC) - 1 - (0));
}

static void test_absent_keeps_defaults(void **state)
{
    (void)state;
    rec_t r;
    memset(&r, 0, sizeof(r));
    r.prio = 4;
    r.done = true;
    assert_int_equal(flare_map_decode(rec_fields, NREC, "{" VALID ",\"done\":null}",
                                      strlen("{" VALID ",\"done\":null}"), &r, &opts, &errs),
                     0);
    assert_int_equal(r.prio, 4);
    assert_true(r.done);
    assert_int_equal(errs.present, 1);
}

static void test_required(void **state)
{
    (void)state;
    expect_error("{}", "title", "is required");
    expect_error("{\"title\":null}", "title", "is required");
    expect_error("{" VALID ",\"address\":{}}", "address.city", "is required");
    expect_error("{" VALID ",\"items\":[{\"qty\":1}]}", "items[0].name", "is required");
}

static void test_wrong_types(void **state)
{
    (void)state;
    expect_error("{\"title\":5}", "title", "must be a string");
    expect_error("{" VALID ",\"done\":\"yes\"}", "done", "must be a boolean");
    expect_error("{" VALID ",\"done\":1}", "done", "must be a boolean");
    expect_error("{" VALID ",\"priority\":\"3\"}", "priority", "must be an integer");
    expect_error("{" VALID ",\"priority\":3.0}", "priority", "must be an integer");
    expect_error("{" VALID ",\"priority\":3.5}", "priority", "must be an integer");
    expect_error("{" VALID ",\"score\":\"1\"}", "score", "must be a number");
    expect_error("{" VALID ",\"address\":[]}", "address", "must be an object");
    expect_error("{" VALID ",\"nums\":{}}", "nums", "must be an array");
    expect_error("{" VALID ",\"nums\":[1,\"2\"]}", "nums[1]", "must be an integer");
    expect_error("{" VALID ",\"items\":[5]}", "items[0]", "must be an object");
    expect_error("[]", "", "must be an object");
    expect_error("\"str\"", "", "must be an object");
}

static void test_int_validators(void **state)
{
    (void)state;
    rec_t r;
    expect_error("{" VALID ",\"priority\":0}", "priority", "must be between 1 and 5");
    expect_error("{" VALID ",\"priority\":6}", "priority", "must be between 1 and 5");
    assert_int_equal(decode("{" VALID ",\"priority\":1}", &r, &opts), 0);
    assert_int_equal(decode("{" VALID ",\"priority\":5}", &r, &opts), 0);
    expect_error("{" VALID ",\"mid\":1001}", "mid", "must be at most 1000");
    expect_error("{" VALID ",\"address\":{\"city\":\"c\",\"zip\":-1}}", "address.zip",
                 "must be between 0 and 99999");
    expect_error("{" VALID ",\"items\":[{\"name\":\"n\",\"qty\":0}]}", "items[0].qty",
                 "must be at least 1");
    /* storage range of the C member */
    expect_error("{" VALID ",\"tiny\":128}", "tiny", "is out of range");
    expect_error("{" VALID ",\"tiny\":-129}", "tiny", "is out of range");
    expect_error("{" VALID ",\"mid\":-32769}", "mid", "is out of range");
    assert_int_equal(decode("{" VALID ",\"tiny\":127}", &r, &opts), 0);
    assert_int_equal(r.tiny, 127);
    expect_error("{" VALID ",\"nums\":[-1]}", "nums[0]", "must be at least 0");
}

static void test_double_validators(void **state)
{
    (void)state;
    rec_t r;
    expect_error("{" VALID ",\"score\":0.49}", "score", "must be between 0.5 and 9.5");
    expect_error("{" VALID ",\"score\":10}", "score", "must be between 0.5 and 9.5");
    assert_int_equal(decode("{" VALID ",\"score\":0.5}", &r, &opts), 0);
    assert_int_equal(decode("{" VALID ",\"score\":9}", &r, &opts), 0); /* integer accepted */
    assert_true(r.score == 9.0);
    expect_error("{" VALID ",\"ratio\":1.0000001}", "ratio", "must be between 0 and 1");
    expect_error("{" VALID ",\"ratio\":-0.1}", "ratio", "must be between 0 and 1");
    assert_int_equal(decode("{" VALID ",\"ratio\":1}", &r, &opts), 0);
    assert_true(r.ratio == 1.0f);
}

static void test_float_range(void **state)
{
    (void)state;
    typedef struct f {
        float x;
    } f_t;
    static const flare_field_t ff[] = { FLARE_FIELD_DOUBLE(f_t, x, "x") };
    f_t v;
    assert_int_equal(flare_map_decode(ff, 1, "{\"x\":1e300}", 11, &v, NULL, &errs), FLARE_EINVAL);
    assert_string_equal(errs.items[0].reason, "is out of range");
    assert_int_equal(flare_map_decode(ff, 1, "{\"x\":-2.5}", 10, &v, NULL, &errs), 0);
    assert_true(v.x == -2.5f);
}

static void test_string_validators(void **state)
{
    (void)state;
    rec_t r;
    expect_error("{\"title\":\"\"}", "title", "length must be 1..20");
    expect_error("{\"title\":\"123456789012345678901\"}", "title", "length must be 1..20");
    /* 20 code points, 40 bytes: the limit counts characters */
    assert_int_equal(
        decode("{\"title\":\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
               "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
               "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"}",
               &r, &opts),
        0);
    assert_int_equal(strlen(r.title), 40);
    expect_error("{" VALID ",\"address\":{\"city\":\"\"}}", "address.city",
                 "length must be at least 1");
    expect_error("{" VALID ",\"tags\":[\"ok\",\"\"]}", "tags[1]", "length must be 1..5");
    expect_error("{" VALID ",\"tags\":[\"toolong\"]}", "tags[0]", "length must be 1..5");
    /* char[N] holds N-1 bytes: longer is an error, never truncated */
    expect_error("{" VALID ",\"address\":{\"city\":\"0123456789012345678901234567890123\"}}",
                 "address.city", "must be at most 31 bytes");
    assert_int_equal(
        decode("{" VALID ",\"address\":{\"city\":\"0123456789012345678901234567890\"}}", &r, &opts),
        0);
    assert_int_equal(strlen(r.addr.city), 31);
    /* pattern: the whole value must match */
    assert_int_equal(decode("{" VALID ",\"note\":\"just words\"}", &r, &opts), 0);
    assert_int_equal(decode("{" VALID ",\"note\":\"\"}", &r, &opts), 0);
    assert_int_equal(r.note.len, 0);
    assert_non_null(r.note.ptr);
    expect_error("{" VALID ",\"note\":\"Words\"}", "note", "has an invalid format");
    expect_error("{" VALID ",\"note\":\"words!\"}", "note", "has an invalid format");
    expect_error("{" VALID ",\"codes\":[\"ABC\",\"ABCD\"]}", "codes[1]", "must be at most 3 bytes");
    expect_error("{" VALID ",\"codes\":[\"ABc\"]}", "codes[0]", "has an invalid format");
    expect_error("{" VALID ",\"codes\":[\"AB\"]}", "codes[0]", "has an invalid format");
    /* the reason never shows the expression; the body names it apart */
    expect_error("{" VALID ",\"note\":\"Words\"}", "note", "has an invalid format");
    assert_string_equal(errs.items[0].pattern, "[a-z ]*");
    assert_string_equal(errors_body(), "{\"errors\":[{\"field\":\"note\",\"reason\":\"has an "
                                       "invalid format\",\"pattern\":\"[a-z ]*\"}]}");
    expect_error("{" VALID ",\"codes\":[\"AB\"]}", "codes[0]", "has an invalid format");
    assert_string_equal(errs.items[0].pattern, "[A-Z]{3}");
    /* other errors have no pattern member */
    expect_error("{\"title\":\"\"}", "title", "length must be 1..20");
    assert_null(errs.items[0].pattern);
    assert_null(strstr(errors_body(), "pattern"));
}

/* FLARE_MESSAGE: the field's own words replace every reason about its
 * value; "is required" and "unknown field" keep theirs. */
typedef struct login {
    char user[33];
    int64_t age;
    flare_str_t tags[2];
    size_t ntags;
    address_t addr;
} login_t;

static const flare_field_t msg_addr_fields[] = {
    FLARE_FIELD_STR(address_t, city, "city", FLARE_REQUIRED, FLARE_LEN(1, 0),
                    FLARE_MESSAGE("name a city")),
    FLARE_FIELD_INT(address_t, zip, "zip", FLARE_MIN(0), FLARE_MAX(99999)),
};

static const flare_field_t login_fields[] = {
    FLARE_FIELD_STR(login_t, user, "user", FLARE_REQUIRED, FLARE_LEN(1, 32),
                    FLARE_PATTERN("[A-Za-z0-9_.-]+"),
                    FLARE_MESSAGE("letters, digits, '.', '_' or '-', at most 32")),
    FLARE_FIELD_INT(login_t, age, "age", FLARE_MIN(0), FLARE_MAX(150),
                    FLARE_MESSAGE("an age in years")),
    FLARE_FIELD_ARRAY(login_t, tags, ntags, "tags", FLARE_LEN(1, 5), FLARE_MESSAGE("short tags")),
    FLARE_FIELD_OBJECT(login_t, addr, "address", msg_addr_fields, FLARE_MESSAGE("an address")),
};

static void expect_login(const char *json, const char *field, const char *reason,
                         const char *pattern)
{
    login_t l;
    memset(&l, 0, sizeof(l));
    int rc =
        flare_map_decode(login_fields, FLARE_MAP_N(login_fields), json, strlen(json), &l,
                         &(flare_map_opts_t){ FLARE_MAP_REJECT_UNKNOWN, arena_alloc, NULL }, &errs);
    if (rc != FLARE_EINVAL)
        fail_msg("%s: rc %d", json, rc);
    for (size_t i = 0; i < errs.count; i++) {
        if (strcmp(errs.items[i].field, field) != 0)
            continue;
        if (strcmp(errs.items[i].reason, reason) != 0)
            fail_msg("%s: %s: reason %s, not %s", json, field, errs.items[i].reason, reason);
        if (pattern == NULL)
            assert_null(errs.items[i].pattern);
        else
            assert_string_equal(errs.items[i].pattern, pattern);
        return;
    }
    fail_msg("%s: no error for %s in %s", json, field, errors_body());
}

static void test_messages(void **state)
{
    (void)state;
    const char *m = "letters, digits, '.', '_' or '-', at most 32";
    expect_login("{\"user\":\"a b\"}", "user", m, "[A-Za-z0-9_.-]+");
    expect_login("{\"user\":\"\"}", "user", m, NULL);
    expect_login("{\"user\":\"0123456789012345678901234567890123\"}", "user", m, NULL);
    expect_login("{\"user\":7}", "user", m, NULL);
    expect_login("{}", "user", "is required", NULL);
    expect_login("{\"user\":\"a\",\"age\":200}", "age", "an age in years", NULL);
    expect_login("{\"user\":\"a\",\"age\":\"x\"}", "age", "an age in years", NULL);
    expect_login("{\"user\":\"a\",\"tags\":[\"ok\",\"toolong\"]}", "tags[1]", "short tags", NULL);
    expect_login("{\"user\":\"a\",\"tags\":[\"a\",\"b\",\"c\"]}", "tags", "short tags", NULL);
    /* an object: its own message when it is not one, its members' inside */
    expect_login("{\"user\":\"a\",\"address\":3}", "address", "an address", NULL);
    expect_login("{\"user\":\"a\",\"address\":{\"city\":\"\"}}", "address.city", "name a city",
                 NULL);
    expect_login("{\"user\":\"a\",\"address\":{\"city\":\"x\",\"zip\":-1}}", "address.zip",
                 "must be between 0 and 99999", NULL);
    expect_login("{\"user\":\"a\",\"address\":{}}", "address.city", "is required", NULL);
    expect_login("{\"user\":\"a\",\"address\":{\"city\":\"x\",\"co\":1}}", "address.co",
                 "unknown field", NULL);
    expect_login("{\"user\":\"a\",\"x\":1}", "x", "unknown field", NULL);
    /* the body: the message, then the pattern apart */
    expect_login("{\"user\":\"a b\"}", "user", m, "[A-Za-z0-9_.-]+");
    assert_string_equal(errors_body(),
                        "{\"errors\":[{\"field\":\"user\",\"reason\":\"letters, digits, '.', '_' "
                        "or '-', at most 32\",\"pattern\":\"[A-Za-z0-9_.-]+\"}]}");
}

static void test_array_items(void **state)
{
    (void)state;
    rec_t r;
    expect_error("{" VALID ",\"nums\":[]}", "nums", "number of items must be 1..4");
    expect_error("{" VALID ",\"nums\":[1,2,3,4,5]}", "nums", "number of items must be 1..4");
    assert_int_equal(decode("{" VALID ",\"nums\":[1,2,3,4]}", &r, &opts), 0);
    assert_int_equal(r.nnums, 4);
    expect_error("{" VALID ",\"ds\":[1,2]}", "ds", "number of items must be at most 1");
    expect_error("{" VALID ",\"tags\":[\"a\",\"b\",\"c\",\"d\"]}", "tags",
                 "number of items must be at most 3");
    assert_int_equal(decode("{" VALID ",\"bits\":[]}", &r, &opts), 0);
    assert_int_equal(r.nbits, 0);
}

static void test_many_errors(void **state)
{
    (void)state;
    rec_t r;
    assert_int_equal(decode("{\"title\":\"\",\"done\":0,\"priority\":9,\"score\":\"x\","
                            "\"address\":{\"zip\":123456},\"nums\":[0.5]}",
                            &r, &opts),
                     FLARE_EINVAL);
    assert_int_equal(errs.count, 7);
    assert_int_equal(errs.total, 7);
    assert_string_equal(errors_body(),
                        "{\"errors\":["
                        "{\"field\":\"title\",\"reason\":\"length must be 1..20\"},"
                        "{\"field\":\"done\",\"reason\":\"must be a boolean\"},"
                        "{\"field\":\"priority\",\"reason\":\"must be between 1 and 5\"},"
                        "{\"field\":\"score\",\"reason\":\"must be a number\"},"
                        "{\"field\":\"address.city\",\"reason\":\"is required\"},"
                        "{\"field\":\"address.zip\",\"reason\":\"must be between 0 and 99999\"},"
                        "{\"field\":\"nums[0]\",\"reason\":\"must be an integer\"}]}");
}

static void test_error_overflow(void **state)
{
    (void)state;
    rec_t r;
    char json[2048];
    size_t n = (size_t)snprintf(json, sizeof(json), "{" VALID ",\"items\":[");
    /* 2 items, each 2 errors, plus a nums array with 4 bad elements, ... */
    n += (size_t)snprintf(json + n, sizeof(json) - n,
                          "{\"qty\":0},{\"qty\":0}],\"nums\":[-1,-1,-1,-1],"
                          "\"tags\":[\"\",\"\",\"\"],\"codes\":[\"a\",\"b\"],\"bits\":[1,2],"
                          "\"ds\":[\"x\"],\"tiny\":999,\"mid\":99999,\"done\":0}");
    assert_int_equal(flare_map_decode(rec_fields, NREC, json, n, &r, &opts, &errs), FLARE_EINVAL);
    assert_int_equal(errs.count, FLARE_MAP_MAX_ERRORS);
    assert_int_equal(errs.total, 19);
    const char *body = errors_body();
    assert_non_null(strstr(body, "],\"more\":3}"));
}

static void test_unknown_fields(void **state)
{
    (void)state;
    rec_t r;
    const char *json = "{" VALID ",\"extra\":1,\"address\":{\"city\":\"c\",\"planet\":\"earth\"}}";
    assert_int_equal(decode(json, &r, &opts), 0); /* ignored by default */
    flare_map_opts_t strict = opts;
    strict.flags = FLARE_MAP_REJECT_UNKNOWN;
    assert_int_equal(decode(json, &r, &strict), FLARE_EINVAL);
    assert_string_equal(errors_body(),
                        "{\"errors\":["
                        "{\"field\":\"address.planet\",\"reason\":\"unknown field\"},"
                        "{\"field\":\"extra\",\"reason\":\"unknown field\"}]}");
}

static void test_partial(void **state)
{
    (void)state;
    rec_t r;
    flare_map_opts_t partial = opts;
    partial.flags = FLARE_MAP_PARTIAL;
    assert_int_equal(decode("{\"done\":true}", &r, &partial), 0);
    assert_true(r.done);
    assert_int_equal(errs.present, 1u << 2);
    /* present fields are still validated, nested objects stay complete */
    assert_int_equal(decode("{\"title\":\"\",\"address\":{}}", &r, &partial), FLARE_EINVAL);
    assert_int_equal(errs.count, 2);
    assert_string_equal(errs.items[0].field, "title");
    assert_string_equal(errs.items[1].field, "address.city");
    assert_int_equal(errs.present, 1u | 1u << 8);
}

static void test_invalid_json(void **state)
{
    (void)state;
    rec_t r;
    assert_int_equal(decode("{\"title\":\"x\",}", &r, &opts), FLARE_EINVAL);
    assert_true(errs.invalid_json);
    assert_int_equal(errs.count, 0);
    assert_string_equal(errors_body(), "{\"error\":\"invalid JSON\",\"line\":1,\"column\":14,"
                                       "\"position\":14,\"reason\":\"string or '}' expected near "
                                       "'}'\"}");
    assert_int_equal(decode("{\"title\":\"a\",\"title\":\"b\"}", &r, &opts), FLARE_EINVAL);
    assert_true(errs.invalid_json);
    assert_non_null(strstr(errs.json.reason, "duplicate"));
}

static void test_server_faults(void **state)
{
    (void)state;
    rec_t r;
    /* flare_str_t member without an allocator */
    assert_int_equal(decode("{" VALID ",\"note\":\"abc\"}", &r, NULL), FLARE_ESTATE);
    /* allocation failure */
    arena_fail = true;
    assert_int_equal(decode("{" VALID ",\"note\":\"abc\"}", &r, &opts), FLARE_ENOMEM);
    arena_fail = false;
    /* a broken pattern */
    typedef struct p {
        char s[8];
    } p_t;
    static const flare_field_t bad[] = { FLARE_FIELD_STR(p_t, s, "s", FLARE_PATTERN("a(")) };
    p_t v;
    assert_int_equal(flare_map_decode(bad, 1, "{\"s\":\"a\"}", 9, &v, NULL, &errs), FLARE_EPATTERN);
    assert_int_equal(flare_map_check(bad, 1), FLARE_EPATTERN);
}

static void test_check(void **state)
{
    (void)state;
    assert_int_equal(flare_map_check(rec_fields, NREC), 0);
    typedef struct s {
        int a;
        int b;
    } s_t;
    static const flare_field_t dup[] = { FLARE_FIELD_INT(s_t, a, "x"),
                                         FLARE_FIELD_INT(s_t, b, "x") };
    assert_int_equal(flare_map_check(dup, 2), FLARE_EINVAL);
    static const flare_field_t inv[] = { FLARE_FIELD_INT(s_t, a, "a", FLARE_MIN(5), FLARE_MAX(1)) };
    assert_int_equal(flare_map_check(inv, 1), FLARE_EINVAL);
    static const flare_field_t noname[] = { FLARE_FIELD_INT(s_t, a, NULL) };
    assert_int_equal(flare_map_check(noname, 1), FLARE_EINVAL);
    flare_field_t broken = rec_fields[3];
    broken.size = 3;
    assert_int_equal(flare_map_check(&broken, 1), FLARE_EINVAL);
}

static void test_encode(void **state)
{
    (void)state;
    rec_t r;
    memset(&r, 0, sizeof(r));
    strcpy(r.title, "Say \"hi\"");
    r.note = (flare_str_t){ NULL, 0 };
    r.done = true;
    r.prio = -3;
    r.tiny = -1;
    r.mid = 300;
    r.score = 0.1;
    r.ratio = 0.25f;
    strcpy(r.addr.city, "Bern");
    r.addr.zip = 3000;
    r.nums[0] = INT64_MAX;
    r.nnums = 1;
    r.tags[0] = FLARE_STR("a");
    r.tags[1] = FLARE_STR("b\n");
    r.ntags = 2;
    r.ncodes = 0;
    r.bits[1] = true;
    r.nbits = 2;
    r.nds = 99; /* clamped to the capacity */
    r.ds[0] = 1.5;
    r.ds[1] = 2;
    strcpy(r.items[0].name, "i");
    r.items[0].qty = 1;
    r.nitems = 1;
    flare_json_t w;
    flare_json_init(&w, out, sizeof(out) - 1);
    assert_int_equal(flare_map_encode(rec_fields, NREC, &r, &w), 0);
    assert_int_equal(flare_json_finish(&w), 0);
    out[w.len] = '\0';
    assert_string_equal(out,
                        "{\"title\":\"Say \\\"hi\\\"\",\"note\":null,\"done\":true,"
                        "\"priority\":-3,\"tiny\":-1,\"mid\":300,\"score\":0.1,\"ratio\":0.25,"
                        "\"address\":{\"city\":\"Bern\",\"zip\":3000},"
                        "\"nums\":[9223372036854775807],\"tags\":[\"a\",\"b\\n\"],\"codes\":[],"
                        "\"bits\":[false,true],\"ds\":[1.5,2],"
                        "\"items\":[{\"name\":\"i\",\"qty\":1}]}");
    /* a NaN cannot be encoded */
    r.score = NAN;
    flare_json_init(&w, out, sizeof(out));
    assert_int_equal(flare_map_encode(rec_fields, NREC, &r, &w), FLARE_EINVAL);
}

static void test_round_trip(void **state)
{
    (void)state;
    const char *json = "{\"title\":\"T\xc3\xa9st\",\"note\":\"a b\",\"done\":false,\"priority\":2,"
                       "\"tiny\":7,\"mid\":-5,\"score\":3.3,\"ratio\":0.75,"
                       "\"address\":{\"city\":\"c\",\"zip\":1},\"nums\":[4,5],\"tags\":[\"x\"],"
                       "\"codes\":[\"QQQ\"],\"bits\":[true],\"ds\":[],"
                       "\"items\":[{\"name\":\"a\",\"qty\":3},{\"name\":\"b\",\"qty\":4}]}";
    rec_t a, b;
    arena_used = 0;
    assert_int_equal(decode(json, &a, &opts), 0);
    flare_json_t w;
    flare_json_init(&w, out, sizeof(out) - 1);
    assert_int_equal(flare_map_encode(rec_fields, NREC, &a, &w), 0);
    out[w.len] = '\0';
    assert_string_equal(out, json);
    assert_int_equal(decode(out, &b, &opts), 0);
    assert_string_equal(a.title, b.title);
    assert_true(a.score == b.score && a.ratio == b.ratio && a.nitems == b.nitems);
    assert_int_equal(a.items[1].qty, b.items[1].qty);
    /* encode inside a bigger document */
    flare_json_init(&w, out, sizeof(out) - 1);
    flare_json_array_begin(&w);
    flare_map_encode(address_fields, 2, &a.addr, &w);
    flare_map_encode(address_fields, 2, &b.addr, &w);
    flare_json_array_end(&w);
    assert_int_equal(flare_json_finish(&w), 0);
    out[w.len] = '\0';
    assert_string_equal(out, "[{\"city\":\"c\",\"zip\":1},{\"city\":\"c\",\"zip\":1}]");
}

static void test_schema(void **state)
{
    (void)state;
    typedef struct todo {
        char title[201 * 4];
        bool done;
        int prio;
        double w;
        char tags[4][8];
        size_t ntags;
        address_t where;
    } todo_t;
    static const flare_field_t todo_fields[] = {
        FLARE_FIELD_STR(todo_t, title, "title", FLARE_REQUIRED, FLARE_LEN(1, 200),
                        FLARE_DESCRIPTION("short text")),
        FLARE_FIELD_BOOL(todo_t, done, "done", FLARE_REQUIRED),
        FLARE_FIELD_INT(todo_t, prio, "priority", FLARE_MIN(1), FLARE_MAX(5)),
        FLARE_FIELD_DOUBLE(todo_t, w, "weight", FLARE_DMIN(0.5)),
        FLARE_FIELD_ARRAY(todo_t, tags, ntags, "tags", FLARE_PATTERN("[a-z]+")),
        FLARE_FIELD_OBJECT(todo_t, where, "where", address_fields),
    };
    flare_json_t w;
    flare_json_init(&w, out, sizeof(out) - 1);
    assert_int_equal(flare_map_schema(todo_fields, FLARE_MAP_N(todo_fields), &w), 0);
    assert_int_equal(flare_json_finish(&w), 0);
    out[w.len] = '\0';
    assert_string_equal(
        out, "{\"type\":\"object\",\"properties\":{"
             "\"title\":{\"description\":\"short text\",\"type\":\"string\",\"minLength\":1,"
             "\"maxLength\":200},"
             "\"done\":{\"type\":\"boolean\"},"
             "\"priority\":{\"type\":\"integer\",\"format\":\"int32\",\"minimum\":1,\"maximum\":5},"
             "\"weight\":{\"type\":\"number\",\"format\":\"double\",\"minimum\":0.5},"
             "\"tags\":{\"type\":\"array\",\"maxItems\":4,\"items\":{\"type\":\"string\","
             "\"maxLength\":7,\"pattern\":\"^([a-z]+)$\"}},"
             "\"where\":{\"type\":\"object\",\"properties\":{"
             "\"city\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":31},"
             "\"zip\":{\"type\":\"integer\",\"format\":\"int32\",\"minimum\":0,\"maximum\":99999}},"
             "\"required\":[\"city\"]}},"
             "\"required\":[\"title\",\"done\"]}");
    assert_int_equal(flare_map_check(todo_fields, FLARE_MAP_N(todo_fields)), 0);
}

/* Patterns are compiled per thread: decode concurrently. */
static void *worker(void *arg)
{
    (void)arg;
    static const char json[] = "{" VALID ",\"codes\":[\"ABC\",\"bad\"],\"nums\":[1]}";
    for (int i = 0; i < 200; i++) {
        rec_t r;
        flare_map_errors_t e;
        memset(&r, 0, sizeof(r));
        int rc = flare_map_decode(rec_fields, NREC, json, sizeof(json) - 1, &r, NULL, &e);
        if (rc != FLARE_EINVAL || e.count != 1 || strcmp(e.items[0].field, "codes[1]") != 0)
            return (void *)1;
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, NULL), 0);
    for (int i = 0; i < 4; i++) {
        void *res;
        assert_int_equal(pthread_join(t[i], &res), 0);
        assert_null(res);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_all_types), cmocka_unit_test(test_absent_keeps_defaults),
        cmocka_unit_test(test_required),         cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_int_validators),   cmocka_unit_test(test_double_validators),
        cmocka_unit_test(test_float_range),      cmocka_unit_test(test_string_validators),
        cmocka_unit_test(test_array_items),      cmocka_unit_test(test_many_errors),
        cmocka_unit_test(test_error_overflow),   cmocka_unit_test(test_unknown_fields),
        cmocka_unit_test(test_partial),          cmocka_unit_test(test_invalid_json),
        cmocka_unit_test(test_server_faults),    cmocka_unit_test(test_check),
        cmocka_unit_test(test_encode),           cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_schema),           cmocka_unit_test(test_threads),
        cmocka_unit_test(test_messages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
