/* The status page: GET PATH is a self-contained HTML page (inline SVG and
 * script, nothing fetched from elsewhere); GET PATH?json the counters it
 * polls. Rates and latency percentiles are computed by the page from the
 * difference between two polls (the histogram's buckets), so the server
 * keeps no history. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "core/buf.h"
#include "http/svc.h"
#include "obs/metrics_app.h"

/* The page in three parts: before the options' head HTML, between it and
 * the back link, after. */
static const char page_head[] =
    "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    "<title>Flare status</title>\n"
    "<style>.st{font:14px/1.4 sans-serif;color:#222;max-width:84rem;margin:1em auto;"
    "padding:0 1em}.st h1{font-size:20px}.st h3{margin:.8em 0 .3em}"
    ".st .row{display:flex;gap:1em;flex-wrap:wrap}.st .card{border:1px solid #ccc;"
    "padding:.6em;border-radius:6px;background:#fff;flex:1 1 9em}.st .big{font-size:22px;"
    "font-weight:bold}.st .chart{flex:1 1 18em;min-width:0}.st svg{background:#fafafa;"
    "display:block;width:100%;max-width:420px;height:auto}.st .scroll{overflow-x:auto;"
    "margin-top:1em}.st table{border-collapse:collapse;background:#fff}"
    ".st td,.st th{border:1px solid #ccc;padding:3px 8px;text-align:right;white-space:nowrap}"
    ".st .l{text-align:left}.st .muted{color:#666}</style>\n";
static const char page_body[] = "</head><body>\n<main class=\"st\">\n";
static const char page_rest[] =
    "<h1>Flare status <small id=\"pid\"></small></h1>\n"
    "<div class=\"row\">"
    "<div class=\"card\">requests/s<div class=\"big\" id=\"rps\">-</div></div>"
    "<div class=\"card\">requests<div class=\"big\" id=\"total\">-</div></div>"
    "<div class=\"card\">p50 / p90 / p99 (ms)<div class=\"big\" id=\"pct\">-</div></div>"
    "<div class=\"card\">connections open / active / idle<div class=\"big\" id=\"conns\">-"
    "</div></div>"
    "<div class=\"card\">streams open (WebSocket, SSE)<div class=\"big\" id=\"ws\">-</div>"
    "</div></div>\n"
    "<div class=\"row\"><div class=\"chart\"><h3>requests/s</h3><svg id=\"c_rps\" "
    "width=\"420\" height=\"140\" viewBox=\"0 0 420 140\"></svg></div><div class=\"chart\">"
    "<h3>latency p50 / p99 (ms)</h3><svg id=\"c_lat\" width=\"420\" height=\"140\" "
    "viewBox=\"0 0 420 140\"></svg></div><div class=\"chart\"><h3>connections</h3><svg "
    "id=\"c_conn\" width=\"420\" height=\"140\" viewBox=\"0 0 420 140\"></svg></div></div>\n"
    "<div class=\"scroll\"><table id=\"routes\"><thead><tr><th class=\"l\">method</th>"
    "<th class=\"l\">route</th><th>requests</th><th>req/s</th><th>5xx</th><th>streams</th>"
    "<th>p50 ms</th><th>p99 ms</th></tr></thead><tbody></tbody></table></div>\n"
    "<p class=\"muted\">Streams (server-sent events, WebSocket upgrades) count as requests "
    "and streams, not in the latencies.</p>\n"
    "<script>\n"
    "'use strict';\n"
    "const N=60,hist={rps:[],p50:[],p99:[],conn:[]};let prev=null;\n"
    "function pct(b,le,q){let t=0;for(const x of b)t+=x;if(t<=0)return null;let want=q*t,c=0;"
    "for(let i=0;i<b.length;i++){const lo=i?le[i-1]:0;c+=b[i];if(c>=want){const hi=i<le.length?"
    "le[i]:lo*2||1;const f=b[i]?(want-(c-b[i]))/b[i]:1;return (lo+(hi-lo)*f)*1000;}}return null}\n"
    "function diff(a,b){return a.map((x,i)=>x-(b?b[i]:0))}\n"
    "function line(svg,series,colors){const w=+svg.getAttribute('width'),h=+svg.getAttribute"
    "('height');let max=1;for(const s of series)for(const v of s)if(v>max)max=v;let o='';"
    "series.forEach((s,k)=>{const pts=s.map((v,i)=>(i*(w-4)/(N-1)+2).toFixed(1)+','+(h-4-"
    "v/max*(h-20)).toFixed(1)).join(' ');o+='<polyline fill=\"none\" stroke=\"'+colors[k]+"
    "'\" stroke-width=\"2\" points=\"'+pts+'\"/>'});o+='<text x=\"4\" y=\"12\" font-size=\"11\""
    ">max '+(max<10?max.toFixed(2):Math.round(max))+'</text>';svg.innerHTML=o}\n"
    "function push(a,v){a.push(v);if(a.length>N)a.shift()}\n"
    "function fmt(v){return v==null?'-':v<10?v.toFixed(2):Math.round(v)}\n"
    "function esc(s){return s.replace(/[&<>]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;'}[c]))}\n"
    "async function poll(){let j;try{const r=await fetch(location.pathname+'?json',{cache:"
    "'no-store'});j=await r.json()}catch(e){return}\n"
    "document.getElementById('pid').textContent='pid '+j.pid;"
    "document.getElementById('total').textContent=j.requests;"
    "document.getElementById('conns').textContent=j.connections.open+' / '+j.connections.active"
    "+' / '+j.connections.idle;document.getElementById('ws').textContent=j.ws_connections;\n"
    "const dt=prev?(j.time-prev.time):0;let rps=0,all=new Array(j.buckets.length+1).fill(0);\n"
    "const tb=document.querySelector('#routes tbody');let rows='';\n"
    "j.routes.forEach((r,i)=>{const p=prev&&prev.routes[i];const d=diff(r.hist,p&&p.hist);"
    "const rr=dt>0?(r.requests-(p?p.requests:0))/dt:0;d.forEach((x,k)=>all[k]+=x);"
    "rows+='<tr><td class=\"l\">'+(esc(r.method)||'*')+'</td><td class=\"l\">'+"
    "(esc(r.route)||'(unmatched)')+'</td><td>'+r.requests+'</td><td>'+fmt(rr)+"
    "'</td><td>'+r.errors+'</td><td>'+r.streams+'</td><td>'+fmt(pct(r.hist,j.buckets,.5))+"
    "'</td><td>'+fmt(pct(r.hist,j.buckets,.99))+'</td></tr>'});tb.innerHTML=rows;\n"
    "if(dt>0)rps=(j.requests-prev.requests)/dt;const p50=pct(all,j.buckets,.5),"
    "p90=pct(all,j.buckets,.9),p99=pct(all,j.buckets,.99);\n"
    "document.getElementById('rps').textContent=prev?fmt(rps):'-';"
    "document.getElementById('pct').textContent=fmt(p50)+' / '+fmt(p90)+' / '+fmt(p99);\n"
    "push(hist.rps,rps);push(hist.p50,p50||0);push(hist.p99,p99||0);push(hist.conn,"
    "j.connections.open);\n"
    "line(document.getElementById('c_rps'),[hist.rps],['#1565c0']);"
    "line(document.getElementById('c_lat'),[hist.p50,hist.p99],['#2e7d32','#c62828']);"
    "line(document.getElementById('c_conn'),[hist.conn],['#6a1b9a']);prev=j}\n"
    "poll();setInterval(poll,1000);\n"
    "</script></main></body></html>\n";

