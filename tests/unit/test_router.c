/* Router: static hash table, parameter tree, precedence, 404/405, the
 * normal form of paths with %-escapes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flare/common.h"
#include "router/match.h"
#include "router/router.h"

#define GET    FLARE_METHOD_GET
#define HEAD   FLARE_METHOD_HEAD
#define POST   FLARE_METHOD_POST
#define PUT    FLARE_METHOD_PUT
#define DELETE FLARE_METHOD_DELETE
#define BIT(m) (1u << (m))

/* Allocation failure injection: the test binary interposes malloc, calloc
 * and realloc (glibc's __libc_* do the work). Not under ASan or TSan, whose
 * runtimes own those symbols: TSan's start-up calls dlsym, which calls
 * malloc, which would be this instrumented one before TSan has a thread
 * state (a SIGSEGV in __tsan::TraceSwitchPart before main); and memory
 * from __libc_malloc freed through TSan's free would not be its own. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ROUTER_OOM_TEST 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ROUTER_OOM_TEST 0
#endif
#endif
#ifndef ROUTER_OOM_TEST
#define ROUTER_OOM_TEST 1
#endif

#if ROUTER_OOM_TEST
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);

static long alloc_countdown = -1; /* fail when it reaches 0; -1: off */

static int alloc_fails(void)
{
    if (alloc_countdown < 0)
        return 0;
    return alloc_countdown-- == 0;
}

void *malloc(size_t n)
{
    return alloc_fails() ? NULL : __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    return alloc_fails() ? NULL : __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    return alloc_fails() ? NULL : __libc_realloc(p, n);
}
#endif

/* Distinct non-NULL route data. */
static int tags[64];
#define T(i) ((void *)&tags[i])

static int add(flare_router_t *r, flare_method_t m, const char *pat, void *data)
{
    return flare__router_add(r, m, flare_str(pat), data);
}

static void *match(const flare_router_t *r, flare_method_t m, const char *path,
                   flare_route_match_t *out)
{
    int rc = flare__router_match(r, m, flare_str(path), out);
    assert_true(rc == 0 || rc == 1);
    assert_int_equal(rc, out->route != NULL);
    if (rc == 1)
        assert_int_equal(out->allowed, 0);
    return out->route;
}

static void assert_param(const flare_route_match_t *m, unsigned i, const char *name,
                         const char *value)
{
    assert_true(i < m->nparams);
    assert_true(flare_str_eq(m->params[i].name, flare_str(name)));
    if (!flare_str_eq(m->params[i].value, flare_str(value)))
        fail_msg("param %u: got '%.*s', want '%s'", i, (int)m->params[i].value.len,
                 m->params[i].value.ptr, value);
}

static int setup(void **state)
{
    *state = flare__router_new();
    return *state == NULL;
}

static int teardown(void **state)
{
    flare__router_free(*state);
    return 0;
}

static void test_static(void **state)
{
    flare_router_t *r = *state;
    flare_route_match_t m;

    assert_int_equal(add(r, GET, "/plaintext", T(1)), 0);
    assert_int_equal(add(r, GET, "/json", T(2)), 0);
    assert_int_equal(add(r, POST, "/json", T(3)), 0);
    assert_int_equal(add(r, GET, "/", T(4)), 0);
    assert_int_equal(add(r, GET, "/users", T(5)), 0);
    assert_int_equal(add(r, GET, "/users/", T(6)), 0);
    assert_int_equal(add(r, GET, "/a/very/long/static/path/with/many/segments.html", T(7)), 0);

    assert_ptr_equal(match(r, GET, "/plaintext", &m), T(1));
    assert_int_equal(m.nparams, 0);
    assert_ptr_equal(match(r, GET, "/json", &m), T(2));
    assert_ptr_equal(match(r, POST, "/json", &m), T(3));
    assert_ptr_equal(match(r, GET, "/", &m), T(4));
    assert_ptr_equal(match(r, GET, "/users", &m), T(5));
    assert_ptr_equal(match(r, GET, "/users/", &m), T(6));
    assert_ptr_equal(match(r, GET, "/a/very/long/static/path/with/many/segments.html", &m), T(7));

    /* No decoding, no normalisation, no prefix match. */
    assert_null(match(r, GET, "/plaintex", &m));
    assert_null(match(r, GET, "/plaintextt", &m));
    assert_null(match(r, GET, "/PLAINTEXT", &m));
    assert_null(match(r, GET, "/plain%74ext", &m));
    assert_null(match(r, GET, "//plaintext", &m));
    assert_null(match(r, GET, "", &m));
    assert_int_equal(m.allowed, 0);
    assert_null(match(r, GET, "*", &m));
    assert_int_equal(m.allowed, 0);

    /* The path need not be NUL-terminated. */
    const char buf[] = "/plaintextXYZ";
    assert_int_equal(flare__router_match(r, GET, (flare_str_t){ buf, 10 }, &m), 1);
    assert_ptr_equal(m.route, T(1));
    assert_int_equal(flare__router_match(r, GET, (flare_str_t){ buf, 1 }, &m), 1);
    assert_ptr_equal(m.route, T(4));
}

