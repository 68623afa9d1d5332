/* Flare: struct <-> JSON mapping from a field-descriptor table.
 *
 * One table per struct is the single source of truth: it decodes and
 * validates a request body into the struct (reporting every invalid field,
 * not just the first), encodes the struct as JSON, and describes it as a
 * JSON Schema (for OpenAPI). The table is an open array of flare_field_t,
 * so tools may also walk it directly.
 *
 *     typedef struct todo { char title[201 * 4]; bool done; int64_t prio; } todo_t;
 *     static const flare_field_t todo_fields[] = {
 *         FLARE_FIELD_STR(todo_t, title, "title", FLARE_REQUIRED, FLARE_LEN(1, 200)),
 *         FLARE_FIELD_BOOL(todo_t, done, "done"),
 *         FLARE_FIELD_INT(todo_t, prio, "priority", FLARE_MIN(1), FLARE_MAX(5)),
 *     };
 *     ...
 *     todo_t t = { .prio = 3 };          // absent optional fields keep their value
 *     flare_map_errors_t errs;
 *     int rc = flare_map_decode(todo_fields, FLARE_MAP_N(todo_fields), body.ptr, body.len,
 *                               &t, NULL, &errs);
 *     if (rc == FLARE_EINVAL)            // 400 with flare_map_errors_write(&errs, w)
 *
 * The FLARE_FIELD_* macros check the member's C type at compile time
 * (_Generic): a mismatch does not compile.
 *
 * Supported member types:
 *   STRING  char name[N] (decoded NUL-terminated, at most N-1 bytes; a longer
 *           value is a validation error, never truncated) or flare_str_t
 *           (copied NUL-terminated into memory from the allocator in
 *           flare_map_opts_t).
 *   INT     signed char, short, int, long, long long (int8_t..int64_t); a
 *           value outside the member's range is a validation error.
 *   DOUBLE  double or float.
 *   BOOL    bool.
 *   OBJECT  a nested struct with its own table.
 *   ARRAY   a fixed-capacity array of any of the above scalars (or of structs
 *           with FLARE_FIELD_ARRAY_OF) plus a size_t member for the count.
 *
 * JSON null counts as absent. Absent members leave the struct member as it
 * was, so initialise defaults before decoding. */
#ifndef FLARE_MAPPING_H
#define FLARE_MAPPING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/common.h"
#include "flare/json.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The type of a struct member in a field table (flare_field_t). */
typedef enum flare_field_type {
    FLARE_FIELD_STRING = 1,
    FLARE_FIELD_INT,
    FLARE_FIELD_DOUBLE,
    FLARE_FIELD_BOOL,
    FLARE_FIELD_OBJECT,
    FLARE_FIELD_ARRAY
} flare_field_type_t;

/* One member of a struct. Fill it with the FLARE_FIELD_* macros below and
 * the validator macros (FLARE_REQUIRED, FLARE_MIN, ...) as extra arguments;
 * unused validators stay zero, which means "no constraint". */
typedef struct flare_field {
    const char *name;        /* JSON member name */
    flare_field_type_t type; /* the member's type */
    flare_field_type_t elem; /* ARRAY: element type (any but ARRAY) */
    size_t offset;           /* offsetof the member */
    /* Storage size of one value (for ARRAY: of one element): STRING 0 for a
     * flare_str_t, N for char[N]; INT 1, 2, 4 or 8; DOUBLE 4 (float) or 8;
     * BOOL sizeof(bool); OBJECT sizeof the nested struct. */
    size_t size;
    size_t capacity;     /* ARRAY: elements the member array holds */
    size_t count_offset; /* ARRAY: offsetof the size_t element count */
    bool required;       /* absent (or null) is an error */
    /* INT and DOUBLE: inclusive bounds. */
    bool has_min, has_max;
    int64_t min, max;
    /* DOUBLE only: inclusive fractional bounds. */
    bool has_dmin, has_dmax;
    double dmin, dmax;
    /* STRING (and ARRAY elements): length in Unicode code points (what a
     * user calls characters), not bytes; max_len 0: unbounded. */
    size_t min_len, max_len;
    /* ARRAY: number of elements; max_items 0: up to capacity (always
     * enforced: more than capacity elements is a validation error). */
    size_t min_items, max_items;
    /* STRING: a POSIX extended regular expression the whole value must
     * match (it is anchored as ^(pattern)$), bytewise unless the process
     * has set a UTF-8 LC_CTYPE. Compiled on first use, once per thread,
     * and cached (flare_map_check compiles it eagerly to report errors). */
    const char *pattern;
    /* OBJECT, or ARRAY of objects: the nested struct's table. */
    const struct flare_field *fields;
    size_t nfields;
    const char *description; /* optional, for documentation (schema) */
    /* optional: the reason reported to the client whenever this field's
     * value is refused (wrong type, length, range, pattern; for an array,
     * any of its elements), instead of the default one: words for the end
     * user ("letters, digits, '.', '_' or '-'"). "is required" and "unknown
     * field" keep theirs. Not copied: the table's string. */
    const char *message;
} flare_field_t;

