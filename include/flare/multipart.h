/* Flare: multipart/form-data bodies (RFC 7578 over RFC 2046).
 *
 * Two levels:
 *
 * 1. A pure, resumable, streaming parser (flare_multipart_t): bytes in, in
 *    any split down to one byte per call, part events out. No I/O, no
 *    allocation: the state is one struct (about 9 KiB, with its bounded
 *    header storage) the caller places where it likes. Data events are
 *    views into the bytes passed in, or (for the few bytes that looked like
 *    the start of a boundary at the end of the previous call and were not)
 *    into the parser's own copy of the delimiter; either way valid until the
 *    next call. The boundary search is linear for any input: it is a
 *    Knuth-Morris-Pratt scan whose state (how much of "\r\n--boundary" the
 *    last bytes matched) is carried across calls, so no byte is examined
 *    more than a small constant number of times, whatever the input
 *    (flare_multipart_t.work counts the steps; the tests bound it).
 *
 * 2. A buffered helper (flare_multipart_parse_req) over a request whose
 *    body the server read whole (flare_req_body): small parts stay views
 *    into the body, parts larger than a threshold go to temporary files
 *    (O_TMPFILE in the temporary directory where the file system has it,
 *    else mkstemp) that are removed when the request ends, unless the
 *    handler keeps one with flare_multipart_keep.
 *
 * Choices:
 *   - the preamble (before the first boundary) and the epilogue (after the
 *     closing one) are ignored; transport padding (spaces and tabs after a
 *     boundary) is accepted;
 *   - the first boundary may start the body ("--b\r\n") or follow a
 *     preamble line ("...\r\n--b\r\n");
 *   - a body with only the closing boundary ("--b--") has zero parts;
 *   - every part must have "Content-Disposition: form-data" with a name
 *     (RFC 7578 section 4.2); filename* (RFC 8187, UTF-8 or ISO-8859-1)
 *     takes precedence over filename; an unknown charset in filename* makes
 *     it ignored, a malformed one is an error;
 *   - obsolete header folding, a header line without ':' and a part header
 *     block without its blank line are errors;
 *   - the filename is data sent by the client: never use it as a path. */
#ifndef FLARE_MULTIPART_H
#define FLARE_MULTIPART_H

#include <stdbool.h>
#include <stdint.h>

#include "flare/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Why a body was refused: X(NAME, HTTP status, message). */
#define FLARE_MULTIPART_ERR_MAP(X)                                                              \
    X(NONE, 0, "no error")                                                                      \
    X(NOT_FORM_DATA, 415, "Content-Type is not multipart/form-data")                            \
    X(BOUNDARY, 400, "multipart boundary missing or invalid (1 to 70 RFC 2046 characters)")     \
    X(DELIMITER, 400, "multipart: unexpected bytes after a boundary")                           \
    X(HEADER, 400, "multipart: malformed part header")                                          \
    X(DISPOSITION, 400, "multipart: part without a valid Content-Disposition: form-data; name") \
    X(TRUNCATED, 400, "multipart: body ends before the closing boundary")                       \
    X(PARTS, 413, "multipart: too many parts")                                                  \
    X(PART_SIZE, 413, "multipart: part too large")                                              \
    X(TOTAL_SIZE, 413, "multipart: body too large")                                             \
    X(HEADER_SIZE, 431, "multipart: part headers too large")                                    \
    X(HEADER_COUNT, 431, "multipart: too many part headers")                                    \
    X(NOMEM, 500, "multipart: out of memory")                                                   \
    X(IO, 500, "multipart: cannot write a temporary file")

/* Why a multipart body was refused (the map above: status and message). */
typedef enum flare_multipart_err {
#define FLARE_MULTIPART_ERR_ENUM(name, status, msg) FLARE_MULTIPART_ERR_##name,
    FLARE_MULTIPART_ERR_MAP(FLARE_MULTIPART_ERR_ENUM)
#undef FLARE_MULTIPART_ERR_ENUM
} flare_multipart_err_t;

