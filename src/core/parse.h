/* The result convention of every pure parser (HTTP head, chunked body,
 * WebSocket frame, ...): bytes consumed (> 0), or one of these. */
#ifndef FLARE_CORE_PARSE_H
#define FLARE_CORE_PARSE_H

/* What the parsers return on failure or with too few bytes (bytes consumed
 * > 0 otherwise). */
#define FLARE_PARSE_ERROR   (-1)
#define FLARE_PARSE_PARTIAL (-2)

#endif
