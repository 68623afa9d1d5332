// A Drogon peer for TFB's /updates on PostgreSQL, to measure examples/tfb
// against in one run (bench/db_xact.sh PEER=drogon; docs/perf.md, "/updates
// against Drogon"). Our own minimal app on Drogon's public API, configured as
// TechEmpower's Drogon app configures its database client: the "fast"
// (lock-free, per event loop) DbClient, libpq pipeline mode with auto_batch on.
//
//   drogon_updates --listen HOST:PORT --db postgresql://user:pass@host:port/db
//                  [--pool N] [--workers N] [--update unnest|case]
//
// --pool: PostgreSQL connections per event loop (default 2, as Flare's --pool);
// --workers (or --threads): event-loop threads (default 1). The flags are
// examples/tfb's, so that bench/db_xact.sh starts either the same way.
//
// Routes (the TFB specification's, as examples/tfb answers them):
//   GET /db                  one random world row {"id":N,"randomNumber":M}
//   GET /updates?queries=N   N (1..500; missing or not a number: 1) random rows,
//                            each SELECTed on its own, then given a new random
//                            number 1..10000 by one batched UPDATE; the answer
//                            is the JSON array of the rows as written.
// The UPDATE is examples/tfb's text (two arrays, unnest), ids sorted so that
// concurrent UPDATEs lock rows in one order: both servers ask PostgreSQL for
// the same work. --update case sends instead the form most TFB apps use
// (TechEmpower's Drogon app among them): "SET randomnumber = CASE id WHEN $1
// THEN $2 ... END WHERE id IN (...)", a text per count, every number a
// parameter of its own. The JSON is written by hand, as examples/tfb does.
// Build: bench/peers/drogon.sh (against a Drogon install: DROGON_PREFIX).
#include <drogon/drogon.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace drogon;

