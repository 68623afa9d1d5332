/* The hub: connection ids, rooms, and fan-out across workers.
 *
 * Nothing here is shared between workers: each worker keeps its own id
 * table and its own rooms (of its own connections). Sending to an id or to
 * a room on other workers posts a task to each of them (their MPSC queue);
 * each delivers to its own connections. A broadcast is encoded once into a
 * refcounted frame (and compressed once when connections share compression
 * parameters); workers and slow recipients hold references, never copies. */
#include <stdlib.h>
#include <string.h>

#include "ws/ws_int.h"

#define ROOM_NAME_MAX 255
#define WORKER_BITS   16

struct ws_member {
    ws_room_t *room;
    flare_ws_t *ws;
    ws_member_t *rprev, *rnext; /* in the room */
    ws_member_t *wnext;         /* in the connection's list */
};

struct ws_room {
    ws_room_t *next; /* hash chain */
    uint64_t hash;
    ws_member_t *members;
    size_t count;
    size_t nlen;
    char name[];
};

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static inline size_t id_slot(uint64_t id, size_t cap)
{
    return (size_t)(((id >> WORKER_BITS) * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

/* ---- ids ---- */

static int ids_grow(ws_worker_t *ww)
{
    size_t cap = ww->idcap != 0 ? ww->idcap * 2 : 64;
    flare_ws_t **t = calloc(cap, sizeof(*t));
    if (t == NULL)
        return FLARE_ENOMEM;
    for (size_t i = 0; i < ww->idcap; i++) {
        flare_ws_t *ws = ww->ids[i];
        while (ws != NULL) {
            flare_ws_t *next = ws->id_next;
            size_t s = id_slot(ws->id, cap);
            ws->id_next = t[s];
            t[s] = ws;
            ws = next;
        }
    }
    free(ww->ids);
    ww->ids = t;
    ww->idcap = cap;
    return 0;
}

uint64_t flare__ws_id_assign(ws_worker_t *ww, flare_ws_t *ws)
{
    if (ww->nids + 1 > ww->idcap && ids_grow(ww) != 0)
        return 0;
    uint64_t id = ww->next_seq++ << WORKER_BITS | (ww->w->id & ((1u << WORKER_BITS) - 1));
    ws->id = id;
    size_t s = id_slot(id, ww->idcap);
    ws->id_next = ww->ids[s];
    ww->ids[s] = ws;
    ww->nids++;
    return id;
}

void flare__ws_id_remove(ws_worker_t *ww, flare_ws_t *ws)
{
    if (ww->idcap == 0)
        return;
    for (flare_ws_t **p = &ww->ids[id_slot(ws->id, ww->idcap)]; *p != NULL; p = &(*p)->id_next) {
        if (*p == ws) {
            *p = ws->id_next;
            ww->nids--;
            return;
        }
    }
}

static flare_ws_t *id_find(ws_worker_t *ww, uint64_t id)
{
    if (ww->idcap == 0)
        return NULL;
    for (flare_ws_t *ws = ww->ids[id_slot(id, ww->idcap)]; ws != NULL; ws = ws->id_next) {
        if (ws->id == id)
            return ws;
    }
    return NULL;
}

/* ---- rooms ---- */

static ws_room_t **room_slot(ws_worker_t *ww, flare_str_t name, uint64_t h)
{
    ws_room_t **p = &ww->rooms[h & (ww->roomcap - 1)];
    while (*p != NULL && !((*p)->hash == h && (*p)->nlen == name.len &&
                           memcmp((*p)->name, name.ptr, name.len) == 0))
        p = &(*p)->next;
    return p;
}

static ws_room_t *room_find(ws_worker_t *ww, flare_str_t name)
{
    if (ww->roomcap == 0)
        return NULL;
    return *room_slot(ww, name, hash_bytes(name.ptr, name.len));
}

static int rooms_grow(ws_worker_t *ww)
{
    size_t cap = ww->roomcap != 0 ? ww->roomcap * 2 : 16;
    ws_room_t **t = calloc(cap, sizeof(*t));
    if (t == NULL)
        return FLARE_ENOMEM;
    for (size_t i = 0; i < ww->roomcap; i++) {
        ws_room_t *r = ww->rooms[i];
        while (r != NULL) {
            ws_room_t *next = r->next;
            r->next = t[r->hash & (cap - 1)];
            t[r->hash & (cap - 1)] = r;
            r = next;
        }
    }
    free(ww->rooms);
    ww->rooms = t;
    ww->roomcap = cap;
    return 0;
}

static bool room_name_ok(flare_str_t room)
{
    return room.len > 0 && room.len <= ROOM_NAME_MAX && room.ptr != NULL;
}

int flare_ws_join(flare_ws_t *ws, flare_str_t room)
{
    if (ws == NULL || !room_name_ok(room))
        return FLARE_EINVAL;
    if (ws->state == WS_DEAD)
        return FLARE_ECLOSED;
    ws_worker_t *ww = ws->ww;
    for (ws_member_t *m = ws->rooms; m != NULL; m = m->wnext) {
        if (m->room->nlen == room.len && memcmp(m->room->name, room.ptr, room.len) == 0)
            return 0;
    }
    if (ww->nrooms + 1 > ww->roomcap && rooms_grow(ww) != 0)
        return FLARE_ENOMEM;
    uint64_t h = hash_bytes(room.ptr, room.len);
    ws_room_t **slot = room_slot(ww, room, h);
    ws_room_t *r = *slot;
    ws_member_t *m = malloc(sizeof(*m));
    if (m == NULL)
        return FLARE_ENOMEM;
    if (r == NULL) {
        r = malloc(sizeof(*r) + room.len);
        if (r == NULL) {
            free(m);
            return FLARE_ENOMEM;
        }
        r->next = NULL;
        r->hash = h;
        r->members = NULL;
        r->count = 0;
        r->nlen = room.len;
        memcpy(r->name, room.ptr, room.len);
        *slot = r;
        ww->nrooms++;
    }
    m->room = r;
    m->ws = ws;
    m->rprev = NULL;
    m->rnext = r->members;
    if (r->members != NULL)
        r->members->rprev = m;
    r->members = m;
    r->count++;
    m->wnext = ws->rooms;
    ws->rooms = m;
    return 0;
}

static void member_drop(ws_worker_t *ww, ws_member_t *m)
{
    ws_room_t *r = m->room;
    if (m->rprev != NULL)
        m->rprev->rnext = m->rnext;
    else
        r->members = m->rnext;
    if (m->rnext != NULL)
        m->rnext->rprev = m->rprev;
    free(m);
    if (--r->count == 0) {
        ws_room_t **p = room_slot(ww, (flare_str_t){ r->name, r->nlen }, r->hash);
        *p = r->next;
        ww->nrooms--;
        free(r);
    }
}

int flare_ws_leave(flare_ws_t *ws, flare_str_t room)
{
    if (ws == NULL || !room_name_ok(room))
        return FLARE_EINVAL;
    for (ws_member_t **p = &ws->rooms; *p != NULL; p = &(*p)->wnext) {
        ws_member_t *m = *p;
        if (m->room->nlen == room.len && memcmp(m->room->name, room.ptr, room.len) == 0) {
            *p = m->wnext;
            member_drop(ws->ww, m);
            return 0;
        }
    }
    return FLARE_ENOTFOUND;
}

void flare__ws_leave_all(flare_ws_t *ws)
{
    while (ws->rooms != NULL) {
        ws_member_t *m = ws->rooms;
        ws->rooms = m->wnext;
        member_drop(ws->ww, m);
    }
}

void flare__ws_hub_dispose(ws_worker_t *ww)
{
    /* every connection has left its rooms by now; free the tables */
    free(ww->rooms);
    ww->rooms = NULL;
    ww->roomcap = ww->nrooms = 0;
    free(ww->ids);
    ww->ids = NULL;
    ww->idcap = ww->nids = 0;
}

/* ---- delivery ---- */

static void deliver_local(ws_worker_t *ww, flare_str_t room, ws_shared_t *plain,
                          ws_shared_t *packed, uint64_t except)
{
    if (room.len == 0) {
        for (flare_ws_t *ws = ww->conns; ws != NULL; ws = ws->next) {
            if (ws->id != except && (ws->flags & WF_OPENED))
                flare__ws_send_shared(ws, plain, packed);
        }
        return;
    }
    ws_room_t *r = room_find(ww, room);
    if (r == NULL)
        return;
    /* sends never free a connection or a membership (that waits for the
     * reap), so the list holds still while we walk it */
    for (ws_member_t *m = r->members; m != NULL; m = m->rnext) {
        if (m->ws->id != except && (m->ws->flags & WF_OPENED))
            flare__ws_send_shared(m->ws, plain, packed);
    }
}

typedef struct bcast_task {
    flare_worker_t *w;
    const ws_app_t *wa;
    ws_shared_t *plain, *packed;
    uint64_t except;
    size_t rlen;
    char room[];
} bcast_task_t;

static void bcast_run(void *ud)
{
    bcast_task_t *t = ud;
    ws_worker_t *ww = flare__ws_worker(t->w, t->wa); /* on t->w's thread (or after it ended) */
    if (ww != NULL)
        deliver_local(ww, (flare_str_t){ t->room, t->rlen }, t->plain, t->packed, t->except);
    flare__ws_shared_unref(t->plain);
    flare__ws_shared_unref(t->packed);
    free(t);
}

static ws_worker_t *local_worker(flare_app_t *app)
{
    ws_worker_t *ww = flare__ws_tls;
    return ww != NULL && ww->w->app == app ? ww : NULL;
}

/* Compresses a broadcast once, for every connection that shares
 * compression parameters with it (no context takeover, same window). */
static ws_shared_t *pack(ws_app_t *wa, ws_worker_t *local, uint8_t op, flare_str_t payload)
{
    z_stream tmp, *z;
    bool own = false;
    flare_buf_t out = { 0 };
    if (local != NULL) {
        z = flare__ws_shared_deflater(local, wa->bcast_bits, wa->bcast_mem, wa->bcast_level);
        if (z == NULL)
            return NULL;
    } else {
        /* not on a worker: a stream for this call */
        if (flare__ws_deflate_init(&tmp, wa->bcast_level, wa->bcast_bits, wa->bcast_mem) != 0)
            return NULL;
        z = &tmp;
        own = true;
    }
    ws_shared_t *s = NULL;
    if (flare__ws_deflate_message(z, payload.ptr, payload.len, true, &out) == 0)
        s = flare__ws_shared_new(op, true, out.data, out.len);
    else if (!own)
        deflateReset(z);
    if (own)
        deflateEnd(&tmp);
    flare__buf_free(&out);
    return s;
}

static int broadcast(flare_app_t *app, ws_app_t *wa, flare_str_t room, flare_ws_opcode_t op,
                     flare_str_t payload, uint64_t except);

int flare_ws_broadcast(flare_app_t *app, flare_str_t room, flare_ws_opcode_t op,
                       flare_str_t payload, uint64_t except)
{
    if (app == NULL || (op != FLARE_WS_TEXT && op != FLARE_WS_BINARY) || room.len > ROOM_NAME_MAX ||
        (room.len > 0 && room.ptr == NULL) || (payload.len > 0 && payload.ptr == NULL))
        return FLARE_EINVAL;
    if (op == FLARE_WS_TEXT && !flare__utf8_valid(payload.ptr, payload.len))
        return FLARE_EINVAL;
    ws_app_t *wa = flare__ws_app_state(app);
    if (wa == NULL)
        return FLARE_ESTATE;
    int rc = flare__app_enter(app); /* the workers stay while we are inside */
    if (rc != 0)
        return rc;
    rc = broadcast(app, wa, room, op, payload, except);
    flare__app_leave(app);
    return rc;
}

static int broadcast(flare_app_t *app, ws_app_t *wa, flare_str_t room, flare_ws_opcode_t op,
                     flare_str_t payload, uint64_t except)
{
    ws_worker_t *local = local_worker(app);
    ws_shared_t *plain = flare__ws_shared_new((uint8_t)op, false, payload.ptr, payload.len);
    if (plain == NULL)
        return FLARE_ENOMEM;
    ws_shared_t *packed = NULL;
    if (wa->shared_deflate && payload.len >= wa->bcast_min)
        packed = pack(wa, local, (uint8_t)op, payload); /* NULL: per connection then */
    int rc = 0;
    for (unsigned i = 0; i < app->nworkers; i++) {
        flare_worker_t *w = &app->workers[i];
        if (local != NULL && local->w == w) {
            deliver_local(local, room, plain, packed, except);
            continue;
        }
        bcast_task_t *t = malloc(sizeof(*t) + room.len);
        if (t == NULL) {
            rc = FLARE_ENOMEM;
            continue;
        }
        t->w = w;
        t->wa = wa;
        t->plain = plain;
        t->packed = packed;
        t->except = except;
        t->rlen = room.len;
        if (room.len > 0)
            memcpy(t->room, room.ptr, room.len);
        flare__ws_shared_ref(plain);
        if (packed != NULL)
            flare__ws_shared_ref(packed);
        if (flare__loop_post(&w->loop, bcast_run, t) != 0) {
            flare__ws_shared_unref(plain);
            flare__ws_shared_unref(packed);
            free(t);
            rc = FLARE_ENOMEM;
        }
    }
    flare__ws_shared_unref(plain);
    flare__ws_shared_unref(packed);
    return rc;
}

typedef struct sendto_task {
    flare_worker_t *w;
    const ws_app_t *wa;
    uint64_t id;
    flare_ws_opcode_t op;
    size_t len;
    char data[];
} sendto_task_t;

static void sendto_run(void *ud)
{
    sendto_task_t *t = ud;
    ws_worker_t *ww = flare__ws_worker(t->w, t->wa);
    flare_ws_t *ws = ww != NULL ? id_find(ww, t->id) : NULL;
    if (ws != NULL && (ws->flags & WF_OPENED))
        flare_ws_send(ws, t->op, (flare_str_t){ t->data, t->len });
    free(t);
}

static int send_to(flare_app_t *app, const ws_app_t *wa, uint64_t id, flare_ws_opcode_t op,
                   flare_str_t payload);

int flare_ws_send_to(flare_app_t *app, uint64_t id, flare_ws_opcode_t op, flare_str_t payload)
{
    if (app == NULL || (op != FLARE_WS_TEXT && op != FLARE_WS_BINARY) ||
        (payload.len > 0 && payload.ptr == NULL))
        return FLARE_EINVAL;
    if (op == FLARE_WS_TEXT && !flare__utf8_valid(payload.ptr, payload.len))
        return FLARE_EINVAL;
    const ws_app_t *wa = flare__ws_app_state(app);
    if (wa == NULL)
        return FLARE_ESTATE;
    int rc = flare__app_enter(app); /* the workers stay while we are inside */
    if (rc != 0)
        return rc;
    rc = send_to(app, wa, id, op, payload);
    flare__app_leave(app);
    return rc;
}

static int send_to(flare_app_t *app, const ws_app_t *wa, uint64_t id, flare_ws_opcode_t op,
                   flare_str_t payload)
{
    unsigned wid = (unsigned)(id & ((1u << WORKER_BITS) - 1));
    if ((id >> WORKER_BITS) == 0 || wid >= app->nworkers)
        return FLARE_ENOTFOUND;
    flare_worker_t *w = &app->workers[wid];
    ws_worker_t *local = local_worker(app);
    if (local != NULL && local->w == w) {
        flare_ws_t *ws = id_find(local, id);
        if (ws == NULL || !(ws->flags & WF_OPENED))
            return FLARE_ENOTFOUND;
        return flare_ws_send(ws, op, payload);
    }
    sendto_task_t *t = malloc(sizeof(*t) + payload.len);
    if (t == NULL)
        return FLARE_ENOMEM;
    t->w = w;
    t->wa = wa;
    t->id = id;
    t->op = op;
    t->len = payload.len;
    if (payload.len > 0)
        memcpy(t->data, payload.ptr, payload.len);
    if (flare__loop_post(&w->loop, sendto_run, t) != 0) {
        free(t);
        return FLARE_ENOMEM;
    }
    return 0;
}