/* The number of entries of a field table (an array, not a pointer). */
#define FLARE_MAP_N(table) (sizeof(table) / sizeof((table)[0]))

/* ---- validators (extra arguments of FLARE_FIELD_*) ---------------------- */
#define FLARE_REQUIRED       .required = true
#define FLARE_MIN(v)         .has_min = true, .min = (v)
#define FLARE_MAX(v)         .has_max = true, .max = (v)
#define FLARE_DMIN(v)        .has_dmin = true, .dmin = (v)
#define FLARE_DMAX(v)        .has_dmax = true, .dmax = (v)
#define FLARE_LEN(lo, hi)    .min_len = (lo), .max_len = (hi)
#define FLARE_ITEMS(lo, hi)  .min_items = (lo), .max_items = (hi)
#define FLARE_PATTERN(re)    .pattern = (re)
#define FLARE_DESCRIPTION(s) .description = (s)
#define FLARE_MESSAGE(s)     .message = (s)

/* ---- field macros ------------------------------------------------------- */
#define FLARE__M(T, m) (((T *)0)->m)

/* Element/scalar type and storage size, checked against the C type. */
/* clang-format off */
#define FLARE__TYPE_OF(e)                                 \
    _Generic(&(e),                                        \
        flare_str_t *: FLARE_FIELD_STRING,                \
        char (*)[sizeof(e)]: FLARE_FIELD_STRING,          \
        signed char *: FLARE_FIELD_INT,                   \
        short *: FLARE_FIELD_INT,                         \
        int *: FLARE_FIELD_INT,                           \
        long *: FLARE_FIELD_INT,                          \
        long long *: FLARE_FIELD_INT,                     \
        float *: FLARE_FIELD_DOUBLE,                      \
        double *: FLARE_FIELD_DOUBLE,                     \
        bool *: FLARE_FIELD_BOOL)
#define FLARE__STR_SIZE(e)                                \
    _Generic(&(e),                                        \
        flare_str_t *: (size_t)0,                         \
        char (*)[sizeof(e)]: sizeof(e))
#define FLARE__INT_SIZE(e)                                \
    _Generic(&(e),                                        \
        signed char *: sizeof(e),                         \
        short *: sizeof(e),                               \
        int *: sizeof(e),                                 \
        long *: sizeof(e),                                \
        long long *: sizeof(e))
#define FLARE__DOUBLE_SIZE(e)  _Generic(&(e), float *: sizeof(e), double *: sizeof(e))
#define FLARE__BOOL_SIZE(e)    _Generic(&(e), bool *: sizeof(e))
#define FLARE__SCALAR_SIZE(e)  _Generic(&(e), flare_str_t *: (size_t)0, default: sizeof(e))
#define FLARE__COUNT_OFF(T, c) _Generic(&FLARE__M(T, c), size_t *: offsetof(T, c))
/* clang-format on */
/* First of one or more arguments (ISO C: the inner macro always gets two). */
#define FLARE__FIRST(...)     FLARE__FIRST_(__VA_ARGS__, 0)
#define FLARE__FIRST_(a, ...) a

/* The field macros take the JSON name and then any validators:
 *     FLARE_FIELD_STR(T, member, "json_name", FLARE_REQUIRED, FLARE_LEN(1, 200))
 * (the name is the first variadic argument, so that a field without
 * validators is valid ISO C even under -pedantic). */

