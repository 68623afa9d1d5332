/* Tables generated from the X-macro maps in flare/common.h, the failure
 * record of each thread, and copies of header fields. */
#include "flare/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* The last recorded failure of this thread (see flare_last_error). */
static _Thread_local char last_msg[256];
static _Thread_local int last_errno;

int flare__fail(int code, int sys_errno, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_msg, sizeof(last_msg), fmt, ap);
    va_end(ap);
    if (n >= 0 && sys_errno != 0 && (size_t)n < sizeof(last_msg)) {
        char eb[128];
        const char *es = strerror_r(sys_errno, eb, sizeof(eb));
        snprintf(last_msg + n, sizeof(last_msg) - (size_t)n, ": %s", es);
    }
    last_errno = sys_errno;
    return code;
}

const char *flare_last_error(void)
{
    return last_msg;
}

int flare_last_errno(void)
{
    return last_errno;
}

int flare__fields_copy(const flare_header_t *in, size_t n, flare_header_t **out)
{
    size_t bytes = n * sizeof(flare_header_t);
    for (size_t i = 0; i < n; i++)
        bytes += in[i].name.len + in[i].value.len + 2;
    flare_header_t *f = malloc(bytes ? bytes : 1);
    *out = f;
    if (f == NULL)
        return FLARE_ENOMEM;
    char *s = (char *)(f + n);
    for (size_t i = 0; i < n; i++) {
        flare_str_t name = in[i].name, v = in[i].value;
        if (name.len > 0)
            memcpy(s, name.ptr, name.len);
        s[name.len] = '\0';
        f[i].name = (flare_str_t){ s, name.len };
        s += name.len + 1;
        if (v.len > 0)
            memcpy(s, v.ptr, v.len);
        s[v.len] = '\0';
        f[i].value = (flare_str_t){ s, v.len };
        s += v.len + 1;
    }
    return 0;
}

const char *flare_strerror(int code)
{
    switch (code) {
    case 0:
        return "success";
#define FLARE_ERRNO_CASE(name, val, msg) \
    case (val):                          \
        return msg;
        FLARE_ERRNO_MAP(FLARE_ERRNO_CASE)
#undef FLARE_ERRNO_CASE
    default:
        return "unknown error";
    }
}

/* clang-format off */
static const flare_str_t method_names[FLARE_METHOD_COUNT] = {
    [FLARE_METHOD_OTHER] = { "", 0 },
#define FLARE_METHOD_NAME(m) [FLARE_METHOD_##m] = { #m, sizeof(#m) - 1 },
    FLARE_METHOD_MAP(FLARE_METHOD_NAME)
#undef FLARE_METHOD_NAME
};
/* clang-format on */

flare_str_t flare_method_name(flare_method_t m)
{
    if ((unsigned)m >= FLARE_METHOD_COUNT)
        return method_names[0];
    return method_names[m];
}

flare_str_t flare_status_reason(int status)
{
    switch (status) {
#define FLARE_STATUS_CASE(code, name, reason) \
    case (code):                              \
        return FLARE_STR(reason);
        FLARE_STATUS_MAP(FLARE_STATUS_CASE)
#undef FLARE_STATUS_CASE
    default:
        return FLARE_STR("Unknown");
    }
}

bool flare_str_ieq(flare_str_t a, flare_str_t b)
{
    if (a.len != b.len)
        return false;
    for (size_t i = 0; i < a.len; i++) {
        if (flare__lower((unsigned char)a.ptr[i]) != flare__lower((unsigned char)b.ptr[i]))
            return false;
    }
    return true;
}
