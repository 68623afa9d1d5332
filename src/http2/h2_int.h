/* HTTP/2 internals shared by session.c (the nghttp2 session, input,
 * output, defences, timeouts) and ops.c (the exchange's operations). */
#ifndef FLARE_HTTP2_H2_INT_H
#define FLARE_HTTP2_H2_INT_H

#include <nghttp2/nghttp2.h>

#include "worker.h"
#include "http/exchange.h"
#include "net/conn.h"
#include "http2/h2.h"
#include "http2/h2_names.h"

/* Advertised and enforced limits (docs/http2.md). */
#define H2_MAX_STREAMS       128         /* SETTINGS_MAX_CONCURRENT_STREAMS, and our own count */
#define H2_STREAM_WINDOW     (256 << 10) /* SETTINGS_INITIAL_WINDOW_SIZE */
#define H2_CONN_WINDOW       (1 << 20)   /* the connection's receive window */
#define H2_MAX_UNSENT        (1u << 20)  /* output queued for a slow reader before reading pauses */
#define H2_WINDOW_MS         1000        /* flood counters' window */
#define H2_MAX_RESETS        100  /* streams the client cancels per window (CVE-2023-44487) */
#define H2_MAX_CTRL          100  /* SETTINGS, PING per window (each) */
#define H2_MAX_PRIORITY      500  /* PRIORITY frames per window */
#define H2_MAX_EMPTY_DATA    100  /* DATA without payload nor END_STREAM per window */
#define H2_MAX_WU            1000 /* WINDOW_UPDATE per window, plus two per DATA sent */
#define H2_MAX_CONT          32   /* CONTINUATION frames in one header block (CVE-2024-27316) */
/* NGHTTP2_ERR_TOO_MANY_CONTINUATIONS, by value: nghttp2 1.61 (and Debian
 * 12's 1.52 with the CVE-2024-28182 fix) ends a header block of more than
 * 8 CONTINUATION frames itself, before H2_MAX_CONT; answered as our own
 * CONTINUATION defence, ENHANCE_YOUR_CALM, not as a protocol error */
#define H2_ERR_TOO_MANY_CONT (-905)
#define H2_COPY_MAX          1024 /* borrowed body pieces this small are copied, not queued */
#define H2_ONE_FRAME         16384 /* a body that fits one DATA frame (SETTINGS_MAX_FRAME_SIZE's least) */

enum { SRC_NONE, SRC_BUF, SRC_REF, SRC_FILE, SRC_STREAM };

enum {
    ST_READY = 1u << 0,      /* request complete: on the ready list */
    ST_DISPATCHED = 1u << 1, /* handed to dispatch */
    ST_EOF = 1u << 2,        /* stream_end: no more data after what is buffered */
    ST_DEFERRED = 1u << 3,   /* the data provider returned DEFERRED */
    ST_ENDED_IN = 1u << 4,   /* END_STREAM received */
    ST_ANSWERED = 1u << 5,   /* a response was submitted */
    ST_MALFORMED = 1u << 6,  /* reset with PROTOCOL_ERROR (RFC 9113 8.1.1), or REFUSED_STREAM
                                by the body budget: never dispatched */
};

/* fields.c: RFC 9113 8.2 and 8.3, one request field at a time. seen keeps
 * the block's state (H2S_*); the result says what the field is, or
 * H2F_BAD: the request is malformed. */
enum {
    H2S_METHOD = 1u << 0,
    H2S_SCHEME = 1u << 1,
    H2S_PATH = 1u << 2,
    H2S_AUTHORITY = 1u << 3,
    H2S_REGULAR = 1u << 4, /* a regular field came: no pseudo-header after it */
    H2S_CLEN = 1u << 5,    /* content-length came (once) */
};
enum {
    H2F_BAD = -1,
    H2F_REGULAR,
    H2F_METHOD,
    H2F_PATH,
    H2F_SCHEME,
    H2F_AUTHORITY,
    H2F_CLEN,
    H2F_HOST,
};
int flare__h2_check_field(uint8_t *seen, bool trailer, const uint8_t *name, size_t nlen,
                          const uint8_t *value, size_t vlen);
/* the block's required pseudo-headers are there (8.3.1, 8.5 for CONNECT) */
bool flare__h2_head_ok(uint8_t seen, bool connect);
/* :path's bytes: H2T_TARGET none is a control byte, space or DEL;
 * H2T_PLAIN neither is any '?' or '%' (the path is the whole target, with
 * nothing to decode) */
