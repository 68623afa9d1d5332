/* Log line formats: pure functions from the fields to the bytes of one line
 * (no I/O, no allocation), shared by the error log and the access log and
 * tested on their own (tests/unit/test_log.c). */
#ifndef FLARE_OBS_LOGFMT_H
#define FLARE_OBS_LOGFMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "flare/log.h"

/* Room a line is formatted in; a longer message is cut (it still ends in
 * a newline and, in JSON, is still a valid object). */
#define FLARE__LOG_LINE_MAX 4096

/* The formatted second, cached by whoever formats (a worker, the shared
 * path): gmtime once per second, not per line. */
typedef struct flare_logclock {
    time_t sec;   /* -1: nothing cached */
    char iso[20]; /* 2026-12-02T05:40:15 */
    char clf[27]; /* 02/Dec/2026:05:40:15 +0000 */
} flare_logclock_t;

void flare__logclock_init(flare_logclock_t *c);

/* One error-log line into out (cap >= 256): returns its length, always
 * ending in '\n'. worker < 0: not on a worker; reqid.len 0: none. */
size_t flare__log_format(char *out, size_t cap, int format, flare_logclock_t *clk,
                         const struct timespec *ts, flare_log_level_t lvl, int worker,
                         flare_str_t reqid, const char *msg, size_t msglen);

/* What one access-log line says about an exchange. peer, method and
 * protocol are written as given (the caller's own text: an address it
 * formatted, a token the parser checked, a constant); the other strings are
 * escaped. */
typedef struct flare_access_rec {
    flare_str_t peer, method, target, protocol, user_agent, referer, request_id;
    int status;
    uint64_t bytes;        /* body bytes sent */
    uint64_t dur_us;       /* head parsed -> response complete */
    bool request_id_plain; /* request_id is known to need no escaping (an id the
                            * logger made: hex digits) */
} flare_access_rec_t;

size_t flare__access_format(char *out, size_t cap, int format, flare_logclock_t *clk,
                            const struct timespec *ts, const flare_access_rec_t *r);

/* Escapes src into [p, end) and returns the new end: JSON string contents
 * (quotes, backslashes and control bytes escaped, invalid UTF-8 replaced by
 * U+FFFD), or text (control bytes as \n, \r, \t or \xNN; with `quote`, also
 * '"' and '\\' as \xNN, nginx's escaping inside its quoted fields). Stops
 * before a character that would not fit. */
char *flare__log_escape_json(char *p, char *end, const char *src, size_t len);
char *flare__log_escape_text(char *p, char *end, const char *src, size_t len, int quote);

#endif
