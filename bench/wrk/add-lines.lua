-- wrk script: POST a body of LINES payload lines to /acme/job/bench/add.
-- Usage: LINES=100 wrk -s add-lines.lua -t8 -c8 -d20s http://127.0.0.1:7070
local lines = tonumber(os.getenv("LINES") or "1")
local parts = {}
for i = 1, lines do parts[i] = "payload " .. i end
wrk.method = "POST"
wrk.path = "/acme/job/bench/add"
wrk.body = table.concat(parts, "\n") .. "\n"
wrk.headers["Content-Type"] = "text/plain"
local token = os.getenv("JOBSTORE_TOKEN")
if token then wrk.headers["Authorization"] = "Bearer " .. token end

local errors = 0
function response(status, headers, body)
  if status ~= 200 then errors = errors + 1 end
end

function done(summary, latency, requests)
  io.write(string.format("jobs acknowledged/s: %.0f  (%d lines per request, %d non-200)\n",
    summary.requests / (summary.duration / 1e6) * lines, lines, summary.errors.status))
  io.write(string.format("latency p50 %.3f ms  p99 %.3f ms  max %.3f ms\n",
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