static void put(flare_buf_t *b, int *err, const char *s, size_t n)
{
    if (*err == 0 && flare__buf_append(b, s, n) != 0)
        *err = FLARE_ENOMEM;
}

static void putf(flare_buf_t *b, int *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void putf(flare_buf_t *b, int *err, const char *fmt, ...)
{
    char tmp[160];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        put(b, err, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static void put_json_str(flare_buf_t *b, int *err, const char *s)
{
    put(b, err, "\"", 1);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = { '\\', (char)c };
            put(b, err, e, 2);
        } else if (c < 0x20)
            putf(b, err, "\\u%04x", c);
        else
            put(b, err, s, 1);
    }
    put(b, err, "\"", 1);
}

static int status_json(flare_app_t *app, flare_res_t *res)
{
    flare_metrics_totals_t t;
    int rc = flare__metrics_totals(app, &t);
    if (rc != 0)
        return flare_res_send(res, 500, FLARE_STR("text/plain"), FLARE_STR("metrics are off\n"));
    flare_buf_t b = { 0 };
    int err = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t idle = t.open > t.active ? t.open - t.active : 0;
    putf(&b, &err, "{\"time\":%.3f,\"pid\":%ld,\"requests\":%llu,",
         (double)ts.tv_sec + ts.tv_nsec / 1e9, (long)getpid(), (unsigned long long)t.requests);
    putf(&b, &err, "\"bytes_received\":%llu,\"bytes_sent\":%llu,", (unsigned long long)t.rx,
         (unsigned long long)t.tx);
    putf(&b, &err, "\"connections\":{\"open\":%llu,\"active\":%llu,\"idle\":%llu},",
         (unsigned long long)t.open, (unsigned long long)t.active, (unsigned long long)idle);
    putf(&b, &err, "\"ws_connections\":%llu,\"listeners\":[", (unsigned long long)t.ws_open);
    /* app->active lives from before the workers start until after they are
     * joined: a handler (on a worker) reads it safely */
    for (unsigned i = 0; i < app->nactive; i++) {
        const flare_listener_t *l = app->active[i];
        const char *open = i ? ",{\"address\":" : "{\"address\":";
        put(&b, &err, open, strlen(open));
        put_json_str(&b, &err, l->name);
        putf(&b, &err, ",\"port\":%d,\"tls\":%s,\"admin\":%s}", atomic_load(&l->port),
             l->tls != NULL ? "true" : "false", l->admin ? "true" : "false");
    }
    put(&b, &err, "],\"buckets\":[", 13);
    for (unsigned i = 0; i < FLARE__HIST_NB; i++)
        putf(&b, &err, "%s%g", i ? "," : "", (double)flare__hist_bounds_ns[i] / 1e9);
    put(&b, &err, "],\"routes\":[", 12);
    for (size_t r = 0; r < t.nroutes; r++) {
        const flare_metrics_route_sum_t *s = &t.routes[r];
        put(&b, &err, r ? ",{\"route\":" : "{\"route\":", r ? 10 : 9);
        put_json_str(&b, &err, flare__metrics_route_name(app, r));
        put(&b, &err, ",\"method\":", 10);
        put_json_str(&b, &err, flare__metrics_route_method(app, r));
        putf(&b, &err, ",\"requests\":%llu,\"errors\":%llu,\"streams\":%llu,\"hist\":[",
             (unsigned long long)s->requests, (unsigned long long)s->errors,
             (unsigned long long)s->hist[FLARE__HIST_STREAM]);
        for (unsigned c = 0; c <= FLARE__HIST_NB; c++)
            putf(&b, &err, "%s%llu", c ? "," : "", (unsigned long long)s->hist[c]);
        put(&b, &err, "]}", 2);
    }
    put(&b, &err, "]}\n", 3);
    free(t.routes);
    if (err != 0) {
        flare__buf_free(&b);
        return flare_res_send(res, 500, FLARE_STR("text/plain"), FLARE_STR("out of memory\n"));
    }
    rc = flare_res_send(res, 200, FLARE_STR("application/json"), (flare_str_t){ b.data, b.len });
    flare__buf_free(&b);
    return rc;
}

static int status_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    const flare_status_page_t *p = ud;
    if (flare__admin_elsewhere(req))
        return flare__res_error(req, 404, "not found");
    flare_str_t q = flare_req_query(req);
    if (q.len == 4 && memcmp(q.ptr, "json", 4) == 0)
        return status_json(p->app, res);
    int rc = flare_res_header(res, FLARE_STR("Cache-Control"), FLARE_STR("no-store"));
    if (rc != 0)
        return rc;
    return flare_res_send_ref(res, 200, FLARE_STR("text/html; charset=utf-8"),
                              (flare_str_t){ p->html, p->len }, NULL, NULL);
}

