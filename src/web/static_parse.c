/* The pure parts of static file serving (web/static_parse.h): the request
 * path, Range, entity-tag lists, Accept-Encoding, and HTTP dates
 * (flare_http_date_parse, flare/static.h). Bytes in, result out: no I/O,
 * no allocation (fuzzed by fuzz/fuzz_static.c). */
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"
#include "flare/static.h"
#include "web/static_parse.h"

/* ---- request path, Range, entity tags, Accept-Encoding --------------------- */

int flare__static_path(flare_str_t raw, char *out, size_t *outlen, bool *dir, bool dotfiles)
{
    size_t n = 0, seg = 0; /* seg: where the current segment starts in out */
    *dir = raw.len > 0 && raw.ptr[raw.len - 1] == '/';
    for (size_t i = 0; i <= raw.len; i++) {
        unsigned char ch;
        if (i == raw.len) {
            ch = '/';
        } else if (raw.ptr[i] == '%') {
            int hi = i + 2 < raw.len ? flare__hexval((unsigned char)raw.ptr[i + 1]) : -1;
            int lo = hi >= 0 ? flare__hexval((unsigned char)raw.ptr[i + 2]) : -1;
            if (lo < 0)
                return 400;
            ch = (unsigned char)(hi << 4 | lo);
            i += 2;
            if (ch == 0)
                return 400;
        } else {
            ch = (unsigned char)raw.ptr[i];
            if (ch == 0)
                return 400;
        }
        if (ch != '/') {
            out[n++] = (char)ch;
            continue;
        }
        /* end of a segment: out[seg, n) */
        size_t len = n - seg;
        const char *s = out + seg;
        if (len == 0 || (len == 1 && s[0] == '.')) {
            n = seg; /* dropped */
        } else if (len == 2 && s[0] == '.' && s[1] == '.') {
            return 400;
        } else if (s[0] == '.' && !dotfiles) {
            return 404;
        } else {
            out[n++] = '/';
            seg = n;
        }
    }
    if (n > 0)
        n--; /* the separator after the last segment */
    out[n] = '\0';
    *outlen = n;
    return 0;
}

/* Saturating decimal: digits at *p..end; false when there are none. */
static bool digits(const char **p, const char *end, uint64_t *v)
{
    const char *s = *p;
    uint64_t x = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        unsigned d = (unsigned)(*s - '0');
        x = x > (UINT64_MAX - d) / 10 ? UINT64_MAX : x * 10 + d;
        s++;
    }
    if (s == *p)
        return false;
    *p = s;
    *v = x;
    return true;
}

int flare__range_parse(flare_str_t value, uint64_t size, uint64_t *first, uint64_t *len)
{
    if (value.ptr == NULL) /* (NULL + 0 is undefined) */
        return FLARE__RANGE_NONE;
    const char *p = value.ptr, *end = value.ptr + value.len;
    if (value.len < 6 || strncasecmp(p, "bytes=", 6) != 0 || size == 0)
        return FLARE__RANGE_NONE;
    p += 6;
    unsigned specs = 0, satisfiable = 0;
    uint64_t f = 0, l = 0;
    while (p < end) {
        while (p < end && (flare__is_ows(*p) || *p == ','))
            p++;
        if (p == end)
            break;
        uint64_t a = 0, b = 0; /* set by digits() on every path that reads them */
        bool sat;
        if (*p == '-') { /* suffix-range */
            p++;
            if (!digits(&p, end, &b))
                return FLARE__RANGE_NONE;
            sat = b > 0;
            a = b >= size ? 0 : size - b;
            b = size - 1;
        } else {
            if (!digits(&p, end, &a) || p == end || *p != '-')
                return FLARE__RANGE_NONE;
            p++;
            if (p < end && *p >= '0' && *p <= '9') {
                digits(&p, end, &b);
                if (b < a)
                    return FLARE__RANGE_NONE; /* invalid range-spec: ignore the field */
            } else {
                b = UINT64_MAX;
            }
            sat = a < size;
            if (b >= size)
                b = size - 1;
        }
        while (p < end && flare__is_ows(*p))
            p++;
        if (p < end && *p != ',')
            return FLARE__RANGE_NONE;
        specs++;
        if (sat) {
            satisfiable++;
            f = a;
            l = b - a + 1;
        }
    }
    if (specs == 0)
        return FLARE__RANGE_NONE;
    if (satisfiable == 0)
        return FLARE__RANGE_UNSAT;
    if (specs > 1)
        return FLARE__RANGE_NONE;
    *first = f;
    *len = l;
    return FLARE__RANGE_ONE;
}

bool flare__etag_match(flare_str_t list, flare_str_t etag, bool strong)
{
    if (list.ptr == NULL)
        return false;
    const char *p = list.ptr, *end = list.ptr + list.len;
    bool matched = false;
    unsigned elems = 0;
    while (p < end) {
        while (p < end && (flare__is_ows(*p) || *p == ','))
            p++;
        if (p == end)
            break;
        elems++;
        if (*p == '*') {
            p++;
            matched = true;
        } else {
            bool weak = false;
            if (end - p >= 2 && p[0] == 'W' && p[1] == '/') {
                weak = true;
                p += 2;
            }
            if (p == end || *p != '"')
                return false;
            const char *q = p + 1;
            while (q < end && *q != '"') {
                unsigned char c = (unsigned char)*q;
                if (c < 0x21 || c == 0x7f) /* etagc = %x21 / %x23-7E / obs-text */
                    return false;
                q++;
            }
            if (q == end)
                return false;
            q++; /* the closing quote */
            size_t n = (size_t)(q - p);
            if (!(strong && weak) && n == etag.len && memcmp(p, etag.ptr, n) == 0)
                matched = true;
            p = q;
        }
        while (p < end && flare__is_ows(*p))
            p++;
        if (p < end && *p != ',')
            return false;
    }
    return elems > 0 && matched;
}

