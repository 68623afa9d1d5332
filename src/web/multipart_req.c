/* multipart/form-data over a buffered request body: small parts stay views
 * of the body, larger ones go to temporary files removed when the request
 * ends (unless kept). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "flare/flare.h"
#include "flare/multipart.h"

#define DEFAULT_THRESHOLD (64 * 1024)

/* Tests set it to take the mkstemp path where O_TMPFILE works. */
bool flare__multipart_no_tmpfile = false;

/* What the cleanup hook walks: the form's fields as they are now. */
typedef struct files {
    flare_multipart_field_t *fields;
    size_t count;
    bool hooked;
} files_t;

typedef struct ctx {
    flare_req_t *req;
    flare_multipart_form_t *form;
    files_t *files;
    size_t cap;
    size_t threshold;
    const char *dir;
    /* streaming: the data views die with their chunk, so in-memory content
     * is copied into a buffer that doubles (cur_cap: the current field's) */
    bool copy;
    bool discard; /* content goes to the sink only */
    size_t cur_cap;
} ctx_t;

static void files_cleanup(void *ud)
{
    files_t *f = ud;
    for (size_t i = 0; i < f->count; i++) {
        flare_multipart_field_t *fl = &f->fields[i];
        if (fl->fd < 0)
            continue;
        close(fl->fd);
        fl->fd = -1;
        if (fl->path_ != NULL)
            unlink(fl->path_); /* a kept copy is another link: it stays */
    }
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static flare_str_t copy_str(flare_req_t *req, flare_str_t s, bool *oom)
{
    if (s.ptr == NULL)
        return s;
    char *p = flare_req_alloc(req, s.len + 1);
    if (p == NULL) {
        *oom = true;
        return FLARE_STR_NULL;
    }
    memcpy(p, s.ptr, s.len);
    p[s.len] = '\0';
    return (flare_str_t){ p, s.len };
}

/* An anonymous file in dir (O_TMPFILE), or a named one (mkstemp) whose
 * path *path gets; -1 with errno on failure. */
static int tmp_open(ctx_t *c, char **path)
{
    *path = NULL;
    if (!flare__multipart_no_tmpfile) {
        int fd = open(c->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
            return fd;
    }
    size_t n = strlen(c->dir) + sizeof("/flare-upload-XXXXXX");
    char *p = flare_req_alloc(c->req, n);
    if (p == NULL) {
        errno = ENOMEM;
        return -1;
    }
    snprintf(p, n, "%s/flare-upload-XXXXXX", c->dir);
    int fd = mkostemp(p, O_CLOEXEC);
    if (fd >= 0)
        *path = p;
    return fd;
}

static int grow(ctx_t *c)
{
    flare_multipart_form_t *form = c->form;
    if (form->count < c->cap)
        return 0;
    size_t cap = c->cap != 0 ? 2 * c->cap : 8;
    flare_multipart_field_t *f = flare_req_alloc(c->req, cap * sizeof(*f));
    if (f == NULL)
        return FLARE_ENOMEM;
    if (form->count > 0)
        memcpy(f, form->fields, form->count * sizeof(*f));
    form->fields = f;
    c->files->fields = f;
    c->cap = cap;
    return 0;
}

/* The current field's in-memory content grows by d (streaming): amortised
 * doubling in the arena, so a part fed a byte at a time costs O(n). */
static int append_copy(ctx_t *c, flare_multipart_field_t *f, flare_str_t d)
{
    size_t need = f->data.len + d.len;
    if (need > c->cur_cap) {
        size_t cap = c->cur_cap != 0 ? c->cur_cap : 256;
        while (cap < need)
            cap *= 2;
        if (cap > c->threshold)
            cap = c->threshold;
        char *p = flare_req_alloc(c->req, cap);
        if (p == NULL)
            return FLARE_ENOMEM;
        if (f->data.len > 0)
            memcpy(p, f->data.ptr, f->data.len);
        f->data.ptr = p;
        c->cur_cap = cap;
    }
    memcpy((char *)f->data.ptr + f->data.len, d.ptr, d.len);
    f->data.len = need;
    f->size += d.len;
    return 0;
}

static int append(ctx_t *c, flare_multipart_field_t *f, flare_str_t d)
{
    if (c->discard) {
        f->size += d.len;
        return 0;
    }
    if (c->copy && f->fd < 0 && f->size + d.len <= c->threshold)
        return append_copy(c, f, d);
    if (f->fd < 0 && f->size + d.len <= c->threshold) {
        if (f->data.len == 0) {
            f->data = d;
        } else if (f->data.ptr + f->data.len == d.ptr) {
            f->data.len += d.len; /* the usual case: the next bytes of the body */
        } else {
            char *p = flare_req_alloc(c->req, f->data.len + d.len);
            if (p == NULL)
                return FLARE_ENOMEM;
            memcpy(p, f->data.ptr, f->data.len);
            memcpy(p + f->data.len, d.ptr, d.len);
            f->data = (flare_str_t){ p, f->data.len + d.len };
        }
        f->size += d.len;
        return 0;
    }
    if (f->fd < 0) {
        if (!c->files->hooked) {
            if (flare_req_on_cleanup(c->req, files_cleanup, c->files) != 0)
                return FLARE_ENOMEM;
            c->files->hooked = true;
        }
        char *path;
        int fd = tmp_open(c, &path);
        if (fd < 0)
            return flare__fail(FLARE_EIO, errno, "multipart: temporary file in %s", c->dir);
        f->fd = fd;
        f->path_ = path;
        if (write_all(fd, f->data.ptr, f->data.len) != 0)
            return flare__fail(FLARE_EIO, errno, "multipart: write to a temporary file");
        f->data = FLARE_STR_NULL;
    }
    if (write_all(f->fd, d.ptr, d.len) != 0)
        return flare__fail(FLARE_EIO, errno, "multipart: write to a temporary file");
    f->size += d.len;
    return 0;
}

static int begin(ctx_t *c, const flare_multipart_part_t *part)
{
    int rc = grow(c);
    if (rc != 0)
        return rc;
    flare_multipart_field_t *f = &c->form->fields[c->form->count];
    bool oom = false;
    *f = (flare_multipart_field_t){ .fd = -1 };
    f->name = copy_str(c->req, part->name, &oom);
    f->filename = copy_str(c->req, part->filename, &oom);
    f->content_type = copy_str(c->req, part->content_type, &oom);
    if (oom)
        return FLARE_ENOMEM;
    f->data = (flare_str_t){ "", 0 };
    c->cur_cap = 0;
    c->form->count++;
    c->files->count = c->form->count;
    return 0;
}

int flare_multipart_parse_req(flare_req_t *req, const flare_multipart_opts_t *opts,
                              flare_multipart_form_t *form)
{
    *form = (flare_multipart_form_t){ 0 };
    flare_multipart_opts_t o = opts != NULL ? *opts : (flare_multipart_opts_t){ 0 };
    const char *dir = o.tmpdir;
    if (dir == NULL || *dir == '\0')
        dir = secure_getenv("TMPDIR");
    if (dir == NULL || *dir == '\0')
        dir = "/tmp";
    flare_multipart_t *mp = flare_req_alloc(req, sizeof(*mp));
    files_t *files = flare_req_alloc(req, sizeof(*files));
    if (mp == NULL || files == NULL) {
        form->err = FLARE_MULTIPART_ERR_NOMEM;
        return FLARE_ENOMEM;
    }
    *files = (files_t){ 0 };
    ctx_t c = { req, form,  files, 0, o.file_threshold != 0 ? o.file_threshold : DEFAULT_THRESHOLD,
                dir, false, false, 0 };
    int rc = flare_multipart_init(mp, flare_req_header(req, "Content-Type"), &o.limits);
    if (rc != 0) {
        form->err = mp->err;
        return rc;
    }
    flare_str_t body = flare_req_body(req);
    const char *p = body.ptr;
    size_t left = body.len;
    for (;;) {
        flare_multipart_event_t ev;
        size_t used;
        int mrc = flare_multipart_next(mp, p, left, &used, &ev);
        if (mrc != 0) {
            form->err = mp->err;
            return mrc;
        }
        p += used;
        left -= used;
        if (ev.type == FLARE_MULTIPART_NEED_MORE)
            break;
        rc = 0;
        if (ev.type == FLARE_MULTIPART_PART_BEGIN)
            rc = begin(&c, ev.part);
        else if (ev.type == FLARE_MULTIPART_DATA)
            rc = append(&c, &form->fields[form->count - 1], ev.data);
        if (rc != 0) {
            form->err = rc == FLARE_ENOMEM ? FLARE_MULTIPART_ERR_NOMEM : FLARE_MULTIPART_ERR_IO;
            return rc;
        }
    }
    rc = flare_multipart_finish(mp);
    if (rc != 0)
        form->err = mp->err;
    return rc;
}

const flare_multipart_field_t *flare_multipart_field(const flare_multipart_form_t *form,
                                                     flare_str_t name)
{
    for (size_t i = 0; i < form->count; i++)
        if (flare_str_eq(form->fields[i].name, name))
            return &form->fields[i];
    return NULL;
}

int flare_multipart_keep(const flare_multipart_field_t *f, const char *path)
{
    if (f == NULL || path == NULL || *path == '\0')
        return FLARE_EINVAL;
    if (f->fd >= 0) {
        int r;
        if (f->path_ != NULL) {
            r = link(f->path_, path);
        } else {
            /* an O_TMPFILE file gets its first name through /proc (linkat
             * with AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH) */
            char proc[64];
            snprintf(proc, sizeof(proc), "/proc/self/fd/%d", f->fd);
            r = linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
        }
        if (r == 0)
            return 0;
        if (errno == EEXIST)
            return flare__fail(FLARE_EEXIST, errno, "multipart: keep %s", path);
        return flare__fail(FLARE_EIO, errno, "multipart: keep %s", path);
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return flare__fail(errno == EEXIST ? FLARE_EEXIST : FLARE_EIO, errno, "multipart: keep %s",
                           path);
    int w = write_all(fd, f->data.ptr, f->data.len);
    int e = errno;
    if (close(fd) != 0 && w == 0) {
        w = -1;
        e = errno;
    }
    if (w != 0) {
        unlink(path);
        return flare__fail(FLARE_EIO, e, "multipart: keep %s", path);
    }
    return 0;
}

/* ---- streaming: the body as it arrives (flare/body.h) ---- */

struct flare_multipart_stream {
    ctx_t c;
    flare_multipart_form_t form;
    files_t files;
    flare_multipart_sink_t sink;
    void *ud;
    int rc; /* the first failure, returned again by every later call */
    flare_multipart_t mp;
};

static const char *tmp_dir(const char *dir)
{
    if (dir == NULL || *dir == '\0')
        dir = secure_getenv("TMPDIR");
    if (dir == NULL || *dir == '\0')
        dir = "/tmp";
    return dir;
}

int flare_multipart_stream_start(flare_req_t *req, const flare_multipart_opts_t *opts,
                                 const flare_multipart_sink_t *sink, void *ud,
                                 flare_multipart_stream_t **out, flare_multipart_err_t *why)
{
    flare_multipart_err_t dummy;
    if (why == NULL)
        why = &dummy;
    *why = FLARE_MULTIPART_ERR_NONE;
    if (req == NULL || out == NULL)
        return FLARE_EINVAL;
    *out = NULL;
    flare_multipart_opts_t o = opts != NULL ? *opts : (flare_multipart_opts_t){ 0 };
    flare_multipart_stream_t *ms = flare_req_alloc(req, sizeof(*ms));
    if (ms == NULL) {
        *why = FLARE_MULTIPART_ERR_NOMEM;
        return FLARE_ENOMEM;
    }
    memset(ms, 0, offsetof(flare_multipart_stream_t, mp));
    ms->c = (ctx_t){ .req = req,
                     .form = &ms->form,
                     .files = &ms->files,
                     .threshold = o.file_threshold != 0 ? o.file_threshold : DEFAULT_THRESHOLD,
                     .dir = tmp_dir(o.tmpdir),
                     .copy = true,
                     .discard = sink != NULL && sink->discard };
    if (sink != NULL)
        ms->sink = *sink;
    ms->ud = ud;
    int rc = flare_multipart_init(&ms->mp, flare_req_header(req, "Content-Type"), &o.limits);
    if (rc != 0) {
        *why = ms->mp.err;
        return rc;
    }
    *out = ms;
    return 0;
}

static int stream_failed(flare_multipart_stream_t *ms, int rc, flare_multipart_err_t err)
{
    if (ms->form.err == FLARE_MULTIPART_ERR_NONE)
        ms->form.err = err;
    ms->rc = rc;
    return rc;
}

int flare_multipart_stream_feed(flare_multipart_stream_t *ms, flare_str_t data)
{
    if (ms == NULL)
        return FLARE_EINVAL;
    if (ms->rc != 0)
        return ms->rc;
    const char *p = data.ptr;
    size_t left = data.len;
    for (;;) {
        flare_multipart_event_t ev;
        size_t used;
        int mrc = flare_multipart_next(&ms->mp, p, left, &used, &ev);
        if (mrc != 0)
            return stream_failed(ms, mrc, ms->mp.err);
        p += used;
        left -= used;
        if (ev.type == FLARE_MULTIPART_NEED_MORE)
            return 0;
        flare_multipart_field_t *f =
            ms->form.count > 0 ? &ms->form.fields[ms->form.count - 1] : NULL;
        int rc = 0;
        if (ev.type == FLARE_MULTIPART_PART_BEGIN) {
            rc = begin(&ms->c, ev.part);
            if (rc == 0 && ms->sink.on_part != NULL)
                rc = ms->sink.on_part(ms->ud, &ms->form.fields[ms->form.count - 1]);
        } else if (ev.type == FLARE_MULTIPART_DATA && f != NULL) {
            rc = append(&ms->c, f, ev.data);
            if (rc == 0 && ms->sink.on_data != NULL)
                rc = ms->sink.on_data(ms->ud, f, ev.data);
        } else if (ev.type == FLARE_MULTIPART_PART_END && f != NULL) {
            if (ms->sink.on_part_end != NULL)
                rc = ms->sink.on_part_end(ms->ud, f);
        }
        if (rc != 0)
            return stream_failed(ms, rc,
                                 rc == FLARE_ENOMEM ? FLARE_MULTIPART_ERR_NOMEM
                                 : rc == FLARE_EIO  ? FLARE_MULTIPART_ERR_IO
                                                    : FLARE_MULTIPART_ERR_NONE);
    }
}

int flare_multipart_stream_finish(flare_multipart_stream_t *ms, const flare_multipart_form_t **form)
{
    if (ms == NULL)
        return FLARE_EINVAL;
    if (form != NULL)
        *form = &ms->form;
    if (ms->rc != 0)
        return ms->rc;
    int rc = flare_multipart_finish(&ms->mp);
    if (rc != 0)
        return stream_failed(ms, rc, ms->mp.err);
    return 0;
}

flare_multipart_err_t flare_multipart_stream_err(const flare_multipart_stream_t *ms)
{
    return ms != NULL ? ms->form.err : FLARE_MULTIPART_ERR_NONE;
}
