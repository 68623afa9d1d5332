/* What other layers may ask of the WebSocket module (its internals are in
 * ws/ws_int.h). */
#ifndef FLARE_WS_WS_H
#define FLARE_WS_WS_H

#include "flare/flare.h"

/* The WebSocket connections worker w holds now (handshaking or open), 0
 * when the app has no WebSocket route. On w's thread. Server-sent event
 * streams, which the worker also holds through the drain, are not counted. */
unsigned flare__ws_open(const flare_worker_t *w);

#endif
