/* Sockets on 127.0.0.1 for the unit tests that play a peer of their own (a
 * raw upstream, a port that is taken, a port nobody listens on, a client
 * that writes bytes by hand): tests/unit/loopback.c, linked into every unit
 * test. None of them asserts: each returns -1 on failure, and the caller
 * says what that means for its test. */
#ifndef FLARE_TEST_LOOPBACK_H
#define FLARE_TEST_LOOPBACK_H

/* A TCP socket listening on 127.0.0.1 at a port the kernel picks (no
 * SO_REUSEADDR, no SO_REUSEPORT: nobody else can join it), with `backlog`.
 * Returns the socket and sets *port, or -1. */
int loopback_listen(int backlog, int *port);

/* A loopback port nothing listens on: bound, then closed (another process
 * may take it later; the tests use it at once). Returns the port, or -1. */
int loopback_free_port(void);

/* A blocking TCP connection to 127.0.0.1:port. Returns the socket, or -1. */
int loopback_connect(int port);

#endif
