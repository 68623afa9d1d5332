/* Clocks and the cached Date header. */
#ifndef FLARE_CLOCK_H
#define FLARE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic milliseconds (coarse clock: vDSO, no syscall, ~4 ms resolution). */
static inline uint64_t flare__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

#define FLARE_DATE_LINE_LEN (sizeof("Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n") - 1)

/* Writes "Date: <IMF-fixdate>\r\n" for Unix time t into out (FLARE_DATE_LINE_LEN
 * bytes, not NUL-terminated). No locale, no printf. */
void flare__format_date_line(char *out, time_t t);

/* Writes the IMF-fixdate alone (29 bytes). */
void flare__format_http_date(char *out, time_t t);

#endif
