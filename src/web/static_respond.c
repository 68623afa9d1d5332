/* The response for a static file: its validators (ETag, Last-Modified),
 * the conditionals of RFC 9110 section 13.2.2 (412, 304), a single byte
 * Range with If-Range (206, 416), then the body: by reference from the
 * cache, copied, or with sendfile. */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/core.h"
#include "flare/compress.h"
#include "http/svc.h"
#include "web/static_int.h"
#include "web/static_parse.h"

size_t flare__static_vhdrs(char *out, const struct stat *st, size_t *etag_len)
{
    size_t n = 6;
    memcpy(out, "ETag: ", 6);
    out[n++] = '"';
    n += flare__u64tohex(out + n, (uint64_t)st->st_mtim.tv_sec);
    out[n++] = '.';
    n += flare__u64tohex(out + n, (uint64_t)st->st_mtim.tv_nsec);
    out[n++] = '-';
    n += flare__u64tohex(out + n, (uint64_t)st->st_size);
    out[n++] = '"';
    *etag_len = n - 6;
    memcpy(out + n, "\r\nLast-Modified: ", 17);
    n += 17;
    flare__format_http_date(out + n, st->st_mtim.tv_sec);
    n += 29;
    memcpy(out + n, "\r\n", 2);
    return n + 2;
}

void flare__static_scan_conds(flare_req_t *req, conds_t *c)
{
    memset(c, 0, sizeof(*c));
    size_t n = flare_req_header_count(req);
    for (size_t i = 0; i < n; i++) {
        const flare_header_t *h = flare_req_header_at(req, i);
        flare_str_t *slot = NULL;
        switch (h->name.len) {
        case 5:
            slot = flare_str_ieq(h->name, FLARE_STR("range")) ? &c->range : NULL;
            break;
        case 8:
            slot = flare_str_ieq(h->name, FLARE_STR("if-match"))   ? &c->im
                   : flare_str_ieq(h->name, FLARE_STR("if-range")) ? &c->ir
                                                                   : NULL;
            break;
        case 13:
            slot = flare_str_ieq(h->name, FLARE_STR("if-none-match")) ? &c->inm : NULL;
            break;
        case 15:
            slot = flare_str_ieq(h->name, FLARE_STR("accept-encoding")) ? &c->ae : NULL;
            break;
        case 17:
            slot = flare_str_ieq(h->name, FLARE_STR("if-modified-since")) ? &c->ims : NULL;
            break;
        case 19:
            slot = flare_str_ieq(h->name, FLARE_STR("if-unmodified-since")) ? &c->ius : NULL;
            break;
        default:
            break;
        }
        if (slot != NULL && slot->ptr == NULL) /* the first one counts */
            *slot = h->value;
    }
}

int flare__static_respond(flare_req_t *req, flare_res_t *res, const static_dir_t *sd,
                          file_info_t *fi, const conds_t *c)
{
    int rc = flare__res_header_block(res, fi->vhdrs);
    if (rc == 0)
        rc = flare__res_header_block(res, (flare_str_t){ sd->fixed_hdrs, sd->fixed_len });
    if (rc == 0 && fi->gz)
        rc = flare__res_header_block(res, fi->gz == FLARE_CODING_BR
                                              ? FLARE_STR("Content-Encoding: br\r\n")
                                              : FLARE_STR("Content-Encoding: gzip\r\n"));
    if (rc != 0)
        goto done;

    /* conditionals, RFC 9110 section 13.2.2 */
    time_t when;
    if (c->im.ptr != NULL ? !flare__etag_match(c->im, fi->etag, true)
                          : (c->ius.ptr != NULL && flare_http_date_parse(c->ius, &when) == 0 &&
                             fi->mtime > when)) {
        rc = flare__static_fail(res, 412, "Precondition Failed\n");
        goto done;
    }
    if (c->inm.ptr != NULL ? flare__etag_match(c->inm, fi->etag, false)
                           : (c->ims.ptr != NULL && flare_http_date_parse(c->ims, &when) == 0 &&
                              fi->mtime <= when)) {
        rc = flare_res_send(res, 304, FLARE_STR_NULL, FLARE_STR_NULL);
        goto done;
    }

    uint64_t first = 0, len = fi->size;
    int status = 200;
    if (c->range.ptr != NULL && flare_req_method(req) == FLARE_METHOD_GET) {
        bool use = true;
        if (c->ir.ptr != NULL) {
            /* an entity tag ("x" or W/"x"), else a date; "Wed, ..." is a date */
            if (c->ir.len > 0 && (c->ir.ptr[0] == '"' ||
                                  (c->ir.len > 1 && c->ir.ptr[0] == 'W' && c->ir.ptr[1] == '/')))
                use = flare__etag_match(c->ir, fi->etag, true);
            else
                use = flare_http_date_parse(c->ir, &when) == 0 && when == fi->mtime;
        }
        int r = use ? flare__range_parse(c->range, fi->size, &first, &len) : FLARE__RANGE_NONE;
        if (r != FLARE__RANGE_NONE) {
            char *cr = flare_req_alloc(req, 96);
            if (cr == NULL) {
                rc = FLARE_ENOMEM;
                goto done;
            }
            size_t cl = sizeof("Content-Range: bytes ") - 1;
            memcpy(cr, "Content-Range: bytes ", cl);
            if (r == FLARE__RANGE_UNSAT) {
                cr[cl++] = '*';
            } else {
                cl += flare__u64toa(cr + cl, first);
                cr[cl++] = '-';
                cl += flare__u64toa(cr + cl, first + len - 1);
            }
            cr[cl++] = '/';
            cl += flare__u64toa(cr + cl, fi->size);
            cr[cl++] = '\r';
            cr[cl++] = '\n';
            if ((rc = flare__res_header_block(res, (flare_str_t){ cr, cl })) != 0)
                goto done;
            if (r == FLARE__RANGE_UNSAT) {
                rc = flare__static_fail(res, 416, "Range Not Satisfiable\n");
                goto done;
            }
            status = 206;
        }
    }
    if (fi->shared != NULL) {
        /* by reference: send_ref releases at once when it copies instead */
        fi->shared->refs++;
        return flare_res_send_ref(res, status, fi->ctype,
                                  (flare_str_t){ fi->body + first, (size_t)len },
                                  flare__static_cbody_release, fi->shared);
    }
    if (fi->body != NULL)
        return flare_res_send(res, status, fi->ctype,
                              (flare_str_t){ fi->body + first, (size_t)len });
    int fd = fi->fd;
    fi->fd = -1;
    rc = flare_res_sendfile(res, status, fi->ctype, fd, first, len);
    if (rc == FLARE_EIO) /* the file changed size under us: nothing was sent */
        return flare__static_fail(res, 500,
                                  "Internal Server Error: file changed while being sent\n");
    return rc;
done:
    if (fi->body == NULL && fi->fd >= 0) {
        close(fi->fd);
        fi->fd = -1;
    }
    return rc;
}
