/* WebSocket output: frames shared between recipients, and writing them
 * through the connection's stream (net/stream.h).
 *
 * Frames are written straight from the caller's memory when the socket
 * takes them; only what it refuses is kept in the stream's queue: copied,
 * or referenced when the frame is a shared (broadcast) one. Inside a read
 * batch small frames are queued and leave together at its end. Once the queue is empty after our
 * close frame and the closing handshake is done (or failed), the write side is shut and the
 * connection lingers for the peer's EOF. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "worker.h"
#include "core/sys.h"
#include "ws/ws_int.h"

#define BATCH_COPY_MAX 8192 /* in a read batch, frames up to this are queued, not written */

static inline uint64_t now_ms(const flare_ws_t *ws)
{
    return ws->ww->w->loop.now;
}

/* ---- shared frames ---- */

ws_shared_t *flare__ws_shared_new(uint8_t opcode, bool rsv1, const void *payload, size_t len)
{
    uint8_t hdr[FLARE_WS_MAX_HEADER];
    size_t hl = flare__ws_frame_header(hdr, opcode, true, rsv1, len, NULL);
    if (len > SIZE_MAX - sizeof(ws_shared_t) - hl)
        return NULL;
    ws_shared_t *s = malloc(sizeof(*s) + hl + len);
    if (s == NULL)
        return NULL;
    atomic_init(&s->refs, 1);
    s->opcode = opcode;
    s->len = hl + len;
    s->plain_off = hl;
    memcpy(s->data, hdr, hl);
    if (len > 0)
        memcpy(s->data + hl, payload, len);
    return s;
}

void flare__ws_shared_ref(ws_shared_t *s)
{
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

void flare__ws_shared_unref(ws_shared_t *s)
{
    if (s != NULL && atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
        free(s);
}

/* ---- writing ---- */

static void shared_release(void *ud)
{
    flare__ws_shared_unref(ud);
}

static inline bool attached(const flare_ws_t *ws)
{
    return (ws->s.sflags & FLARE_S_ATTACHED) != 0;
}

/* Writes (hdr, payload) as far as the socket takes them and keeps the rest
 * in the stream's queue: copied, or referenced when the payload is the
 * shared frame sh. Frames are only queued when the socket is not ours yet,
 * or a read batch is collecting small frames (written at its end). */
int flare__ws_emit(flare_ws_t *ws, const void *hdr, size_t hlen, const void *pl, size_t plen,
                   ws_shared_t *sh)
{
    if (ws->state == WS_DEAD || ws->state == WS_LINGER)
        return FLARE_ECLOSED;
    flare_stream_t *s = &ws->s;
    struct iovec iov[2];
    int n = 0;
    if (hlen > 0)
        iov[n++] = (struct iovec){ (void *)hdr, hlen };
    if (plen > 0)
        iov[n++] = (struct iovec){ (void *)pl, plen };
    if (n == 0)
        return 0;
    flare_task_fn release = NULL;
    if (sh != NULL && plen > 0) {
        flare__ws_shared_ref(sh);
        release = shared_release;
    }
    size_t before = flare__stream_unsent(s);
    if (before == 0)
        ws->t_progress = now_ms(ws); /* the stall clock starts now */
    bool now = attached(ws) && !((ws->flags & WF_BATCH) && hlen + plen <= BATCH_COPY_MAX);
    int rc = now ? flare__stream_send(s, iov, n, release, sh)
                 : flare__stream_queue(s, iov, n, release, sh);
    if (rc != 0) {
        flare__ws_go_dead(ws); /* the stream would be corrupt without these bytes */
        return rc == FLARE_ENOMEM ? rc : FLARE_ECLOSED;
    }
    if (now && flare__stream_unsent(s) < before + hlen + plen)
        ws->t_progress = now_ms(ws);
    return 0;
}

static void maybe_linger(flare_ws_t *ws)
{
    if (ws->state != WS_OPEN || flare__stream_has_output(&ws->s) || !(ws->flags & WF_CLOSE_SENT) ||
        !(ws->flags & (WF_CLOSE_RECV | WF_FAILED)))
        return;
    /* handshake done (or failed) and our close frame is out */
    flare__stream_linger(&ws->s);
    ws->state = WS_LINGER;
    ws->deadline = now_ms(ws) + FLARE_LINGER_MS;
    ws->s.rlen = ws->s.rpos = 0;
    flare__stream_idle(&ws->s);
}

void flare__ws_flush(flare_ws_t *ws)
{
    if (!attached(ws))
        return;
    size_t before = flare__stream_unsent(&ws->s);
    int rc = flare__stream_flush(&ws->s);
    if (rc < 0) {
        flare__ws_go_dead(ws);
        return;
    }
    if (flare__stream_unsent(&ws->s) < before)
        ws->t_progress = now_ms(ws);
    if (rc == 1)
        maybe_linger(ws);
}
