/* web/session: the memory store directly, then the middleware over sockets
 * (cookie flow, regeneration, logout, expiry, tampered ids). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <flare/session.h>

#include "harness.h"
#include "web/session_mem.h"

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

/* The in-memory store completes at once: done has run when save returns. */
static void saved(void *ctx, int rc)
{
    *(int *)ctx = rc;
}

static int save_sync(flare_session_store_t *st, flare_str_t id, flare_str_t data, unsigned ttl)
{
    int rc = 1;
    st->save(st->self, NULL, id, data, ttl, saved, &rc);
    assert_int_not_equal(rc, 1);
    return rc;
}

static void test_memory_store(void **state)
{
    (void)state;
    flare_session_store_t st;
    assert_int_equal(flare_session_memory_store(64, &st), 0);
    got_t g = { 0 };
    st.load(st.self, NULL, FLARE_STR("nope"), 60, got, &g);
    assert_int_equal(g.rc, FLARE_ENOTFOUND);
    assert_int_equal(save_sync(&st, FLARE_STR("id1"), FLARE_STR("hello"), 60), 0);
    st.load(st.self, NULL, FLARE_STR("id1"), 60, got, &g);
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.len, 5);
    assert_memory_equal(g.data, "hello", 5);
    assert_int_equal(save_sync(&st, FLARE_STR("id1"), FLARE_STR("bye"), 60), 0);
    st.load(st.self, NULL, FLARE_STR("id1"), 60, got, &g);
    assert_memory_equal(g.data, "bye", 3);
    st.remove(st.self, NULL, FLARE_STR("id1"), NULL, NULL);
    st.load(st.self, NULL, FLARE_STR("id1"), 60, got, &g);
    assert_int_equal(g.rc, FLARE_ENOTFOUND);
    /* a ttl of 0 is already expired */
    assert_int_equal(save_sync(&st, FLARE_STR("gone"), FLARE_STR("x"), 0), 0);
    st.load(st.self, NULL, FLARE_STR("gone"), 60, got, &g);
    assert_int_equal(g.rc, FLARE_ENOTFOUND);
    /* bounded: many more than max_sessions still works, recent ones stay */
    char id[32];
    for (int i = 0; i < 2000; i++) {
        int n = snprintf(id, sizeof(id), "s%d", i);
        assert_int_equal(
            save_sync(&st, (flare_str_t){ id, (size_t)n }, FLARE_STR("v"), 60 + (unsigned)i), 0);
    }
    st.load(st.self, NULL, FLARE_STR("s1999"), 60, got, &g);
    assert_int_equal(g.rc, 0);
    assert_int_equal(save_sync(&st, FLARE_STR(""), FLARE_STR("v"), 60), FLARE_EINVAL);
    st.destroy(st.self);
}

static void test_memory_store_bounds(void **state)
{
    (void)state;
    flare_session_store_t st;
    assert_int_equal(flare_session_memory_store(SIZE_MAX, &st), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "max_sessions"));
    assert_int_equal(flare_session_memory_store(((size_t)1 << 24) + 1, &st), FLARE_EINVAL);
    assert_int_equal(flare_session_memory_store(0, NULL), FLARE_EINVAL);
    assert_int_equal(flare_session_memory_store(16, &st), 0);
    /* a data length no allocation can hold: refused, not wrapped */
    assert_int_equal(save_sync(&st, FLARE_STR("id"), (flare_str_t){ "x", SIZE_MAX - 8 }, 60),
                     FLARE_ETOOBIG);
    st.destroy(st.self);
}

static size_t load_ok(flare_session_store_t *st, const char *prefix, int n)
{
    size_t found = 0;
    char id[32];
    for (int i = 0; i < n; i++) {
        int k = snprintf(id, sizeof(id), "%s%d", prefix, i);
        got_t g = { 0 };
        st->load(st->self, NULL, (flare_str_t){ id, (size_t)k }, 60, got, &g);
        found += g.rc == 0;
    }
    return found;
}

/* Saves n sessions and checks that no save examined more than the sweep
 * bound, whatever the store holds: the work is linear in the saves. */
static void save_many(flare_session_store_t *st, const char *prefix, int n, unsigned ttl)
{
    char id[32];
    size_t count;
    uint64_t before, after;
    flare__session_mem_stats(st->self, &count, &before);
    uint64_t start = before;
    for (int i = 0; i < n; i++) {
        int k = snprintf(id, sizeof(id), "%s%d", prefix, i);
        assert_int_equal(save_sync(st, (flare_str_t){ id, (size_t)k }, FLARE_STR("data"), ttl), 0);
        flare__session_mem_stats(st->self, &count, &after);
        assert_true(after - before <= FLARE__SESSION_SWEEP_STEP + FLARE__SESSION_SWEEP_FULL);
        before = after;
    }
    assert_true(after - start <=
                (uint64_t)n * (FLARE__SESSION_SWEEP_STEP + FLARE__SESSION_SWEEP_FULL));
}

/* 100,000 expired sessions go through a store of 16,000 while 1,000 live
 * ones stay: expired sessions are reclaimed as saves go, never by a scan
 * of the whole store. */
