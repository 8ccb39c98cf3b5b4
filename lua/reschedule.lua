#!lua flags=allow-oom
--[[ reschedule: pending -> pending (new due time)
Moves the due time of a message that still waits in pending, e.g. to
reset a timeout each time the user acts (debounce). A message that is
already due (ready, retry), being processed, dead or unknown is left alone.

The delay in the stored value's header ("/<sent at>+<delay>", from send)
becomes new due time - sent at, so the consumer reports the new due time;
it is written in place (SETRANGE, with leading zeros when it has fewer
digits) unless it has more digits, when the value is rewritten (a staged
send writes the delay with 12 digits, so a big value never is).

A retry (its attempt record holds a due time) gets the new due time in its
record too, the due time its delivery reports.

KEYS[1] pending zset   KEYS[2] msg string of this id   KEYS[3] attempts hash
ARGV[1] id   ARGV[2] delay ms (from now, by Redis's clock)
ARGV[3] wake-up channel
Returns 1 rescheduled, 0 not pending (nothing done).
Publishes a wake-up when the new due time is earlier than every other
pending message's.
Idempotent: a re-run sets the due time again, to now + delay of its own run.
Complexity: O(log N), plus O(payload size) when the header's delay gains
a digit.
]]
--- @include "checks"
--- @include "clock"
--- @include "store"
--- @include "wake"
check_types(KEYS[1], 'zset', KEYS[3], 'hash')
local id = ARGV[1]
if not redis.call('ZSCORE', KEYS[1], id) or redis.call('EXISTS', KEYS[2]) == 0 then
  return 0
end
local now = now_ms()
local due = now + tonumber(ARGV[2])
local head = head_due(KEYS[1])
redis.call('ZADD', KEYS[1], 'XX', due, id)
set_due(KEYS[2], KEYS[3], id, due)
wake_if_earlier(ARGV[3], due, head, now)
return 1
