/* flare/rest.h over real sockets: flare_req_json and flare_req_bind refuse
 * bodies not labelled as JSON (415) unless the app allows any type
 * (flare_config_t.json_any_content_type), since a browser sends text/plain
 * and form bodies cross-origin without a CORS preflight. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"
#include <flare/rest.h>

typedef struct {
    flare_str_t name;
} thing_t;

static const flare_field_t thing_fields[] = {
    FLARE_FIELD_STR(thing_t, name, "name", FLARE_REQUIRED),
};

static int bind_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    thing_t t = { 0 };
    if (flare_req_bind(req, res, thing_fields, FLARE_MAP_N(thing_fields), &t, 0, NULL) != 0)
        return 0;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), t.name);
}

static int json_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    if (flare_req_json(req, res) == NULL)
        return 0;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("parsed"));
}

static harness_t start(bool any_type)
{
    flare_config_t cfg = { .workers = 1, .json_any_content_type = any_type };
    harness_t h = { .app = flare_app_new(&cfg) };
    assert_non_null(h.app);
    assert_int_equal(flare_post(h.app, "/bind", bind_handler, NULL), 0);
    assert_int_equal(flare_post(h.app, "/json", json_handler, NULL), 0);
    assert_int_equal(harness_start(&h), 0);
    return h;
}

/* POST path with body and, when ctype is not NULL, that Content-Type: the
 * status, and the response in *out (freed by the caller) */
static int post(const harness_t *h, const char *path, const char *ctype, const char *body,
                char **out)
{
    char req[1024];
    snprintf(req, sizeof(req),
             "POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s%s%sContent-Length: %zu"
             "\r\n\r\n%s",
             path, ctype != NULL ? "Content-Type: " : "", ctype != NULL ? ctype : "",
             ctype != NULL ? "\r\n" : "", strlen(body), body);
    char *r = harness_roundtrip(h, req);
    int status = 0;
    sscanf(r, "HTTP/1.1 %d", &status);
    if (out != NULL)
        *out = r;
    else
        free(r);
    return status;
}

static const char *const paths[] = { "/bind", "/json" };
#define BODY "{\"name\":\"ann\"}"

static void test_json_types_accepted(void **state)
{
    (void)state;
    harness_t h = start(false);
    static const char *const ok[] = {
        "application/json",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        "Application/JSON",
        "application/json ",
        "application/merge-patch+json",
        "application/vnd.api+json; ext=bulk",
    };
    for (size_t p = 0; p < 2; p++) {
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
            if (post(&h, paths[p], ok[i], BODY, NULL) != 200)
                fail_msg("%s with %s: not 200", paths[p], ok[i]);
        }
    }
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
}

static void test_other_types_refused(void **state)
{
    (void)state;
    harness_t h = start(false);
    /* the types a cross-origin page sends without a preflight, and near misses */
    static const char *const bad[] = {
        "text/plain",
        "text/plain; charset=utf-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonx",
        "application/json text/plain",
        "+json",
        "application/+json",
        "",
    };
    for (size_t p = 0; p < 2; p++) {
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            char *r;
            int st = post(&h, paths[p], bad[i], BODY, &r);
            if (st != 415 || strstr(r, "Content-Type") == NULL ||
                strstr(r, "application/json") == NULL)
                fail_msg("%s with \"%s\": %d, want 415 naming the type:\n%s", paths[p], bad[i], st,
                         r);
            free(r);
        }
        /* no Content-Type at all, with a body: refused too */
        char *r;
        assert_int_equal(post(&h, paths[p], NULL, BODY, &r), 415);
        assert_non_null(strstr(r, "missing Content-Type"));
        free(r);
        /* no body and no type: the parser's 400, as before */
        assert_int_equal(post(&h, paths[p], NULL, "", NULL), 400);
        /* labelled JSON but not JSON: still the parser's 400 */
        assert_int_equal(post(&h, paths[p], "application/json", "{no", NULL), 400);
    }
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
}

static void test_any_type_option(void **state)
{
    (void)state;
    harness_t h = start(true);
    for (size_t p = 0; p < 2; p++) {
        assert_int_equal(post(&h, paths[p], "text/plain", BODY, NULL), 200);
        assert_int_equal(post(&h, paths[p], NULL, BODY, NULL), 200);
        assert_int_equal(post(&h, paths[p], "application/x-www-form-urlencoded", "{no", NULL), 400);
    }
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_types_accepted),
        cmocka_unit_test(test_other_types_refused),
        cmocka_unit_test(test_any_type_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
