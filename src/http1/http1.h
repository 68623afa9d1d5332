/* HTTP/1.1 internals shared by its files: the protocol operations the
 * exchange layer calls (response.c) and the connection's side of them
 * (conn.c). */
#ifndef FLARE_HTTP1_H
#define FLARE_HTTP1_H

#include "http/exchange.h"

extern const flare_proto_ops_t flare__http1_ops;

/* conn.c: a response is complete, or has more output: the in-order queue
 * moves what it can into the stream and writes it (outside a read batch). */
void flare__http1_complete(struct flare_req *ex);

/* conn.c: the body_read op (streaming request bodies, flare/body.h). */
void flare__http1_body_read(struct flare_req *ex, bool on);

#endif
