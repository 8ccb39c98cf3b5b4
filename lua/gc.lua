#!lua flags=allow-oom
--[[ gc: garbage -> (deleted)
Deletes up to ARGV[2] messages that exhausted their deliveries: payload,
retry record and garbage entry.

KEYS[1] garbage set   KEYS[2] retries hash
ARGV[1] msg key prefix   ARGV[2] limit (<= 1000)
Returns the number of messages deleted.
Idempotent: a re-run deletes only what is still in garbage.
Complexity: O(M) with M = deleted.
]]
check_types(KEYS[1], 'set', KEYS[2], 'hash')
local ids = redis.call('SPOP', KEYS[1], tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('DEL', ARGV[1] .. id)
  redis.call('HDEL', KEYS[2], id)
end
return #ids