enum { H2T_PLAIN = 1u << 0, H2T_TARGET = 1u << 1 };
unsigned flare__h2_target_class(const uint8_t *p, size_t n);
/* 1*DIGIT, at most 18 of them */
bool flare__h2_content_length(const uint8_t *v, size_t n, int64_t *out);

typedef struct h2_stream {
    struct h2_stream *next, *prev; /* the connection's streams */
    struct h2_stream *hnext;       /* the connection's table bucket (H2_TAB) */
    struct h2_stream *rnext;       /* ready list */
    struct flare_h2 *h2;
    struct flare_req *ex;
    int32_t id;
    uint32_t flags;
    uint32_t nfields;
    uint8_t seen; /* H2S_*: what the request's fields held so far */
    size_t hdr_bytes;
    uint64_t body_len;
    /* the body budget: bytes of this stream's body buffered (counted in
     * h2->held until the stream is freed), and of those the ones whose
     * window was not given back yet (h2->owed) */
    uint64_t held, owed;
    uint64_t t_body; /* last request progress (ms) */
    int err_status;  /* answer this once the request's head is complete */
    const char *err_msg;
    uint8_t src;
    size_t opos; /* SRC_BUF/SRC_STREAM: bytes of ex->out handed to nghttp2 */
    flare_str_t ref;
    flare_release_t rel;
    int fd;
    uint64_t foff, fleft;
    /* RFC 9113 8.2.3: the cookie fields of a block are joined with "; "
     * into the first one's value (head.headers[cookie_ix - 1]; 0: none yet)
     * once the block ends; the further ones wait here (in the arena) */
    uint32_t cookie_ix;
    struct h2_crumb *crumbs, *crumbs_last;
} h2_stream_t;

/* a cookie field after the block's first */
typedef struct h2_crumb {
    struct h2_crumb *next;
    size_t len;
    char data[];
} h2_crumb_t;

/* Flare's own per-connection counters (independent of nghttp2's). */
typedef struct flare_h2_counters {
    uint64_t streams, resets, calm;
} flare_h2_counters_t;

enum {
    H2_IN_BATCH = 1u << 0,   /* inside input processing: output leaves at its end */
    H2_CLOSING = 1u << 1,    /* GOAWAY queued for an error: close once flushed */
    H2_NOTICE = 1u << 2,     /* drain: shutdown notice sent */
    H2_GOAWAY = 1u << 3,     /* drain: final GOAWAY sent */
    H2_PAUSED = 1u << 4,     /* input paused: too much output queued */
    H2_IN_RECV = 1u << 5,    /* inside nghttp2_session_mem_recv */
    H2_IN_HDRS = 1u << 6,    /* a header block is open (HEADERS without END_HEADERS) */
    H2_STREAM_OUT = 1u << 7, /* a response is streamed (flare_res_write): check the streams'
                                backpressure after I/O (stream_out_check) */
};

#define H2_GAPS 4
#define H2_TAB  64 /* buckets of the connection's stream table (a power of two) */