static void test_params(void **state)
{
    flare_router_t *r = *state;
    flare_route_match_t m;

    assert_int_equal(add(r, GET, "/users/{id}", T(1)), 0);
    assert_int_equal(add(r, GET, "/users/{id}/posts/{post_id}", T(2)), 0);
    assert_int_equal(add(r, GET, "/{a}/{b}/{c}/x", T(3)), 0);
    assert_int_equal(add(r, PUT, "/users/{uid}", T(4)), 0);
    assert_int_equal(add(r, GET, "/users/{id}/", T(5)), 0);

    assert_ptr_equal(match(r, GET, "/users/123", &m), T(1));
    assert_int_equal(m.nparams, 1);
    assert_param(&m, 0, "id", "123");

    assert_ptr_equal(match(r, GET, "/users/123/posts/abc%20d", &m), T(2));
    assert_int_equal(m.nparams, 2);
    assert_param(&m, 0, "id", "123");
    assert_param(&m, 1, "post_id", "abc%20d");

    assert_ptr_equal(match(r, GET, "/1/2/3/x", &m), T(3));
    assert_int_equal(m.nparams, 3);
    assert_param(&m, 0, "a", "1");
    assert_param(&m, 1, "b", "2");
    assert_param(&m, 2, "c", "3");

    /* Same shape, another method, its own names. */
    assert_ptr_equal(match(r, PUT, "/users/7", &m), T(4));
    assert_int_equal(m.nparams, 1);
    assert_param(&m, 0, "uid", "7");

    /* Trailing slash is significant. */
    assert_ptr_equal(match(r, GET, "/users/9/", &m), T(5));
    assert_param(&m, 0, "id", "9");

    /* A param never matches an empty segment nor crosses '/'. */
    assert_null(match(r, GET, "/users/", &m));
    assert_null(match(r, GET, "/users//posts/1", &m));
    assert_null(match(r, GET, "/users/1/posts/", &m));
    assert_null(match(r, GET, "/users/1/posts/2/3", &m));
    assert_null(match(r, GET, "/users", &m));
    assert_null(match(r, GET, "/1/2/3", &m));
}

static void test_wildcard(void **state)
{
    flare_router_t *r = *state;
    flare_route_match_t m;

    assert_int_equal(add(r, GET, "/static/{*path}", T(1)), 0);
    assert_int_equal(add(r, GET, "/static/special.css", T(2)), 0);
    assert_int_equal(add(r, GET, "/files/{user}/{*rest}", T(3)), 0);
    assert_int_equal(add(r, POST, "/{*all}", T(4)), 0);

    assert_ptr_equal(match(r, GET, "/static/a/b.css", &m), T(1));
    assert_int_equal(m.nparams, 1);
    assert_param(&m, 0, "path", "a/b.css");

    assert_ptr_equal(match(r, GET, "/static/", &m), T(1));
    assert_int_equal(m.nparams, 1);
    assert_param(&m, 0, "path", "");

    assert_ptr_equal(match(r, GET, "/static//x/", &m), T(1));
    assert_param(&m, 0, "path", "/x/");

    /* Documented: the wildcard needs the slash before it. */
    assert_null(match(r, GET, "/static", &m));
    assert_int_equal(m.allowed, BIT(POST)); /* only POST /{*all} */

    /* Exact static beats the wildcard. */
    assert_ptr_equal(match(r, GET, "/static/special.css", &m), T(2));
    assert_int_equal(m.nparams, 0);

    assert_ptr_equal(match(r, GET, "/files/bob/x/y/z", &m), T(3));
    assert_int_equal(m.nparams, 2);
    assert_param(&m, 0, "user", "bob");
    assert_param(&m, 1, "rest", "x/y/z");
    assert_ptr_equal(match(r, GET, "/files/bob/", &m), T(3));
    assert_param(&m, 1, "rest", "");
    assert_null(match(r, GET, "/files/bob", &m));

    assert_ptr_equal(match(r, POST, "/", &m), T(4));
    assert_param(&m, 0, "all", "");
    assert_ptr_equal(match(r, POST, "/anything/at/all", &m), T(4));
    assert_param(&m, 0, "all", "anything/at/all");
    assert_null(match(r, POST, "", &m));
}