/* The HTTP status to answer for err (0 for NONE) and a short message
 * (static storage). */
FLARE_API int flare_multipart_err_status(flare_multipart_err_t err);
FLARE_API const char *flare_multipart_err_message(flare_multipart_err_t err);

/* Defaults and bounds. */
#define FLARE_MULTIPART_MAX_PARTS    1000
#define FLARE_MULTIPART_HEADER_MAX   4096 /* bytes of one part's header block */
#define FLARE_MULTIPART_HEADERS_MAX  16   /* header fields of one part */
#define FLARE_MULTIPART_BOUNDARY_MAX 70

/* Limits; a zeroed struct means the defaults. */
typedef struct flare_multipart_limits {
    size_t max_parts;        /* 0: FLARE_MULTIPART_MAX_PARTS */
    size_t max_header_size;  /* 0 or more than FLARE_MULTIPART_HEADER_MAX: that */
    uint64_t max_part_size;  /* bytes of one part's content; 0: no bound */
    uint64_t max_total_size; /* bytes of the whole body; 0: no bound */
} flare_multipart_limits_t;

/* Extracts the boundary parameter of a Content-Type value
 * ("multipart/form-data; boundary=xyz" or boundary="a b"). *boundary is a
 * view into content_type (without the quotes; a quoted boundary holds no
 * backslash escape since bchars have none). 0, or FLARE_EINVAL when the
 * media type is not multipart/form-data or the boundary is missing, empty,
 * longer than 70, ends with a space or has a character outside RFC 2046's
 * bchars; *why (may be NULL) then says which (NOT_FORM_DATA or BOUNDARY). */
FLARE_API int flare_multipart_boundary(flare_str_t content_type, flare_str_t *boundary,
                                       flare_multipart_err_t *why);

/* What flare_multipart_next reports. */
typedef enum flare_multipart_event_type {
    FLARE_MULTIPART_NEED_MORE = 0, /* every byte given was used: call again with more */
    FLARE_MULTIPART_PART_BEGIN,    /* ev.part is the new part's header */
    FLARE_MULTIPART_DATA,          /* ev.data is content of the current part */
    FLARE_MULTIPART_PART_END,      /* the current part is complete */
    FLARE_MULTIPART_DONE           /* closing boundary seen; later bytes are epilogue */
} flare_multipart_event_type_t;

/* A part's header, decoded. Views into the parser's header storage: valid
 * until the next PART_BEGIN (copy what must last longer). A field that is
 * absent has ptr NULL. */
typedef struct flare_multipart_part {
    flare_str_t name;         /* Content-Disposition name */
    flare_str_t filename;     /* filename* decoded (to UTF-8) or filename; NULL if none */
    flare_str_t content_type; /* as sent, trimmed; NULL if none (RFC 7578: text/plain) */
    size_t header_count;      /* entries in headers[] */
    flare_header_t headers[FLARE_MULTIPART_HEADERS_MAX]; /* raw fields, names and values */
} flare_multipart_part_t;

/* One event of the parser: its type, the data and the current part. */
typedef struct flare_multipart_event {
    flare_multipart_event_type_t type;  /* what happened */
    flare_str_t data;                   /* DATA */
    const flare_multipart_part_t *part; /* PART_BEGIN, DATA, PART_END: the current part */
} flare_multipart_event_t;

/* Parser state. Fields are private except `work` and `err`. */
typedef struct flare_multipart {
    uint8_t state;                   /* private: where the parser is */
    flare_multipart_err_t err;       /* why the parser stopped, NONE while it goes on */
    uint16_t dlen;                   /* delimiter length: 4 + boundary length */
    uint16_t match;                  /* how much of the delimiter the last bytes matched */
    uint16_t hdr_len;                /* private: header bytes buffered */
    uint64_t work;                   /* scan steps so far: linear in the input, for tests */
    uint64_t total;                  /* bytes consumed */
    uint64_t part_size;              /* private: bytes of the current part */
    size_t parts;                    /* private: parts so far */
    flare_multipart_limits_t limits; /* private: the limits in effect */
    char delim[4 + FLARE_MULTIPART_BOUNDARY_MAX]; /* "\r\n--" boundary */
    uint8_t fail[4 + FLARE_MULTIPART_BOUNDARY_MAX +
                 1];             /* private: the delimiter's KMP failure function */
    flare_multipart_part_t part; /* private: the current part */
    /* the raw header block, then the decoded parameters */
    char hdr[2 * FLARE_MULTIPART_HEADER_MAX];
} flare_multipart_t;

