/* Request ids: accept a sane incoming X-Request-Id, else make one. */
#include <string.h>

#include "flare/middleware.h"
#include "core/random.h"

static bool id_ok(flare_str_t v)
{
    if (v.len == 0 || v.len > 128)
        return false;
    for (size_t i = 0; i < v.len; i++) {
        unsigned char ch = (unsigned char)v.ptr[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              strchr("-_.:/+=", ch) != NULL) ||
            ch == 0)
            return false;
    }
    return true;
}

static int reqid_before(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t id = flare_req_header(req, "X-Request-Id");
    char gen[FLARE__REQUEST_ID_LEN + 1];
    if (!id_ok(id)) {
        flare__request_id(gen);
        id = (flare_str_t){ gen, FLARE__REQUEST_ID_LEN };
    }
    int rc = flare_req_set_str(req, FLARE_REQUEST_ID_ATTR, id);
    if (rc == 0)
        rc = flare_res_header(res, FLARE_STR("X-Request-Id"), id);
    return rc;
}

int flare_request_id(flare_app_t *app, flare_middleware_t *out)
{
    if (app == NULL || out == NULL)
        return FLARE_EINVAL;
    *out = (flare_middleware_t){ "request-id", reqid_before, NULL, NULL };
    return 0;
}
