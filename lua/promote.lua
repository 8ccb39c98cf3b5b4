--[[ promote: pending -> ready
Moves ids whose due time has come (by Redis's clock) to the ready list,
oldest first, at most ARGV[2] per call so Redis is never blocked long.
An id whose payload is gone is dropped and counted: cancel removes pending
entries, so a due id without payload expired (msg ttl passed while no
consumer ran).

KEYS[1] pending zset   KEYS[2] ready list
ARGV[1] msg key prefix   ARGV[2] limit (<= 1000)
Returns {moved, wait_ms, expired}: wait_ms is how long until the next
pending id is due (0 when more are due now), -1 when pending is empty.
Idempotent: a re-run moves only what is still pending.
Complexity: O(log N + M) with M = moved.
]]
check_types(KEYS[1], 'zset', KEYS[2], 'list')
local now = now_ms()
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local live = {}
for _, id in ipairs(ids) do
  if redis.call('EXISTS', ARGV[1] .. id) == 1 then
    live[#live + 1] = id
  end
end
if #ids > 0 then
  redis.call('ZREM', KEYS[1], unpack(ids))
end
if #live > 0 then
  redis.call('RPUSH', KEYS[2], unpack(live))
end
local wait = -1
local head = head_due(KEYS[1])
if head then
  wait = math.max(0, tonumber(head) - now)
end
return {#live, wait, #ids - #live}
