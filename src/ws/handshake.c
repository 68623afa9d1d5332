/* WebSocket opening handshake checks and Sec-WebSocket-Accept. */
#include "ws/handshake.h"

#include <openssl/evp.h>
#include <string.h>

#include "core/core.h"

static const char GUID[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

bool flare__ws_list_next(const flare_header_t *h, size_t n, const char *name, size_t *field,
                         size_t *pos, flare_str_t *elem)
{
    flare_str_t want = flare_str(name);
    for (; *field < n; (*field)++, *pos = 0) {
        if (!flare_str_ieq(h[*field].name, want))
            continue;
        flare_str_t v = h[*field].value;
        while (*pos < v.len) {
            size_t i = *pos;
            while (i < v.len && (flare__is_ows(v.ptr[i]) || v.ptr[i] == ','))
                i++;
            size_t start = i;
            bool quoted = false;
            while (i < v.len && (quoted || v.ptr[i] != ',')) {
                if (v.ptr[i] == '"')
                    quoted = !quoted;
                else if (v.ptr[i] == '\\' && quoted && i + 1 < v.len)
                    i++;
                i++;
            }
            size_t end = i;
            while (end > start && flare__is_ows(v.ptr[end - 1]))
                end--;
            *pos = i;
            if (end > start) {
                *elem = (flare_str_t){ v.ptr + start, end - start };
                return true;
            }
        }
    }
    return false;
}

static bool list_has(const flare_header_t *h, size_t n, const char *name, const char *lower)
{
    size_t field = 0, pos = 0;
    flare_str_t e;
    size_t len = strlen(lower);
    while (flare__ws_list_next(h, n, name, &field, &pos, &e)) {
        if (flare__ieq_lit(e, lower, len))
            return true;
    }
    return false;
}

/* The single field `name`: *count tells how many there were. */
static flare_str_t single(const flare_header_t *h, size_t n, const char *name, int *count)
{
    flare_str_t want = flare_str(name), v = FLARE_STR_NULL;
    *count = 0;
    for (size_t i = 0; i < n; i++) {
        if (flare_str_ieq(h[i].name, want)) {
            if ((*count)++ == 0)
                v = h[i].value;
        }
    }
    return v;
}

static inline bool b64_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/';
}

/* base64 of exactly 16 bytes: 22 characters and "==" */
static bool key_ok(flare_str_t k)
{
    if (k.len != 24 || k.ptr[22] != '=' || k.ptr[23] != '=')
        return false;
    for (size_t i = 0; i < 22; i++) {
        if (!b64_char(k.ptr[i]))
            return false;
    }
    return true;
}

/* "scheme://host[:port]" -> "host[:port]" */
static flare_str_t origin_authority(flare_str_t o)
{
    for (size_t i = 0; i + 2 < o.len; i++) {
        if (o.ptr[i] == ':' && o.ptr[i + 1] == '/' && o.ptr[i + 2] == '/')
            return (flare_str_t){ o.ptr + i + 3, o.len - i - 3 };
    }
    return FLARE_STR_NULL;
}

static bool origin_allowed(flare_str_t origin, const flare_header_t *h, size_t n,
                           const flare_ws_hs_policy_t *pol)
{
    if (pol->norigins == 0) {
        /* the default: same origin only. The Host header is the authority
         * the page was served from (through a proxy that keeps Host). */
        int count;
        flare_str_t host = single(h, n, "host", &count);
        flare_str_t auth = origin_authority(origin);
        return count == 1 && auth.len > 0 && flare_str_ieq(auth, host);
    }
    for (size_t i = 0; i < pol->norigins; i++) {
        flare_str_t o = pol->origins[i];
        if ((o.len == 1 && o.ptr[0] == '*') || flare_str_ieq(o, origin))
            return true;
    }
    return false;
}

static int refuse(flare_ws_hs_t *out, int status, const char *error)
{
    out->status = status;
    out->error = error;
    return status;
}

int flare__ws_handshake_check(flare_method_t method, int minor, const flare_header_t *h, size_t n,
                              const flare_ws_hs_policy_t *policy, flare_ws_hs_t *out)
{
    memset(out, 0, sizeof(*out));
    if (method != FLARE_METHOD_GET)
        return refuse(out, 400, "a WebSocket handshake must be a GET request");
    if (minor < 1)
        return refuse(out, 400, "a WebSocket handshake needs HTTP/1.1");
    if (!list_has(h, n, "upgrade", "websocket"))
        return refuse(out, 426, "this resource needs a WebSocket upgrade (Upgrade: websocket)");
    if (!list_has(h, n, "connection", "upgrade"))
        return refuse(out, 400, "Connection header must contain the upgrade token");
    int count;
    flare_str_t ver = single(h, n, "sec-websocket-version", &count);
    if (count != 1 || ver.len != 2 || memcmp(ver.ptr, "13", 2) != 0)
        return refuse(out, 426, "unsupported WebSocket version (13 is supported)");
    flare_str_t key = single(h, n, "sec-websocket-key", &count);
    if (count != 1 || !key_ok(key))
        return refuse(out, 400, "Sec-WebSocket-Key must be the base64 of 16 bytes");
    out->key = key;
    flare_str_t origin = single(h, n, "origin", &count);
    if (count > 1)
        return refuse(out, 403, "more than one Origin header");
    if (count == 0) {
        if (policy->origin_required)
            return refuse(out, 403, "Origin header required");
    } else if (!origin_allowed(origin, h, n, policy)) {
        return refuse(out, 403, "origin not allowed");
    }
    /* the server's preference wins: first supported protocol offered */
    for (size_t i = 0; i < policy->nprotocols && out->protocol.len == 0; i++) {
        size_t field = 0, pos = 0;
        flare_str_t e;
        while (flare__ws_list_next(h, n, "sec-websocket-protocol", &field, &pos, &e)) {
            if (flare_str_eq(e, policy->protocols[i])) {
                out->protocol = policy->protocols[i];
                break;
            }
        }
    }
    return 0;
}

int flare__ws_accept_key(flare_str_t key, char *out)
{
    char buf[64 + sizeof(GUID)];
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (key.len > 64)
        return FLARE_EINVAL;
    memcpy(buf, key.ptr, key.len);
    memcpy(buf + key.len, GUID, sizeof(GUID) - 1);
    if (EVP_Digest(buf, key.len + sizeof(GUID) - 1, md, &mdlen, EVP_sha1(), NULL) != 1 ||
        mdlen != 20)
        return FLARE_ESYS;
    unsigned char b64[32];
    if (EVP_EncodeBlock(b64, md, 20) != FLARE_WS_ACCEPT_LEN)
        return FLARE_ESYS;
    memcpy(out, b64, FLARE_WS_ACCEPT_LEN);
    return 0;
}
