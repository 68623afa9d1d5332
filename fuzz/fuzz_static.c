/* libFuzzer target: the pure parts of static file serving.
 *
 * The first byte selects what the rest of the input (the payload) is:
 *   'p'  a static URL path: flare__static_path, with and without dotfiles;
 *   'r'  a Range value: flare__range_parse; "r<size>\n<value>" takes the
 *        size from the input, and every value is also tried against a table
 *        of sizes (0, 1, 10, ..., UINT64_MAX) and its own length;
 *   'e'  "<etag>\n<list>" (or a list alone, against "\"xyzzy\""):
 *        flare__etag_match, strong and weak;
 *   'g'  an Accept-Encoding value: flare__accepts_gzip;
 *   'd'  an HTTP-date: flare_http_date_parse, and flare__format_http_date;
 *   'm'  a file name: flare_mime_type;
 *   anything else: the payload goes through all of the above.
 * Checked (abort() on violation):
 *   - path: the result equals a naive reference (decode everything, split on
 *     '/', drop empty and "." segments; 400 for a bad escape, NUL or "..",
 *     404 for a dot segment without dotfiles); the output is NUL-terminated,
 *     no longer than the input, holds no NUL, "..", ".", empty segment or
 *     leading/trailing '/'; dotfiles only widens what is accepted; feeding
 *     the output back (with '%' escaped as %25) gives the same output;
 *   - range: the result equals a split-on-commas reference; on
 *     FLARE__RANGE_ONE, len > 0 and first + len <= size (no overflow);
 *     outputs are untouched otherwise;
 *   - etag: "*" always matches, "" never; a strong match is a weak match; a
 *     match means the list holds the tag or "*" and stays a match with more
 *     elements appended; a well-formed tag matches itself, and its W/ form
 *     only weakly;
 *   - gzip: acceptance needs "gzip" or "*"; appending ", gzip;q=0" always
 *     refuses and ", gzip" always accepts; letter case does not matter;
 *   - dates: a parsed date formats (IMF-fixdate) and parses back to the same
 *     time_t (years 0000-9999, all the formatter writes); an IMF-fixdate
 *     input formats back to itself apart from the day name (except for
 *     second 60); every time_t of years 0000-9999 taken from the input
 *     round-trips through format and parse; a date built from input bytes
 *     as fields (day 0-39, hour 0-29, ...) in any of the three forms is
 *     accepted exactly when it is a real date, at the instant an
 *     independent reference computes;
 *   - mime: the type never depends on letter case or a leading directory,
 *     is application/octet-stream without an extension, and name + ".html"
 *     is HTML.
 * Every parser reads a malloc'd buffer of exactly its input's size, so ASan
 * sees any read past the end. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/clock.h"
#include "flare/static.h"
#include "web/static_parse.h"

#define CHECK(x)     \
    do {             \
        if (!(x))    \
            abort(); \
    } while (0)

/* An exact-size heap copy of a + b (either may be empty). */
static char *joindup(const char *a, size_t na, const char *b, size_t nb)
{
    char *p = malloc(na + nb != 0 ? na + nb : 1);
    CHECK(p != NULL);
    if (na > 0)
        memcpy(p, a, na);
    if (nb > 0)
        memcpy(p + na, b, nb);
    return p;
}