bool flare__accepts_gzip(flare_str_t value)
{
    if (value.ptr == NULL)
        return false;
    const char *p = value.ptr, *end = value.ptr + value.len;
    bool gzip = false, star = false, gzip_seen = false;
    while (p < end) {
        while (p < end && (flare__is_ows(*p) || *p == ','))
            p++;
        const char *t = p;
        while (p < end && *p != ',' && *p != ';' && !flare__is_ows(*p))
            p++;
        size_t tlen = (size_t)(p - t);
        /* parameters: only q matters; q=0 (0, 0.0, 0.000) refuses */
        bool refused = false;
        while (p < end && *p != ',') {
            while (p < end && (flare__is_ows(*p) || *p == ';'))
                p++;
            if (end - p >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
                p += 2;
                refused = p < end && *p == '0';
                if (refused) {
                    p++;
                    if (p < end && *p == '.') {
                        p++;
                        while (p < end && *p == '0')
                            p++;
                        refused = p == end || !(*p >= '1' && *p <= '9');
                    }
                }
            }
            while (p < end && *p != ',' && *p != ';')
                p++;
        }
        if (tlen == 4 && strncasecmp(t, "gzip", 4) == 0) {
            gzip_seen = true;
            gzip = !refused;
        } else if (tlen == 1 && t[0] == '*') {
            star = !refused;
        }
    }
    return gzip || (!gzip_seen && star);
}

/* ---- HTTP dates ------------------------------------------------------------ */

static int month_of(const char *s)
{
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    for (int m = 0; m < 12; m++) {
        if (memcmp(s, months + 3 * m, 3) == 0)
            return m;
    }
    return -1;
}

static bool num(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * days_from_civil algorithm) */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static bool hms(const char *s, int *h, int *mi, int *sec)
{
    return num(s, 2, h) && s[2] == ':' && num(s + 3, 2, mi) && s[5] == ':' && num(s + 6, 2, sec) &&
           *h < 24 && *mi < 60 && *sec <= 60;
}

static bool day_name(const char *s, size_t n)
{
    static const char *const names[] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
    static const char *const long_names[] = { "Sunday",   "Monday", "Tuesday", "Wednesday",
                                              "Thursday", "Friday", "Saturday" };
    for (int i = 0; i < 7; i++) {
        if ((n == 3 && memcmp(s, names[i], 3) == 0) ||
            (n == strlen(long_names[i]) && memcmp(s, long_names[i], n) == 0))
            return true;
    }
    return false;
}

static bool date_parse(flare_str_t str, time_t *out)
{
    const char *s = str.ptr;
    size_t n = str.len;
    int d, m, y, h, mi, sec;
    if (s == NULL)
        return false;
    if (n == 29 && s[3] == ',') {
        /* IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT */
        if (!day_name(s, 3) || s[4] != ' ' || !num(s + 5, 2, &d) || s[7] != ' ' ||
            (m = month_of(s + 8)) < 0 || s[11] != ' ' || !num(s + 12, 4, &y) || s[16] != ' ' ||
            !hms(s + 17, &h, &mi, &sec) || memcmp(s + 25, " GMT", 4) != 0)
            return false;
    } else if (n == 24 && s[3] == ' ') {
        /* asctime: Sun Nov  6 08:49:37 1994 */
        if (!day_name(s, 3) || (m = month_of(s + 4)) < 0 || s[7] != ' ' ||
            !(s[8] == ' ' ? num(s + 9, 1, &d) : num(s + 8, 2, &d)) || s[10] != ' ' ||
            !hms(s + 11, &h, &mi, &sec) || s[19] != ' ' || !num(s + 20, 4, &y))
            return false;
    } else {
        /* RFC 850: Sunday, 06-Nov-94 08:49:37 GMT */
        const char *comma = memchr(s, ',', n);
        if (comma == NULL || !day_name(s, (size_t)(comma - s)))
            return false;
        size_t k = (size_t)(comma - s);
        if (n != k + 24 || comma[1] != ' ' || !num(comma + 2, 2, &d) || comma[4] != '-' ||
            (m = month_of(comma + 5)) < 0 || comma[8] != '-' || !num(comma + 9, 2, &y) ||
            comma[11] != ' ' || !hms(comma + 12, &h, &mi, &sec) ||
            memcmp(comma + 20, " GMT", 4) != 0)
            return false;
        y += y < 70 ? 2000 : 1900;
    }
    static const unsigned char mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d < 1 || d > mdays[m] || (m == 1 && d == 29 && !leap))
        return false;
    int64_t t = days_from_civil(y, (unsigned)m + 1, (unsigned)d) * 86400 + h * 3600 + mi * 60 + sec;
    *out = (time_t)t;
    return true;
}

int flare_http_date_parse(flare_str_t str, time_t *out)
{
    return date_parse(str, out) ? 0 : FLARE_EINVAL;
}
