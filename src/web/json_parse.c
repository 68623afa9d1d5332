/* Strict JSON parsing behind Flare's own handles.
 *
 * A flare_json_doc_t and a flare_json_val_t are jansson json_t pointers
 * under another name (never dereferenced as Flare types): the document is
 * its root value and owns the tree through jansson's reference count, so a
 * document costs no allocation beyond jansson's own. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "flare/json.h"

#define J(v) ((json_t *)(v))
#define V(j) ((const flare_json_val_t *)(j))

/* jansson options: duplicate keys are an error; any value may be the root;
 * the EOF check stays on (trailing garbage is an error); "\u0000" stays
 * forbidden (C consumers would truncate at it). */
#define PARSE_FLAGS (JSON_REJECT_DUPLICATES | JSON_DECODE_ANY)

/* jansson stops at a NUL byte as if the input ended there, so "1\0" would
 * parse. A NUL is never valid in JSON text (raw control characters are
 * not allowed in strings either): reject it up front, with its place. */
static void nul_error(const char *json, size_t at, flare_json_error_t *err)
{
    if (err == NULL)
        return;
    int line = 1, column = 0;
    for (size_t i = 0; i <= at; i++) {
        if (json[i] == '\n') {
            line++;
            column = 0;
        } else if (((unsigned char)json[i] & 0xC0) != 0x80) {
            column++;
        }
    }
    err->line = line;
    err->column = column;
    err->position = at + 1;
    snprintf(err->reason, sizeof(err->reason), "NUL byte not allowed");
}

int flare_json_parse(const char *json, size_t len, flare_json_doc_t **out, flare_json_error_t *err)
{
    json_error_t je;
    *out = NULL;
    if (err != NULL)
        memset(err, 0, sizeof(*err));
    if (json == NULL && len != 0)
        return FLARE_EINVAL;
    const char *nul = len > 0 ? memchr(json, '\0', len) : NULL;
    if (nul != NULL) {
        nul_error(json, (size_t)(nul - json), err);
        return FLARE_EINVAL;
    }
    json_t *root = json_loadb(json != NULL ? json : "", len, PARSE_FLAGS, &je);
    if (root != NULL) {
        *out = (flare_json_doc_t *)root;
        return 0;
    }
    enum json_error_code code = json_error_code(&je);
    if (err != NULL) {
        size_t n = strnlen(je.text, JSON_ERROR_TEXT_LENGTH - 1);
        if (n >= sizeof(err->reason))
            n = sizeof(err->reason) - 1;
        memcpy(err->reason, je.text, n);
        err->reason[n] = '\0';
        if (code != json_error_out_of_memory && je.line > 0) {
            err->line = je.line;
            err->column = je.column > 0 ? je.column : 1;
            err->position = je.position > 0 ? (size_t)je.position : 0;
        }
    }
    return code == json_error_out_of_memory ? FLARE_ENOMEM : FLARE_EINVAL;
}

void flare_json_doc_free(flare_json_doc_t *doc)
{
    if (doc != NULL)
        json_decref(J(doc));
}

const flare_json_val_t *flare_json_doc_root(const flare_json_doc_t *doc)
{
    return (const flare_json_val_t *)doc;
}

int flare_json_error_write(const flare_json_error_t *err, flare_json_t *w)
{
    flare_json_object_begin(w);
    flare_json_kv_cstr(w, "error", "invalid JSON");
    if (err != NULL && err->line > 0) {
        flare_json_kv_int(w, "line", err->line);
        flare_json_kv_int(w, "column", err->column);
        flare_json_kv_int(w, "position", (int64_t)err->position);
    }
    if (err != NULL && err->reason[0] != '\0') {
        size_t n = strnlen(err->reason, sizeof(err->reason));
        flare_json_kv_str(w, "reason", (flare_str_t){ err->reason, n });
    }
    return flare_json_object_end(w);
}

