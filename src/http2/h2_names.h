/* HTTP/2 names shared by the glue (src/http2/) and the metrics (src/obs/):
 * RFC 9113's error codes and the defences of session.c, each one X-macro
 * table from which the enum and the label strings are generated. No
 * nghttp2 here: the metrics block is sized from these counts. */
#ifndef FLARE_HTTP2_H2_NAMES_H
#define FLARE_HTTP2_H2_NAMES_H

#include <stdint.h>

/* RFC 9113 section 7, in code order (the enum's value is the code). */
#define FLARE__H2_ERRORS(X)                       \
    X(NO_ERROR, "no_error")                       \
    X(PROTOCOL_ERROR, "protocol_error")           \
    X(INTERNAL_ERROR, "internal_error")           \
    X(FLOW_CONTROL_ERROR, "flow_control_error")   \
    X(SETTINGS_TIMEOUT, "settings_timeout")       \
    X(STREAM_CLOSED, "stream_closed")             \
    X(FRAME_SIZE_ERROR, "frame_size_error")       \
    X(REFUSED_STREAM, "refused_stream")           \
    X(CANCEL, "cancel")                           \
    X(COMPRESSION_ERROR, "compression_error")     \
    X(CONNECT_ERROR, "connect_error")             \
    X(ENHANCE_YOUR_CALM, "enhance_your_calm")     \
    X(INADEQUATE_SECURITY, "inadequate_security") \
    X(HTTP_1_1_REQUIRED, "http_1_1_required")

#define FLARE__H2_ERR_ENUM(n, s) FLARE__H2E_##n,
enum { FLARE__H2_ERRORS(FLARE__H2_ERR_ENUM) FLARE__H2E_COUNT };
#undef FLARE__H2_ERR_ENUM

/* The defences that end a connection with ENHANCE_YOUR_CALM (session.c,
 * docs/http2.md). */
#define FLARE__H2_FLOODS(X)           \
    X(RAPID_RESET, "rapid_reset")     \
    X(CONTINUATION, "continuation")   \
    X(SETTINGS, "settings")           \
    X(PING, "ping")                   \
    X(PRIORITY, "priority")           \
    X(EMPTY_DATA, "empty_data")       \
    X(WINDOW_UPDATE, "window_update") \
    X(HEADER_LIST, "header_list")

#define FLARE__H2_FLOOD_ENUM(n, s) FLARE__H2F_##n,
enum { FLARE__H2_FLOODS(FLARE__H2_FLOOD_ENUM) FLARE__H2F_COUNT };
#undef FLARE__H2_FLOOD_ENUM

#define FLARE__H2_NAME(n, s) s,

/* The label of an error code: "unknown" for a code RFC 9113 does not
 * define (a peer may send any 32-bit value; this side sends none). Inline:
 * the metrics read the names without calling into the protocol. */
static inline const char *flare__h2_error_name(uint32_t code)
{
    static const char *const names[FLARE__H2E_COUNT] = { FLARE__H2_ERRORS(FLARE__H2_NAME) };
    return code < FLARE__H2E_COUNT ? names[code] : "unknown";
}

/* The label of a defence (FLARE__H2F_*); NULL when out of range. */
static inline const char *flare__h2_flood_name(unsigned kind)
{
    static const char *const names[FLARE__H2F_COUNT] = { FLARE__H2_FLOODS(FLARE__H2_NAME) };
    return kind < FLARE__H2F_COUNT ? names[kind] : NULL;
}

#undef FLARE__H2_NAME

#endif
