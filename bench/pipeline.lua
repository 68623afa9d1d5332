-- wrk script: HTTP/1.1 pipelining, DEPTH requests per write (default 16).
--   wrk -s bench/pipeline.lua http://127.0.0.1:8080/plaintext -- 16
-- Every request is wrk's default one for the URL's path (wrk.format), so the bytes on the
-- wire are the same as in the keep-alive runs, just 16 of them back to back.
local req

init = function(args)
   local depth = tonumber(args[1]) or 16
   local r = {}
   for i = 1, depth do
      r[i] = wrk.format()
   end
   req = table.concat(r)
end

request = function()
   return req
end
