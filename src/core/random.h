/* Randomness (internal): session ids and tokens for the web layer, request
 * and log ids.
 *
 * Two sources, for two jobs:
 *   - secrets (session ids, tokens): the kernel CSPRNG, getrandom(2), on
 *     every call; fork-safe, never predictable;
 *   - identifiers that only need to be unique (request ids): a per-thread
 *     xoshiro256** generator seeded from getrandom on first use — no lock,
 *     no syscall after the first call. Not for secrets. A forked child
 *     that keeps using a parent thread's state repeats its sequence; call
 *     flare__rand_reseed() in the child. */
#ifndef FLARE_CORE_RANDOM_H
#define FLARE_CORE_RANDOM_H

#include <stddef.h>
#include <stdint.h>

/* Fills buf with n bytes from the kernel CSPRNG (retrying on EINTR and
 * short reads). Returns 0 or FLARE_ESYS. */
int flare__random_bytes(void *buf, size_t n);

/* A 128-bit session id from the kernel CSPRNG, as 32 lower-case hex
 * characters or 22 base64url characters (no padding), plus a NUL.
 * Returns 0 or FLARE_ESYS. */
#define FLARE__SESSION_ID_HEX_LEN 32
#define FLARE__SESSION_ID_B64_LEN 22
int flare__session_id_hex(char out[FLARE__SESSION_ID_HEX_LEN + 1]);
int flare__session_id_b64(char out[FLARE__SESSION_ID_B64_LEN + 1]);

/* Next 64 bits of this thread's fast generator. */
uint64_t flare__rand64(void);

/* A uniformly distributed integer in [0, bound) (bound > 0), no modulo
 * bias (rejection sampling). */
uint64_t flare__rand_below(uint64_t bound);

/* Seeds this thread's generator again from getrandom. */
void flare__rand_reseed(void);

/* A request id: 16 lower-case hex characters (64 random bits) plus a NUL. */
#define FLARE__REQUEST_ID_LEN 16
void flare__request_id(char out[FLARE__REQUEST_ID_LEN + 1]);

#endif
