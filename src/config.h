/* The configuration's defaults and bounds (config.c), for the app and the
 * settings loaders (obs/settings*.c). */
#ifndef FLARE_CONFIG_H
#define FLARE_CONFIG_H

#include "flare/flare.h"

/* config.c: *out = *in (NULL: the defaults) with every zero field set to
 * its default, then checked. 0, or FLARE_EINVAL with flare_last_error()
 * naming the field and its bound. */
int flare__config_resolve(flare_config_t *out, const flare_config_t *in);

#endif
