/* libFuzzer target: the WebSocket frame parser and the UTF-8 validator.
 *
 * Input: one configuration byte (bit 0: deflate negotiated, bit 1: client
 * side (unmasked frames), bits 2-3: message limit 0 / 64 / 1000 / 1 MiB),
 * then a byte stream from the peer. The stream is parsed whole, byte by byte
 * and in pieces of 7; all must give the same events (messages, control
 * frames) and the same close code. Also checked (abort() on violation):
 * consumption within the input, views inside the buffer, the message limit,
 * control payloads <= 125 bytes, text messages valid UTF-8 (checked again
 * in one go), close codes valid. Each read lands in a buffer of exactly the
 * bytes held, so ASan sees any read past them. Then the encoder: every event
 * re-encoded as a masked frame parses back to itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http1/parser.h"
#include "ws/frame.h"

#define CHECK(x)     \
    do {             \
        if (!(x))    \
            abort(); \
    } while (0)

typedef struct digest {
    uint16_t error;
    uint64_t hash; /* FNV-1a over the event stream (messages and controls) */
    size_t nmsgs, ncontrols, consumed;
} digest_t;

static void mix(uint64_t *h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        *h ^= b[i];
        *h *= 0x100000001b3ull;
    }
}

static uint8_t msg[(1 << 20) + 16];

static void parse_all(const uint8_t *in, size_t len, size_t step, uint8_t cfg, digest_t *d)
{
    static const uint64_t limits[4] = { 0, 64, 1000, 1 << 20 };
    flare_ws_parser_t p;
    flare__ws_parser_init(&p, !(cfg & 2), limits[(cfg >> 2) & 3]);
    p.rsv1_allowed = cfg & 1;
    p.max_compressed = p.max_message + 8;
    memset(d, 0, sizeof(*d));
    d->hash = 0xcbf29ce484222325ull;
    uint8_t *held = NULL;
    size_t have = 0, fed = 0, mlen = 0;
    bool text = false, compressed = false;
    while (fed < len) {
        size_t add = step == 0 || len - fed < step ? len - fed : step;
        uint8_t *nb = malloc(have + add);
        CHECK(nb != NULL);
        if (have > 0)
            memcpy(nb, held, have);
        memcpy(nb + have, in + fed, add);
        free(held);
        held = nb;
        have += add;
        fed += add;
        size_t pos = 0;
        while (pos < have) {
            flare_ws_event_t ev;
            int rc = flare__ws_parse(&p, held + pos, have - pos, &ev);
            if (rc == FLARE_PARSE_PARTIAL)
                break;
            if (rc == FLARE_PARSE_ERROR) {
                CHECK(p.error == 1002 || p.error == 1007 || p.error == 1009);
                d->error = p.error;
                free(held);
                return;
            }
            CHECK(rc > 0 && (size_t)rc <= have - pos);
            if (ev.type == FLARE_WS_EV_DATA || ev.type == FLARE_WS_EV_CONTROL) {
                CHECK(ev.len == 0 ||
                      (ev.data >= held + pos && ev.data + ev.len <= held + pos + (size_t)rc));
            }
            pos += (size_t)rc;
            d->consumed += (size_t)rc;
            if (ev.type == FLARE_WS_EV_DATA) {
                CHECK(ev.opcode == FLARE_WS_OP_TEXT || ev.opcode == FLARE_WS_OP_BINARY);
                if (ev.first) {
                    CHECK(mlen == 0);
                    text = ev.opcode == FLARE_WS_OP_TEXT;
                    compressed = ev.compressed;
                    CHECK(!compressed || (cfg & 1));
                }
                CHECK(mlen + ev.len <= (compressed ? p.max_compressed : p.max_message));
                memcpy(msg + mlen, ev.data, ev.len);
                mlen += ev.len;
                if (ev.fin) {
                    if (text && !compressed)
                        CHECK(flare__utf8_valid(msg, mlen));
                    mix(&d->hash, &ev.opcode, 1);
                    mix(&d->hash, msg, mlen);
                    d->nmsgs++;
                    mlen = 0;
                }
            } else if (ev.type == FLARE_WS_EV_CONTROL) {
                CHECK(ev.len <= FLARE_WS_MAX_CONTROL);
                if (ev.opcode == FLARE_WS_OP_CLOSE && ev.len > 0) {
                    CHECK(flare__ws_close_code_valid(ev.close_code));
                    CHECK(flare__utf8_valid(ev.reason.ptr, ev.reason.len));
                }
                mix(&d->hash, &ev.opcode, 1);
                mix(&d->hash, ev.data, ev.len);
                d->ncontrols++;
            }
        }
        /* keep the unconsumed bytes, in a buffer of exactly their size */
        if (pos > 0) {
            size_t rest = have - pos;
            uint8_t *nb2 = malloc(rest > 0 ? rest : 1);
            CHECK(nb2 != NULL);
            if (rest > 0)
                memcpy(nb2, held + pos, rest);
            free(held);
            held = nb2;
            have = rest;
        }
    }
    free(held);
}

/* Every complete message of the stream, re-encoded as one masked frame,
 * parses back to the same bytes. */
static void roundtrip(const uint8_t *in, size_t len)
{
    static uint8_t frame[FLARE_WS_MAX_HEADER + 4096];
    size_t n = len < 4096 ? len : 4096;
    static const uint8_t key[4] = { 1, 2, 3, 4 };
    uint8_t op = n > 0 && (in[0] & 1) ? FLARE_WS_OP_BINARY : FLARE_WS_OP_PING;
    if (op == FLARE_WS_OP_PING && n > FLARE_WS_MAX_CONTROL)
        n = FLARE_WS_MAX_CONTROL;
    size_t h = flare__ws_frame_header(frame, op, true, false, n, key);
    memcpy(frame + h, in, n);
    flare__ws_unmask(frame + h, n, key, 0);
    flare_ws_parser_t p;
    flare__ws_parser_init(&p, true, 1 << 20);
    flare_ws_event_t ev;
    int rc = flare__ws_parse(&p, frame, h + n, &ev);
    CHECK(rc == (int)(h + n));
    CHECK(ev.len == n && (n == 0 || memcmp(ev.data, in, n) == 0));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t cfg = data[0];
    const uint8_t *in = data + 1;
    size_t len = size - 1;
    digest_t whole, bytes, sevens;
    parse_all(in, len, 0, cfg, &whole);
    parse_all(in, len, 1, cfg, &bytes);
    parse_all(in, len, 7, cfg, &sevens);
    CHECK(whole.error == bytes.error && whole.error == sevens.error);
    CHECK(whole.nmsgs == bytes.nmsgs && whole.nmsgs == sevens.nmsgs);
    CHECK(whole.ncontrols == bytes.ncontrols && whole.ncontrols == sevens.ncontrols);
    CHECK(whole.hash == bytes.hash && whole.hash == sevens.hash);
    if (whole.error == 0)
        CHECK(whole.consumed == bytes.consumed && whole.consumed == sevens.consumed);
    /* the validator alone: in one go and split at every 3 bytes agree */
    uint32_t s = FLARE_UTF8_ACCEPT;
    for (size_t i = 0; i < len; i += 3)
        s = flare__utf8_step(s, in + i, len - i < 3 ? len - i : 3);
    uint32_t t = flare__utf8_step(FLARE_UTF8_ACCEPT, in, len);
    CHECK((s == FLARE_UTF8_ACCEPT) == (t == FLARE_UTF8_ACCEPT));
    CHECK((s == FLARE_UTF8_REJECT) == (t == FLARE_UTF8_REJECT));
    roundtrip(in, len);
    return 0;
}
