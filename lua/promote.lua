#!lua flags=allow-oom
--[[ promote: pending -> ready
Moves ids whose due time has come (by Redis's clock) to the ready list,
oldest first, at most ARGV[1] per call so Redis is never blocked long.
(An id whose payload is gone is moved too; claim buries and counts it.)

KEYS[1] pending zset   KEYS[2] ready list
ARGV[1] limit (1 to 1000)
Returns {moved, wait_ms, late1, late2, ...}: wait_ms is how long until the
next pending id is due (0 when more are due now), -1 when pending is
empty; late_i is how many microseconds after its due time each moved id
moved (the consumer's lateness metric, which a ms would round to 0).
Idempotent: a re-run moves only what is still pending.
Complexity: O(log N + M) with M = moved.
]]
check_types(KEYS[1], 'zset', KEYS[2], 'list')
local now_u = now_us()
local now = math.floor(now_u / 1000)
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, limit_arg(1), 'WITHSCORES')
local out = {0, -1}
local ids = {}
for i = 1, #due, 2 do
  ids[#ids + 1] = due[i]
  out[#out + 1] = now_u - tonumber(due[i + 1]) * 1000
end
if #ids > 0 then
  redis.call('RPUSH', KEYS[2], unpack(ids))
  redis.call('ZREM', KEYS[1], unpack(ids))
end
local head = head_due(KEYS[1])
if head then
  out[2] = math.max(0, tonumber(head) - now)
end
out[1] = #ids
return out
