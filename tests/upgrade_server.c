/* The server of tests/integ/test_upgrade.py: "/" answers the serving
 * process's pid, so a client sees which binary answered it.
 *
 *   upgrade_server --listen HOST:PORT [--workers N | --workers-file F] [--drain-ms MS]
 *
 * Exits with flare_app_run's result: 0 after a drain (SIGTERM, or an
 * upgrade's hand-over). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flare/flare.h"

static char pid_body[32];
static size_t pid_len;

static int pid_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), (flare_str_t){ pid_body, pid_len });
}

int main(int argc, char **argv)
{
    const char *listen = NULL;
    flare_config_t cfg;
    flare_config_init(&cfg);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--listen") == 0)
            listen = argv[i + 1];
        else if (strcmp(argv[i], "--workers") == 0)
            cfg.workers = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--workers-file") == 0) {
            /* read at each start: the test changes it between upgrades */
            FILE *f = fopen(argv[i + 1], "r");
            unsigned n = 0;
            if (f == NULL || fscanf(f, "%u", &n) != 1) {
                fprintf(stderr, "upgrade_server: --workers-file %s: no number\n", argv[i + 1]);
                return 2;
            }
            fclose(f);
            cfg.workers = n;
        } else if (strcmp(argv[i], "--drain-ms") == 0)
            cfg.drain_timeout_ms = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "upgrade_server: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (listen == NULL) {
        fprintf(stderr, "usage: upgrade_server --listen HOST:PORT [--workers N] [--drain-ms MS]\n");
        return 2;
    }
    pid_len = (size_t)snprintf(pid_body, sizeof(pid_body), "%ld", (long)getpid());
    flare_app_t *app = flare_app_new(&cfg);
    if (app == NULL) {
        fprintf(stderr, "upgrade_server: %s\n", flare_last_error());
        return 1;
    }
    int rc = flare_get(app, "/", pid_handler, NULL);
    if (rc == 0)
        rc = flare_app_run(app, listen);
    if (rc != 0)
        fprintf(stderr, "upgrade_server: %s: %s\n", flare_strerror(rc), flare_last_error());
    flare_app_free(app);
    return rc != 0;
}
