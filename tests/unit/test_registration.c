/* Route, group and middleware registration: a group's root ("" and "/"),
 * and a reason in flare_last_error() for every refusal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <flare/flare.h>

#include "harness.h"

static int h_name(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), flare_str(ud));
}

static int before_pass(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)res;
    (void)ud;
    return 0;
}

/* The call failed with `code` and said why: the reason names `what`. */
#define assert_reason(call, code, what)                                       \
    do {                                                                      \
        reset_reason();                                                       \
        assert_int_equal((call), (code));                                     \
        if (strstr(flare_last_error(), (what)) == NULL)                       \
            fail_msg("reason \"%s\" lacks \"%s\"", flare_last_error(), what); \
    } while (0)

/* Records a recognisable reason, so a call that sets none is caught. */
static void reset_reason(void)
{
    flare_app_t *app = flare_app_new(&(flare_config_t){ .max_headers = 1u << 20 });
    assert_null(app);
    assert_non_null(strstr(flare_last_error(), "max_headers"));
}

static void test_group_root(void **state)
{
    (void)state;
    harness_t h = { 0 };
    h.app = flare_app_new(&(flare_config_t){ .workers = 1 });
    assert_non_null(h.app);
    flare_group_t *todos = flare_group_new(h.app, "/api/todos");
    assert_non_null(todos);
    assert_int_equal(flare_group_route(todos, FLARE_METHOD_POST, "", h_name, "post-root"), 0);
    assert_int_equal(flare_group_route(todos, FLARE_METHOD_GET, "/", h_name, "get-root"), 0);
    assert_int_equal(flare_group_route(todos, FLARE_METHOD_GET, "/{id}", h_name, "one"), 0);
    /* "" and "/" are the same route: the second is a duplicate, and says so */
    assert_reason(flare_group_route(todos, FLARE_METHOD_POST, "/", h_name, "again"), FLARE_EEXIST,
                  "/api/todos");
    /* a nested group's root */
    flare_group_t *api = flare_group_new(h.app, "/v2/");
    flare_group_t *items = flare_group_sub(api, "/items");
    assert_non_null(items);
    assert_int_equal(flare_group_route(items, FLARE_METHOD_GET, "", h_name, "items-root"), 0);
    /* the root group: "" is "/" */
    flare_group_t *root = flare_group_new(h.app, "/");
    assert_non_null(root);
    assert_int_equal(flare_group_route(root, FLARE_METHOD_GET, "", h_name, "slash"), 0);

    assert_int_equal(harness_start(&h), 0);
    char *r = harness_roundtrip(&h, "POST /api/todos HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                                    "Connection: close\r\n\r\n");
    assert_non_null(strstr(r, "200 OK"));
    assert_non_null(strstr(r, "\r\n\r\npost-root"));
    free(r);
    r = harness_roundtrip(&h, "GET /api/todos HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_non_null(strstr(r, "\r\n\r\nget-root"));
    free(r);
    /* the trailing slash stays significant: /api/todos/ is not the root */
    r = harness_roundtrip(&h, "GET /api/todos/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_non_null(strstr(r, "404"));
    free(r);
    r = harness_roundtrip(&h, "GET /v2/items HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_non_null(strstr(r, "\r\n\r\nitems-root"));
    free(r);
    r = harness_roundtrip(&h, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_non_null(strstr(r, "\r\n\r\nslash"));
    free(r);
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
}

static void test_reasons(void **state)
{
    (void)state;
    flare_app_t *app = flare_app_new(NULL);
    assert_non_null(app);
    flare_group_t *g = flare_group_new(app, "/g");
    assert_non_null(g);
    flare_middleware_t none = { "empty", NULL, NULL, NULL };
    flare_middleware_t ok = { "ok", before_pass, NULL, NULL };

    /* routes */
    assert_reason(flare_get(app, NULL, h_name, ""), FLARE_EINVAL, "pattern is NULL");
    assert_reason(flare_get(app, "/x", NULL, ""), FLARE_EINVAL, "handler is NULL");
    assert_reason(flare_get(NULL, "/x", h_name, ""), FLARE_EINVAL, "app is NULL");
    assert_reason(flare_route(app, FLARE_METHOD_OTHER, "/x", h_name, ""), FLARE_EINVAL, "method");
    assert_reason(flare_route(app, (flare_method_t)99, "/x", h_name, ""), FLARE_EINVAL, "method");
    assert_reason(flare_get(app, "x", h_name, ""), FLARE_EPATTERN, "start with '/'");
    assert_reason(flare_get(app, "", h_name, ""), FLARE_EPATTERN, "start with '/'");
    assert_reason(flare_get(app, "/a//b", h_name, ""), FLARE_EPATTERN, "empty segment");
    assert_reason(flare_get(app, "/a/{", h_name, ""), FLARE_EPATTERN, "whole segment");
    assert_reason(flare_get(app, "/a/{*}", h_name, ""), FLARE_EPATTERN, "empty parameter name");
    assert_reason(flare_get(app, "/a/{x-y}", h_name, ""), FLARE_EPATTERN, "[A-Za-z0-9_]");
    assert_reason(flare_get(app, "/a/{*r}/b", h_name, ""), FLARE_EPATTERN, "last segment");
    assert_reason(flare_get(app, "/{a}/{a}", h_name, ""), FLARE_EPATTERN, "duplicate");
    assert_reason(flare_get(app, "/file{id}.txt", h_name, ""), FLARE_EPATTERN, "literal");
    assert_reason(flare_get(app, "/a%zz", h_name, ""), FLARE_EPATTERN, "%XX");
    assert_int_equal(flare_get(app, "/u/{id}", h_name, ""), 0);
    assert_reason(flare_get(app, "/u/{other}", h_name, ""), FLARE_EEXIST, "already registered");
    assert_reason(flare_route_mw(app, FLARE_METHOD_GET, "/m", h_name, "", NULL, 2), FLARE_EINVAL,
                  "mws is NULL");
    assert_reason(flare_route_mw(app, FLARE_METHOD_GET, "/m", h_name, "", &none, 1), FLARE_EINVAL,
                  "neither before nor after");

    /* groups */
    assert_reason(flare_group_route(g, FLARE_METHOD_GET, "items", h_name, ""), FLARE_EINVAL,
                  "starts with '/'");
    assert_reason(flare_group_route(NULL, FLARE_METHOD_GET, "/x", h_name, ""), FLARE_EINVAL,
                  "group is NULL");
    assert_reason(flare_group_route(g, FLARE_METHOD_GET, "/x", NULL, ""), FLARE_EINVAL,
                  "handler is NULL");
    assert_reason(flare_group_route(g, FLARE_METHOD_GET, "/a//b", h_name, ""), FLARE_EPATTERN,
                  "/g/a//b");
    reset_reason();
    assert_null(flare_group_new(app, "api"));
    assert_non_null(strstr(flare_last_error(), "starts with '/'"));
    reset_reason();
    assert_null(flare_group_new(app, NULL));
    assert_non_null(strstr(flare_last_error(), "prefix is NULL"));
    reset_reason();
    assert_null(flare_group_sub(NULL, "/x"));
    assert_non_null(strstr(flare_last_error(), "parent is NULL"));

    /* middleware */
    assert_reason(flare_use(app, NULL), FLARE_EINVAL, "middleware is NULL");
    assert_reason(flare_use(NULL, &ok), FLARE_EINVAL, "app is NULL");
    assert_reason(flare_use(app, &none), FLARE_EINVAL, "\"empty\" has neither");
    assert_reason(flare_group_use(g, &none), FLARE_EINVAL, "flare_group_use");
    assert_reason(flare_group_use(NULL, &ok), FLARE_EINVAL, "group is NULL");
    assert_int_equal(flare_use(app, &ok), 0);
    flare_app_free(app);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_root),
        cmocka_unit_test(test_reasons),
    };
    return cmocka_run_group_tests_name("registration", tests, NULL, NULL);
}
