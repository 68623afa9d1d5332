/* Flare: JSON — a streaming writer and a strict parser.
 *
 * Writer: flare_json_t appends JSON text to a buffer the caller chooses —
 * a fixed buffer (no allocation ever), a buffer grown through an allocator
 * callback (the request arena), the heap, or any buffer managed by a grow
 * callback (which may also flush: stream the bytes written so far out and
 * start again at the beginning of the buffer). Nesting is checked (keys
 * only inside objects, every object value has a key, nothing after the
 * root value, ends match begins, depth <= FLARE_JSON_MAX_DEPTH). The first
 * error is sticky: every later call returns it without writing, and
 * flare_json_finish() reports it, so a handler may write a whole document
 * and check once.
 *
 * Parser: flare_json_parse() reads a complete document into a tree behind
 * opaque handles (the implementation uses jansson; no jansson type appears
 * here). It is strict: RFC 8259 only, duplicate object keys rejected,
 * nothing but whitespace after the value, integers must fit int64_t, reals
 * must be finite, "\u0000" and NUL bytes rejected, invalid UTF-8 rejected,
 * at most 2048 levels of nesting. Errors carry line, column, byte position
 * and a reason.
 *
 * Threads: a writer, a document and its values belong to one thread at a
 * time; different ones may be used on different threads concurrently. */
#ifndef FLARE_JSON_H
#define FLARE_JSON_H

#include <stdbool.h>
#include <stdint.h>

#include "flare/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== writer ============================================================== */

/* The deepest nesting a writer accepts (objects and arrays). */
#define FLARE_JSON_MAX_DEPTH 32

typedef struct flare_json flare_json_t;

/* Called when the buffer is full (len == cap). `need` is how many bytes
 * the writer would like (the rest of the current piece, at most 4096).
 * On success it returns 0 with at least one byte free, ideally `need`:
 * either it moves to a bigger buffer (update buf and cap, keeping the first
 * len bytes) or it consumes the bytes written so far (sends them on, then
 * sets len to 0). Every write is split across calls as needed, so a
 * flushing callback works with any buffer size (64 bytes or more avoids
 * many small flushes). A negative FLARE_E* return becomes the writer's
 * sticky error. */
typedef int (*flare_json_grow_fn)(flare_json_t *w, size_t need, void *ctx);

/* The writer state. Open so that it can live on the stack or in the
 * request arena with no allocation; read buf/len/cap (or use
 * flare_json_output), change them only from a grow callback. */
struct flare_json {
    char *buf;               /* output so far: buf[0..len), not NUL-terminated */
    size_t len;              /* bytes written */
    size_t cap;              /* bytes buf holds */
    flare_json_grow_fn grow; /* NULL: fixed buffer, FLARE_ETOOBIG when full */
    void *grow_ctx;          /* given to grow */
    flare_alloc_fn alloc;    /* for flare_json_init_alloc */
    int err;                 /* first error, sticky; 0 if none */
    uint32_t stack;          /* bit d: the container at depth d+1 is an object */
    uint8_t depth;           /* open containers */
    uint8_t flags;           /* internal state */
    uint8_t kind;            /* internal: which constructor made it (0 for the
                                flare_json_init* family), so that flare_json_end
                                can tell a flare_res_json writer without reading
                                past a plain one */
};

/* Writes into buf[0..cap) and never allocates; when the document does not
 * fit, the writer fails with FLARE_ETOOBIG. buf must outlive the writer. */
FLARE_API void flare_json_init(flare_json_t *w, char *buf, size_t cap);

/* Starts in buf[0..cap) (may be NULL, 0) and, when it is full, moves to a
 * buffer twice as big (at least 256 bytes) taken from alloc(ctx, n),
 * copying what was written. Buffers are never freed by the writer: with the
 * request arena (flare_req_alloc) they go when the response completes, and
 * the doubling bounds the waste to the final size. Allocation failure is
 * FLARE_ENOMEM. */
FLARE_API void flare_json_init_alloc(flare_json_t *w, char *buf, size_t cap, flare_alloc_fn alloc,
                                     void *ctx);

/* Grows with realloc(); flare_json_dispose() frees the buffer. For use
 * outside a request (tests, tools, startup). initial_cap may be 0. */
FLARE_API void flare_json_init_heap(flare_json_t *w, size_t initial_cap);

/* Starts in buf[0..cap) and calls grow(w, need, ctx) when it is full (see
 * flare_json_grow_fn). This is how a writer streams into a response. */