/* Sets mp up for the body of a request whose Content-Type is content_type
 * (the boundary is copied: content_type need not outlive mp). limits may
 * be NULL (defaults). 0, or FLARE_EINVAL with mp->err set (as
 * flare_multipart_boundary). */
FLARE_API int flare_multipart_init(flare_multipart_t *mp, flare_str_t content_type,
                                   const flare_multipart_limits_t *limits);

/* Same (mp, limits) with the boundary itself (1..70 bchars). */
FLARE_API int flare_multipart_init_boundary(flare_multipart_t *mp, flare_str_t boundary,
                                            const flare_multipart_limits_t *limits);

/* Feeds bytes: returns 0 with *used set to how many of data[0..len) it
 * used (0..len) and *ev to what it found; call again with the rest
 * (data + *used) until it reports NEED_MORE, which it does only when it
 * used everything. Returns a negative code on bad input (*used 0):
 * FLARE_EINVAL (malformed) or FLARE_ETOOBIG (a limit), with mp->err saying
 * which (flare_multipart_err_status gives the 4xx); every later call
 * returns the same. After DONE the rest is epilogue: used and ignored (it
 * still counts toward max_total_size). */
FLARE_API int flare_multipart_next(flare_multipart_t *mp, const char *data, size_t len,
                                   size_t *used, flare_multipart_event_t *ev);

/* At the end of the body: 0 when the closing boundary was seen, else
 * FLARE_EINVAL with mp->err TRUNCATED (or the earlier error's code). */
FLARE_API int flare_multipart_finish(flare_multipart_t *mp);

/* ---- the buffered helper ---------------------------------------------- */

/* The request handle (flare/flare.h). */
typedef struct flare_req flare_req_t;

/* Options; a zeroed struct means the defaults. */
typedef struct flare_multipart_opts {
    flare_multipart_limits_t limits; /* zeroed: the defaults */
    size_t file_threshold;           /* parts larger than this go to a file; 0: 64 KiB */
    const char *tmpdir;              /* NULL: $TMPDIR, else /tmp */
} flare_multipart_opts_t;

/* One part of a parsed form. */
typedef struct flare_multipart_field {
    flare_str_t name;         /* in the request's arena */
    flare_str_t filename;     /* in the arena; ptr NULL when the part had none */
    flare_str_t content_type; /* in the arena; ptr NULL when the part had none */
    uint64_t size;            /* bytes of content */
    flare_str_t data;         /* in memory (fd == -1): the content, a view of the body */
    int fd;                   /* in a file: read it with pread from offset 0; else -1 */
    char *path_;              /* private: the mkstemp path, or NULL */
} flare_multipart_field_t;

/* A buffered multipart body: its fields, or why it failed. */
typedef struct flare_multipart_form {
    flare_multipart_field_t *fields; /* in the request's arena */
    size_t count;                    /* entries in fields[] */
    flare_multipart_err_t err;       /* on failure: why (its status and message, see above) */
} flare_multipart_form_t;

/* Parses req's buffered body (Content-Type from the request) into *form.
 * Everything lives until the request ends: the fields in the request's
 * arena, the temporary files until the exchange's cleanup, which closes
 * them and removes them (unless kept). opts may be NULL. Returns 0, or
 * FLARE_EINVAL / FLARE_ETOOBIG (bad input, the limits; form->err says which
 * and its status: answer it), FLARE_ENOMEM or FLARE_EIO (a temporary file
 * could not be created or written; errno kept in flare_last_errno). On
 * failure the files created so far are released at cleanup as well. */