static void test_precedence(void **state)
{
    flare_router_t *r = *state;
    flare_route_match_t m;

    assert_int_equal(add(r, GET, "/a/b/c", T(1)), 0);
    assert_int_equal(add(r, GET, "/a/{x}/d", T(2)), 0);
    assert_int_equal(add(r, GET, "/a/{x}/{y}", T(3)), 0);
    assert_int_equal(add(r, GET, "/a/{*rest}", T(4)), 0);
    assert_int_equal(add(r, GET, "/u/me", T(5)), 0);
    assert_int_equal(add(r, GET, "/u/{id}", T(6)), 0);
    assert_int_equal(add(r, GET, "/p/{x}/lit/end", T(7)), 0);
    assert_int_equal(add(r, GET, "/p/lit/{y}/other", T(8)), 0);

    /* Static exact wins. */
    assert_ptr_equal(match(r, GET, "/a/b/c", &m), T(1));
    assert_int_equal(m.nparams, 0);
    /* Backtracking: literal 'b' branch has no 'd', param branch has. */
    assert_ptr_equal(match(r, GET, "/a/b/d", &m), T(2));
    assert_int_equal(m.nparams, 1);
    assert_param(&m, 0, "x", "b");
    /* Literal beats param at the same segment. */
    assert_ptr_equal(match(r, GET, "/a/z/d", &m), T(2));
    assert_param(&m, 0, "x", "z");
    /* Param beats wildcard. */
    assert_ptr_equal(match(r, GET, "/a/b/e", &m), T(3));
    assert_int_equal(m.nparams, 2);
    assert_param(&m, 0, "x", "b");
    assert_param(&m, 1, "y", "e");
    /* Falls back to the wildcard when params cannot match. */
    assert_ptr_equal(match(r, GET, "/a/b/c/d", &m), T(4));
    assert_int_equal(m.nparams, 1);
    assert_param(&m, 0, "rest", "b/c/d");
    assert_ptr_equal(match(r, GET, "/a/b", &m), T(4));
    assert_param(&m, 0, "rest", "b");
    assert_ptr_equal(match(r, GET, "/a/", &m), T(4));
    assert_param(&m, 0, "rest", "");

    assert_ptr_equal(match(r, GET, "/u/me", &m), T(5));
    assert_int_equal(m.nparams, 0);
    assert_ptr_equal(match(r, GET, "/u/mee", &m), T(6));
    assert_param(&m, 0, "id", "mee");

    /* Stale values from a failed branch do not leak into the result. */
    assert_ptr_equal(match(r, GET, "/p/lit/lit/end", &m), T(7));
    assert_int_equal(m.nparams, 1);
    assert_param(&m, 0, "x", "lit");
    assert_ptr_equal(match(r, GET, "/p/lit/q/other", &m), T(8));
    assert_int_equal(m.nparams, 1);
    assert_param(&m, 0, "y", "q");
}

static void test_method_specific_precedence(void **state)
{
    flare_router_t *r = *state;
    flare_route_match_t m;

    /* Static route for GET only: POST on the same path uses the tree. */
    assert_int_equal(add(r, GET, "/users/me", T(1)), 0);
    assert_int_equal(add(r, POST, "/users/{id}", T(2)), 0);
    assert_int_equal(add(r, DELETE, "/users/{*rest}", T(3)), 0);

    assert_ptr_equal(match(r, GET, "/users/me", &m), T(1));
    assert_ptr_equal(match(r, POST, "/users/me", &m), T(2));
    assert_param(&m, 0, "id", "me");
    assert_ptr_equal(match(r, DELETE, "/users/me", &m), T(3));
    assert_param(&m, 0, "rest", "me");

    assert_null(match(r, PUT, "/users/me", &m));
    assert_int_equal(m.allowed, BIT(GET) | BIT(POST) | BIT(DELETE));
    assert_null(match(r, GET, "/users/you", &m));
    assert_int_equal(m.allowed, BIT(POST) | BIT(DELETE));
    assert_null(match(r, POST, "/users/", &m));
    assert_int_equal(m.allowed, BIT(DELETE));
}