/* A string member: char name[N] or flare_str_t. */
#define FLARE_FIELD_STR(T, member, ...)                                   \
    {                                                                     \
        .type = FLARE_FIELD_STRING, .offset = offsetof(T, member),        \
        .size = FLARE__STR_SIZE(FLARE__M(T, member)), .name = __VA_ARGS__ \
    }
#define FLARE_FIELD_INT(T, member, ...)                                   \
    {                                                                     \
        .type = FLARE_FIELD_INT, .offset = offsetof(T, member),           \
        .size = FLARE__INT_SIZE(FLARE__M(T, member)), .name = __VA_ARGS__ \
    }
#define FLARE_FIELD_DOUBLE(T, member, ...)                                   \
    {                                                                        \
        .type = FLARE_FIELD_DOUBLE, .offset = offsetof(T, member),           \
        .size = FLARE__DOUBLE_SIZE(FLARE__M(T, member)), .name = __VA_ARGS__ \
    }
#define FLARE_FIELD_BOOL(T, member, ...)                                   \
    {                                                                      \
        .type = FLARE_FIELD_BOOL, .offset = offsetof(T, member),           \
        .size = FLARE__BOOL_SIZE(FLARE__M(T, member)), .name = __VA_ARGS__ \
    }
/* A nested struct member described by `table` (a complete array):
 *     FLARE_FIELD_OBJECT(T, member, "json_name", table, validators...) */
#define FLARE_FIELD_OBJECT(T, member, json_name, ...)                                           \
    {                                                                                           \
        .name = (json_name), .type = FLARE_FIELD_OBJECT, .offset = offsetof(T, member),         \
        .size = sizeof(FLARE__M(T, member)), .nfields = FLARE_MAP_N(FLARE__FIRST(__VA_ARGS__)), \
        .fields = __VA_ARGS__                                                                   \
    }
/* An array member of scalars (flare_str_t, char[N], integers, float,
 * double, bool) and its size_t count member:
 *     FLARE_FIELD_ARRAY(T, member, count_member, "json_name", validators...) */
#define FLARE_FIELD_ARRAY(T, member, count_member, ...)                                    \
    {                                                                                      \
        .type = FLARE_FIELD_ARRAY, .elem = FLARE__TYPE_OF(FLARE__M(T, member)[0]),         \
        .offset = offsetof(T, member), .size = FLARE__SCALAR_SIZE(FLARE__M(T, member)[0]), \
        .capacity = FLARE_MAP_N(FLARE__M(T, member)),                                      \
        .count_offset = FLARE__COUNT_OFF(T, count_member), .name = __VA_ARGS__             \
    }
/* An array member of structs described by `table`, and its size_t count:
 *     FLARE_FIELD_ARRAY_OF(T, member, count_member, "json_name", table, validators...) */
#define FLARE_FIELD_ARRAY_OF(T, member, count_member, json_name, ...)               \
    {                                                                               \
        .name = (json_name), .type = FLARE_FIELD_ARRAY, .elem = FLARE_FIELD_OBJECT, \
        .offset = offsetof(T, member), .size = sizeof(FLARE__M(T, member)[0]),      \
        .capacity = FLARE_MAP_N(FLARE__M(T, member)),                               \
        .count_offset = FLARE__COUNT_OFF(T, count_member),                          \
        .nfields = FLARE_MAP_N(FLARE__FIRST(__VA_ARGS__)), .fields = __VA_ARGS__    \
    }

/* ---- decoding ------------------------------------------------------------ */

enum {
    /* A member the table does not know is an error ("unknown field");
     * without it such members are ignored. Applies at every level. */
    FLARE_MAP_REJECT_UNKNOWN = 1u << 0,
    /* Top-level required fields may be absent (PATCH): only what is present
     * is decoded and validated. Nested objects are always complete. */
    FLARE_MAP_PARTIAL = 1u << 1
};

/* Options of flare_map_decode; a zeroed struct means the defaults. */
typedef struct flare_map_opts {
    unsigned flags;       /* FLARE_MAP_* */
    flare_alloc_fn alloc; /* for flare_str_t members (NULL: such members fail
                             with FLARE_ESTATE) */
    void *alloc_ctx;      /* given to alloc */
} flare_map_opts_t;

/* How many errors a flare_map_errors_t holds (more are counted in total). */
#define FLARE_MAP_MAX_ERRORS 16

