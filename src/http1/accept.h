/* HTTP/1.1's accept: what a listener's on_accept is set to (listeners.c),
 * without the connection's insides (http1/conn.h). */
#ifndef FLARE_HTTP1_ACCEPT_H
#define FLARE_HTTP1_ACCEPT_H

#include <sys/socket.h>

struct flare_listener;
struct flare_worker;

/* http1/conn.c: the accept of every listener (HTTP/1.1 first; HTTP/2 by
 * ALPN or the preface takes it over) */
void flare__conn_open(struct flare_worker *w, int fd, const struct sockaddr *sa,
                      const struct flare_listener *l);

#endif