static void test_404_405(void **state)
{
    flare_router_t *r = *state;
    flare_route_match_t m;

    assert_int_equal(add(r, GET, "/items", T(1)), 0);
    assert_int_equal(add(r, POST, "/items", T(2)), 0);
    assert_int_equal(add(r, GET, "/items/{id}", T(3)), 0);
    assert_int_equal(add(r, PUT, "/items/{id}", T(4)), 0);
    assert_int_equal(add(r, DELETE, "/items/{id}", T(5)), 0);
    assert_int_equal(add(r, FLARE_METHOD_PATCH, "/items/special", T(6)), 0);
    assert_int_equal(add(r, HEAD, "/files/{*p}", T(7)), 0);

    assert_null(match(r, DELETE, "/items", &m));
    assert_int_equal(m.allowed, BIT(GET) | BIT(POST));
    assert_null(match(r, POST, "/items/3", &m));
    assert_int_equal(m.allowed, BIT(GET) | BIT(PUT) | BIT(DELETE));
    /* Static + tree union. */
    assert_null(match(r, POST, "/items/special", &m));
    assert_int_equal(m.allowed, BIT(GET) | BIT(PUT) | BIT(DELETE) | BIT(FLARE_METHOD_PATCH));
    assert_null(match(r, GET, "/files/x", &m));
    assert_int_equal(m.allowed, BIT(HEAD));
    /* 404 */
    assert_null(match(r, GET, "/nothing", &m));
    assert_int_equal(m.allowed, 0);
    assert_null(match(r, GET, "/items/3/4", &m));
    assert_int_equal(m.allowed, 0);
    assert_null(match(r, GET, "/items/", &m));
    assert_int_equal(m.allowed, 0);
    /* FLARE_METHOD_OTHER never matches, but still reports 405. */
    assert_null(match(r, FLARE_METHOD_OTHER, "/items", &m));
    assert_int_equal(m.allowed, BIT(GET) | BIT(POST));
    assert_null(match(r, (flare_method_t)99, "/items", &m));
    assert_int_equal(m.allowed, BIT(GET) | BIT(POST));

    assert_int_equal(flare__router_allowed(r, flare_str("/items")), BIT(GET) | BIT(POST));
    assert_int_equal(flare__router_allowed(r, flare_str("/items/9")),
                     BIT(GET) | BIT(PUT) | BIT(DELETE));
    assert_int_equal(flare__router_allowed(r, flare_str("/items/special")),
                     BIT(GET) | BIT(PUT) | BIT(DELETE) | BIT(FLARE_METHOD_PATCH));
    assert_int_equal(flare__router_allowed(r, flare_str("/files/")), BIT(HEAD));
    assert_int_equal(flare__router_allowed(r, flare_str("/files")), 0);
    assert_int_equal(flare__router_allowed(r, flare_str("/x")), 0);
    assert_int_equal(flare__router_allowed(r, flare_str("")), 0);
    assert_int_equal(flare__router_allowed(r, flare_str("*")), 0);
}

static void test_allowed_backtracking(void **state)
{
    flare_router_t *r = *state;

    /* Every branch contributes, not only the preferred one. */
    assert_int_equal(add(r, GET, "/a/b/{c}", T(1)), 0);
    assert_int_equal(add(r, POST, "/a/{x}/c", T(2)), 0);
    assert_int_equal(add(r, PUT, "/a/{*r}", T(3)), 0);
    assert_int_equal(add(r, DELETE, "/a/{x}/{y}/", T(4)), 0);
    assert_int_equal(flare__router_allowed(r, flare_str("/a/b/c")),
                     BIT(GET) | BIT(POST) | BIT(PUT));
    assert_int_equal(flare__router_allowed(r, flare_str("/a/b/d")), BIT(GET) | BIT(PUT));
    assert_int_equal(flare__router_allowed(r, flare_str("/a/q/c")), BIT(POST) | BIT(PUT));
    assert_int_equal(flare__router_allowed(r, flare_str("/a/q/c/")), BIT(PUT) | BIT(DELETE));
    assert_int_equal(flare__router_allowed(r, flare_str("/a")), 0);

    flare_route_match_t m;
    assert_ptr_equal(match(r, POST, "/a/b/c", &m), T(2));
    assert_param(&m, 0, "x", "b");
    assert_ptr_equal(match(r, DELETE, "/a/b/c/", &m), T(4));
    assert_param(&m, 0, "x", "b");
    assert_param(&m, 1, "y", "c");
}

static void test_duplicates(void **state)
{
    flare_router_t *r = *state;
    flare_route_match_t m;

    assert_int_equal(add(r, GET, "/x", T(1)), 0);
    assert_int_equal(add(r, GET, "/x", T(2)), FLARE_EEXIST);
    assert_int_equal(add(r, POST, "/x", T(3)), 0);
    assert_int_equal(add(r, GET, "/u/{a}", T(4)), 0);
    assert_int_equal(add(r, GET, "/u/{b}", T(5)), FLARE_EEXIST);
    assert_int_equal(add(r, PUT, "/u/{b}", T(6)), 0);
    assert_int_equal(add(r, GET, "/s/{*a}", T(7)), 0);
    assert_int_equal(add(r, GET, "/s/{*b}", T(8)), FLARE_EEXIST);
    assert_int_equal(add(r, GET, "/s/{b}", T(9)), 0); /* param != wildcard */
    assert_int_equal(add(r, GET, "/u/{a}/", T(10)), 0);
    assert_int_equal(add(r, GET, "/u/{z}/", T(11)), FLARE_EEXIST);

    /* The first registration stays. */
    assert_ptr_equal(match(r, GET, "/x", &m), T(1));
    assert_ptr_equal(match(r, POST, "/x", &m), T(3));
    assert_ptr_equal(match(r, GET, "/u/1", &m), T(4));
    assert_param(&m, 0, "a", "1");
    assert_ptr_equal(match(r, PUT, "/u/1", &m), T(6));
    assert_param(&m, 0, "b", "1");
    assert_ptr_equal(match(r, GET, "/s/1/2", &m), T(7));
    assert_param(&m, 0, "a", "1/2");
    assert_ptr_equal(match(r, GET, "/s/1", &m), T(9));
}

