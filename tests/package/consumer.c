#include <flare/flare.h>
#include <stdio.h>

static int hello(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("hi"));
}

int main(void)
{
    flare_app_t *app = flare_app_new(NULL);
    if (app == NULL || flare_get(app, "/", hello, NULL) != 0)
        return 1;
    printf("%s\n", flare_strerror(FLARE_EPATTERN));
    flare_app_free(app);
    return 0;
}
