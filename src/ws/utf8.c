/* Incremental UTF-8 validation (RFC 3629: no overlongs, no surrogates,
 * nothing past U+10FFFF).
 *
 * The state names what the next byte must be, so validation resumes at any
 * split (a frame boundary, a read boundary, inflate output) and rejects at
 * the first byte that cannot start or continue a valid sequence: a text
 * message fails fast (RFC 6455 8.1), before the rest of it arrives. ASCII
 * runs, the common case, are skipped 16 bytes at a time. */
#include <string.h>

#include "ws/frame.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* states (ACCEPT = 0 and REJECT = 1 are public) */
enum {
    S_C1 = 2, /* one more 80..BF */
    S_C2,     /* two more, next 80..BF */
    S_C3,     /* three more, next 80..BF */
    S_E0,     /* after E0: A0..BF, then one more */
    S_ED,     /* after ED: 80..9F (no surrogates), then one more */
    S_F0,     /* after F0: 90..BF, then two more */
    S_F4,     /* after F4: 80..8F (<= U+10FFFF), then two more */
};

static inline uint32_t lead(uint8_t c)
{
    if (c < 0x80)
        return FLARE_UTF8_ACCEPT;
    if (c < 0xC2)
        return FLARE_UTF8_REJECT; /* stray continuation or overlong 2-byte lead */
    if (c < 0xE0)
        return S_C1;
    if (c == 0xE0)
        return S_E0;
    if (c == 0xED)
        return S_ED;
    if (c < 0xF0)
        return S_C2;
    if (c == 0xF0)
        return S_F0;
    if (c < 0xF4)
        return S_C3;
    if (c == 0xF4)
        return S_F4;
    return FLARE_UTF8_REJECT;
}

static inline uint32_t cont(uint32_t s, uint8_t c)
{
    switch (s) {
    case S_C1:
        return (c & 0xC0) == 0x80 ? FLARE_UTF8_ACCEPT : FLARE_UTF8_REJECT;
    case S_C2:
        return (c & 0xC0) == 0x80 ? S_C1 : FLARE_UTF8_REJECT;
    case S_C3:
        return (c & 0xC0) == 0x80 ? S_C2 : FLARE_UTF8_REJECT;
    case S_E0:
        return c >= 0xA0 && c <= 0xBF ? S_C1 : FLARE_UTF8_REJECT;
    case S_ED:
        return c >= 0x80 && c <= 0x9F ? S_C1 : FLARE_UTF8_REJECT;
    case S_F0:
        return c >= 0x90 && c <= 0xBF ? S_C2 : FLARE_UTF8_REJECT;
    case S_F4:
        return c >= 0x80 && c <= 0x8F ? S_C2 : FLARE_UTF8_REJECT;
    default:
        return FLARE_UTF8_REJECT;
    }
}

uint32_t flare__utf8_step(uint32_t state, const uint8_t *p, size_t n)
{
    size_t i = 0;
    if (state == FLARE_UTF8_REJECT)
        return state;
    while (i < n) {
        if (state == FLARE_UTF8_ACCEPT) {
#if defined(__SSE2__)
            while (i + 16 <= n) {
                __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
                if (_mm_movemask_epi8(v) != 0)
                    break;
                i += 16;
            }
#endif
            while (i + 8 <= n) {
                uint64_t w;
                memcpy(&w, p + i, 8);
                if (w & 0x8080808080808080ull)
                    break;
                i += 8;
            }
            while (i < n && p[i] < 0x80)
                i++;
            if (i == n)
                break;
            state = lead(p[i++]);
            if (state == FLARE_UTF8_REJECT)
                return state;
            continue;
        }
        state = cont(state, p[i++]);
        if (state == FLARE_UTF8_REJECT)
            return state;
    }
    return state;
}
