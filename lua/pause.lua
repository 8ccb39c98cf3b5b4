#!lua flags=allow-oom
--[[ pause: sets or clears the queue's paused flag (no message moves).
The flag is the field 'paused' of the totals hash (Redis time in ms when
the queue was paused): a key every claim reads anyway, so a paused flag
costs claims no key of their own (one more key that is usually missing
would make them fail with TRYAGAIN while a cluster slot migrates).
While the flag is set, claim leases nothing: consumers finish what they
hold, sends and promotions go on, due messages wait in ready. Clearing it
wakes sleeping consumers, so they claim at once.

KEYS[1] totals hash
ARGV[1] 1 pause, 0 resume
ARGV[2] wake-up channel
Returns 1 when the flag changed, 0 when it already was so.
Idempotent: a repeat changes nothing and returns 0.
Complexity: O(1).
]]
--- @include "checks"
--- @include "clock"
--- @include "wake"
check_types(KEYS[1], 'hash')
local paused = redis.call('HEXISTS', KEYS[1], 'paused')
if ARGV[1] == '1' then
  if paused == 1 then
    return 0
  end
  redis.call('HSET', KEYS[1], 'paused', now_ms())
  return 1
end
if paused == 1 then
  redis.call('HDEL', KEYS[1], 'paused')
  wake(ARGV[2], 0)
end
return paused
