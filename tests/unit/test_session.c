/* web/session: the memory store directly, then the middleware over sockets
 * (cookie flow, regeneration, logout, expiry, tampered ids). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <flare/session.h>

#include "harness.h"

static harness_t h;

typedef struct {
    int rc;
    char data[64];
    size_t len;
} got_t;

static void got(void *ctx, int rc, flare_str_t data)
{
    got_t *g = ctx;
    g->rc = rc;
    g->len = data.len < sizeof(g->data) ? data.len : sizeof(g->data);
    if (g->len > 0)
        memcpy(g->data, data.ptr, g->len);
}

static void test_memory_store(void **state)
{
    (void)state;
    flare_session_store_t st;
    assert_int_equal(flare_session_memory_store(64, &st), 0);
    got_t g = { 0 };
    st.load(st.self, NULL, FLARE_STR("nope"), got, &g);
    assert_int_equal(g.rc, FLARE_ENOTFOUND);
    assert_int_equal(st.save(st.self, NULL, FLARE_STR("id1"), FLARE_STR("hello"), 60), 0);
    st.load(st.self, NULL, FLARE_STR("id1"), got, &g);
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.len, 5);
    assert_memory_equal(g.data, "hello", 5);
    assert_int_equal(st.save(st.self, NULL, FLARE_STR("id1"), FLARE_STR("bye"), 60), 0);
    st.load(st.self, NULL, FLARE_STR("id1"), got, &g);
    assert_memory_equal(g.data, "bye", 3);
    st.remove(st.self, NULL, FLARE_STR("id1"));
    st.load(st.self, NULL, FLARE_STR("id1"), got, &g);
    assert_int_equal(g.rc, FLARE_ENOTFOUND);
    /* a ttl of 0 is already expired */
    assert_int_equal(st.save(st.self, NULL, FLARE_STR("gone"), FLARE_STR("x"), 0), 0);
    st.load(st.self, NULL, FLARE_STR("gone"), got, &g);
    assert_int_equal(g.rc, FLARE_ENOTFOUND);
    /* bounded: many more than max_sessions still works, recent ones stay */
    char id[32];
    for (int i = 0; i < 2000; i++) {
        int n = snprintf(id, sizeof(id), "s%d", i);
        assert_int_equal(st.save(st.self, NULL, (flare_str_t){ id, (size_t)n }, FLARE_STR("v"),
                                 60 + (unsigned)i),
                         0);
    }
    st.load(st.self, NULL, FLARE_STR("s1999"), got, &g);
    assert_int_equal(g.rc, 0);
    assert_int_equal(st.save(st.self, NULL, FLARE_STR(""), FLARE_STR("v"), 60), FLARE_EINVAL);
    st.destroy(st.self);
}

static int h_login(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    assert_int_equal(flare_session_regenerate(req), 0);
    assert_int_equal(flare_session_set(req, "user", flare_req_body(req)), 0);
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("in"));
}

static int h_me(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t u = flare_session_get(req, "user");
    if (u.ptr == NULL)
        return flare_res_send(res, 401, FLARE_STR("text/plain"), FLARE_STR("anonymous"));
    return flare_res_send(res, 200, FLARE_STR("text/plain"), u);
}

static int h_logout(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    assert_int_equal(flare_session_destroy(req), 0);
    return flare_res_send(res, 204, FLARE_STR_NULL, FLARE_STR_NULL);
}

static int setup(void **state)
{
    (void)state;
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 2;
    h.app = flare_app_new(&cfg);
    flare_middleware_t m;
    flare_session_config_t bad = { .cookie_name = "bad name" };
    assert_int_equal(flare_sessions(h.app, &bad, &m), FLARE_EINVAL);
    flare_session_config_t sc = { .cookie_name = "sid", .absolute_timeout = 2 };
    assert_int_equal(flare_sessions(h.app, &sc, &m), 0);
    assert_int_equal(flare_use(h.app, &m), 0);
    assert_int_equal(flare_post(h.app, "/login", h_login, NULL), 0);
    assert_int_equal(flare_get(h.app, "/me", h_me, NULL), 0);
    assert_int_equal(flare_post(h.app, "/logout", h_logout, NULL), 0);
    return harness_start(&h);
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
    return 0;
}