typedef struct flare_h2 {
    nghttp2_session *sess;
    flare_conn_t *c;
    flare_worker_t *w; /* c's */
    h2_stream_t *streams;
    unsigned nstreams;
    h2_stream_t *ready, **ready_tail;
    /* the streams by id: bucket (id >> 1) % H2_TAB (client ids are odd and
     * rising), chained by hnext. Flare's own: nghttp2's stream user data
     * is a map lookup per access, and three of them per request */
    h2_stream_t *tab[H2_TAB];
    /* the stream whose request header block is being decoded (its fields
     * come one callback each: no table walk per field); NULL when freed */
    h2_stream_t *hot;
    uint32_t flags;
    uint32_t goaway_code; /* a defence's verdict, sent as GOAWAY */
    const char *why;
    uint64_t t_win;
    uint32_t w_resets, w_settings, w_pings, w_prio, w_empty, w_wu, w_data_out;
    /* streams this side reset (413, REFUSED_STREAM, an early answer): a
     * client's HEADERS still in flight for one of them is ignored (RFC 9113
     * 5.1, "closed"), any other HEADERS on a stream id at or below the last
     * one opened is a connection error */
    int32_t reset_ids[16];
    unsigned reset_pos;
    /* client stream ids: the highest one opened, and the runs of ids the
     * client skipped below it (never opened). A HEADERS on an id at or
     * below open_max is on a closed stream (5.1: STREAM_CLOSED) if it was
     * opened, a stream id going backwards (5.1.1: PROTOCOL_ERROR) if not.
     * The last H2_GAPS runs are kept; ids at or below gap_floor are in
     * runs forgotten since, and count as never opened. */
    int32_t open_max, gap_floor;
    int32_t gap_lo[H2_GAPS], gap_hi[H2_GAPS];
    unsigned gap_pos;
    uint32_t cont_frames;
    size_t cont_bytes;
    /* the body budget (max_conn_body): request body bytes buffered on the
     * connection, those whose window is held back, and the stream whose
     * body always goes on (the oldest one receiving a body; NULL: to find) */
    uint64_t held, owed;
    h2_stream_t *leader;
    uint64_t t_activity; /* last request activity (not PING) */
    uint64_t t_out;      /* last DATA/HEADERS out, or a response submitted */
    uint64_t t_hdrs;     /* H2_IN_HDRS: when its HEADERS began (the header timeout) */
    int32_t hdrs_sid;    /* H2_IN_HDRS: the stream whose header block is open */
    /* session.c recv_frames: where the input is in the frame sequence:
     * bytes of the current frame's payload (or of the preface) still to
     * pass, and a frame header split between reads */
    uint32_t in_left;
    uint8_t in_hd[9];
    uint8_t in_hdlen;
    /* a PRIORITY frame's stream dependency, gathered as it comes in: bytes
     * still to come (of 4), the bytes so far, the frame's stream (RFC 9113
     * 5.3.1: none may depend on itself) */
    uint8_t prio_left;
    uint32_t prio_dep;
    int32_t prio_sid;
    flare_h2_counters_t ctr;
    nghttp2_mem mem; /* the session's allocator (mem.c) */
} flare_h2_t;

extern const flare_proto_ops_t flare__h2_ops;

/* mem.c: per-worker free lists for nghttp2's blocks and our streams */
typedef struct flare_h2_mem flare_h2_mem_t;
void *flare__h2_malloc(flare_worker_t *w, size_t size);
void *flare__h2_calloc(flare_worker_t *w, size_t n, size_t size);
void *flare__h2_realloc(flare_worker_t *w, void *ptr, size_t size);
void flare__h2_mfree(flare_worker_t *w, void *ptr);
/* the session's allocator, the worker's; its lists are made the first time
 * (the functions above need them: 0, or FLARE_ENOMEM) */
int flare__h2_nghttp2_mem(flare_worker_t *w, nghttp2_mem *out);
/* session.c: nghttp2's on_begin_frame callback (ud: the flare_h2_t), where
 * the flood counters count (per H2_WINDOW_MS window of h2->w->loop.now)
 * and a verdict sets goaway_code and returns NGHTTP2_ERR_CALLBACK_FAILURE;
 * it also opens and closes the header-block timeout (H2_IN_HDRS). */
int flare__h2_on_begin_frame(nghttp2_session *sess, const nghttp2_frame_hd *hd, void *ud);

/* session.c: produce output (mem_send into the stream's buffer) and write
 * it, unless inside an input batch (the batch's end does). */
void flare__h2_output(flare_h2_t *h2);
/* ops.c: the response's fields as nghttp2 takes them. nva holds cap
 * entries, lc room for every name's bytes (lower-cased there). add_nv
 * cuts the value's trailing blanks and drops empty and connection-specific
 * names (RFC 9113 8.2.2) and anything past cap; add_block adds the lines of
 * a trusted "Name: value\r\n" block. Names and values are not copied: they
 * must outlive the HEADERS frame (NGHTTP2_NV_FLAG_NO_COPY_*). */
typedef struct flare_h2_nvb {
    nghttp2_nv *nva;
    size_t n, cap;
    char *lc;
} flare_h2_nvb_t;
void flare__h2_add_nv(flare_h2_nvb_t *b, flare_str_t name, flare_str_t value);
void flare__h2_add_block(flare_h2_nvb_t *b, flare_str_t blk);
/* ops.c: the data provider */
ssize_t flare__h2_read_cb(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t len,
                          uint32_t *flags, nghttp2_data_source *src, void *ud);
/* ops.c: puts a DATA frame the provider sized (NO_COPY) on the output */
int flare__h2_send_data(nghttp2_session *sess, nghttp2_frame *frame, const uint8_t *framehd,
                        size_t len, nghttp2_data_source *src, void *ud);
/* ops.c: a stream's response source is released (ref, file) */
void flare__h2_src_release(h2_stream_t *st);
/* ops.c: submits an error answer for a stream not dispatched */
void flare__h2_error(h2_stream_t *st, int status, const char *msg);

#endif
