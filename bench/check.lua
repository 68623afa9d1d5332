-- wrk script used by bench/run.sh for every run: builds the request(s) and checks EVERY response.
--
--   wrk -t1 -c64 -d5s -s bench/check.lua http://127.0.0.1:8080/plaintext -- \
--       expect='Hello, World!' [depth=16] [method=POST] [body_file=PATH] [ctype=TYPE] \
--       [expect_file=PATH] [expect_ctype=TYPE]
--
-- arguments (key=value, after wrk's "--"):
--   depth=N          requests per write (HTTP/1.1 pipelining); default 1
--   method=M         request method; default GET
--   body_file=PATH   request body (a Content-Length header is added by wrk.format)
--   ctype=TYPE       request Content-Type header
--   expect=TEXT      the exact response body every response must carry
--   expect_file=PATH the same, read from a file (e.g. the echoed body)
--   expect_ctype=T   the response's Content-Type must be exactly T
--
-- A response is "bad" when its status is not 2xx, its body differs from the expected one, or
-- its Content-Type differs (when expect_ctype is given). At the end wrk prints one line
--   CHECK responses=N bad=M
-- plus, when M > 0, the first bad response's status and the start of its body; run.sh fails
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

local req, expect, expect_ctype

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
   local ok = status >= 200 and status < 300
   if ok and expect and body ~= expect then
      ok = false
   end
   if ok and expect_ctype and header(headers, "Content-Type") ~= expect_ctype then
      ok = false
   end
   if not ok then
      bad = bad + 1
      if bad == 1 then
         first_bad = string.format("status %d, Content-Type %s, body(%d) %q", status,
            tostring(header(headers, "Content-Type")), #(body or ""), string.sub(body or "", 1, 120))
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