static int hexv(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* ---- paths ------------------------------------------------------------------ */

enum { REF_BAD400 = 1, REF_DOT404 = 2 };

/* The obvious way: decode all, then look at the segments. Returns a mask of
 * the errors present; when 0, out/olen is the expected path. */
static int ref_path(const char *raw, size_t n, bool dotfiles, char *out, size_t *olen)
{
    char *dec = malloc(n + 1);
    CHECK(dec != NULL);
    size_t m = 0;
    int errs = 0;
    for (size_t i = 0; i < n; i++) {
        char c = raw[i];
        if (c == '%') {
            if (i + 2 < n && hexv((unsigned char)raw[i + 1]) >= 0 &&
                hexv((unsigned char)raw[i + 2]) >= 0) {
                c = (char)(hexv((unsigned char)raw[i + 1]) * 16 + hexv((unsigned char)raw[i + 2]));
                i += 2;
            } else {
                errs |= REF_BAD400;
            }
        }
        if (c == '\0')
            errs |= REF_BAD400;
        dec[m++] = c;
    }
    size_t o = 0, start = 0;
    for (size_t i = 0; i <= m; i++) {
        if (i < m && dec[i] != '/')
            continue;
        size_t len = i - start;
        const char *s = dec + start;
        start = i + 1;
        if (len == 0 || (len == 1 && s[0] == '.'))
            continue;
        if (len == 2 && s[0] == '.' && s[1] == '.')
            errs |= REF_BAD400;
        else if (s[0] == '.' && !dotfiles)
            errs |= REF_DOT404;
        if (o > 0)
            out[o++] = '/';
        memcpy(out + o, s, len);
        o += len;
    }
    *olen = o;
    free(dec);
    return errs;
}

/* Runs flare__static_path on an exact-size copy, output into exactly
 * n + 1 bytes. Returns the status; *out is malloc'd (caller frees). */
static int run_path(const char *raw, size_t n, bool dotfiles, char **out, size_t *olen, bool *dir)
{
    char *in = joindup(raw, n, NULL, 0);
    *out = malloc(n + 1);
    CHECK(*out != NULL);
    *olen = (size_t)-1;
    int rc = flare__static_path((flare_str_t){ in, n }, *out, olen, dir, dotfiles);
    free(in);
    return rc;
}

static void check_path_once(const char *raw, size_t n, bool dotfiles, int *rc_out, char **out_out,
                            size_t *olen_out)
{
    char *out;
    size_t olen;
    bool dir = !(n > 0 && raw[n - 1] == '/');
    int rc = run_path(raw, n, dotfiles, &out, &olen, &dir);
    CHECK(dir == (n > 0 && raw[n - 1] == '/'));

    char *ref = malloc(n + 1);
    CHECK(ref != NULL);
    size_t rlen;
    int errs = ref_path(raw, n, dotfiles, ref, &rlen);
    if (rc == 0) {
        CHECK(errs == 0);
        CHECK(olen <= n && out[olen] == '\0' && memchr(out, '\0', olen) == NULL);
        CHECK(olen == rlen && memcmp(out, ref, olen) == 0);
        CHECK(olen == 0 || (out[0] != '/' && out[olen - 1] != '/'));
        /* segment by segment */
        size_t start = 0;
        for (size_t i = 0; i <= olen; i++) {
            if (i < olen && out[i] != '/')
                continue;
            if (olen > 0) {
                size_t len = i - start;
                CHECK(len > 0);
                CHECK(!(len == 1 && out[start] == '.'));
                CHECK(!(len == 2 && out[start] == '.' && out[start + 1] == '.'));
                CHECK(dotfiles || out[start] != '.');
            }
            start = i + 1;
        }
        /* idempotent: the output, with '%' escaped, decodes to itself */
        size_t pct = 0;
        for (size_t i = 0; i < olen; i++)
            pct += out[i] == '%';
        char *esc = malloc(olen + 2 * pct + 1);
        CHECK(esc != NULL);
        size_t e = 0;
        for (size_t i = 0; i < olen; i++) {
            if (out[i] == '%') {
                memcpy(esc + e, "%25", 3);
                e += 3;
            } else {
                esc[e++] = out[i];
            }
        }
        char *again;
        size_t alen;
        bool adir = true;
        CHECK(run_path(esc, e, dotfiles, &again, &alen, &adir) == 0);
        CHECK(!adir && alen == olen && memcmp(again, out, olen + 1) == 0);
        free(again);
        free(esc);
    } else if (rc == 400) {
        CHECK(errs & REF_BAD400);
    } else {
        CHECK(rc == 404 && !dotfiles && (errs & REF_DOT404));
    }
    free(ref);
    *rc_out = rc;
    *out_out = out;
    *olen_out = olen;
}

static void check_path(const char *raw, size_t n)
{
    int rc_no, rc_yes;
    char *out_no, *out_yes;
    size_t len_no, len_yes;
    check_path_once(raw, n, false, &rc_no, &out_no, &len_no);
    check_path_once(raw, n, true, &rc_yes, &out_yes, &len_yes);
    /* dotfiles only turns 404s into something else */
    CHECK(rc_yes != 404);
    if (rc_no == 0)
        CHECK(rc_yes == 0 && len_yes == len_no && memcmp(out_yes, out_no, len_no) == 0);
    if (rc_no == 400)
        CHECK(rc_yes == 400);
    free(out_no);
    free(out_yes);
}

/* ---- ranges ----------------------------------------------------------------- */

static uint64_t sat_digits(const char *s, size_t n, bool *ok)
{
    uint64_t x = 0;
    *ok = n > 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            *ok = false;
            return 0;
        }
        unsigned d = (unsigned)(s[i] - '0');
        x = x > (UINT64_MAX - d) / 10 ? UINT64_MAX : x * 10 + d;
    }
    return x;
}