static void test_invalid(void **state)
{
    flare_router_t *r = *state;
    static const char *const bad[] = {
        "",
        "x",
        "users",
        "//",
        "//a",
        "/a//b",
        "/a//",
        "/a/b//",
        "/{",
        "/}",
        "/{a",
        "/a}",
        "/{}",
        "/{*}",
        "/{a}}",
        "/{{a}}",
        "/{a}{b}",
        "/file{id}.txt",
        "/x{id}",
        "/{id}x",
        "/{a-b}",
        "/{a b}",
        "/{a/b}",
        "/{*a}/b",
        "/{*a}/",
        "/{*a}/{*b}",
        "/{*a*}",
        "/{a}/{a}",
        "/{a}/{*a}",
        "/a b",
        "/a?b",
        "/a#b",
        "/a\tb",
        "/{1}/{2}/{3}/{4}/{5}/{6}/{7}/{8}/{9}/{10}/{11}/{12}/{13}/{14}/{15}/{16}/{17}",
        "/{1}/{2}/{3}/{4}/{5}/{6}/{7}/{8}/{9}/{10}/{11}/{12}/{13}/{14}/{15}/{16}/{*r}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = add(r, GET, bad[i], T(1));
        if (rc != FLARE_EPATTERN)
            fail_msg("pattern '%s': got %d, want FLARE_EPATTERN", bad[i], rc);
    }
    /* A NUL byte inside the view. */
    assert_int_equal(flare__router_add(r, GET, (flare_str_t){ "/a\0b", 4 }, T(1)), FLARE_EPATTERN);

    /* Exactly the maximum is fine. */
    assert_int_equal(add(r, GET,
                         "/{1}/{2}/{3}/{4}/{5}/{6}/{7}/{8}/{9}/{10}/{11}/{12}/{13}/{14}/{15}/{16}",
                         T(2)),
                     0);
    assert_int_equal(
        add(r, POST, "/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}/{j}/{k}/{l}/{m}/{n}/{o}/{*p}", T(3)), 0);
    flare_route_match_t m;
    assert_ptr_equal(match(r, GET, "/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p", &m), T(2));
    assert_int_equal(m.nparams, FLARE_ROUTER_MAX_PARAMS);
    assert_param(&m, 15, "16", "p");
    assert_ptr_equal(match(r, POST, "/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r", &m), T(3));
    assert_int_equal(m.nparams, FLARE_ROUTER_MAX_PARAMS);
    assert_param(&m, 0, "a", "a");
    assert_param(&m, 15, "p", "p/q/r");

    /* Invalid method or arguments. */
    assert_int_equal(add(r, FLARE_METHOD_OTHER, "/ok", T(1)), FLARE_EINVAL);
    assert_int_equal(add(r, FLARE_METHOD_COUNT, "/ok", T(1)), FLARE_EINVAL);
    assert_int_equal(add(r, (flare_method_t)-1, "/ok", T(1)), FLARE_EINVAL);
    assert_int_equal(add(r, GET, "/ok", NULL), FLARE_EINVAL);
    assert_int_equal(flare__router_add(NULL, GET, flare_str("/ok"), T(1)), FLARE_EINVAL);
    assert_int_equal(flare__router_add(r, GET, (flare_str_t){ NULL, 3 }, T(1)), FLARE_EINVAL);

    /* Nothing from the failed adds is visible. */
    assert_null(match(r, GET, "/ok", &m));
    assert_int_equal(m.allowed, 0);
    assert_null(match(r, GET, "/file1.txt", &m));
    assert_int_equal(flare__router_allowed(r, flare_str("/a/b")), 0);

    /* Valid oddities. */
    assert_int_equal(add(r, GET, "/", T(4)), 0);
    assert_int_equal(add(r, GET, "/{x}/", T(5)), 0);
    assert_int_equal(add(r, GET, "/a.b-c_d~e%20/f:g@h!$&'()*+,;=", T(6)), 0);
    assert_int_equal(add(r, GET, "/{Az09_}", T(7)), 0);
    assert_ptr_equal(match(r, GET, "/a.b-c_d~e%20/f:g@h!$&'()*+,;=", &m), T(6));
    assert_ptr_equal(match(r, GET, "/q", &m), T(7));
    assert_param(&m, 0, "Az09_", "q");
    assert_ptr_equal(match(r, GET, "/q/", &m), T(5));
}

