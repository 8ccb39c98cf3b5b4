--[[ ack: unack -> (deleted)
Finishes a batch of deliveries. Each id is acked only while its lease is
the current one, so a late ack of a delivery that timed out and was
redelivered deletes nothing.

KEYS[1] unack zset   KEYS[2] retries hash
ARGV[1] msg key prefix   ARGV[2..] pairs of id, lease
Returns one 1 (acked) or 0 (lease lost) per pair, in order.
Idempotent: a re-run finds nothing left and returns 0s.
Complexity: O(M log N) with M = pairs.
]]
check_types(KEYS[1], 'zset', KEYS[2], 'hash')
local out = {}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local score = redis.call('ZSCORE', KEYS[1], id)
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    redis.call('ZREM', KEYS[1], id)
    redis.call('DEL', ARGV[1] .. id)
    redis.call('HDEL', KEYS[2], id)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