FLARE_API int flare_multipart_parse_req(flare_req_t *req, const flare_multipart_opts_t *opts,
                                        flare_multipart_form_t *form);

/* The first field of form named name, or NULL. */
FLARE_API const flare_multipart_field_t *flare_multipart_field(const flare_multipart_form_t *form,
                                                               flare_str_t name);

/* Keeps a field's content at path, a path the handler chooses (never the
 * client's filename): the temporary file is linked there (so a kept file
 * costs no copy), an in-memory field is written there. path must not
 * exist: the call never replaces a file. 0, or FLARE_EEXIST, FLARE_EIO (with
 * flare_last_errno; e.g. path on another file system than the temporary
 * directory). The field's fd stays open until the request ends. */
FLARE_API int flare_multipart_keep(const flare_multipart_field_t *field, const char *path);

/* ---- the streaming helper (over flare/body.h) --------------------------- */

/* The same as flare_multipart_parse_req, fed the body as it arrives (a
 * streaming route's chunks): small parts go to the request's arena
 * (copied: chunks do not outlive their callback), parts past the
 * threshold to temporary files, removed when the request ends unless kept
 * (flare_multipart_keep). Optionally a sink sees every part as it passes:
 * with sink->discard, the content goes to the sink only (nothing is
 * stored: a field's size is counted, its data stays empty and fd -1), for
 * handlers that hash or forward what they receive. */
typedef struct flare_multipart_sink {
    /* each may be NULL; 0 or a negative FLARE_E* code (stops the parse: the
     * feed call returns it). f is the field being received: name,
     * filename, content type; size so far (final at on_part_end). */
    int (*on_part)(void *ud, const flare_multipart_field_t *f);
    int (*on_data)(void *ud, const flare_multipart_field_t *f, flare_str_t data);
    int (*on_part_end)(void *ud, const flare_multipart_field_t *f);
    bool discard;
} flare_multipart_sink_t;

/* A streaming parse of a request's multipart body (opaque). */
typedef struct flare_multipart_stream flare_multipart_stream_t;

/* Starts parsing req's body (Content-Type from the request; from a
 * streaming route's on_start, or its first on_chunk). Lives in the
 * request's arena until the request ends. opts, sink may be NULL; *sink is
 * copied, ud is given to its callbacks. *out is set on success. 0, or FLARE_EINVAL with *why
 * (NOT_FORM_DATA 415, BOUNDARY 400: answer flare_multipart_err_status), or
 * FLARE_ENOMEM. */
FLARE_API int flare_multipart_stream_start(flare_req_t *req, const flare_multipart_opts_t *opts,
                                           const flare_multipart_sink_t *sink, void *ud,
                                           flare_multipart_stream_t **out,
                                           flare_multipart_err_t *why);

/* Feeds data, the next bytes of the body (any split). 0, or the first failure:
 * FLARE_EINVAL / FLARE_ETOOBIG (bad input, a limit: flare_multipart_stream_err
 * says which, answer its status), FLARE_ENOMEM, FLARE_EIO, or what a sink
 * callback returned; once failed, every call returns the same. */
FLARE_API int flare_multipart_stream_feed(flare_multipart_stream_t *ms, flare_str_t data);

/* At the end of the body (on_end with err 0): 0 when the closing boundary
 * was seen, else as feed (TRUNCATED). *form (may be NULL) gets the parsed
 * form either way: fields received so far, valid until the request ends. */
FLARE_API int flare_multipart_stream_finish(flare_multipart_stream_t *ms,
                                            const flare_multipart_form_t **form);

/* Why the stream failed (NONE while it goes on, or for a sink's error). */
FLARE_API flare_multipart_err_t flare_multipart_stream_err(const flare_multipart_stream_t *ms);

#ifdef __cplusplus
}
#endif
#endif
