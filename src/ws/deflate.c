/* permessage-deflate (RFC 7692): offer parsing, parameter agreement, and
 * the zlib calls. */
#include "ws/deflate.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ws/handshake.h"

typedef struct offer {
    bool snct, cnct;
    bool has_smax, has_cmax;
    unsigned smax, cmax; /* cmax 0: offered without a value */
} offer_t;

static flare_str_t trim(flare_str_t s)
{
    while (s.len > 0 && (s.ptr[0] == ' ' || s.ptr[0] == '\t')) {
        s.ptr++;
        s.len--;
    }
    while (s.len > 0 && (s.ptr[s.len - 1] == ' ' || s.ptr[s.len - 1] == '\t'))
        s.len--;
    return s;
}

/* window bits value: 1*DIGIT without a leading zero, 8..15; quotes allowed
 * (RFC 7692 7.1: a quoted-string value must still match the token rule) */
static bool window_value(flare_str_t v, unsigned *out)
{
    if (v.len >= 2 && v.ptr[0] == '"' && v.ptr[v.len - 1] == '"') {
        v.ptr++;
        v.len -= 2;
    }
    if (v.len == 0 || v.len > 2 || v.ptr[0] == '0')
        return false;
    unsigned x = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.ptr[i] < '0' || v.ptr[i] > '9')
            return false;
        x = x * 10 + (unsigned)(v.ptr[i] - '0');
    }
    if (x < 8 || x > 15)
        return false;
    *out = x;
    return true;
}

/* Splits the next ';'-separated part of s at *pos (quotes respected). */
static bool next_part(flare_str_t s, size_t *pos, flare_str_t *part)
{
    if (*pos > s.len)
        return false;
    size_t i = *pos, start = i;
    bool quoted = false;
    while (i < s.len && (quoted || s.ptr[i] != ';')) {
        if (s.ptr[i] == '"')
            quoted = !quoted;
        i++;
    }
    *part = trim((flare_str_t){ s.ptr + start, i - start });
    *pos = i + 1;
    return true;
}

/* -1: another extension; 0: an invalid permessage-deflate offer; 1: valid */
static int parse_offer(flare_str_t e, offer_t *o)
{
    memset(o, 0, sizeof(*o));
    size_t pos = 0;
    flare_str_t part;
    next_part(e, &pos, &part);
    if (!FLARE__IEQ(part, "permessage-deflate"))
        return -1;
    while (next_part(e, &pos, &part)) {
        flare_str_t name = part, value = FLARE_STR_NULL;
        bool has_value = false;
        for (size_t i = 0; i < part.len; i++) {
            if (part.ptr[i] == '=') {
                name = trim((flare_str_t){ part.ptr, i });
                value = trim((flare_str_t){ part.ptr + i + 1, part.len - i - 1 });
                has_value = true;
                break;
            }
        }
        if (FLARE__IEQ(name, "server_no_context_takeover")) {
            if (o->snct || has_value)
                return 0;
            o->snct = true;
        } else if (FLARE__IEQ(name, "client_no_context_takeover")) {
            if (o->cnct || has_value)
                return 0;
            o->cnct = true;
        } else if (FLARE__IEQ(name, "server_max_window_bits")) {
            if (o->has_smax || !has_value || !window_value(value, &o->smax))
                return 0;
            o->has_smax = true;
        } else if (FLARE__IEQ(name, "client_max_window_bits")) {
            if (o->has_cmax || (has_value && !window_value(value, &o->cmax)))
                return 0;
            o->has_cmax = true;
        } else {
            return 0; /* unknown parameter (or an empty one: "a;;b") */
        }
    }
    return 1;
}

bool flare__ws_pmd_negotiate(const flare_header_t *h, size_t n, const flare_ws_pmd_policy_t *pol,
                             flare_ws_pmd_t *out, char *resp, size_t *resp_len)
{
    unsigned maxw = pol->max_window_bits;
    if (maxw < 9 || maxw > 15)
        maxw = 15;
    size_t field = 0, pos = 0;
    flare_str_t e;
    while (flare__ws_list_next(h, n, "sec-websocket-extensions", &field, &pos, &e)) {
        offer_t o;
        if (parse_offer(e, &o) != 1)
            continue;
        unsigned sbits = o.has_smax && o.smax < maxw ? o.smax : maxw;
        if (sbits < 9)
            continue; /* server_max_window_bits=8: decline, see the header */
        memset(out, 0, sizeof(*out));
        out->server_bits = (uint8_t)sbits;
        out->server_nct = o.snct || pol->no_context_takeover;
        out->client_nct = o.cnct || pol->no_context_takeover;
        unsigned cbits = 0;
        if (o.has_cmax) {
            cbits = o.cmax != 0 && o.cmax < maxw ? o.cmax : maxw;
            /* a client whose zlib turned 8 into 9 still decodes fine with 9 */
            out->inflate_bits = (uint8_t)(cbits < 9 ? 9 : cbits);
        } else {
            out->inflate_bits = 15; /* the client may use any window */
        }
        int len = snprintf(resp, FLARE_WS_PMD_RESPONSE_MAX, "permessage-deflate%s%s",
                           out->server_nct ? "; server_no_context_takeover" : "",
                           out->client_nct ? "; client_no_context_takeover" : "");
        if (o.has_smax)
            len += snprintf(resp + len, FLARE_WS_PMD_RESPONSE_MAX - (size_t)len,
                            "; server_max_window_bits=%u", sbits);
        if (o.has_cmax)
            len += snprintf(resp + len, FLARE_WS_PMD_RESPONSE_MAX - (size_t)len,
                            "; client_max_window_bits=%u", cbits);
        *resp_len = (size_t)len;
        return true;
    }
    return false;
}

