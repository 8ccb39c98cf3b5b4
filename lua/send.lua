--[[ send: (nothing) -> pending
Stores one message atomically: payload string (with TTL), retry record and
pending entry are written together or not at all.

KEYS[1] pending zset   KEYS[2] retries hash   KEYS[3] unack zset
KEYS[4] garbage set    KEYS[5] msg string of this id
ARGV[1] id   ARGV[2] payload   ARGV[3] delay ms   ARGV[4] msg ttl ms
ARGV[5] retry count
Returns {1, due_ms} when stored, {0, 0} when the id is already live
(pending, ready, retry or processing): the caller reports a duplicate.
Idempotent: a re-sent call finds its own message and returns {0, 0}.
Complexity: O(log N) in the size of pending.
]]
check_types(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'zset', KEYS[4], 'set', KEYS[5], 'string')
local id = ARGV[1]
local live = redis.call('EXISTS', KEYS[5]) == 1 and redis.call('SISMEMBER', KEYS[4], id) == 0
if live or redis.call('ZSCORE', KEYS[3], id) then
  return {0, 0}
end
-- A dead message with the same id is replaced by the new one.
redis.call('SREM', KEYS[4], id)
local delay = tonumber(ARGV[3])
local due = now_ms() + delay
-- The payload outlives its due time by msg ttl, so it is never shorter than the delay.
redis.call('SET', KEYS[5], ARGV[2], 'PX', delay + tonumber(ARGV[4]))
redis.call('HSET', KEYS[2], id, '0:' .. ARGV[5])
redis.call('ZADD', KEYS[1], due, id)
return {1, due}
