/* The protocol-neutral connection: the worker's list, close, the dead
 * list, and the worker-wide walks through the operations table. See
 * conn.h. */
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "net/conn.h"

void flare__conn_set_peer(flare_conn_t *c, const struct sockaddr *sa)
{
    if (sa != NULL && sa->sa_family == AF_INET) {
        memcpy(c->peer, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
        c->s.conn_family = AF_INET;
    } else if (sa != NULL && sa->sa_family == AF_INET6) {
        memcpy(c->peer, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
        c->s.conn_family = AF_INET6;
    } else if (sa != NULL && sa->sa_family == AF_UNIX) {
        c->s.conn_family = AF_UNIX; /* no address: the peer is "unix:" (peer stays zeroed) */
    }
}

void flare__conn_attach(flare_conn_t *c, flare_worker_t *w, const flare_conn_ops_t *ops)
{
    c->ops = ops;
    c->w = w;
    c->prev = NULL;
    c->next = w->conns;
    if (w->conns != NULL)
        w->conns->prev = c;
    w->conns = c;
    w->nconns++;
}

void flare__conn_close(flare_conn_t *c, bool clean)
{
    if (c->s.conn_flags & FLARE_CONN_DEAD)
        return;
    flare_worker_t *w = flare__conn_worker(c);
    c->s.conn_flags |= FLARE_CONN_DEAD;
    flare__stream_close(&c->s, clean);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    w->nconns--;
    c->prev = NULL;
    c->next = w->dead;
    w->dead = c;
    w->loop.deferred = true;
    c->ops->closed(c); /* last: it may run user callbacks */
}

void flare__conn_free_dead(flare_worker_t *w)
{
    while (w->dead != NULL) {
        flare_conn_t *c = w->dead;
        w->dead = c->next;
        c->ops->free(c);
    }
}

void flare__conn_sweep_all(flare_worker_t *w)
{
    uint64_t now = w->loop.now;
    bool past = w->draining && now >= w->drain_deadline;
    for (flare_conn_t *c = w->conns, *next; c != NULL; c = next) {
        next = c->next;
        if (flare__conn_dead(c))
            continue; /* closed by an earlier one's sweep (its callbacks) */
        c->ops->sweep(c, now);
        if (past)
            flare__conn_close(c, false); /* (a no-op when the sweep closed it) */
    }
}

void flare__conn_drain_all(flare_worker_t *w)
{
    for (flare_conn_t *c = w->conns, *next; c != NULL; c = next) {
        next = c->next;
        c->ops->drain(c);
    }
}

void flare__conn_close_all(flare_worker_t *w)
{
    while (w->conns != NULL)
        flare__conn_close(w->conns, false);
    flare__conn_free_dead(w);
}