/* The page with its options: head, head_html, body, the back link, rest. */
static flare_status_page_t *page_new(flare_app_t *app, const flare_status_opts_t *o)
{
    flare_buf_t b = { 0 };
    int err = 0;
    put(&b, &err, page_head, sizeof(page_head) - 1);
    if (o->head_html != NULL)
        put(&b, &err, o->head_html, strlen(o->head_html));
    put(&b, &err, page_body, sizeof(page_body) - 1);
    if (o->back_href != NULL) {
        static const char a[] = "<p><a class=\"back\" href=\"";
        put(&b, &err, a, sizeof(a) - 1);
        for (const char *c = o->back_href; *c != '\0'; c++) {
            switch (*c) {
            case '&':
                put(&b, &err, "&amp;", 5);
                break;
            case '"':
                put(&b, &err, "&quot;", 6);
                break;
            case '<':
                put(&b, &err, "&lt;", 4);
                break;
            case '>':
                put(&b, &err, "&gt;", 4);
                break;
            default:
                put(&b, &err, c, 1);
            }
        }
        static const char z[] = "\">\u2190 back</a></p>\n";
        put(&b, &err, z, sizeof(z) - 1);
    }
    put(&b, &err, page_rest, sizeof(page_rest) - 1);
    flare_status_page_t *p = err == 0 ? malloc(sizeof(*p) + b.len) : NULL;
    if (p != NULL) {
        p->next = NULL;
        p->app = app;
        p->len = b.len;
        memcpy(p->html, b.data, b.len);
    }
    flare__buf_free(&b);
    return p;
}

int flare_status_route_opts(flare_app_t *app, const char *path, const flare_status_opts_t *opts)
{
    if (app == NULL || path == NULL || path[0] != '/')
        return flare__fail(FLARE_EINVAL, 0, "flare_status_route: app NULL or path not /...");
    int rc = flare_metrics_enable(app);
    if (rc != 0)
        return rc;
    flare_metrics_app_t *ma = flare__metrics_app(app, false);
    flare_status_page_t *p = page_new(app, opts != NULL ? opts : &(flare_status_opts_t){ 0 });
    if (ma == NULL || p == NULL) {
        free(p);
        return flare__fail(FLARE_ENOMEM, 0, "flare_status_route: out of memory");
    }
    rc = flare_get(app, path, status_handler, p);
    if (rc != 0) {
        free(p);
        return rc;
    }
    p->next = ma->status_pages;
    ma->status_pages = p;
    return 0;
}

int flare_status_route(flare_app_t *app, const char *path)
{
    return flare_status_route_opts(app, path, NULL);
}
