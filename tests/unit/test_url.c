/* The client's URL parser (client/url.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "client/url.h"

static void assert_view(flare_str_t v, const char *want)
{
    assert_int_equal(v.len, strlen(want));
    assert_memory_equal(v.ptr, want, v.len);
}

static void test_good(void **state)
{
    (void)state;
    flare_url_t u;
    const char *why;
    assert_int_equal(flare__url_parse("http://example.com/a/b?x=1#frag", &u, &why), 0);
    assert_false(u.tls);
    assert_view(u.host, "example.com");
    assert_int_equal(u.port, 80);
    assert_view(u.target, "/a/b?x=1");
    assert_view(u.authority, "example.com");
    assert_int_equal(flare__url_parse("HTTPS://127.0.0.1:8443", &u, &why), 0);
    assert_true(u.tls);
    assert_int_equal(u.port, 8443);
    assert_view(u.target, "/");
    assert_view(u.authority, "127.0.0.1:8443");
    assert_int_equal(flare__url_parse("https://[::1]:9000/p", &u, &why), 0);
    assert_true(u.ip6);
    assert_view(u.host, "::1");
    assert_int_equal(u.port, 9000);
    assert_view(u.authority, "[::1]:9000");
    assert_int_equal(flare__url_parse("http://h?q=1", &u, &why), 0);
    assert_view(u.target, "?q=1");
    assert_int_equal(flare__url_parse("http://h#f", &u, &why), 0);
    assert_view(u.target, "/");
}

static void resolves(const char *base, const char *ref, const char *want)
{
    char out[256];
    int n = flare__url_resolve(base, ref, out, sizeof(out));
    if (want == NULL) {
        if (n != -1)
            fail_msg("%s + %s: got %s, want an error", base, ref, out);
        return;
    }
    if (n < 0 || strcmp(out, want) != 0 || (size_t)n != strlen(want))
        fail_msg("%s + %s: got %s (%d), want %s", base, ref, n < 0 ? "(error)" : out, n, want);
}

/* RFC 3986 5.4's examples (those an http client meets), and the edges. */
static void test_resolve(void **state)
{
    (void)state;
    const char *b = "http://a/b/c/d;p?q";
    resolves(b, "g", "http://a/b/c/g");
    resolves(b, "./g", "http://a/b/c/g");
    resolves(b, "g/", "http://a/b/c/g/");
    resolves(b, "/g", "http://a/g");
    resolves(b, "//g", "http://g");
    resolves(b, "?y", "http://a/b/c/d;p?y");
    resolves(b, "g?y", "http://a/b/c/g?y");
    resolves(b, "#s", "http://a/b/c/d;p?q");
    resolves(b, "g#s", "http://a/b/c/g");
    resolves(b, "", "http://a/b/c/d;p?q");
    resolves(b, ".", "http://a/b/c/");
    resolves(b, "./", "http://a/b/c/");
    resolves(b, "..", "http://a/b/");
    resolves(b, "../", "http://a/b/");
    resolves(b, "../g", "http://a/b/g");
    resolves(b, "../..", "http://a/");
    resolves(b, "../../g", "http://a/g");
    resolves(b, "../../../g", "http://a/g");
    resolves(b, "../../../../g", "http://a/g");
    resolves(b, "/./g", "http://a/g");
    resolves(b, "/../g", "http://a/g");
    resolves(b, "g.", "http://a/b/c/g.");
    resolves(b, "..g", "http://a/b/c/..g");
    resolves(b, "./../g", "http://a/b/g");
    resolves(b, "./g/.", "http://a/b/c/g/");
    resolves(b, "g/./h", "http://a/b/c/g/h");
    resolves(b, "g/../h", "http://a/b/c/h");
    resolves(b, "g?y/./x", "http://a/b/c/g?y/./x");
    /* absolute references, schemes and ports */
    resolves(b, "https://x.test:8443/p?q#f", "https://x.test:8443/p?q");
    resolves(b, "HTTP://X/", "HTTP://X/");
    resolves("https://h:444/a/b", "//k/z", "https://k/z");
    resolves("https://h:444/a/b", "/z", "https://h:444/z");
    resolves("http://[::1]:8080/a/b", "c", "http://[::1]:8080/a/c");
    resolves("http://h", "x", "http://h/x");
    resolves("http://h?q", "?r", "http://h/?r");
    /* refused */
    resolves(b, "ftp://x/", NULL);
    resolves(b, "javascript:alert(1)", NULL);
    resolves(b, "mailto:a@b", NULL);
    resolves(b, "http://user@h/", NULL);
    resolves(b, "/a b", NULL);
    resolves("ftp://a/", "g", NULL);
    char tiny[12];
    assert_int_equal(flare__url_resolve(b, "/long/path", tiny, sizeof(tiny)), -1);
}

static void test_bad(void **state)
{
    (void)state;
    const char *bad[] = {
        "",
        "ftp://h/",
        "http://",
        "http:///path",
        "http://user:pw@h/",
        "http://h:0/",
        "http://h:65536/",
        "http://h:/",
        "http://h:8x/",
        "http://h h/",
        "http://h/a b",
        "http://h/\r\nX: y",
        "http://[::1/",
        "http://[]/",
        "http://[::1]x/",
        "http://[g::1]/",
        "http://ex%41mple.com/",
        "//h/",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        flare_url_t u;
        const char *why = NULL;
        if (flare__url_parse(bad[i], &u, &why) != -1)
            fail_msg("accepted \"%s\"", bad[i]);
        assert_non_null(why);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_good), cmocka_unit_test(test_bad),
                                        cmocka_unit_test(test_resolve) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
