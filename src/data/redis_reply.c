/* hiredis's redisReply tree as a flare_redis_reply_t tree: counted first,
 * then filled into one allocation, so a reply of any depth costs at most
 * one malloc (none for a scalar reply, the common case). */
#include <stdlib.h>
#include <string.h>

#include "data/redis_int.h"

static const char *const type_names[] = {
    [FLARE_REDIS_NIL] = "nil",       [FLARE_REDIS_INT] = "int",     [FLARE_REDIS_STRING] = "string",
    [FLARE_REDIS_STATUS] = "status", [FLARE_REDIS_ERROR] = "error", [FLARE_REDIS_ARRAY] = "array",
    [FLARE_REDIS_MAP] = "map",       [FLARE_REDIS_SET] = "set",     [FLARE_REDIS_PUSH] = "push",
    [FLARE_REDIS_DOUBLE] = "double", [FLARE_REDIS_BOOL] = "bool",   [FLARE_REDIS_BIGNUM] = "bignum",
    [FLARE_REDIS_VERB] = "verb",
};

const char *flare_redis_type_name(flare_redis_type_t t)
{
    return (unsigned)t < sizeof(type_names) / sizeof(type_names[0]) ? type_names[t] : "unknown";
}

static bool is_aggregate(int type)
{
    switch (type) {
    case REDIS_REPLY_ARRAY:
#ifdef REDIS_REPLY_MAP
    case REDIS_REPLY_MAP:
    case REDIS_REPLY_SET:
    case REDIS_REPLY_PUSH:
#endif
        return true;
    default:
        return false;
    }
}

/* Nodes below r (r itself not counted). */
static size_t count_below(const redisReply *r)
{
    if (!is_aggregate(r->type))
        return 0;
    size_t n = r->elements;
    for (size_t i = 0; i < r->elements; i++)
        n += count_below(r->element[i]);
    return n;
}

/* Fills *out from r; r's elements take nodes from *pool onwards. */
static int fill(const redisReply *r, flare_redis_reply_t *out, flare_redis_reply_t **pool)
{
    memset(out, 0, sizeof(*out));
    switch (r->type) {
    case REDIS_REPLY_NIL:
        out->type = FLARE_REDIS_NIL;
        return 0;
    case REDIS_REPLY_INTEGER:
        out->type = FLARE_REDIS_INT;
        out->integer = r->integer;
        return 0;
    case REDIS_REPLY_STRING:
        out->type = FLARE_REDIS_STRING;
        break;
    case REDIS_REPLY_STATUS:
        out->type = FLARE_REDIS_STATUS;
        break;
    case REDIS_REPLY_ERROR:
        out->type = FLARE_REDIS_ERROR;
        break;
#ifdef REDIS_REPLY_MAP
    case REDIS_REPLY_DOUBLE:
        out->type = FLARE_REDIS_DOUBLE;
        out->dval = r->dval;
        break;
    case REDIS_REPLY_BOOL:
        out->type = FLARE_REDIS_BOOL;
        out->integer = r->integer != 0;
        return 0;
    case REDIS_REPLY_BIGNUM:
        out->type = FLARE_REDIS_BIGNUM;
        break;
    case REDIS_REPLY_VERB:
        out->type = FLARE_REDIS_VERB;
        break;
    case REDIS_REPLY_MAP:
        out->type = FLARE_REDIS_MAP;
        goto aggregate;
    case REDIS_REPLY_SET:
        out->type = FLARE_REDIS_SET;
        goto aggregate;
    case REDIS_REPLY_PUSH:
        out->type = FLARE_REDIS_PUSH;
        goto aggregate;
#endif
    case REDIS_REPLY_ARRAY:
        out->type = FLARE_REDIS_ARRAY;
#ifdef REDIS_REPLY_MAP
    aggregate :
#endif
    {
        flare_redis_reply_t *kids = *pool;
        if (r->elements > 0) /* the pool is NULL for an empty tree */
            *pool += r->elements;
        out->n = r->elements;
        out->elem = r->elements > 0 ? kids : NULL;
        for (size_t i = 0; i < r->elements; i++) {
            int rc = fill(r->element[i], &kids[i], pool);
            if (rc != 0)
                return rc;
        }
        return 0;
    }
    default:
        return FLARE_EINVAL;
    }
    out->str = (flare_str_t){ r->str != NULL ? r->str : "", r->str != NULL ? (size_t)r->len : 0 };
    return 0;
}

int flare__redis_reply_build(const redisReply *r, flare_redis_reply_t *root,
                             flare_redis_reply_t **heap)
{
    *heap = NULL;
    size_t n = count_below(r);
    flare_redis_reply_t *pool = NULL;
    if (n > 0) {
        pool = malloc(n * sizeof(*pool));
        if (pool == NULL)
            return FLARE_ENOMEM;
    }
    flare_redis_reply_t *next = pool;
    int rc = fill(r, root, &next);
    if (rc != 0) {
        free(pool);
        return rc;
    }
    *heap = pool;
    return 0;
}