flare_json_type_t flare_json_val_type(const flare_json_val_t *v)
{
    if (v == NULL)
        return FLARE_JSON_NONE;
    switch (json_typeof(J(v))) {
    case JSON_OBJECT:
        return FLARE_JSON_OBJECT;
    case JSON_ARRAY:
        return FLARE_JSON_ARRAY;
    case JSON_STRING:
        return FLARE_JSON_STRING;
    case JSON_INTEGER:
        return FLARE_JSON_INT;
    case JSON_REAL:
        return FLARE_JSON_DOUBLE;
    case JSON_TRUE:
    case JSON_FALSE:
        return FLARE_JSON_BOOL;
    case JSON_NULL:
        return FLARE_JSON_NULL;
    }
    return FLARE_JSON_NONE;
}

const char *flare_json_type_name(flare_json_type_t t)
{
    switch (t) {
    case FLARE_JSON_NULL:
        return "null";
    case FLARE_JSON_BOOL:
        return "boolean";
    case FLARE_JSON_INT:
        return "integer";
    case FLARE_JSON_DOUBLE:
        return "number";
    case FLARE_JSON_STRING:
        return "string";
    case FLARE_JSON_ARRAY:
        return "array";
    case FLARE_JSON_OBJECT:
        return "object";
    case FLARE_JSON_NONE:
        break;
    }
    return "none";
}

const flare_json_val_t *flare_json_val_get(const flare_json_val_t *v, const char *key)
{
    if (v == NULL || key == NULL || !json_is_object(J(v)))
        return NULL;
    return V(json_object_get(J(v), key));
}

const flare_json_val_t *flare_json_val_getn(const flare_json_val_t *v, flare_str_t key)
{
    if (v == NULL || (key.ptr == NULL && key.len != 0) || !json_is_object(J(v)))
        return NULL;
    return V(json_object_getn(J(v), key.ptr != NULL ? key.ptr : "", key.len));
}

size_t flare_json_val_len(const flare_json_val_t *v)
{
    if (v == NULL)
        return 0;
    if (json_is_array(J(v)))
        return json_array_size(J(v));
    if (json_is_object(J(v)))
        return json_object_size(J(v));
    return 0;
}

const flare_json_val_t *flare_json_val_at(const flare_json_val_t *v, size_t i)
{
    if (v == NULL || !json_is_array(J(v)))
        return NULL;
    return V(json_array_get(J(v), i));
}

int flare_json_val_next(const flare_json_val_t *obj, void **iter, flare_str_t *key,
                        const flare_json_val_t **member)
{
    if (obj == NULL || !json_is_object(J(obj)))
        return FLARE_EINVAL;
    void *it = *iter == NULL ? json_object_iter(J(obj)) : json_object_iter_next(J(obj), *iter);
    *iter = it;
    if (it == NULL)
        return FLARE_EEND;
    key->ptr = json_object_iter_key(it);
    key->len = json_object_iter_key_len(it);
    *member = V(json_object_iter_value(it));
    return 0;
}

int flare_json_val_str(const flare_json_val_t *v, flare_str_t *out)
{
    if (v == NULL || !json_is_string(J(v)))
        return FLARE_EINVAL;
    out->ptr = json_string_value(J(v));
    out->len = json_string_length(J(v));
    return 0;
}

int flare_json_val_int(const flare_json_val_t *v, int64_t *out)
{
    if (v == NULL || !json_is_integer(J(v)))
        return FLARE_EINVAL;
    *out = (int64_t)json_integer_value(J(v));
    return 0;
}

int flare_json_val_double(const flare_json_val_t *v, double *out)
{
    if (v == NULL || !json_is_number(J(v)))
        return FLARE_EINVAL;
    *out = json_number_value(J(v));
    return 0;
}

int flare_json_val_bool(const flare_json_val_t *v, bool *out)
{
    if (v == NULL || !json_is_boolean(J(v)))
        return FLARE_EINVAL;
    *out = json_is_true(J(v));
    return 0;
}

bool flare_json_val_is_null(const flare_json_val_t *v)
{
    return v != NULL && json_is_null(J(v));
}
