/* Internal core utilities: small inline helpers shared by every layer. */
#ifndef FLARE_CORE_H
#define FLARE_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/common.h"

#define flare__likely(x)     __builtin_expect(!!(x), 1)
#define flare__unlikely(x)   __builtin_expect(!!(x), 0)
#define FLARE__ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* FLARE__ASAN: AddressSanitizer replaces malloc. FLARE__SANITIZED: any
 * sanitizer that replaces malloc (ASan, TSan). There glibc's malloc is never
 * called, so the first malloc_trim sets its arena up, and two workers
 * trimming at once race in that set-up (one walks bins the other has not
 * filled yet): glibc's malloc functions are not called at all. */
#if defined(__SANITIZE_ADDRESS__)
#define FLARE__ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FLARE__ASAN 1
#endif
#endif
#if defined(FLARE__ASAN) || defined(__SANITIZE_THREAD__)
#define FLARE__SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FLARE__SANITIZED 1
#endif
#endif

/* FNV-1a, 64 bits: the hash of every table keyed by bytes (SQL texts,
 * session ids, channel names, paths). Not for keys an attacker picks to
 * collide where a bucket's length matters: those tables bound their chains. */
static inline uint64_t flare__hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static inline unsigned char flare__lower(unsigned char c)
{
    return (unsigned char)((unsigned)(c - 'A') < 26u ? c | 0x20 : c);
}

/* Case-insensitive compare of a view against a lower-case literal. */
static inline bool flare__ieq_lit(flare_str_t s, const char *lower, size_t n)
{
    if (s.len != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (flare__lower((unsigned char)s.ptr[i]) != (unsigned char)lower[i])
            return false;
    }
    return true;
}
#define FLARE__IEQ(s, lit) flare__ieq_lit((s), lit, sizeof(lit) - 1)

/* A header field value may hold HTAB, SP, visible ASCII and obs-text, but no
 * other control byte (CR, LF, NUL, DEL...): nothing can end the header. */
static inline bool flare__field_value_ok(flare_str_t s)
{
    for (size_t i = 0; i < s.len; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return false;
    }
    return true;
}

/* The value of a hex digit, or -1. */
static inline int flare__hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (unsigned char)(c | 0x20);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* OWS (RFC 9110 section 5.6.3): space or horizontal tab. */
static inline bool flare__is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Records the cause of a failure for flare_last_error()/flare_last_errno()
 * on this thread and returns code, so a failing path reads
 *     return flare__fail(FLARE_EBIND, errno, "bind %s", addr);
 * With sys_errno != 0, ": <strerror(sys_errno)>" is appended to the message.
 * Off the hot path only (it formats). */
int flare__fail(int code, int sys_errno, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Copies n header fields into one heap block, freed with one free(*out):
 * the array, then each name and value with a NUL after it, so the copy
 * outlives the buffer the views pointed into (a client's answer handed to
 * its caller). n == 0 still gives a block. 0 or FLARE_ENOMEM (*out NULL). */
int flare__fields_copy(const flare_header_t *in, size_t n, flare_header_t **out);

/* Reads exactly len bytes of fd from offset off (pread, EINTR retried).
 * 0, or FLARE_EIO when the file ends first or the read fails. */
int flare__pread_all(int fd, char *dst, uint64_t off, size_t len);

extern const char flare__digits2[201]; /* "00".."99" */

/* Writes v in decimal at p, returns the number of digits (at most 20).
 * Two digits at a time from a table: Content-Length is formatted on every
 * response (52 -> ~20 instructions for "13" measured with callgrind).
 * Inline: an out-of-line call costs ~10 more on that path. */
static inline size_t flare__u64toa(char *p, uint64_t v)
{
    if (v < 10) {
        p[0] = (char)('0' + v);
        return 1;
    }
    if (v < 100) {
        memcpy(p, flare__digits2 + 2 * v, 2);
        return 2;
    }
    char tmp[20];
    size_t n = sizeof(tmp);
    while (v >= 100) {
        n -= 2;
        memcpy(tmp + n, flare__digits2 + 2 * (v % 100), 2);
        v /= 100;
    }
    if (v >= 10) {
        n -= 2;
        memcpy(tmp + n, flare__digits2 + 2 * v, 2);
    } else {
        tmp[--n] = (char)('0' + v);
    }
    memcpy(p, tmp + n, sizeof(tmp) - n);
    return sizeof(tmp) - n;
}

/* Copies n bytes from src to dst (not overlapping). Short copies, the
 * common Content-Type and small body, are two overlapping moves of 8 or 16
 * bytes inline, each within [src, src + n): a call to memcpy costs more
 * than such a copy. Longer ones (and n < 8) go to memcpy. */
static inline void flare__copy(void *dst, const void *src, size_t n)
{
    char *d = dst;
    const char *s = src;
    if (n - 8 <= 24) {
        uint64_t a, b;
        if (n >= 16) {
            uint64_t c, e;
            memcpy(&a, s, 8);
            memcpy(&b, s + 8, 8);
            memcpy(&c, s + n - 16, 8);
            memcpy(&e, s + n - 8, 8);
            memcpy(d, &a, 8);
            memcpy(d + 8, &b, 8);
            memcpy(d + n - 16, &c, 8);
            memcpy(d + n - 8, &e, 8);
        } else {
            memcpy(&a, s, 8);
            memcpy(&b, s + n - 8, 8);
            memcpy(d, &a, 8);
            memcpy(d + n - 8, &b, 8);
        }
        return;
    }
    memcpy(d, s, n);
}

/* Writes v in lowercase hex (no prefix) at p, returns the digits (1 to 16). */
size_t flare__u64tohex(char *p, uint64_t v);

/* tchar (RFC 9110 section 5.6.2): the bytes of a token, which methods,
 * field names, chunk-extension names and values, cookie names are made of.
 * One table (core/chars.c) for every token check: a byte costs one load. */
extern const uint8_t flare__tchar[256];

static inline bool flare__is_tchar(unsigned char c)
{
    return flare__tchar[c] != 0;
}

/* token = 1*tchar */
static inline bool flare__is_token(flare_str_t s)
{
    if (s.len == 0 || s.ptr == NULL)
        return false;
    for (size_t i = 0; i < s.len; i++) {
        if (!flare__is_tchar((unsigned char)s.ptr[i]))
            return false;
    }
    return true;
}

#endif