namespace
{
constexpr unsigned kWorldRows = 10000;
constexpr unsigned kMaxQueries = 500;

const std::string kSqlWorld = "SELECT id, randomnumber FROM world WHERE id = $1";
const std::string kSqlUpdate =
    "UPDATE world SET randomnumber = v.r "
    "FROM unnest($1::int[], $2::int[]) AS v(id, r) WHERE world.id = v.id";

bool updateCase = false;

// UPDATE world SET randomnumber = CASE id WHEN $1 THEN $2 ... ELSE randomnumber
// END WHERE id IN ($2n+1, ...), for n distinct ids; made once per n
const std::string &caseSql(size_t n)
{
    thread_local std::vector<std::string> texts(kMaxQueries + 1);
    std::string &s = texts[n];
    if (s.empty())
    {
        s = "UPDATE world SET randomnumber = CASE id";
        for (size_t i = 0; i < n; i++)
            s += " WHEN $" + std::to_string(2 * i + 1) + " THEN $" + std::to_string(2 * i + 2);
        s += " ELSE randomnumber END WHERE id IN (";
        for (size_t i = 0; i < n; i++)
            s += (i > 0 ? ",$" : "$") + std::to_string(2 * n + i + 1);
        s += ')';
    }
    return s;
}

// xorshift64*, one state per event-loop thread (examples/tfb's generator)
thread_local uint64_t rngState;

unsigned randomId()
{
    if (rngState == 0)
        rngState = reinterpret_cast<uintptr_t>(&rngState) ^ 0x9e3779b97f4a7c15ull;
    uint64_t x = rngState;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rngState = x;
    return static_cast<unsigned>((x * 0x2545f4914f6cdd1dull) >> 33) % kWorldRows + 1;
}

// 1..500; missing, empty or not a number: 1
unsigned queryCount(const HttpRequestPtr &req)
{
    const std::string &v = req->getParameter("queries");
    if (v.empty())
        return 1;
    size_t i = 0;
    bool neg = false;
    if (v[0] == '-' || v[0] == '+')
    {
        neg = v[0] == '-';
        i = 1;
    }
    if (i == v.size())
        return 1;
    unsigned n = 0;
    for (; i < v.size(); i++)
    {
        char c = v[i];
        if (c < '0' || c > '9')
            return 1;
        if (n <= kMaxQueries)
            n = n * 10 + static_cast<unsigned>(c - '0');
    }
    if (neg || n < 1)
        return 1;
    return n > kMaxQueries ? kMaxQueries : n;
}

void putRow(std::string &out, unsigned id, unsigned rn)
{
    out += "{\"id\":";
    out += std::to_string(id);
    out += ",\"randomNumber\":";
    out += std::to_string(rn);
    out += '}';
}

HttpResponsePtr jsonResponse(std::string &&body)
{
    auto resp = HttpResponse::newHttpResponse();
    resp->setContentTypeCode(CT_APPLICATION_JSON);
    resp->setBody(std::move(body));
    return resp;
}

HttpResponsePtr errorResponse(const char *what)
{
    auto resp = HttpResponse::newHttpResponse();
    resp->setStatusCode(k500InternalServerError);
    resp->setContentTypeCode(CT_TEXT_PLAIN);
    resp->setBody(what);
    return resp;
}

// the fast client of the calling event loop, looked up once per thread
const orm::DbClientPtr &dbClient()
{
    thread_local orm::DbClientPtr client;
    if (!client)
        client = app().getFastDbClient();
    return client;
}

using Callback = std::function<void(const HttpResponsePtr &)>;

struct UpdatesCtx
{
    Callback callback;
    std::vector<unsigned> ids, rns;
    unsigned pending = 0;
    bool failed = false;
};

void fail(const std::shared_ptr<UpdatesCtx> &c)
{
    if (!c->failed)
    {
        c->failed = true;
        c->callback(errorResponse("database error"));
    }
}

void writeUpdates(const std::shared_ptr<UpdatesCtx> &c)
{
    const size_t n = c->ids.size();
    for (size_t i = 0; i < n; i++)
        c->rns[i] = randomId();
    // a repeated id answers the value written last
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (c->ids[j] == c->ids[i])
                c->rns[i] = c->rns[j];
    std::vector<std::pair<unsigned, unsigned>> order(n);
    for (size_t i = 0; i < n; i++)
        order[i] = {c->ids[i], c->rns[i]};
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end(),
                            [](const auto &x, const auto &y) { return x.first == y.first; }),
                order.end());
    auto answer = [c](const orm::Result &) {
        std::string body;
        body.reserve(c->ids.size() * 36 + 2);
        body += '[';
        for (size_t i = 0; i < c->ids.size(); i++)
        {
            if (i > 0)
                body += ',';
            putRow(body, c->ids[i], c->rns[i]);
        }
        body += ']';
        c->callback(jsonResponse(std::move(body)));
    };
    auto failed = [c](const orm::DrogonDbException &) { fail(c); };
    if (updateCase)
    {
        auto binder = *dbClient() << caseSql(order.size());
        for (const auto &o : order)
            binder << static_cast<int32_t>(o.first) << static_cast<int32_t>(o.second);
        for (const auto &o : order)
            binder << static_cast<int32_t>(o.first);
        binder >> std::move(answer);
        binder >> std::move(failed);
        return;
    }
    std::string a = "{", b = "{";
    for (size_t i = 0; i < order.size(); i++)
    {
        if (i > 0)
        {
            a += ',';
            b += ',';
        }
        a += std::to_string(order[i].first);
        b += std::to_string(order[i].second);
    }
    a += '}';
    b += '}';
    dbClient()->execSqlAsync(kSqlUpdate, std::move(answer), std::move(failed), std::move(a),
                             std::move(b));
}

void handleUpdates(const HttpRequestPtr &req, Callback &&callback)
{
    const unsigned n = queryCount(req);
    auto c = std::make_shared<UpdatesCtx>();
    c->callback = std::move(callback);
    c->ids.resize(n);
    c->rns.assign(n, 0);
    c->pending = n;
    for (unsigned i = 0; i < n; i++)
        c->ids[i] = randomId();
    const auto &db = dbClient();
    for (unsigned i = 0; i < n; i++)
    {
        db->execSqlAsync(
            kSqlWorld,
            [c, i](const orm::Result &r) {
                if (r.size() == 1)
                    c->rns[i] = r[0][1].as<unsigned>();
                else
                    fail(c);  // the id is not there: the table is not TFB's
                if (--c->pending == 0 && !c->failed)
                    writeUpdates(c);
            },
            [c](const orm::DrogonDbException &) {
                --c->pending;
                fail(c);
            },
            static_cast<int32_t>(c->ids[i]));
    }
}

