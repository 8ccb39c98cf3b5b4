#!lua flags=allow-oom
--[[ timeout: unack -> retry | garbage
Takes back deliveries whose visibility deadline passed (the consumer died,
hung or was too slow): each counts as a failed delivery. With deliveries
left the id goes to retry, else to garbage.

KEYS[1] unack zset   KEYS[2] retries hash   KEYS[3] retry list
KEYS[4] garbage set
ARGV[1] msg key prefix   ARGV[2] limit (<= 1000)   ARGV[3] msg ttl ms
ARGV[4] default retry count   ARGV[5] wake-up channel
Returns {timed_out, moved_to_garbage}.
Publishes a wake-up when it moved anything to retry.
Idempotent: a re-run moves only what is still overdue.
Complexity: O(log N + M log N) with M = timed out.
]]
check_types(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'list', KEYS[4], 'set')
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_us(), 'LIMIT', 0, tonumber(ARGV[2]))
local dead = 0
local ttl = tonumber(ARGV[3])
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local key = ARGV[1] .. id
  if used_up(KEYS[2], id, key, tonumber(ARGV[4])) then
    redis.call('SADD', KEYS[4], id)
    dead = dead + 1
  else
    keep_payload(key, ttl)
    redis.call('RPUSH', KEYS[3], id)
  end
end
if #ids > dead then
  wake(ARGV[5], 0)
end
return {#ids, dead}