/* RFC 9110 section 14.1.2, written differently: split on ',', trim OWS,
 * skip empty elements, every element a range-spec or the field is ignored. */
static int ref_range(const char *v, size_t n, uint64_t size, uint64_t *first, uint64_t *len)
{
    if (n < 6 || strncasecmp(v, "bytes=", 6) != 0 || size == 0)
        return FLARE__RANGE_NONE;
    size_t i = 6;
    unsigned specs = 0, sat = 0;
    uint64_t f = 0, l = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && v[j] != ',')
            j++;
        size_t a = i, b = j;
        while (a < b && is_ows(v[a]))
            a++;
        while (b > a && is_ows(v[b - 1]))
            b--;
        i = j + 1;
        if (a == b)
            continue;
        const char *dash = memchr(v + a, '-', b - a);
        if (dash == NULL)
            return FLARE__RANGE_NONE;
        size_t d = (size_t)(dash - v);
        bool ok1, ok2;
        if (d == a) {
            uint64_t suffix = sat_digits(v + a + 1, b - a - 1, &ok2);
            if (!ok2)
                return FLARE__RANGE_NONE;
            specs++;
            if (suffix > 0) {
                sat++;
                f = suffix >= size ? 0 : size - suffix;
                l = size - f;
            }
        } else {
            uint64_t x = sat_digits(v + a, d - a, &ok1);
            uint64_t y = UINT64_MAX;
            if (!ok1)
                return FLARE__RANGE_NONE;
            if (d + 1 < b) {
                y = sat_digits(v + d + 1, b - d - 1, &ok2);
                if (!ok2 || y < x)
                    return FLARE__RANGE_NONE;
            }
            specs++;
            if (x < size) {
                sat++;
                f = x;
                l = (y >= size ? size - 1 : y) - x + 1;
            }
        }
    }
    if (specs == 0)
        return FLARE__RANGE_NONE;
    if (sat == 0)
        return FLARE__RANGE_UNSAT;
    if (specs > 1)
        return FLARE__RANGE_NONE;
    *first = f;
    *len = l;
    return FLARE__RANGE_ONE;
}

static void check_range_size(const char *v, size_t n, uint64_t size)
{
    char *in = joindup(v, n, NULL, 0);
    uint64_t first = 0x1111, len = 0x2222;
    int r = flare__range_parse((flare_str_t){ in, n }, size, &first, &len);
    CHECK(r == FLARE__RANGE_NONE || r == FLARE__RANGE_ONE || r == FLARE__RANGE_UNSAT);
    if (size == 0)
        CHECK(r == FLARE__RANGE_NONE);
    if (r == FLARE__RANGE_ONE) {
        CHECK(len > 0 && first < size && len <= size - first);
    } else {
        CHECK(first == 0x1111 && len == 0x2222);
    }
    uint64_t rf = 0x1111, rl = 0x2222;
    CHECK(ref_range(in, n, size, &rf, &rl) == r);
    CHECK(rf == first && rl == len);
    free(in);
}

