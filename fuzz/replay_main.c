/* Replays fuzz inputs through a target without libFuzzer: every regular file
 * under the directories (or files) named on the command line. Used by CTest so
 * the seed corpus and every past crash run on each build, with any compiler. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path, unsigned *count)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return -1;
    }
    long n = ftell(f);
    rewind(f);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf == NULL || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) {
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    (*count)++;
    return 0;
}

static int replay_path(const char *path, unsigned *count)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 0; /* a missing folder (no regressions yet) is fine */
    if (!S_ISDIR(st.st_mode))
        return replay_file(path, count);
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char sub[4096];
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        if (replay_path(sub, count) != 0)
            rc = -1;
    }
    closedir(d);
    return rc;
}

int main(int argc, char **argv)
{
    unsigned count = 0;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        if (replay_path(argv[i], &count) != 0)
            rc = 1;
    }
    printf("replayed %u inputs\n", count);
    if (count == 0) {
        fprintf(stderr, "no inputs found\n");
        return 1;
    }
    return rc;
}