static void test_many_static(void **state)
{
    flare_router_t *r = *state;
    flare_route_match_t m;
    char buf[64];
    enum { N = 2000 };
    static int data[N];

    for (int i = 0; i < N; i++) {
        snprintf(buf, sizeof buf, "/route/%d/item", i);
        assert_int_equal(add(r, i % 3 == 0 ? POST : GET, buf, &data[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        snprintf(buf, sizeof buf, "/route/%d/item", i);
        flare_method_t want = i % 3 == 0 ? POST : GET;
        assert_ptr_equal(match(r, want, buf, &m), &data[i]);
        assert_null(match(r, want == GET ? POST : GET, buf, &m));
        assert_int_equal(m.allowed, BIT(want));
        assert_int_equal(add(r, want, buf, &data[0]), FLARE_EEXIST);
    }
    for (int i = N; i < N + 200; i++) {
        snprintf(buf, sizeof buf, "/route/%d/item", i);
        assert_null(match(r, GET, buf, &m));
        assert_int_equal(m.allowed, 0);
    }
}

static void test_many_tree(void **state)
{
    flare_router_t *r = *state;
    flare_route_match_t m;
    char buf[64];
    enum { N = 500 };
    static int data[N];

    /* Wide literal fan-out under a parameter: exercises the sorted children. */
    for (int i = 0; i < N; i++) {
        snprintf(buf, sizeof buf, "/api/{ver}/res%d/{id}", (i * 7919) % N);
        assert_int_equal(add(r, GET, buf, &data[(i * 7919) % N]), 0);
    }
    for (int i = 0; i < N; i++) {
        snprintf(buf, sizeof buf, "/api/v2/res%d/%d", i, i * 3);
        assert_ptr_equal(match(r, GET, buf, &m), &data[i]);
        char want[32];
        snprintf(want, sizeof want, "%d", i * 3);
        assert_param(&m, 0, "ver", "v2");
        assert_param(&m, 1, "id", want);
    }
    assert_null(match(r, GET, "/api/v2/res500/1", &m));
    assert_int_equal(m.allowed, 0);
}

static void test_pattern_copied(void **state)
{
    flare_router_t *r = *state;
    flare_route_match_t m;
    char *a = strdup("/copied/static");
    char *b = strdup("/copied/{name}/{*tail}");
    assert_non_null(a);
    assert_non_null(b);

    assert_int_equal(add(r, GET, a, T(1)), 0);
    assert_int_equal(add(r, GET, b, T(2)), 0);
    memset(a, 'X', strlen(a));
    memset(b, 'Y', strlen(b));
    free(a);
    free(b);

    assert_ptr_equal(match(r, GET, "/copied/static", &m), T(1));
    assert_ptr_equal(match(r, GET, "/copied/n/t/u", &m), T(2));
    assert_param(&m, 0, "name", "n");
    assert_param(&m, 1, "tail", "t/u");
}

static void test_empty_router(void **state)
{
    flare_router_t *r = *state;
    flare_route_match_t m;

    assert_null(match(r, GET, "/", &m));
    assert_int_equal(m.allowed, 0);
    assert_null(match(r, GET, "", &m));
    assert_int_equal(flare__router_allowed(r, flare_str("/")), 0);
    assert_int_equal(flare__router_allowed(r, FLARE_STR_NULL), 0);
    assert_int_equal(flare__router_match(r, GET, FLARE_STR_NULL, &m), 0);
    flare__router_free(NULL);
}

static void test_hostile_paths(void **state)
{
    flare_router_t *r = *state;
    flare_route_match_t m;
    enum { LEN = 8192 };
    char *p = malloc(LEN);
    assert_non_null(p);

    assert_int_equal(add(r, GET, "/{a}/{b}/{c}", T(1)), 0);
    assert_int_equal(add(r, GET, "/x/x/x/y", T(2)), 0);
    assert_int_equal(add(r, GET, "/x/{a}/x/{b}/z", T(3)), 0);
    for (int i = 0; i < LEN; i += 2) {
        p[i] = '/';
        p[i + 1] = 'x';
    }
    assert_int_equal(flare__router_match(r, GET, (flare_str_t){ p, LEN }, &m), 0);
    assert_int_equal(m.allowed, 0);
    memset(p, '/', LEN);
    assert_int_equal(flare__router_match(r, GET, (flare_str_t){ p, LEN }, &m), 0);
    assert_int_equal(flare__router_allowed(r, (flare_str_t){ p, LEN }), 0);
    assert_ptr_equal(match(r, GET, "/x/x/x", &m), T(1));
    assert_ptr_equal(match(r, GET, "/x/x/x/q/z", &m), T(3));
    free(p);
}

#if ROUTER_OOM_TEST
/* Checks that the router answers exactly as before the failed add. */
static void check_base(const flare_router_t *r)
{
    flare_route_match_t m;
    assert_ptr_equal(match(r, GET, "/base", &m), T(1));
    assert_ptr_equal(match(r, GET, "/base/x/y", &m), T(2));
    assert_param(&m, 0, "p", "x");
    assert_param(&m, 1, "q", "y");
    assert_null(match(r, PUT, "/base/x/y", &m));
    assert_int_equal(m.allowed, BIT(GET));
    assert_int_equal(flare__router_allowed(r, flare_str("/base/x/new/z/w/")), 0);
    assert_int_equal(flare__router_allowed(r, flare_str("/new/static")), 0);
    assert_int_equal(flare__router_allowed(r, flare_str("/base/x/lit/more")), 0);
}

static void oom_case(flare_method_t method, const char *pat, const char *path)
{
    for (long fail_at = 0;; fail_at++) {
        flare_router_t *r = flare__router_new();
        assert_non_null(r);
        assert_int_equal(add(r, GET, "/base", T(1)), 0);
        assert_int_equal(add(r, GET, "/base/{p}/{q}", T(2)), 0);
        assert_int_equal(add(r, GET, "/base/{p}/lit", T(3)), 0);
        /* Fill the static table up to its growth point. */
        char buf[32];
        for (int i = 0; i < 7; i++) { /* 8 entries: the next add grows 16 -> 32 */
            snprintf(buf, sizeof buf, "/fill/%d", i);
            assert_int_equal(add(r, POST, buf, T(4)), 0);
        }

        alloc_countdown = fail_at;
        int rc = add(r, method, pat, T(9));
        int failed = alloc_countdown < 0; /* the countdown fired */
        alloc_countdown = -1;
        if (!failed) {
            assert_int_equal(rc, 0);
            flare__router_free(r);
            break;
        }
        assert_int_equal(rc, FLARE_ENOMEM);
        check_base(r);
        /* Still usable: the same add now succeeds. */
        assert_int_equal(add(r, method, pat, T(9)), 0);
        flare_route_match_t m;
        assert_ptr_equal(match(r, method, path, &m), T(9));
        flare__router_free(r);
    }
}

static void test_out_of_memory(void **state)
{
    (void)state;
    /* Valgrind replaces our malloc too: then injection cannot work. */
    alloc_countdown = 0;
    void *(*volatile malloc_fn)(size_t) = malloc; /* not elided as a builtin */
    void *probe = malloc_fn(16);
    alloc_countdown = -1;
    if (probe != NULL) {
        free(probe);
        skip();
    }
    assert_null((alloc_countdown = 0, flare__router_new()));
    alloc_countdown = 1;
    assert_null(flare__router_new());
    alloc_countdown = -1;

    oom_case(PUT, "/new/static", "/new/static");
    oom_case(PUT, "/base/{p}/new/{z}/{*w}", "/base/x/new/z/w/");
    oom_case(PUT, "/base/{p}/lit/more", "/base/x/lit/more");
    oom_case(GET, "/base/{p}/{q}/{*rest}", "/base/x/y/");
    oom_case(PUT, "/new/%73tatic", "/new/static"); /* the normal form's copy */
}
#endif

static void check_norm(const char *in, const char *want)
{
    char out[256], again[256];
    size_t len = strlen(in);
    size_t n = flare__router_normalize_path((flare_str_t){ in, len }, out);
    if (n != strlen(want) || memcmp(out, want, n) != 0)
        fail_msg("normalize(\"%s\") = \"%.*s\", want \"%s\"", in, (int)n, out, want);
    assert_true(n <= len);
    /* idempotent */
    assert_int_equal(flare__router_normalize_path((flare_str_t){ out, n }, again), n);
    assert_memory_equal(again, out, n);
    /* in place */
    char buf[256];
    memcpy(buf, in, len);
    assert_int_equal(flare__router_normalize_path((flare_str_t){ buf, len }, buf), n);
    assert_memory_equal(buf, want, n);
}

/* RFC 3986 6.2.2.1-2: unreserved characters decoded, other escapes kept
 * with upper-case hex. */
static void test_normalize_path(void **state)
{
    (void)state;
    check_norm("/plaintext", "/plaintext");
    check_norm("/pl%61intext", "/plaintext");
    check_norm("/%70%6C%61%69%6e%74%65%78%74", "/plaintext");
    check_norm("/users/%41lice", "/users/Alice");
    check_norm("/%30%39%41%5A%61%7A%2D%2E%5F%7E", "/09AZaz-._~");
    check_norm("/%2d%2e%5f%7e", "/-._~");
    /* reserved and other bytes stay escaped, hex upper-cased */
    check_norm("/a%2fb", "/a%2Fb");
    check_norm("/a%2Fb", "/a%2Fb");
    check_norm("/%3f%23%25%20%00%ff%c3%a9", "/%3F%23%25%20%00%FF%C3%A9");
    check_norm("/%21%24%26%27%28%29%2a%2b%2c%3b%3d%3a%40",
               "/%21%24%26%27%28%29%2A%2B%2C%3B%3D%3A%40");
    check_norm("/%2525", "/%2525"); /* one level only */
    check_norm("/%252e", "/%252e");
    /* dot segments are not removed: "..", encoded or not, stays a segment */
    check_norm("/a/%2e%2e/b", "/a/../b");
    check_norm("/a/.%2E/b", "/a/../b");
    check_norm("/%2e", "/.");
    /* a '%' without two hex digits is copied (the parser refuses those) */
    check_norm("/%", "/%");
    check_norm("/%4", "/%4");
    check_norm("/%zz%41", "/%zzA");
    check_norm("/%%41", "/%A");
    check_norm("/a%", "/a%");
    check_norm("", "");
}

/* Patterns are stored in normal form, so a normalised request path finds
 * its route however it was encoded; reserved escapes never become
 * separators. */
static void test_escaped_paths(void **state)
{
    flare_router_t *r = *state;
    flare_route_match_t m;
    char buf[128];

    assert_int_equal(add(r, GET, "/plaintext", T(1)), 0);
    assert_int_equal(add(r, GET, "/users/{id}", T(2)), 0);
    assert_int_equal(add(r, GET, "/a/b", T(3)), 0);
    assert_int_equal(add(r, GET, "/caf%c3%a9", T(4)), 0);
    assert_int_equal(add(r, GET, "/%7Euser", T(5)), 0); /* stored as /~user */
    assert_int_equal(add(r, GET, "/~user", T(6)), FLARE_EEXIST);
    assert_int_equal(add(r, GET, "/files/{*rest}", T(7)), 0);
    assert_int_equal(add(r, GET, "/q%3f", T(8)), 0);

    static const struct {
        const char *path;
        int tag; /* 0: no route */
        const char *param;
    } cases[] = {
        { "/pl%61intext", 1, NULL },
        { "/%70%6c%61%69%6e%74%65%78%74", 1, NULL },
        { "/users/%41lice", 2, "Alice" },
        { "/users/a%2fb", 2, "a%2Fb" }, /* one segment; decoded only in the value */
        { "/a%2Fb", 0, NULL },          /* not /a/b */
        { "/a%2fb", 0, NULL },
        { "/%61/b", 3, NULL },
        { "/caf%C3%A9", 4, NULL },
        { "/caf%c3%a9", 4, NULL },
        { "/~user", 5, NULL },
        { "/%7euser", 5, NULL },
        { "/files/%2e%2e/x", 7, "../x" },
        { "/files/a%2Fb", 7, "a%2Fb" },
        { "/q%3F", 8, NULL },
        { "/q?", 0, NULL },
        { "/plaintext%2F", 0, NULL },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = flare__router_normalize_path(flare_str(cases[i].path), buf);
        buf[n] = '\0';
        void *got = match(r, GET, buf, &m);
        if (got != (cases[i].tag ? T(cases[i].tag) : NULL))
            fail_msg("%s (as %s): got tag %d", cases[i].path, buf,
                     got ? (int)((int *)got - tags) : 0);
        if (cases[i].param != NULL)
            assert_true(flare_str_eq(m.params[0].value, flare_str(cases[i].param)));
    }

    /* a '%' that cannot start an escape can never match: refused */
    assert_int_equal(add(r, GET, "/100%", T(9)), FLARE_EPATTERN);
    assert_int_equal(add(r, GET, "/a%zz", T(9)), FLARE_EPATTERN);
    assert_int_equal(add(r, GET, "/a%4/{id}", T(9)), FLARE_EPATTERN);
    assert_int_equal(add(r, GET, "/%/{id}", T(9)), FLARE_EPATTERN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_static, setup, teardown),
        cmocka_unit_test_setup_teardown(test_params, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wildcard, setup, teardown),
        cmocka_unit_test_setup_teardown(test_precedence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_method_specific_precedence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_404_405, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allowed_backtracking, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_static, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_tree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pattern_copied, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_router, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_paths, setup, teardown),
        cmocka_unit_test(test_normalize_path),
        cmocka_unit_test_setup_teardown(test_escaped_paths, setup, teardown),
#if ROUTER_OOM_TEST
        cmocka_unit_test(test_out_of_memory),
#endif
    };
    return cmocka_run_group_tests_name("router", tests, NULL, NULL);
}
