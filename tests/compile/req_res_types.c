/* flare_req_t and flare_res_t are distinct types: passing one where the
 * other is expected must not compile. Built by tests/CMakeLists.txt once per
 * case with -DCASE=n (-fsyntax-only -Werror): case 0 is the correct code and
 * must compile, every other case swaps the two somewhere and must fail with
 * an incompatible-pointer-types diagnostic. */
#include "flare/flare.h"
#include "flare/ws.h"

#ifndef CASE
#define CASE 0
#endif

static int handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
#if CASE == 1 /* a request where a response goes */
    (void)res;
    return flare_res_send(req, 200, FLARE_STR("text/plain"), FLARE_STR("x"));
#elif CASE == 2 /* a response where a request goes */
    (void)req;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), flare_req_path(res));
#elif CASE == 3 /* the web layer's helpers */
    (void)res;
    return flare_res_cookie(req, &(flare_cookie_t){ 0 });
#else
    return flare_res_send(res, 200, FLARE_STR("text/plain"), flare_req_path(req));
#endif
}

static int before(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)res;
    (void)ud;
    return 0;
}

static void after(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)res;
    (void)ud;
}

#if CASE == 4 /* a handler with its parameters swapped */
static int swapped(flare_res_t *res, flare_req_t *req, void *ud)
{
    (void)res;
    (void)req;
    (void)ud;
    return 0;
}
#elif CASE == 5 /* an after hook with its parameters swapped */
static void swapped_after(flare_res_t *res, flare_req_t *req, void *ud)
{
    (void)res;
    (void)req;
    (void)ud;
}
#endif

int main(void)
{
    flare_app_t *app = flare_app_new(NULL);
    flare_get(app, "/", handler, NULL);
#if CASE == 4
    flare_get(app, "/swapped", swapped, NULL);
#endif
    flare_middleware_t mw = { "m", before, after, NULL };
#if CASE == 5 /* a middleware hook with its parameters swapped */
    mw.after = swapped_after;
#endif
    flare_use(app, &mw);
    flare_app_free(app);
    return 0;
}
