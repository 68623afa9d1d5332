/* The channel layer's public edges (flare/channel.h): positions and their
 * tokens, and the C-callback subscriber kind. */
#include <stdlib.h>
#include <string.h>

#include "worker.h"
#include "web/channel.h"

/* ---- positions ---- */

static bool epoch_char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           c == '-';
}

int flare_channel_pos_parse(flare_str_t t, flare_channel_pos_t *out)
{
    if (out == NULL)
        return FLARE_EINVAL;
    memset(out, 0, sizeof(*out));
    if (t.ptr == NULL || t.len < 3 || t.len > FLARE_CHANNEL_POS_MAX)
        return FLARE_EINVAL;
    size_t i = 0;
    uint64_t v = 0;
    while (i < t.len && t.ptr[i] >= '0' && t.ptr[i] <= '9') {
        v = v * 10 + (uint64_t)(t.ptr[i] - '0');
        if (v > (1ull << 53))
            return FLARE_EINVAL;
        i++;
    }
    if (i == 0 || i > 16 || i >= t.len || t.ptr[i] != ':')
        return FLARE_EINVAL;
    size_t elen = t.len - i - 1;
    if (elen == 0 || elen > FLARE_CHANNEL_EPOCH_MAX)
        return FLARE_EINVAL;
    for (size_t k = 0; k < elen; k++) {
        if (!epoch_char(t.ptr[i + 1 + k]))
            return FLARE_EINVAL;
    }
    out->offset = v;
    out->epoch_len = (uint8_t)elen;
    memcpy(out->epoch, t.ptr + i + 1, elen);
    return 0;
}

size_t flare_channel_pos_format(const flare_channel_pos_t *pos, char *out, size_t cap)
{
    char buf[FLARE_CHANNEL_POS_MAX + 1], tmp[21];
    size_t n = 0, k = 0;
    uint64_t v = pos != NULL ? pos->offset : 0;
    do {
        tmp[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (k > 0)
        buf[n++] = tmp[--k];
    buf[n++] = ':';
    size_t elen = pos != NULL && pos->epoch_len <= FLARE_CHANNEL_EPOCH_MAX ? pos->epoch_len : 0;
    if (elen > 0)
        memcpy(buf + n, pos->epoch, elen);
    n += elen;
    if (cap > 0 && out != NULL) {
        size_t c = n < cap ? n : cap - 1;
        memcpy(out, buf, c);
        out[c] = '\0';
    }
    return n;
}

/* ---- C subscribers ---- */

static void *fn_prepare(flare_app_t *app, const flare__chan_msg_t *m, bool positions)
{
    (void)app;
    (void)m;
    (void)positions;
    return NULL; /* the view is made per delivery: nothing to share */
}

static void fn_release(void *rep)
{
    (void)rep;
}

static void fn_deliver(flare__chan_sub_t *s, const flare__chan_msg_t *m, void *rep)
{
    (void)rep;
    flare_channel_msg_t v = flare__chan_msg_view(m);
    s->cfg.on_message(s, &v, s->cfg.ud);
}

static void fn_notice(flare__chan_sub_t *s, const flare__chan_msg_t *m)
{
    if (s->cfg.on_notice == NULL)
        return;
    flare_channel_notice_t n = { .channel = { m->name, m->name_len } };
    switch (m->type) {
    case FLARE__CHAN_NLOST:
        n.kind = FLARE_CHANNEL_LOST;
        n.offset = m->offset;
        n.epoch = (flare_str_t){ m->epoch, m->epoch_len };
        n.reason = m->reason;
        break;
    case FLARE__CHAN_NDOWN:
        n.kind = FLARE_CHANNEL_DOWN;
        break;
    case FLARE__CHAN_NUP:
        n.kind = FLARE_CHANNEL_UP;
        break;
    case FLARE__CHAN_NCLOSED:
        n.kind = FLARE_CHANNEL_CLOSED;
        break;
    case FLARE__CHAN_NJOIN:
    case FLARE__CHAN_NLEAVE:
        n.kind = m->type == FLARE__CHAN_NJOIN ? FLARE_CHANNEL_JOIN : FLARE_CHANNEL_LEAVE;
        n.client = (flare_str_t){ m->client, m->client_len };
        n.info = (flare_str_t){ m->data + m->client_len, m->data_len - m->client_len };
        break;
    default:
        return;
    }
    s->cfg.on_notice(s, &n, s->cfg.ud);
}

const flare__chan_kind_t flare__fn_chan_kind = {
    .id = FLARE__CHAN_FN,
    .prepare = fn_prepare,
    .release = fn_release,
    .deliver = fn_deliver,
    .notice = fn_notice,
};

int flare_channel_subscribe(flare_worker_t *w, flare_str_t channel,
                            const flare_channel_sub_config_t *cfg, flare_channel_sub_t **out)
{
    if (w == NULL || cfg == NULL || cfg->on_message == NULL || out == NULL ||
        w != flare__worker_self || !flare__chan_name_ok(channel))
        return FLARE_EINVAL;
    flare__chan_sub_t *s;
    int rc = flare__chan_join(w, &flare__fn_chan_kind, NULL, channel, 0, &s);
    if (rc != 0)
        return rc;
    s->cfg = *cfg;
    s->cfg.since = NULL;
    *out = s;
    flare__chan_resume(s, cfg->since);
    return 0;
}

int flare_channel_unsubscribe(flare_channel_sub_t *sub)
{
    if (sub == NULL || sub->kind != &flare__fn_chan_kind)
        return FLARE_EINVAL;
    flare__chan_leave(sub);
    return 0;
}

flare_str_t flare_channel_sub_name(const flare_channel_sub_t *sub)
{
    if (sub == NULL || sub->ch == NULL)
        return FLARE_STR_NULL;
    return (flare_str_t){ sub->ch->name, sub->ch->nlen };
}