static void test_memory_store_expiry_many(void **state)
{
    (void)state;
    flare_session_store_t st;
    assert_int_equal(flare_session_memory_store(16000, &st), 0);
    size_t max = 16 * flare__session_mem_max_per_shard(st.self), count;
    uint64_t visited;
    save_many(&st, "live", 1000, 3600);
    save_many(&st, "dead", 100000, 0); /* ttl 0: expired at once */
    flare__session_mem_stats(st.self, &count, &visited);
    assert_true(count <= max);
    assert_true(count < 1000 + 2000); /* the expired ones did not pile up */
    assert_int_equal(load_ok(&st, "live", 1000), 1000);
    assert_int_equal(load_ok(&st, "dead", 100000), 0);
    /* the store keeps working once they are gone */
    save_many(&st, "new", 1000, 3600);
    assert_int_equal(load_ok(&st, "new", 1000), 1000);
    assert_int_equal(load_ok(&st, "live", 1000), 1000);
    st.destroy(st.self);
}

/* A store full of live sessions: each save into a full shard drops one
 * (the examined one closest to expiry), so the store stays within its
 * bound and the newest sessions are there, at a bounded cost per save
 * (the purge used to rescan the shard once per dropped session). */
static void test_memory_store_full_bounded(void **state)
{
    (void)state;
    flare_session_store_t st;
    assert_int_equal(flare_session_memory_store(1600, &st), 0);
    size_t per = flare__session_mem_max_per_shard(st.self), count;
    uint64_t visited;
    save_many(&st, "s", 50000, 3600);
    flare__session_mem_stats(st.self, &count, &visited);
    assert_true(count <= 16 * per);
    assert_true(count >= 16 * per - 16); /* full, not emptied */
    /* the last save of each shard is always there */
    got_t g = { 0 };
    st.load(st.self, NULL, FLARE_STR("s49999"), 60, got, &g);
    assert_int_equal(g.rc, 0);
    /* the session closest to expiry goes first: with 2 per shard, "short"
     * is dropped once its shard holds another and a third arrives, while
     * the long-lived ones saved after it stay within the bound */
    st.destroy(st.self);
    assert_int_equal(flare_session_memory_store(16, &st), 0);
    assert_int_equal(flare__session_mem_max_per_shard(st.self), 2);
    assert_int_equal(save_sync(&st, FLARE_STR("short"), FLARE_STR("v"), 100), 0);
    char id[32];
    for (int i = 0; i < 100; i++) {
        int k = snprintf(id, sizeof(id), "long%d", i);
        assert_int_equal(save_sync(&st, (flare_str_t){ id, (size_t)k }, FLARE_STR("v"), 3600), 0);
    }
    g.rc = 0;
    st.load(st.self, NULL, FLARE_STR("short"), 60, got, &g);
    assert_int_equal(g.rc, FLARE_ENOTFOUND);
    flare__session_mem_stats(st.self, &count, &visited);
    assert_int_equal(count, 32);
    st.load(st.self, NULL, FLARE_STR("long99"), 60, got, &g);
    assert_int_equal(g.rc, 0);
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

/* Lengths near SIZE_MAX are refused before any copy (ptr is not read). */
static int h_huge(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    assert_int_equal(flare_session_set(req, "k", FLARE_STR("kept")), 0);
    assert_int_equal(flare_session_set(req, "k", (flare_str_t){ "x", SIZE_MAX - 8 }),
                     FLARE_ETOOBIG);
    assert_int_equal(flare_session_set(req, "k", (flare_str_t){ "x", SIZE_MAX / 2 }), FLARE_ENOMEM);
    flare_str_t v = flare_session_get(req, "k");
    return flare_res_send(res, 200, FLARE_STR("text/plain"), v);
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
    flare_session_config_t bad_secure = { .secure = (flare_session_secure_t)3 };
    assert_int_equal(flare_sessions(h.app, &bad_secure, &m), FLARE_EINVAL);
    flare_session_config_t sc = { .cookie_name = "sid", .absolute_timeout = 2 };
    assert_int_equal(flare_sessions(h.app, &sc, &m), 0);
    assert_int_equal(flare_use(h.app, &m), 0);
    assert_int_equal(flare_post(h.app, "/login", h_login, NULL), 0);
    assert_int_equal(flare_get(h.app, "/me", h_me, NULL), 0);
    assert_int_equal(flare_post(h.app, "/logout", h_logout, NULL), 0);
    assert_int_equal(flare_get(h.app, "/huge", h_huge, NULL), 0);
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
    assert_null(strstr(r, "Secure")); /* plain HTTP: no Secure (over TLS: test_tls.py) */
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

static void test_session_set_huge(void **state)
{
    (void)state;
    char *r = req_with("GET", "/huge", NULL, "");
    assert_non_null(strstr(r, "HTTP/1.1 200 OK"));
    assert_non_null(strstr(r, "\r\n\r\nkept")); /* a refused set leaves the old value */
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
        cmocka_unit_test(test_memory_store_bounds),
        cmocka_unit_test(test_memory_store_expiry_many),
        cmocka_unit_test(test_memory_store_full_bounded),
        cmocka_unit_test(test_session_flow),
        cmocka_unit_test(test_session_set_huge),
        cmocka_unit_test(test_session_absolute_expiry),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