int flare__ws_deflate_init(z_stream *z, int level, unsigned window_bits, unsigned mem_level)
{
    memset(z, 0, sizeof(*z));
    if (window_bits < 9 || window_bits > 15)
        window_bits = 15;
    if (mem_level < 1 || mem_level > 9)
        mem_level = 8;
    if (deflateInit2(z, level, Z_DEFLATED, -(int)window_bits, (int)mem_level, Z_DEFAULT_STRATEGY) !=
        Z_OK)
        return FLARE_ENOMEM;
    return 0;
}

int flare__ws_inflate_init(z_stream *z, unsigned window_bits)
{
    memset(z, 0, sizeof(*z));
    if (window_bits < 8 || window_bits > 15)
        window_bits = 15;
    if (inflateInit2(z, -(int)window_bits) != Z_OK)
        return FLARE_ENOMEM;
    return 0;
}

int flare__ws_deflate_message(z_stream *z, const void *in, size_t len, bool reset, flare_buf_t *out)
{
    if (len == 0) {
        /* an empty stored block without its 00 00 ff ff: valid whatever the
         * stream's state (the stream is byte-aligned between messages),
         * while zlib would have nothing to flush after an earlier flush */
        return flare__buf_append(out, "", 1);
    }
    size_t start = out->len;
    const unsigned char *p = in;
    size_t left = len;
    for (;;) {
        uInt chunk = left > (1u << 30) ? (1u << 30) : (uInt)left;
        bool final = chunk == left;
        z->next_in = (Bytef *)(uintptr_t)p;
        z->avail_in = chunk;
        do {
            if (flare__buf_reserve(out, 64 + (chunk >> 3)) != 0)
                return FLARE_ENOMEM;
            size_t room = out->cap - out->len;
            if (room > UINT_MAX)
                room = UINT_MAX;
            z->next_out = (Bytef *)out->data + out->len;
            z->avail_out = (uInt)room;
            int rc = deflate(z, final ? Z_SYNC_FLUSH : Z_NO_FLUSH);
            if (rc != Z_OK && rc != Z_BUF_ERROR)
                return FLARE_ESYS;
            out->len += room - z->avail_out;
        } while (z->avail_out == 0 || z->avail_in > 0);
        p += chunk;
        left -= chunk;
        if (final)
            break;
    }
    /* RFC 7692 7.2.1: remove the 4 octets 00 00 ff ff of the flush */
    if (out->len - start < 4 || memcmp(out->data + out->len - 4, "\x00\x00\xff\xff", 4) != 0)
        return FLARE_ESYS;
    out->len -= 4;
    if (reset && deflateReset(z) != Z_OK)
        return FLARE_ESYS;
    return 0;
}

/* Room for at least one more byte, never past limit bytes in all. */
static int grow_bounded(flare_buf_t *b, size_t limit)
{
    if (b->len < b->cap)
        return 0;
    if (b->cap >= limit)
        return FLARE_ETOOBIG;
    size_t cap = b->cap != 0 ? b->cap * 2 : 4096;
    if (cap > limit)
        cap = limit;
    char *p = realloc(b->data, cap);
    if (p == NULL)
        return FLARE_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

static int inflate_all(z_stream *z, const unsigned char *in, size_t len, size_t max,
                       flare_buf_t *out, bool *ended)
{
    /* max + 1: one byte past the limit is how "too big" shows */
    size_t limit = max == SIZE_MAX ? max : max + 1;
    while (len > 0) {
        uInt chunk = len > (1u << 30) ? (1u << 30) : (uInt)len;
        z->next_in = (Bytef *)(uintptr_t)in;
        z->avail_in = chunk;
        for (;;) {
            int g = grow_bounded(out, limit);
            if (g != 0)
                return g;
            size_t room = out->cap - out->len;
            if (room > UINT_MAX)
                room = UINT_MAX;
            z->next_out = (Bytef *)out->data + out->len;
            z->avail_out = (uInt)room;
            int rc = inflate(z, Z_SYNC_FLUSH);
            out->len += room - z->avail_out;
            if (out->len > max)
                return FLARE_ETOOBIG;
            if (rc == Z_STREAM_END) {
                /* a final block (BFINAL) ended the stream: the sender drops
                 * its context; nothing may follow in this message */
                *ended = true;
                if (inflateReset(z) != Z_OK)
                    return FLARE_ESYS;
                if (z->avail_in != 0 || len > chunk)
                    return FLARE_EINVAL;
                break;
            }
            if (rc == Z_MEM_ERROR)
                return FLARE_ENOMEM;
            if (rc != Z_OK && rc != Z_BUF_ERROR)
                return FLARE_EINVAL;
            if (z->avail_in == 0 && z->avail_out > 0)
                break; /* all input used, all output out */
            if (rc == Z_BUF_ERROR && z->avail_out > 0)
                break; /* no progress possible without more input */
        }
        in += chunk;
        len -= chunk;
    }
    return 0;
}

int flare__ws_inflate_piece(z_stream *z, const void *in, size_t len, bool last, bool reset_at_end,
                            size_t max, flare_buf_t *out, bool *ended)
{
    static const unsigned char tail[4] = { 0x00, 0x00, 0xff, 0xff };
    if (*ended && len > 0)
        return FLARE_EINVAL; /* data after a final block */
    int rc = inflate_all(z, in, len, max, out, ended);
    /* the tail completes a sync flush; after a final block there is none */
    if (rc == 0 && last && !*ended)
        rc = inflate_all(z, tail, 4, max, out, ended);
    if (rc == 0 && last && reset_at_end && !*ended && inflateReset(z) != Z_OK)
        rc = FLARE_ESYS;
    return rc;
}
