/* Kernel CSPRNG for secrets, per-thread xoshiro256** for ids. */
#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "flare/common.h"
#include "core/random.h"

int flare__random_bytes(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return FLARE_ESYS;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static const char hex[] = "0123456789abcdef";

int flare__session_id_hex(char out[FLARE__SESSION_ID_HEX_LEN + 1])
{
    unsigned char b[16];
    if (flare__random_bytes(b, sizeof(b)) < 0)
        return FLARE_ESYS;
    for (size_t i = 0; i < sizeof(b); i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[FLARE__SESSION_ID_HEX_LEN] = '\0';
    return 0;
}

int flare__session_id_b64(char out[FLARE__SESSION_ID_B64_LEN + 1])
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned char b[16];
    if (flare__random_bytes(b, sizeof(b)) < 0)
        return FLARE_ESYS;
    size_t o = 0;
    for (size_t i = 0; i < 15; i += 3) {
        uint32_t v = (uint32_t)b[i] << 16 | (uint32_t)b[i + 1] << 8 | b[i + 2];
        out[o++] = b64[v >> 18];
        out[o++] = b64[v >> 12 & 63];
        out[o++] = b64[v >> 6 & 63];
        out[o++] = b64[v & 63];
    }
    out[o++] = b64[b[15] >> 2];
    out[o++] = b64[(b[15] & 3) << 4];
    out[o] = '\0';
    return 0;
}

/* ---- xoshiro256** (Blackman & Vigna), per thread -------------------------- */

static _Thread_local uint64_t rng_s[4];
static _Thread_local int rng_seeded;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

void flare__rand_reseed(void)
{
    uint64_t seed[4];
    if (flare__random_bytes(seed, sizeof(seed)) < 0) {
        /* No getrandom (very old kernel, seccomp): fall back on values that
         * differ between threads and runs. Uniqueness only, not secrecy. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        x ^= (uint64_t)(uintptr_t)&rng_s ^ (uint64_t)getpid() << 32;
        for (int i = 0; i < 4; i++)
            seed[i] = splitmix64(&x);
    }
    /* Pass the seed through splitmix64 so that no state is all zero. */
    for (int i = 0; i < 4; i++) {
        uint64_t x = seed[i];
        rng_s[i] = splitmix64(&x);
    }
    if ((rng_s[0] | rng_s[1] | rng_s[2] | rng_s[3]) == 0)
        rng_s[0] = 1;
    rng_seeded = 1;
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t flare__rand64(void)
{
    if (rng_seeded == 0)
        flare__rand_reseed();
    uint64_t *s = rng_s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t flare__rand_below(uint64_t bound)
{
    if (bound == 0)
        return 0;
    /* Reject the first 2^64 mod bound values so that every residue is
     * equally likely; at most one retry in two even for the worst bound. */
    uint64_t threshold = (0 - bound) % bound;
    uint64_t r;
    do
        r = flare__rand64();
    while (r < threshold);
    return r % bound;
}

void flare__request_id(char out[FLARE__REQUEST_ID_LEN + 1])
{
    uint64_t v = flare__rand64();
    for (int i = FLARE__REQUEST_ID_LEN - 1; i >= 0; i--) {
        out[i] = hex[v & 15];
        v >>= 4;
    }
    out[FLARE__REQUEST_ID_LEN] = '\0';
}
