/* In-process server harness for unit tests that need real sockets: runs an
 * app on 127.0.0.1:0 in a thread and makes Connection: close round trips. */
#ifndef FLARE_TEST_HARNESS_H
#define FLARE_TEST_HARNESS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <flare/flare.h>

#include "loopback.h"

typedef struct harness {
    flare_app_t *app;
    pthread_t thread;
    int rc;
    int port;
} harness_t;

static void *harness_main(void *arg)
{
    harness_t *h = arg;
    h->rc = flare_app_run(h->app, "127.0.0.1:0");
    return NULL;
}

static void harness_noop(void *ud)
{
    (void)ud;
}

static int harness_start(harness_t *h)
{
    if (pthread_create(&h->thread, NULL, harness_main, h) != 0)
        return -1;
    for (int i = 0; i < 500 && flare_app_port(h->app) == 0; i++)
        usleep(10000);
    h->port = flare_app_port(h->app);
    /* the port is known once the listeners are bound; the workers take
     * cross-thread calls once every one of them has started: wait for that
     * too (a fixed sleep lost the race under ThreadSanitizer on a loaded
     * machine) */
    for (int i = 0; i < 500 && flare_app_post(h->app, 0, harness_noop, NULL) == FLARE_ESTATE; i++)
        usleep(10000);
    return h->port > 0 ? 0 : -1;
}

static int harness_stop(harness_t *h)
{
    flare_app_stop(h->app);
    pthread_join(h->thread, NULL);
    return h->rc;
}

/* Sends raw bytes, reads until the server closes. Caller frees. */
static char *harness_roundtrip(const harness_t *h, const char *req)
{
    int fd = loopback_connect(h->port);
    if (fd < 0)
        return strdup("");
    size_t n = strlen(req);
    if (write(fd, req, n) != (ssize_t)n) {
        close(fd);
        return strdup("");
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    ssize_t r;
    while (len < cap && (r = read(fd, buf + len, cap - len)) > 0)
        len += (size_t)r;
    close(fd);
    buf[len] = '\0';
    return buf;
}

#endif
