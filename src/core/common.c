/* Tables generated from the X-macro maps in flare/common.h. */
#include "flare/common.h"

#include "core/core.h"

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

int flare_str_ieq(flare_str_t a, flare_str_t b)
{
    if (a.len != b.len)
        return 0;
    for (size_t i = 0; i < a.len; i++) {
        if (flare__lower((unsigned char)a.ptr[i]) != flare__lower((unsigned char)b.ptr[i]))
            return 0;
    }
    return 1;
}
