#include "core/clock.h"

#include <string.h>

static void put2(char *p, unsigned v)
{
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
}

void flare__format_http_date(char *out, time_t t)
{
    static const char days[] = "SunMonTueWedThuFriSat";
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    struct tm tm;
    gmtime_r(&t, &tm);
    memcpy(out, days + 3 * tm.tm_wday, 3);
    out[3] = ',';
    out[4] = ' ';
    put2(out + 5, (unsigned)tm.tm_mday);
    out[7] = ' ';
    memcpy(out + 8, months + 3 * tm.tm_mon, 3);
    out[11] = ' ';
    unsigned y = (unsigned)(tm.tm_year + 1900);
    put2(out + 12, y / 100 % 100);
    put2(out + 14, y % 100);
    out[16] = ' ';
    put2(out + 17, (unsigned)tm.tm_hour);
    out[19] = ':';
    put2(out + 20, (unsigned)tm.tm_min);
    out[22] = ':';
    put2(out + 23, (unsigned)tm.tm_sec);
    memcpy(out + 25, " GMT", 4);
}

void flare__format_date_line(char *out, time_t t)
{
    memcpy(out, "Date: ", 6);
    flare__format_http_date(out + 6, t);
    out[35] = '\r';
    out[36] = '\n';
}