FLARE_API void flare_json_init_grow(flare_json_t *w, char *buf, size_t cap, flare_json_grow_fn grow,
                                    void *ctx);

/* Frees the buffer of a heap writer (a no-op for the other kinds). The
 * writer must be initialised again before reuse. */
FLARE_API void flare_json_dispose(flare_json_t *w);

/* Forgets what was written and any error; keeps the buffer and its kind. */
FLARE_API void flare_json_reset(flare_json_t *w);

/* Checks that exactly one complete value was written (every container
 * closed). Returns 0, the sticky error, or FLARE_EINVAL (which then becomes
 * sticky) when containers are still open or nothing was written. */
FLARE_API int flare_json_finish(flare_json_t *w);

/* The text written so far: a view of w->buf valid until the next write,
 * reset or dispose (and for a flushing grow callback, only the part not yet
 * flushed). */
FLARE_API flare_str_t flare_json_output(const flare_json_t *w);

/* Every function below returns 0 or the writer's (sticky) error:
 *   FLARE_EINVAL  misuse: value where a key is needed, key outside an object,
 *                 end that does not match, a second root value, NaN or
 *                 infinity, NULL key;
 *   FLARE_ETOOBIG the fixed buffer is full, or nesting deeper than
 *                 FLARE_JSON_MAX_DEPTH;
 *   FLARE_ENOMEM  the allocator failed; or a grow callback's code. */

/* Opens or closes an object ({ }) or an array ([ ]). */
FLARE_API int flare_json_object_begin(flare_json_t *w);
FLARE_API int flare_json_object_end(flare_json_t *w);
FLARE_API int flare_json_array_begin(flare_json_t *w);
FLARE_API int flare_json_array_end(flare_json_t *w);

/* The key of the next member of the current object (escaped like a string). */
FLARE_API int flare_json_key(flare_json_t *w, flare_str_t key);

/* A string value, escaped: '"' and '\' by backslash, the control
 * characters as \b \f \n \r \t or \u00XX, U+2028 and U+2029 as \u2028 and
 * \u2029 (so that the output is also valid JavaScript). Everything else is
 * copied as UTF-8. Invalid UTF-8 (bad or truncated sequences, overlong
 * forms, surrogates, code points above U+10FFFF) is never copied: each
 * maximal invalid subpart becomes U+FFFD, as the Unicode standard
 * recommends, so the output is always valid UTF-8. s.ptr may be NULL when
 * s.len is 0. */
FLARE_API int flare_json_str(flare_json_t *w, flare_str_t s);
/* Same for s, a NUL-terminated string; NULL writes null. */
FLARE_API int flare_json_cstr(flare_json_t *w, const char *s);
/* v as an exact decimal integer. */
FLARE_API int flare_json_int(flare_json_t *w, int64_t v);
FLARE_API int flare_json_uint(flare_json_t *w, uint64_t v);
/* v: the shortest of %.15g, %.16g, %.17g that reads back as the same double
 * (so 0.1 is "0.1", 1e21 is "1e+21"; integral values print without a
 * fraction: 2.0 is "2"). NaN and infinities have no JSON form: FLARE_EINVAL.
 * Independent of the locale's decimal separator. */
FLARE_API int flare_json_double(flare_json_t *w, double v);
FLARE_API int flare_json_bool(flare_json_t *w, bool v);
FLARE_API int flare_json_null(flare_json_t *w);
/* Pre-encoded JSON (json) copied as one value, unchecked: the caller guarantees it
 * is exactly one valid JSON value. */
FLARE_API int flare_json_raw(flare_json_t *w, flare_str_t json);

/* Key and value (v) in one call; key is a NUL-terminated string (usually a
 * literal). kv_object / kv_array write the key and open the container. */
FLARE_API int flare_json_kv_str(flare_json_t *w, const char *key, flare_str_t v);
FLARE_API int flare_json_kv_cstr(flare_json_t *w, const char *key, const char *v);
FLARE_API int flare_json_kv_int(flare_json_t *w, const char *key, int64_t v);
FLARE_API int flare_json_kv_double(flare_json_t *w, const char *key, double v);
FLARE_API int flare_json_kv_bool(flare_json_t *w, const char *key, bool v);
FLARE_API int flare_json_kv_null(flare_json_t *w, const char *key);
FLARE_API int flare_json_kv_object(flare_json_t *w, const char *key);
FLARE_API int flare_json_kv_array(flare_json_t *w, const char *key);

/* ==== parser ============================================================== */

/* A parsed document (owns the tree) and the values inside it. Values are
 * borrowed: valid until flare_json_doc_free(). */
