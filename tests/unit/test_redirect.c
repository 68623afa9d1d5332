/* flare_res_redirect over HTTP/1.1: the five redirect statuses, Location,
 * the small body, HEAD, and the refusals (another status, CR/LF). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <flare/flare.h>

#include "harness.h"

static harness_t h;

/* GET /to/{status}?loc=...: redirects to loc with that status. */
static int h_to(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t st = flare_req_param(req, "status");
    flare_str_t loc = flare_req_query_param(req, "loc");
    int status = 0;
    for (size_t i = 0; i < st.len; i++)
        status = status * 10 + (st.ptr[i] - '0');
    int rc = flare_res_redirect(res, status, loc);
    if (rc == 0)
        return 0;
    /* refused: nothing was sent, the handler still answers, with the reason */
    const char *why = flare_last_error();
    char body[300];
    int n = snprintf(body, sizeof(body), "refused %d: %s", rc, why);
    return flare_res_send(res, 400, FLARE_STR("text/plain"), (flare_str_t){ body, (size_t)n });
}

/* Headers added first go out with the redirect. */
static int h_extra(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    assert_int_equal(flare_res_header(res, FLARE_STR("Cache-Control"), FLARE_STR("no-store")), 0);
    assert_int_equal(flare_res_redirect(res, 303, FLARE_STR("https://example.com/a?b=c")), 0);
    /* once sent: a second answer is refused */
    assert_int_equal(flare_res_redirect(res, 302, FLARE_STR("/x")), FLARE_ESTATE);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    memset(&h, 0, sizeof(h));
    h.app = flare_app_new(&(flare_config_t){ .workers = 1 });
    if (h.app == NULL || flare_get(h.app, "/to/{status}", h_to, NULL) != 0 ||
        flare_post(h.app, "/to/{status}", h_to, NULL) != 0 ||
        flare_get(h.app, "/extra", h_extra, NULL) != 0)
        return -1;
    return harness_start(&h);
}

static int teardown(void **state)
{
    (void)state;
    int rc = harness_stop(&h);
    flare_app_free(h.app);
    return rc;
}

static char *get(const char *method, const char *target)
{
    char req[512];
    snprintf(req, sizeof(req),
             "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
             "Connection: close\r\n\r\n",
             method, target);
    return harness_roundtrip(&h, req);
}

static void test_statuses(void **state)
{
    (void)state;
    static const struct {
        int status;
        const char *line;
    } ok[] = {
        { 301, "HTTP/1.1 301 Moved Permanently\r\n" },
        { 302, "HTTP/1.1 302 Found\r\n" },
        { 303, "HTTP/1.1 303 See Other\r\n" },
        { 307, "HTTP/1.1 307 Temporary Redirect\r\n" },
        { 308, "HTTP/1.1 308 Permanent Redirect\r\n" },
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char target[64];
        snprintf(target, sizeof(target), "/to/%d?loc=/api/todos", ok[i].status);
        char *r = get(i % 2 == 0 ? "GET" : "POST", target);
        if (strncmp(r, ok[i].line, strlen(ok[i].line)) != 0)
            fail_msg("%d: %s", ok[i].status, r);
        assert_non_null(strstr(r, "\r\nLocation: /api/todos\r\n"));
        assert_non_null(strstr(r, "\r\nContent-Type: text/plain; charset=utf-8\r\n"));
        assert_non_null(strstr(r, "\r\nContent-Length: 26\r\n"));
        assert_non_null(strstr(r, "\r\n\r\nRedirecting to /api/todos\n"));
        free(r);
    }
    /* HEAD: the same head, no body */
    char *r = get("HEAD", "/to/308?loc=/b");
    assert_non_null(strstr(r, "HTTP/1.1 308 Permanent Redirect\r\n"));
    assert_non_null(strstr(r, "\r\nLocation: /b\r\n"));
    const char *end = strstr(r, "\r\n\r\n");
    assert_non_null(end);
    assert_string_equal(end, "\r\n\r\n");
    free(r);
    /* other headers stay, a full URL is sent as given */
    r = get("GET", "/extra");
    assert_non_null(strstr(r, "HTTP/1.1 303 See Other\r\n"));
    assert_non_null(strstr(r, "\r\nLocation: https://example.com/a?b=c\r\n"));
    assert_non_null(strstr(r, "\r\nCache-Control: no-store\r\n"));
    free(r);
}

static void test_refused(void **state)
{
    (void)state;
    static const struct {
        const char *target, *why;
    } bad[] = {
        { "/to/200?loc=/a", "status 200 is not 301, 302, 303, 307 or 308" },
        { "/to/300?loc=/a", "status 300" },
        { "/to/304?loc=/a", "status 304" },
        { "/to/0?loc=/a", "status 0" },
        { "/to/302", "location is empty" },
        { "/to/302?loc=", "location is empty" },
        /* a header injection attempt: %0d%0a decoded by the query parser */
        { "/to/302?loc=/a%0d%0aSet-Cookie:%20x=1", "CR, LF" },
        { "/to/302?loc=/a%0aX:%20y", "CR, LF" },
        { "/to/302?loc=/a%00b", "CR, LF, NUL" },
        { "/to/302?loc=/a%09b", "control" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *r = get("GET", bad[i].target);
        if (strncmp(r, "HTTP/1.1 400 ", 13) != 0 || strstr(r, "refused -2: ") == NULL ||
            strstr(r, bad[i].why) == NULL)
            fail_msg("%s: %s", bad[i].target, r);
        assert_null(strstr(r, "Location"));
        assert_null(strstr(r, "Set-Cookie"));
        free(r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_statuses),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests_name("redirect", tests, setup, teardown);
}
