/* Helpers the showcase's parts share (showcase.h). */
#include <stdbool.h>
#include <stddef.h>

#include <flare/flare.h>
#include <flare/json.h>

#include "showcase.h"

int showcase_json_error(flare_res_t *res, int status, const char *msg)
{
    flare_json_t *j = flare_res_json(res, status);
    if (j == NULL)
        return FLARE_ENOMEM;
    flare_json_object_begin(j);
    flare_json_kv_cstr(j, "error", msg);
    flare_json_object_end(j);
    return flare_json_end(j);
}

bool showcase_valid_name(flare_str_t s)
{
    if (s.len == 0 || s.len > 32)
        return false;
    for (size_t i = 0; i < s.len; i++) {
        char c = s.ptr[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return false;
    }
    return true;
}