typedef struct flare_json_doc flare_json_doc_t;
typedef struct flare_json_val flare_json_val_t;

/* The type of a parsed JSON value. */
typedef enum flare_json_type {
    FLARE_JSON_NONE = 0, /* a NULL value handle (absent member, index out of range) */
    FLARE_JSON_NULL,
    FLARE_JSON_BOOL,
    FLARE_JSON_INT,    /* a number without fraction or exponent, fits int64_t */
    FLARE_JSON_DOUBLE, /* any other number */
    FLARE_JSON_STRING,
    FLARE_JSON_ARRAY,
    FLARE_JSON_OBJECT
} flare_json_type_t;

/* Where and why JSON parsing failed. */
typedef struct flare_json_error {
    int line;         /* 1-based; 0 when not about a place in the input */
    int column;       /* 1-based, in characters (UTF-8 code points) on that line */
    size_t position;  /* bytes from the start of the input to just past the
                         offending token */
    char reason[160]; /* NUL-terminated English text, e.g. "duplicate object key
                         near '\"a\"'" (may quote input bytes) */
} flare_json_error_t;

/* Parses json[0..len) (need not be NUL-terminated; any top-level value is
 * accepted, not only objects). On success *out is a new document that the
 * caller frees with flare_json_doc_free (for a request, register that as a
 * cleanup hook: flare_req_on_cleanup). The tree is allocated with malloc,
 * independent of the input, which may be released afterwards.
 * Returns 0, FLARE_EINVAL (syntax or limit: *err says where and why; err
 * may be NULL) or FLARE_ENOMEM. *out is NULL on failure. */
FLARE_API int flare_json_parse(const char *json, size_t len, flare_json_doc_t **out,
                               flare_json_error_t *err);

/* Frees a document and every value in it. NULL is a no-op. */
FLARE_API void flare_json_doc_free(flare_json_doc_t *doc);

/* The root value. */
FLARE_API const flare_json_val_t *flare_json_doc_root(const flare_json_doc_t *doc);

/* Writes to w the body of a 400 answer for a parse error (err):
 *   {"error":"invalid JSON","line":L,"column":C,"position":P,"reason":"..."} */
FLARE_API int flare_json_error_write(const flare_json_error_t *err, flare_json_t *w);

/* Accessors. Every one accepts NULL (the result of a failed lookup) and
 * then returns FLARE_JSON_NONE / NULL / 0 / an error, so lookups chain. */
FLARE_API flare_json_type_t flare_json_val_type(const flare_json_val_t *v);
/* Name of type t ("object", "integer", ...); static storage. */
FLARE_API const char *flare_json_type_name(flare_json_type_t t);

/* Member of an object by key; NULL if v is not an object or has no such key. */
FLARE_API const flare_json_val_t *flare_json_val_get(const flare_json_val_t *v, const char *key);
FLARE_API const flare_json_val_t *flare_json_val_getn(const flare_json_val_t *v, flare_str_t key);
/* Number of elements of an array or members of an object; 0 for others. */
FLARE_API size_t flare_json_val_len(const flare_json_val_t *v);
/* Element i of an array; NULL if v is not an array or i is out of range. */
FLARE_API const flare_json_val_t *flare_json_val_at(const flare_json_val_t *v, size_t i);

/* Iterates the members of an object in document order: start with
 * *iter = NULL; returns 0 and sets key (a view valid as long as the
 * document) and *member, FLARE_EEND after the last member, FLARE_EINVAL
 * when obj is not an object. */
FLARE_API int flare_json_val_next(const flare_json_val_t *obj, void **iter, flare_str_t *key,
                                  const flare_json_val_t **member);

/* Typed reads: 0 and *out set, or FLARE_EINVAL (and *out untouched) when v
 * has another type. A string is a view valid as long as the document,
 * valid UTF-8 and NUL-terminated at ptr[len] (it never contains a NUL).
 * val_double also accepts integers (converted, possibly rounded);
 * val_int does not accept reals, even integral ones ("1.0"). */
FLARE_API int flare_json_val_str(const flare_json_val_t *v, flare_str_t *out);
FLARE_API int flare_json_val_int(const flare_json_val_t *v, int64_t *out);
FLARE_API int flare_json_val_double(const flare_json_val_t *v, double *out);
FLARE_API int flare_json_val_bool(const flare_json_val_t *v, bool *out);
FLARE_API bool flare_json_val_is_null(const flare_json_val_t *v);

#ifdef __cplusplus
}
#endif
#endif
