/* An app of an installed Flare that documents a route and serves Swagger UI:
 * the package check (check.sh) asks it for /docs/ with the build tree out of
 * reach. Usage: openapi_app HOST:PORT */
#include <flare/flare.h>
#include <stdio.h>

static int hello(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("Hello, World!"));
}

static const flare_op_response_t hello_res[] = {
    { 200, "a greeting", { .content_type = "text/plain" } },
};

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s HOST:PORT\n", argv[0]);
        return 2;
    }
    flare_app_t *app = flare_app_new(NULL);
    if (app == NULL)
        return 1;
    int rc;
    if ((rc = flare_get(app, "/hello", hello, NULL)) != 0 ||
        (rc = flare_route_doc(
             app, FLARE_METHOD_GET, "/hello",
             &(flare_op_t){ .summary = "Say hello", .responses = hello_res, .nresponses = 1 })) !=
            0 ||
        (rc = flare_openapi_route(app, "/openapi.json")) != 0 ||
        (rc = flare_swagger_ui(app, "/docs", NULL)) != 0 || (rc = flare_app_run(app, argv[1])) != 0)
        fprintf(stderr, "openapi_app: %s (%s)\n", flare_strerror(rc), flare_last_error());
    flare_app_free(app);
    return rc != 0;
}