void handleDb(const HttpRequestPtr &, Callback &&callback)
{
    unsigned id = randomId();
    dbClient()->execSqlAsync(
        kSqlWorld,
        [callback](const orm::Result &r) {
            if (r.size() != 1)
            {
                callback(errorResponse("no such row"));
                return;
            }
            std::string body;
            putRow(body, r[0][0].as<unsigned>(), r[0][1].as<unsigned>());
            callback(jsonResponse(std::move(body)));
        },
        [callback](const orm::DrogonDbException &) {
            callback(errorResponse("database error"));
        },
        static_cast<int32_t>(id));
}

// postgresql://user:pass@host:port/dbname (what tests/services.py --pg gives)
bool parseUrl(const std::string &url, orm::PostgresConfig &cfg)
{
    std::string s = url;
    for (const char *scheme : {"postgresql://", "postgres://"})
        if (s.rfind(scheme, 0) == 0)
        {
            s = s.substr(strlen(scheme));
            goto scheme_ok;
        }
    return false;
scheme_ok:
    size_t at = s.rfind('@');
    if (at != std::string::npos)
    {
        std::string cred = s.substr(0, at);
        s = s.substr(at + 1);
        size_t colon = cred.find(':');
        cfg.username = cred.substr(0, colon);
        if (colon != std::string::npos)
            cfg.password = cred.substr(colon + 1);
    }
    size_t slash = s.find('/');
    if (slash == std::string::npos)
        return false;
    cfg.databaseName = s.substr(slash + 1);
    std::string hostport = s.substr(0, slash);
    size_t colon = hostport.rfind(':');
    cfg.host = hostport.substr(0, colon);
    cfg.port = colon == std::string::npos
                   ? 5432
                   : static_cast<unsigned short>(atoi(hostport.c_str() + colon + 1));
    return !cfg.host.empty() && !cfg.databaseName.empty();
}

[[noreturn]] void usage()
{
    fprintf(stderr,
            "usage: drogon_updates --listen HOST:PORT --db postgresql://user:pass@host:port/db"
            " [--pool N] [--workers N] [--update unnest|case]\n");
    exit(2);
}
}  // namespace

int main(int argc, char **argv)
{
    std::string listen = "127.0.0.1:8080", url;
    size_t pool = 2, threads = 1;
    for (int i = 1; i < argc; i++)
    {
        std::string a = argv[i];
        if (i + 1 >= argc)
            usage();
        if (a == "--listen")
            listen = argv[++i];
        else if (a == "--db")
            url = argv[++i];
        else if (a == "--pool")
            pool = strtoul(argv[++i], nullptr, 10);
        else if (a == "--threads" || a == "--workers")
            threads = strtoul(argv[++i], nullptr, 10);
        else if (a == "--update")
        {
            std::string u = argv[++i];
            if (u != "unnest" && u != "case")
                usage();
            updateCase = u == "case";
        }
        else
            usage();
    }
    orm::PostgresConfig cfg{};
    if (url.empty() || !parseUrl(url, cfg) || pool == 0 || threads == 0)
        usage();
    cfg.connectionNumber = pool;  // per event loop: the fast client
    cfg.name = "default";
    cfg.isFast = true;
    cfg.timeout = -1.0;
    cfg.autoBatch = true;
    size_t colon = listen.rfind(':');
    if (colon == std::string::npos)
        usage();
    app()
        .setLogLevel(trantor::Logger::kWarn)
        .addListener(listen.substr(0, colon),
                     static_cast<uint16_t>(atoi(listen.c_str() + colon + 1)))
        .setThreadNum(threads)
        .setIdleConnectionTimeout(0)
        .addDbClient(cfg)
        .registerHandler("/db", &handleDb, {Get})
        .registerHandler("/updates", &handleUpdates, {Get});
    app().run();
    return 0;
}
