#!lua flags=allow-oom
--[[ wait: read-only, or waiters zset + id: a message's result, and a wait for it
Reads the result of message id; when there is none and the message is
still stored, registers a wait for it (when ARGV[2] > 0), so its ack
publishes the id on the done channel (ack.lua).

KEYS[1] result string   KEYS[2] msg string   KEYS[3] waiters zset
ARGV[1] id   ARGV[2] how long the caller waits, ms (0: read only)
Returns {1, result} when a result is kept; {2, ""} no result yet, the
message is stored (and the wait registered); {0, ""} neither.
Registering drops the waits that ended (scored before now) and keeps the
zset's TTL at least to the longest wait.
Idempotent: a re-run registers the same wait (ZADD GT keeps the later end).
Complexity: O(log W + E), W = waits, E = waits dropped.
]]
--- @include "checks"
--- @include "clock"
check_types(KEYS[3], 'zset')
local result = checked('string', 'GET', KEYS[1])
if result then
  return {1, result}
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {0, ''}
end
local wait = tonumber(ARGV[2])
if wait > 0 then
  local now = now_ms()
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  redis.call('ZADD', KEYS[3], 'GT', now + wait, ARGV[1])
  if redis.call('PTTL', KEYS[3]) < wait then
    redis.call('PEXPIRE', KEYS[3], wait)
  end
end
return {2, ''}