static void check_range(const char *p, size_t n)
{
    static const uint64_t sizes[] = {
        0, 1, 2, 5, 10, 100, 1000, 4294967296u, UINT64_MAX - 1, UINT64_MAX
    };
    const char *nl = memchr(p, '\n', n);
    const char *v = p;
    size_t vn = n;
    if (nl != NULL && nl > p) {
        bool ok;
        uint64_t size = sat_digits(p, (size_t)(nl - p), &ok);
        if (ok) {
            v = nl + 1;
            vn = n - (size_t)(nl + 1 - p);
            check_range_size(v, vn, size);
        }
    }
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        check_range_size(v, vn, sizes[i]);
    check_range_size(v, vn, vn);
}

/* ---- entity tags ------------------------------------------------------------ */

static bool match(const char *l, size_t ln, const char *tail, const char *etag, size_t en,
                  bool strong)
{
    size_t tn = tail != NULL ? strlen(tail) : 0;
    char *list = joindup(l, ln, tail, tn);
    char *tag = joindup(etag, en, NULL, 0);
    bool m = flare__etag_match((flare_str_t){ list, ln + tn }, (flare_str_t){ tag, en }, strong);
    free(list);
    free(tag);
    return m;
}

static bool tag_ok(const char *t, size_t n)
{
    if (n < 2 || t[0] != '"' || t[n - 1] != '"')
        return false;
    for (size_t i = 1; i + 1 < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c < 0x21 || c == 0x22 || c == 0x7f)
            return false;
    }
    return true;
}

static void check_etag(const char *p, size_t n)
{
    static const char dflt[] = "\"xyzzy\"";
    const char *nl = memchr(p, '\n', n);
    const char *etag = dflt, *list = p;
    size_t en = sizeof(dflt) - 1, ln = n;
    if (nl != NULL) {
        etag = p;
        en = (size_t)(nl - p);
        list = nl + 1;
        ln = n - en - 1;
    }
    bool ms = match(list, ln, NULL, etag, en, true);
    bool mw = match(list, ln, NULL, etag, en, false);
    CHECK(!ms || mw);
    CHECK(match("*", 1, NULL, etag, en, true) && match("*", 1, NULL, etag, en, false));
    CHECK(!match("", 0, NULL, etag, en, true) && !match("", 0, NULL, etag, en, false));
    if (mw) {
        CHECK(memchr(list, '*', ln) != NULL || (en > 0 && memmem(list, ln, etag, en) != NULL));
        CHECK(match(list, ln, ", *", etag, en, false));
        CHECK(match(list, ln, " ,\t\"zz\" ,", etag, en, false));
    }
    if (ms)
        CHECK(match(list, ln, ",W/\"zz\"", etag, en, true));
    bool wf = match(list, ln, ", *", etag, en, false); /* the list is well-formed */
    CHECK(wf == match(list, ln, ", *", etag, en, true));
    if (tag_ok(etag, en)) {
        CHECK(match(etag, en, NULL, etag, en, true));
        char *w = joindup("W/", 2, etag, en);
        CHECK(match(w, en + 2, NULL, etag, en, false));
        CHECK(!match(w, en + 2, NULL, etag, en, true));
        free(w);
        if (wf) {
            char *tail = joindup(", ", 2, etag, en);
            char *both = joindup(list, ln, tail, en + 2);
            CHECK(match(both, ln + en + 2, NULL, etag, en, true));
            free(both);
            free(tail);
        }
    } else if (!(en == 1 && etag[0] == '*')) {
        /* a malformed tag never equals a well-formed entry */
        CHECK(!match(etag, en, NULL, etag, en, false) || memchr(etag, '*', en) != NULL);
    }
}

/* ---- Accept-Encoding -------------------------------------------------------- */

static bool gz(const char *v, size_t n, const char *tail)
{
    size_t tn = tail != NULL ? strlen(tail) : 0;
    char *s = joindup(v, n, tail, tn);
    bool r = flare__accepts_gzip((flare_str_t){ s, n + tn });
    free(s);
    return r;
}

static bool has_ci(const char *s, size_t n, const char *lower)
{
    size_t k = strlen(lower);
    for (size_t i = 0; i + k <= n; i++) {
        if (strncasecmp(s + i, lower, k) == 0)
            return true;
    }
    return false;
}

