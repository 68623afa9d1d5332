/* Content types of static files: the built-in table by extension
 * (flare_mime_type) and a directory's own types (flare_static_opts_t.mime)
 * looked up before it. */
#include <stddef.h>

#include "flare/static.h"
#include "web/static_int.h"

static const struct {
    const char *ext;
    const char *type;
} mime_table[] = {
    { "html", "text/html; charset=utf-8" },
    { "htm", "text/html; charset=utf-8" },
    { "css", "text/css; charset=utf-8" },
    { "js", "text/javascript; charset=utf-8" },
    { "mjs", "text/javascript; charset=utf-8" },
    { "json", "application/json" },
    { "map", "application/json" },
    { "txt", "text/plain; charset=utf-8" },
    { "md", "text/markdown; charset=utf-8" },
    { "csv", "text/csv; charset=utf-8" },
    { "xml", "application/xml" },
    { "svg", "image/svg+xml" },
    { "png", "image/png" },
    { "jpg", "image/jpeg" },
    { "jpeg", "image/jpeg" },
    { "gif", "image/gif" },
    { "webp", "image/webp" },
    { "avif", "image/avif" },
    { "ico", "image/x-icon" },
    { "wasm", "application/wasm" },
    { "pdf", "application/pdf" },
    { "zip", "application/zip" },
    { "gz", "application/gzip" },
    { "woff", "font/woff" },
    { "woff2", "font/woff2" },
    { "ttf", "font/ttf" },
    { "otf", "font/otf" },
    { "mp4", "video/mp4" },
    { "webm", "video/webm" },
    { "mp3", "audio/mpeg" },
    { "ogg", "audio/ogg" },
    { "wav", "audio/wav" },
    { "webmanifest", "application/manifest+json" },
};

/* The extension of the last path segment (after its last '.'), or
 * .ptr == NULL when it has none. */
static flare_str_t file_ext(flare_str_t name)
{
    size_t i = name.len;
    while (i > 0 && name.ptr[i - 1] != '.' && name.ptr[i - 1] != '/')
        i--;
    if (i == 0 || name.ptr[i - 1] != '.')
        return FLARE_STR_NULL;
    return (flare_str_t){ name.ptr + i, name.len - i };
}

flare_str_t flare_mime_type(flare_str_t name)
{
    flare_str_t ext = file_ext(name);
    if (ext.ptr != NULL) {
        for (size_t k = 0; k < sizeof(mime_table) / sizeof(mime_table[0]); k++) {
            if (flare_str_ieq(ext, flare_str(mime_table[k].ext)))
                return flare_str(mime_table[k].type);
        }
    }
    return FLARE_STR("application/octet-stream");
}

/* The directory's own types first, then the built-in table. */
flare_str_t flare__static_mime(const static_dir_t *sd, flare_str_t name)
{
    flare_str_t ext = file_ext(name);
    for (size_t k = 0; ext.ptr != NULL && k < sd->nmime; k++) {
        if (flare_str_ieq(ext, flare_str(sd->mime[k].ext)))
            return flare_str(sd->mime[k].type);
    }
    return flare_mime_type(name);
}
