/* libFuzzer target: the client's URL parser (client/url.h).
 *
 * The input (up to its first NUL) is parsed; on success every view lies
 * inside the input, the host is not empty, the port is not 0, the target
 * starts with '/' or '?' or is the static "/", nothing parsed holds a
 * control byte or a space, and the authority ends where the target
 * begins. On failure the reason is given. flare__url_resolve runs on it as
 * a reference and as a base: a result is always a URL the parser takes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/url.h"

#define CHECK(x)     \
    do {             \
        if (!(x))    \
            abort(); \
    } while (0)

static void inside(flare_str_t v, const char *s, size_t n)
{
    CHECK(v.len == 0 || (v.ptr >= s && v.ptr + v.len <= s + n));
    for (size_t i = 0; i < v.len; i++)
        CHECK((unsigned char)v.ptr[i] > 0x20 && (unsigned char)v.ptr[i] != 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    CHECK(s != NULL);
    memcpy(s, data, size);
    s[size] = '\0';
    size_t n = strlen(s);
    flare_url_t u;
    const char *why = NULL;
    int rc = flare__url_parse(s, &u, &why);
    if (rc == 0) {
        CHECK(u.host.len > 0 && u.port > 0);
        inside(u.host, s, n);
        inside(u.authority, s, n);
        CHECK(u.target.len > 0);
        if (!(u.target.len == 1 && u.target.ptr[0] == '/' &&
              (u.target.ptr < s || u.target.ptr >= s + n)))
            inside(u.target, s, n);
        CHECK(u.target.ptr[0] == '/' || u.target.ptr[0] == '?');
        CHECK(memchr(u.target.ptr, '#', u.target.len) == NULL);
    } else {
        CHECK(rc == -1 && why != NULL);
    }
    /* the input as a redirect's Location against a fixed base, and as a
     * base for a fixed reference: the result, when there is one, is a URL
     * the parser takes, and fits */
    static const char *const bases[] = { "http://a/b/c/d;p?q", "https://[::1]:8443/x" };
    char out[512];
    for (size_t i = 0; i < 2; i++) {
        int r = flare__url_resolve(bases[i], s, out, sizeof(out));
        CHECK(r >= -1 && r < (int)sizeof(out));
        if (r >= 0) {
            CHECK((size_t)r == strlen(out));
            CHECK(flare__url_parse(out, &u, &why) == 0);
        }
    }
    int r = flare__url_resolve(s, "../g/./h?x#y", out, sizeof(out));
    CHECK(r == -1 || (r >= 0 && flare__url_parse(out, &u, &why) == 0));
    free(s);
    return 0;
}
