/* libFuzzer target: JSON parser, writer and struct mapping.
 *
 * Checked (abort() on violation):
 *   - a document that parses is written back with the writer (nesting up to
 *     FLARE_JSON_MAX_DEPTH, else FLARE_ETOOBIG), the output parses again
 *     and holds the same values (numbers compared by value: 1.0 may come
 *     back as 1);
 *   - a parse error has a place (line >= 1) and its 400 body is valid JSON;
 *   - the input written as one JSON string always gives valid JSON, which
 *     parses back to the input itself when the input is valid UTF-8 without
 *     NUL;
 *   - struct mapping of the input never fails except with FLARE_EINVAL, and
 *     its error body is valid JSON. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flare/json.h"
#include "flare/mapping.h"

#define CHECK(x)     \
    do {             \
        if (!(x))    \
            abort(); \
    } while (0)

static void write_val(const flare_json_val_t *v, flare_json_t *w)
{
    flare_str_t s;
    int64_t i;
    double d;
    bool b;
    switch (flare_json_val_type(v)) {
    case FLARE_JSON_NULL:
        flare_json_null(w);
        break;
    case FLARE_JSON_BOOL:
        CHECK(flare_json_val_bool(v, &b) == 0);
        flare_json_bool(w, b);
        break;
    case FLARE_JSON_INT:
        CHECK(flare_json_val_int(v, &i) == 0);
        flare_json_int(w, i);
        break;
    case FLARE_JSON_DOUBLE:
        CHECK(flare_json_val_double(v, &d) == 0 && isfinite(d));
        flare_json_double(w, d);
        break;
    case FLARE_JSON_STRING:
        CHECK(flare_json_val_str(v, &s) == 0 && s.ptr[s.len] == '\0');
        flare_json_str(w, s);
        break;
    case FLARE_JSON_ARRAY:
        flare_json_array_begin(w);
        for (size_t k = 0; k < flare_json_val_len(v); k++)
            write_val(flare_json_val_at(v, k), w);
        flare_json_array_end(w);
        break;
    case FLARE_JSON_OBJECT: {
        void *it = NULL;
        flare_str_t key;
        const flare_json_val_t *m;
        flare_json_object_begin(w);
        while (flare_json_val_next(v, &it, &key, &m) == 0) {
            flare_json_key(w, key);
            write_val(m, w);
        }
        flare_json_object_end(w);
        break;
    }
    case FLARE_JSON_NONE:
        abort();
    }
}

static bool same(const flare_json_val_t *a, const flare_json_val_t *b)
{
    flare_json_type_t ta = flare_json_val_type(a), tb = flare_json_val_type(b);
    bool na = ta == FLARE_JSON_INT || ta == FLARE_JSON_DOUBLE;
    bool nb = tb == FLARE_JSON_INT || tb == FLARE_JSON_DOUBLE;
    if (na && nb) {
        int64_t x, y;
        if (ta == FLARE_JSON_INT && tb == FLARE_JSON_INT)
            return flare_json_val_int(a, &x) == 0 && flare_json_val_int(b, &y) == 0 && x == y;
        double dx, dy;
        flare_json_val_double(a, &dx);
        flare_json_val_double(b, &dy);
        return dx == dy;
    }
    if (ta != tb)
        return false;
    switch (ta) {
    case FLARE_JSON_BOOL: {
        bool x, y;
        flare_json_val_bool(a, &x);
        flare_json_val_bool(b, &y);
        return x == y;
    }
    case FLARE_JSON_STRING: {
        flare_str_t x, y;
        flare_json_val_str(a, &x);
        flare_json_val_str(b, &y);
        return flare_str_eq(x, y);
    }
    case FLARE_JSON_ARRAY:
        if (flare_json_val_len(a) != flare_json_val_len(b))
            return false;
        for (size_t k = 0; k < flare_json_val_len(a); k++) {
            if (!same(flare_json_val_at(a, k), flare_json_val_at(b, k)))
                return false;
        }
        return true;
    case FLARE_JSON_OBJECT: {
        if (flare_json_val_len(a) != flare_json_val_len(b))
            return false;
        void *it = NULL;
        flare_str_t key;
        const flare_json_val_t *m;
        while (flare_json_val_next(a, &it, &key, &m) == 0) {
            if (!same(m, flare_json_val_getn(b, key)))
                return false;
        }
        return true;
    }
    default:
        return true;
    }
}

static void check_valid_json(flare_str_t s)
{
    flare_json_doc_t *doc;
    flare_json_error_t err;
    CHECK(flare_json_parse(s.ptr, s.len, &doc, &err) == 0);
    flare_json_doc_free(doc);
}

static bool valid_utf8_no_nul(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c == 0)
            return false;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + len > n)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (p[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

typedef struct inner {
    char k[8];
} inner_t;

typedef struct thing {
    char name[16];
    flare_str_t note;
    int id;
    double score;
    bool on;
    short list[4];
    size_t nlist;
    inner_t sub;
} thing_t;

static const flare_field_t inner_fields[] = {
    FLARE_FIELD_STR(inner_t, k, "k", FLARE_REQUIRED, FLARE_PATTERN("[a-z]*")),
};

static const flare_field_t thing_fields[] = {
    FLARE_FIELD_STR(thing_t, name, "name", FLARE_REQUIRED, FLARE_LEN(1, 10)),
    FLARE_FIELD_STR(thing_t, note, "note"),
    FLARE_FIELD_INT(thing_t, id, "id", FLARE_MIN(0)),
    FLARE_FIELD_DOUBLE(thing_t, score, "score", FLARE_DMIN(-1), FLARE_DMAX(1)),
    FLARE_FIELD_BOOL(thing_t, on, "on"),
    FLARE_FIELD_ARRAY(thing_t, list, nlist, "list", FLARE_ITEMS(1, 3)),
    FLARE_FIELD_OBJECT(thing_t, sub, "sub", inner_fields),
};

static char arena[1 << 17];
static size_t arena_used;

static void *arena_alloc(void *ctx, size_t n)
{
    (void)ctx;
    if (n > sizeof(arena) - arena_used)
        return NULL;
    void *p = arena + arena_used;
    arena_used += n;
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *in = malloc(size != 0 ? size : 1);
    CHECK(in != NULL);
    memcpy(in, data, size);

    /* parse, write back, parse again */
    flare_json_doc_t *doc = NULL;
    flare_json_error_t err;
    int rc = flare_json_parse(in, size, &doc, &err);
    flare_json_t w;
    flare_json_init_heap(&w, 0);
    if (rc == 0) {
        write_val(flare_json_doc_root(doc), &w);
        int frc = flare_json_finish(&w);
        CHECK(frc == 0 || frc == FLARE_ETOOBIG);
        if (frc == 0) {
            flare_json_doc_t *again = NULL;
            CHECK(flare_json_parse(w.buf, w.len, &again, &err) == 0);
            CHECK(same(flare_json_doc_root(doc), flare_json_doc_root(again)));
            flare_json_doc_free(again);
        }
        flare_json_doc_free(doc);
    } else {
        CHECK(rc == FLARE_EINVAL);
        CHECK(err.line >= 1 && err.column >= 1 && err.position <= size + 1);
        CHECK(err.reason[0] != '\0');
        CHECK(flare_json_error_write(&err, &w) == 0 && flare_json_finish(&w) == 0);
        check_valid_json(flare_json_output(&w));
    }

    /* the input as one string */
    flare_json_reset(&w);
    CHECK(flare_json_str(&w, (flare_str_t){ in, size }) == 0 && flare_json_finish(&w) == 0);
    if (memchr(in, 0, size) == NULL) {
        check_valid_json(flare_json_output(&w));
        if (valid_utf8_no_nul(data, size)) {
            flare_json_doc_t *s = NULL;
            CHECK(flare_json_parse(w.buf, w.len, &s, NULL) == 0);
            flare_str_t back;
            CHECK(flare_json_val_str(flare_json_doc_root(s), &back) == 0);
            CHECK(back.len == size && memcmp(back.ptr, in, size) == 0);
            flare_json_doc_free(s);
        }
    }

    /* struct mapping */
    thing_t t;
    memset(&t, 0, sizeof(t));
    flare_map_errors_t errs;
    flare_map_opts_t opts = { FLARE_MAP_REJECT_UNKNOWN, arena_alloc, NULL };
    arena_used = 0;
    rc = flare_map_decode(thing_fields, FLARE_MAP_N(thing_fields), in, size, &t, &opts, &errs);
    CHECK(rc == 0 || rc == FLARE_EINVAL);
    CHECK(errs.count <= FLARE_MAP_MAX_ERRORS && errs.count <= errs.total);
    flare_json_reset(&w);
    if (rc == 0) {
        CHECK(errs.total == 0);
        CHECK(strlen(t.name) >= 1 && t.id >= 0 && t.nlist <= 3);
        CHECK(t.nlist >= 1 || !(errs.present & (1u << 5))); /* "list" is optional */
        CHECK(flare_map_encode(thing_fields, FLARE_MAP_N(thing_fields), &t, &w) == 0);
    } else {
        CHECK(errs.total > 0);
        CHECK(flare_map_errors_write(&errs, &w) == 0);
    }
    CHECK(flare_json_finish(&w) == 0);
    check_valid_json(flare_json_output(&w));

    flare_json_dispose(&w);
    free(in);
    return 0;
}
