/* Schema variants of flare_map_schema for the OpenAPI generator
 * (src/web/openapi.c). */
#ifndef FLARE_WEB_MAPPING_INT_H
#define FLARE_WEB_MAPPING_INT_H

#include "flare/mapping.h"

enum {
    /* OpenAPI 3.1 / JSON Schema 2020-12 as decoding really behaves: an
     * optional member is nullable (type ["T", "null"]: null counts as
     * absent), narrow integers carry their implied bounds */
    FLARE__SCHEMA_OPENAPI = 1u << 0,
    /* decoded with FLARE_MAP_PARTIAL: no top-level "required" */
    FLARE__SCHEMA_PARTIAL = 1u << 1,
    /* decoded with FLARE_MAP_REJECT_UNKNOWN: additionalProperties false at
     * every level */
    FLARE__SCHEMA_CLOSED = 1u << 2
};

/* The schema of the struct described by fields[0..n) (as flare_map_schema
 * with flags 0). Returns the writer's state. */
int flare__map_schema(const flare_field_t *fields, size_t n, unsigned flags, flare_json_t *w);

/* The schema of one scalar field (a parameter): type, format and
 * constraints, without its description. */
int flare__map_schema_scalar(const flare_field_t *f, flare_json_t *w);

#endif