/* One validation error: which field and why. */
typedef struct flare_map_error {
    char field[64];   /* path: "title", "address.zip", "tags[2]"; "" is the body
                         itself; truncated to fit */
    char reason[128]; /* "is required", "length must be 1..200", "has an
                         invalid format", or the field's FLARE_MESSAGE; never
                         a regular expression */
    /* the field's FLARE_PATTERN when the value did not match it (for the
     * developer; the table's string), else NULL */
    const char *pattern;
} flare_map_error_t;

/* The errors of a failed decode (flare_map_errors_write writes them). */
typedef struct flare_map_errors {
    size_t count;            /* entries in items[] */
    size_t total;            /* errors found; > count when some did not fit */
    bool invalid_json;       /* the body is not JSON: see json, items is empty */
    flare_json_error_t json; /* where and why the body is not JSON (invalid_json) */
    uint64_t present;        /* bit i: top-level fields[i] (i < 64) was present */
    flare_map_error_t items[FLARE_MAP_MAX_ERRORS]; /* the first errors found, in table order */
} flare_map_errors_t;

/* Parses json[0..len) and decodes it into *obj (a struct described by
 * fields[0..n)). Every field is checked and every problem recorded in
 * *errs (the first FLARE_MAP_MAX_ERRORS of them), in table order.
 * opts may be NULL (flags 0, no allocator).
 * Returns:
 *   0              valid; *obj holds the decoded values;
 *   FLARE_EINVAL   the client's fault (invalid JSON, not an object, or
 *                  validation errors): answer 400 with
 *                  flare_map_errors_write(errs, w); *obj is partly written;
 *   FLARE_ENOMEM   out of memory (parser or allocator);
 *   FLARE_EPATTERN a pattern in the table does not compile (server bug);
 *   FLARE_ESTATE   a flare_str_t member but no allocator (server bug).
 * Strings in flare_str_t members live as long as the allocator's memory;
 * nothing points into json. */
FLARE_API int flare_map_decode(const flare_field_t *fields, size_t n, const char *json, size_t len,
                               void *obj, const flare_map_opts_t *opts, flare_map_errors_t *errs);

/* The same (fields, n, obj, opts, errs) from an already parsed value v
 * (which must be an object). */
FLARE_API int flare_map_decode_val(const flare_field_t *fields, size_t n, const flare_json_val_t *v,
                                   void *obj, const flare_map_opts_t *opts,
                                   flare_map_errors_t *errs);

/* Writes to w the 400 body for a failed decode (errs):
 *   {"errors":[{"field":"title","reason":"length must be 1..200"},...]}
 * An error from a pattern also has the pattern, for developers (clients
 * show "reason"):
 *   {"field":"user","reason":"has an invalid format","pattern":"[a-z]+"}
 * or, when the body was not JSON, the flare_json_error_write body. */
FLARE_API int flare_map_errors_write(const flare_map_errors_t *errs, flare_json_t *w);

/* ---- encoding, schema, checking ----------------------------------------- */

/* Writes *obj, described by the table fields (n entries), to w as a JSON
 * object (one value: at the root, as an array element
 * or after a key), members in table order. A flare_str_t with ptr NULL is
 * written as null; arrays write min(count, capacity) elements. Returns the
 * writer's state (FLARE_EINVAL for a NaN or infinite double). */
FLARE_API int flare_map_encode(const flare_field_t *fields, size_t n, const void *obj,
                               flare_json_t *w);

/* Writes to w a JSON Schema (draft 2020-12, as used by OpenAPI 3.1) of
 * the struct described by fields (n entries): type, properties with their constraints (minLength,
 * maxLength, minimum, maximum, pattern, minItems, maxItems, format, description) and required. */
FLARE_API int flare_map_schema(const flare_field_t *fields, size_t n, flare_json_t *w);

/* Checks a table (fields, n entries) once at startup: names present and unique, types and
 * sizes coherent, min <= max, patterns compile (on this thread). Returns 0,
 * FLARE_EINVAL or FLARE_EPATTERN. Decoding works without it, but reports a
 * broken table only when a request reaches the broken field. */
FLARE_API int flare_map_check(const flare_field_t *fields, size_t n);

#ifdef __cplusplus
}
#endif
#endif
