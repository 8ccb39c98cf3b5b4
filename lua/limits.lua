#!lua flags=allow-oom
--[[ limits: sets or clears one of the queue's limits (no message moves).
Each limit is a field of the totals hash, a key every claim reads anyway
(one more key that is usually missing would make claims fail with
TRYAGAIN while a cluster slot migrates): 'concurrency' "<n>" (at most n
in processing) and 'rate' "<n> <period ms>" (at most n leases in any window
of one period). Claim enforces them (lua/claim.lua). Changing or
clearing the rate drops its count of recent leases ('rate_used'), so a new
rate starts with a full window. A change wakes sleeping consumers, so a
raised or cleared limit takes effect at once.

KEYS[1] totals hash
ARGV[1] which: 'concurrency' or 'rate'
ARGV[2] the value as above, '' to clear
ARGV[3] wake-up channel
Returns 1 when the field changed, 0 when it already held that value.
Idempotent: a repeat changes nothing and returns 0.
Complexity: O(1).
]]
--- @include "checks"
--- @include "wake"
check_types(KEYS[1], 'hash')
local which, value = ARGV[1], ARGV[2]
local valid = {concurrency = '^[1-9]%d*$', rate = '^[1-9]%d* [1-9]%d*$'}
if not valid[which] or (value ~= '' and not string.match(value, valid[which])) then
  error(redis.error_reply('ERR invalid limit ' .. which .. ' ' .. value))
end
local old = redis.call('HGET', KEYS[1], which)
if (old or '') == value then
  return 0
end
if value == '' then
  redis.call('HDEL', KEYS[1], which)
else
  redis.call('HSET', KEYS[1], which, value)
end
if which == 'rate' then
  redis.call('HDEL', KEYS[1], 'rate_used')
end
wake(ARGV[3], 0)
return 1
