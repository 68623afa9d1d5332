/* A route match: what the router's lookup fills (router/router.h) and the
 * exchange embeds (http/exchange.h), apart from the router itself so that
 * the exchange's includers do not see the route table. */
#ifndef FLARE_ROUTER_MATCH_H
#define FLARE_ROUTER_MATCH_H

#include <stdint.h>

#include "flare/common.h"

#define FLARE_ROUTER_MAX_PARAMS 16

typedef struct flare_route_param {
    flare_str_t name;  /* view into the router's copy of the pattern */
    flare_str_t value; /* view into the matched path (raw, not decoded) */
} flare_route_param_t;

typedef struct flare_route_match {
    void *route;      /* the `data` given to flare__router_add, or NULL */
    uint32_t allowed; /* when route == NULL: bit (1u << method) set for each
                         method that has a route for this path; 0 => 404 */
    unsigned nparams;
    flare_route_param_t params[FLARE_ROUTER_MAX_PARAMS];
} flare_route_match_t;

#endif