static void check_gzip(const char *v, size_t n)
{
    bool r = gz(v, n, NULL);
    if (r)
        CHECK(has_ci(v, n, "gzip") || memchr(v, '*', n) != NULL);
    CHECK(!gz(v, n, ", gzip;q=0"));
    CHECK(!gz(v, n, ",GZIP ; Q=0.000"));
    CHECK(gz(v, n, ", gzip"));
    CHECK(gz(v, n, ",gzip;q=0.001"));
    if (gz(v, n, ", *;q=0"))
        CHECK(r);
    char *up = joindup(v, n, NULL, 0), *low = joindup(v, n, NULL, 0);
    for (size_t i = 0; i < n; i++) {
        if (up[i] >= 'a' && up[i] <= 'z')
            up[i] = (char)(up[i] - 32);
        if (low[i] >= 'A' && low[i] <= 'Z')
            low[i] = (char)(low[i] + 32);
    }
    CHECK(gz(up, n, NULL) == r && gz(low, n, NULL) == r);
    free(up);
    free(low);
}

/* ---- dates ------------------------------------------------------------------ */

#define T_YEAR0     (-62167219200LL) /* 0000-01-01T00:00:00Z */
#define T_YEAR10000 253402300800LL   /* 10000-01-01T00:00:00Z */

static bool parse_date(const char *s, size_t n, time_t *t)
{
    char *in = joindup(s, n, NULL, 0);
    bool ok = flare_http_date_parse((flare_str_t){ in, n }, t) == 0;
    free(in);
    return ok;
}

static void check_roundtrip(time_t t)
{
    char *buf = malloc(29);
    CHECK(buf != NULL);
    flare__format_http_date(buf, t);
    time_t t2 = 0;
    CHECK(parse_date(buf, 29, &t2));
    CHECK(t2 == t);
    free(buf);
}

