/* What HTTP/2 tells the metrics (src/obs/): the label strings of RFC 9113's
 * error codes and of the defences. The counting itself is one increment of the worker's
 * block where session.c sends a frame or a defence fires. */
#include "http2/h2_int.h"

#define NAME(n, s) s,
static const char *const error_names[FLARE__H2E_COUNT] = { FLARE__H2_ERRORS(NAME) };
static const char *const flood_names[FLARE__H2F_COUNT] = { FLARE__H2_FLOODS(NAME) };
#undef NAME

/* the enum is generated in code order: the table's index is the code */
_Static_assert((int)FLARE__H2E_NO_ERROR == (int)NGHTTP2_NO_ERROR &&
                   (int)FLARE__H2E_FLOW_CONTROL_ERROR == (int)NGHTTP2_FLOW_CONTROL_ERROR &&
                   (int)FLARE__H2E_ENHANCE_YOUR_CALM == (int)NGHTTP2_ENHANCE_YOUR_CALM &&
                   (int)FLARE__H2E_HTTP_1_1_REQUIRED == (int)NGHTTP2_HTTP_1_1_REQUIRED,
               "FLARE__H2_ERRORS is not in RFC 9113 code order");

const char *flare__h2_error_name(uint32_t code)
{
    return code < FLARE__H2E_COUNT ? error_names[code] : "unknown";
}

const char *flare__h2_flood_name(unsigned kind)
{
    return kind < FLARE__H2F_COUNT ? flood_names[kind] : NULL;
}
