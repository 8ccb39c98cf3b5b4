#!lua flags=allow-oom
--[[ requeue: garbage -> ready
Gives dead messages a new life: each leaves garbage for the end of the
ready list, with its delivery count and failure reason cleared (so it gets
its full retries again) and its payload kept at least msg ttl from now. A
dead message whose payload is gone is deleted instead.

KEYS[1] garbage zset   KEYS[2] retries hash   KEYS[3] ready list
ARGV[1] msg key prefix   ARGV[2] limit (<= 1000)   ARGV[3] msg ttl ms
ARGV[4] wake-up channel   ARGV[5..] ids (optional; without: the oldest dead)
Returns {requeued, taken out of garbage (requeued or deleted)}.
Publishes a wake-up when it requeued any.
Idempotent: a re-run finds them gone from garbage and requeues nothing.
Complexity: O(M log N) with M = ids looked at.
]]
check_types(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'list')
local limit = tonumber(ARGV[2])
local ids
if #ARGV >= 5 then
  ids = members_of(KEYS[1], 5, limit)
else
  ids = redis.call('ZRANGE', KEYS[1], 0, limit - 1)
end
if #ids == 0 then
  return {0, 0}
end
local keys = payloads_here(ARGV[1], ids)
redis.call('ZREM', KEYS[1], unpack(ids))
redis.call('HDEL', KEYS[2], unpack(ids))
local live = {}
for i, id in ipairs(ids) do
  if redis.call('PEXPIRE', keys[i], tonumber(ARGV[3]), 'GT') == 1
      or redis.call('EXISTS', keys[i]) == 1 then
    live[#live + 1] = id
  end
end
if #live > 0 then
  redis.call('RPUSH', KEYS[3], unpack(live))
  wake(ARGV[4], 0)
end
return {#live, #ids}