static bool leap(long y)
{
    return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

/* days from 0000-01-01 to Jan 1 of year y (y >= 0): year 0 is a leap year,
 * so [0, y) holds ceil(y/4) - ceil(y/100) + ceil(y/400) of them */
static long long days_before_year(long long y)
{
    return 365 * y + (y + 3) / 4 - (y + 99) / 100 + (y + 399) / 400;
}

/* A date built from 7 bytes (fields deliberately a little out of range) in
 * one of the three forms: accepted exactly when the fields make a real date
 * and time, and then at the instant a reference computes. */
static void check_fields(const unsigned char *b)
{
    static const char *const wd[] = { "Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed" };
    static const char *const wdl[] = { "Thursday", "Friday",  "Saturday", "Sunday",
                                       "Monday",   "Tuesday", "Wednesday" };
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    int day = b[0] % 40, mon = b[1] % 12, h = b[4] % 30, mi = b[5] % 70, sec = b[6] % 70;
    int form = b[2] % 3;
    long y = (long)((b[2] >> 2 | b[3] << 6) % 10000);
    if (form == 1) /* RFC 850: two digits, 00-69 are 20xx */
        y = y % 100 < 70 ? 2000 + y % 100 : 1900 + y % 100;
    int dim = mdays[mon] + (mon == 1 && leap(y));
    bool valid = day >= 1 && day <= dim && h < 24 && mi < 60 && sec <= 60;
    long long days = days_before_year(y) - days_before_year(1970);
    for (int m = 0; m < mon; m++)
        days += mdays[m] + (m == 1 && leap(y));
    days += day - 1;
    long long expect = days * 86400 + h * 3600 + mi * 60 + sec;
    int w = (int)(((days % 7) + 7) % 7);

    char buf[40];
    int len;
    if (form == 0) {
        len = snprintf(buf, sizeof(buf), "%s, %02d %.3s %04ld %02d:%02d:%02d GMT", wd[w], day,
                       months + 3 * mon, y, h, mi, sec);
    } else if (form == 1) {
        len = snprintf(buf, sizeof(buf), "%s, %02d-%.3s-%02ld %02d:%02d:%02d GMT", wdl[w], day,
                       months + 3 * mon, y % 100, h, mi, sec);
    } else {
        len = snprintf(buf, sizeof(buf), "%s %.3s %2d %02d:%02d:%02d %04ld", wd[w],
                       months + 3 * mon, day, h, mi, sec, y);
    }
    CHECK(len > 0 && (size_t)len < sizeof(buf));
    time_t t = 0;
    bool ok = parse_date(buf, (size_t)len, &t);
    CHECK(ok == valid);
    if (ok)
        CHECK((long long)t == expect);
}

static void check_date(const char *s, size_t n)
{
    time_t t = 0;
    if (parse_date(s, n, &t)) {
        /* a 4-digit (or 19xx/20xx) year, day 1-31, hh:mm:ss up to 23:59:60 */
        CHECK((long long)t >= T_YEAR0 && (long long)t <= T_YEAR10000);
        if ((long long)t < T_YEAR10000)
            check_roundtrip(t);
        if (n == 29 && s[3] == ',' && memcmp(s + 23, "60", 2) != 0) {
            /* a valid IMF-fixdate is already canonical (apart from the day
             * name, which is not checked) */
            char *buf = malloc(29);
            CHECK(buf != NULL);
            flare__format_http_date(buf, t);
            CHECK(memcmp(buf + 3, s + 3, 26) == 0);
            free(buf);
        }
    }
    /* every time_t the formatter can write parses back */
    if (n >= 8) {
        uint64_t x;
        memcpy(&x, s, 8);
        long long span = T_YEAR10000 - T_YEAR0;
        check_roundtrip((time_t)(T_YEAR0 + (long long)(x % (uint64_t)span)));
        check_fields((const unsigned char *)s);
    }
}

/* ---- MIME types ------------------------------------------------------------- */

static flare_str_t mime(const char *a, size_t na, const char *b)
{
    char *s = joindup(a, na, b, b != NULL ? strlen(b) : 0);
    flare_str_t m = flare_mime_type((flare_str_t){ s, na + (b != NULL ? strlen(b) : 0) });
    free(s);
    return m;
}

static bool same(flare_str_t a, flare_str_t b)
{
    return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

static void check_mime(const char *name, size_t n)
{
    flare_str_t m = mime(name, n, NULL);
    CHECK(m.ptr != NULL && m.len > 0 && strlen(m.ptr) == m.len);
    CHECK(memchr(m.ptr, '/', m.len) != NULL);
    if (memchr(name, '.', n) == NULL)
        CHECK(same(m, FLARE_STR("application/octet-stream")));
    char *up = joindup(name, n, NULL, 0);
    for (size_t i = 0; i < n; i++) {
        if (up[i] >= 'a' && up[i] <= 'z')
            up[i] = (char)(up[i] - 32);
    }
    CHECK(same(mime(up, n, NULL), m));
    free(up);
    char *sub = joindup("dir.x/", 6, name, n);
    CHECK(same(mime(sub, n + 6, NULL), m));
    free(sub);
    CHECK(same(mime(name, n, ".html"), FLARE_STR("text/html; charset=utf-8")));
    CHECK(same(mime(name, n, ".JS"), FLARE_STR("text/javascript; charset=utf-8")));
    CHECK(same(mime(name, n, "/"), FLARE_STR("application/octet-stream")));
    CHECK(same(mime(name, n, "."), FLARE_STR("application/octet-stream")));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) {
        check_path("", 0);
        check_range("", 0);
        check_etag("", 0);
        check_gzip("", 0);
        check_date("", 0);
        check_mime("", 0);
        return 0;
    }
    /* Exact-size copy so that ASan sees any read past the end. */
    size_t n = size - 1;
    char *p = joindup((const char *)data + 1, n, NULL, 0);
    switch (data[0]) {
    case 'p':
        check_path(p, n);
        break;
    case 'r':
        check_range(p, n);
        break;
    case 'e':
        check_etag(p, n);
        break;
    case 'g':
        check_gzip(p, n);
        break;
    case 'd':
        check_date(p, n);
        break;
    case 'm':
        check_mime(p, n);
        break;
    default:
        check_path(p, n);
        check_range(p, n);
        check_etag(p, n);
        check_gzip(p, n);
        check_date(p, n);
        check_mime(p, n);
        break;
    }
    free(p);
    return 0;
}