/* Extracts the sid cookie value from a response into out (33 bytes). */
static bool sid_of(const char *resp, char *out)
{
    const char *p = strstr(resp, "Set-Cookie: sid=");
    if (p == NULL)
        return false;
    p += 16;
    size_t n = strcspn(p, ";\r");
    if (n != 32)
        return false;
    memcpy(out, p, 32);
    out[32] = '\0';
    return true;
}

static char *req_with(const char *method, const char *path, const char *sid, const char *body)
{
    char buf[512];
    snprintf(
        buf, sizeof(buf),
        "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%s%s%sContent-Length: %zu\r\n\r\n%s",
        method, path, sid ? "Cookie: theme=dark; sid=" : "", sid ? sid : "", sid ? "\r\n" : "",
        strlen(body), body);
    return harness_roundtrip(&h, buf);
}

static void test_session_flow(void **state)
{
    (void)state;
    char *r = req_with("GET", "/me", NULL, "");
    assert_non_null(strstr(r, "HTTP/1.1 401"));
    assert_null(strstr(r, "Set-Cookie")); /* nothing stored: no cookie */
    free(r);

    char sid[33], sid2[33];
    r = req_with("POST", "/login", NULL, "alice");
    assert_true(sid_of(r, sid));
    assert_non_null(strstr(r, "; Path=/"));
    assert_non_null(strstr(r, "; HttpOnly"));
    assert_non_null(strstr(r, "; SameSite=Lax"));
    assert_non_null(strstr(r, "; Max-Age=2"));
    free(r);

    r = req_with("GET", "/me", sid, "");
    assert_non_null(strstr(r, "HTTP/1.1 200 OK"));
    assert_non_null(strstr(r, "\r\n\r\nalice"));
    assert_null(strstr(r, "Set-Cookie")); /* unchanged: no new cookie */
    free(r);

    /* login again: a new id (fixation defence), the old one is gone */
    r = req_with("POST", "/login", sid, "bob");
    assert_true(sid_of(r, sid2));
    assert_string_not_equal(sid, sid2);
    free(r);
    r = req_with("GET", "/me", sid, "");
    assert_non_null(strstr(r, "HTTP/1.1 401"));
    free(r);
    r = req_with("GET", "/me", sid2, "");
    assert_non_null(strstr(r, "\r\n\r\nbob"));
    free(r);

    /* a forged or malformed id is just no session */
    r = req_with("GET", "/me", "0123456789abcdef0123456789abcdef", "");
    assert_non_null(strstr(r, "HTTP/1.1 401"));
    free(r);
    r = req_with("GET", "/me", "../../etc/passwd", "");
    assert_non_null(strstr(r, "HTTP/1.1 401"));
    free(r);

    /* logout clears it */
    r = req_with("POST", "/logout", sid2, "");
    assert_non_null(strstr(r, "Set-Cookie: sid=; Path=/; Max-Age=0"));
    free(r);
    r = req_with("GET", "/me", sid2, "");
    assert_non_null(strstr(r, "HTTP/1.1 401"));
    free(r);
}

static void test_session_absolute_expiry(void **state)
{
    (void)state;
    char sid[33];
    char *r = req_with("POST", "/login", NULL, "carol");
    assert_true(sid_of(r, sid));
    free(r);
    sleep(3); /* absolute timeout 2 s */
    r = req_with("GET", "/me", sid, "");
    assert_non_null(strstr(r, "HTTP/1.1 401"));
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_store),
        cmocka_unit_test(test_session_flow),
        cmocka_unit_test(test_session_absolute_expiry),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
