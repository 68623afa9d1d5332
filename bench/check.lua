-- wrk script used by bench/run.sh for every run: builds the request(s) and checks EVERY response.
--
--   wrk -t1 -c64 -d5s -s bench/check.lua http://127.0.0.1:8080/plaintext -- \
--       expect='Hello, World!' [depth=16] [method=POST] [body_file=PATH] [ctype=TYPE] \
--       [expect_file=PATH] [expect_len=N] [expect_ctype=TYPE] [status=200]
--
-- arguments (key=value, after wrk's "--"):
--   depth=N          requests per write (HTTP/1.1 pipelining); default 1
--   method=M         request method; default GET
--   body_file=PATH   request body (a Content-Length header is added by wrk.format)
--   ctype=TYPE       request Content-Type header
--   expect=TEXT      the exact response body every response must carry
--   expect_file=PATH the same, read from a file (e.g. the echoed body, a static file)
--   expect_len=N     the response body must be exactly N bytes long (checked first, so a
--                    truncated or padded body is reported as such)
--   expect_ctype=T   the response's Content-Type must be exactly T
--   status=N         the status every response must have; default 200
--
-- A response is "bad" when its status is not exactly the expected one (200), its body has the
-- wrong length or differs from the expected one, or its Content-Type differs (when
-- expect_ctype is given). At the end wrk prints one line
--   CHECK responses=N bad=M
-- plus, when M > 0, what was wrong with the first bad response (status, body length, body,
-- Content-Type), its status and the start of its body; run.sh fails
-- the run when M > 0 or when that line is missing. Every response is checked (a response
-- callback makes wrk hand each body to Lua: that costs the client some CPU, the same for every
-- server; the server's CPU per request, the figure run.sh compares, does not include it).
local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

local function slurp(path)
   local f = assert(io.open(path, "rb"))
   local s = f:read("*a")
   f:close()
   return s
end

local req, expect, expect_len, expect_ctype, expect_status

function init(args)
   local opt = {}
   for _, a in ipairs(args) do
      local k, v = string.match(a, "^([%w_]+)=(.*)$")
      if not k then
         error("check.lua: argument '" .. a .. "' is not key=value")
      end
      opt[k] = v
   end
   local depth = tonumber(opt.depth or "1")
   if opt.method then
      wrk.method = opt.method
   end
   if opt.body_file then
      wrk.body = slurp(opt.body_file)
   end
   if opt.ctype then
      wrk.headers["Content-Type"] = opt.ctype
   end
   expect = opt.expect
   if opt.expect_file then
      expect = slurp(opt.expect_file)
   end
   if opt.expect_len then
      expect_len = tonumber(opt.expect_len)
      if not expect_len then
         error("check.lua: expect_len=" .. opt.expect_len .. " is not a number")
      end
   end
   if expect and expect_len and #expect ~= expect_len then
      error(string.format("check.lua: the expected body has %d bytes, expect_len=%d", #expect, expect_len))
   end
   expect_status = tonumber(opt.status or "200")
   if not expect_status then
      error("check.lua: status=" .. opt.status .. " is not a number")
   end
   expect_ctype = opt.expect_ctype
   local r = {}
   for i = 1, depth do
      r[i] = wrk.format()
   end
   req = table.concat(r)
   -- globals, so that done() can read them through thread:get()
   responses = 0
   bad = 0
   first_bad = ""
end

function request()
   return req
end

local function header(headers, name)
   local v = headers[name]
   if v then
      return v
   end
   local lname = string.lower(name)
   for k, val in pairs(headers) do
      if string.lower(k) == lname then
         return val
      end
   end
   return nil
end

function response(status, headers, body)
   responses = responses + 1
   body = body or ""
   local why
   if status ~= expect_status then
      why = string.format("status %d, not %d", status, expect_status)
   elseif expect_len and #body ~= expect_len then
      why = string.format("body of %d bytes, not %d", #body, expect_len)
   elseif expect and body ~= expect then
      why = "body differs from the expected one"
   elseif expect_ctype and header(headers, "Content-Type") ~= expect_ctype then
      why = "wrong Content-Type"
   end
   if why then
      bad = bad + 1
      if bad == 1 then
         first_bad = string.format("%s: status %d, Content-Type %s, body(%d) %q", why, status,
            tostring(header(headers, "Content-Type")), #body, string.sub(body, 1, 120))
      end
   end
end

function done(summary, latency, requests)
   local n, b, first = 0, 0, ""
   for _, t in ipairs(threads) do
      n = n + t:get("responses")
      b = b + t:get("bad")
      if first == "" then
         first = t:get("first_bad") or ""
      end
   end
   io.write(string.format("CHECK responses=%d bad=%d\n", n, b))
   if b > 0 then
      io.write("CHECK first bad response: " .. first .. "\n")
   end
end
