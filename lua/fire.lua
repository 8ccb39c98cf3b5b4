#!lua
--[[ fire: (nothing) -> pending, for one fire of a schedule
Sends the fire of a schedule at one fire time as an ordinary message and
moves the schedule's cursor past it, in one step. The cursor (the
schedule's score in the schedules zset) is the fire time of the last fire
sent: a fire at or before it is refused, so a fire is sent at most once
whatever number of schedulers try it, and a late scheduler cannot send
an old fire again after its message was acked and its id is free. The
message is stored as send stores one (store_message) with the stored
value kept in the schedule's hash ('value'), under the caller's id
("{<name>}@<fire ms>"), due at the fire time by Redis's clock (now when
it has passed). The fire times sent and not yet due are kept in the
hash ('ahead'), so that an update, pause or removal can withdraw them.
A manual trigger (empty version) sends one message due now and leaves
the cursor alone.

KEYS[1] schedules zset   KEYS[2] schedule hash   KEYS[3] pending zset
KEYS[4] attempts hash     KEYS[5] processing zset      KEYS[6] dead zset
KEYS[7] totals hash      KEYS[8] msg string of the fire's message
ARGV[1] schedule name
ARGV[2] message id
ARGV[3] the schedule's version the caller planned with ('': a manual trigger)
ARGV[4] fire time, ms since the epoch
ARGV[5] the cursor to set, at least the fire time (later when the fires
between are skipped as misfires)
ARGV[6] expire_after ms (0: never expires)
ARGV[7] wake-up channel
ARGV[8] the wire format version the caller speaks (docs/wire-format.md)
Fails with a "DQFORMAT ..." error, nothing written, when the totals'
'format' field holds another version than ARGV[8]; sets it to ARGV[8]
when it is missing and the fire was sent.
Counts 'sent' in the totals and 'fired' in the schedule's hash; a value
over BIG_VALUE bytes sets the totals' 'big' (send.lua); one with a group
sets 'groups' (send.lua).
Returns 0 the cursor is at or past the fire time (sent already, nothing
written), 1 sent, 2 the msg key holds another type, 3 the id is live (a
message with it is waiting or processing; not sent again), 4 the schedule
is gone or its version changed (nothing written), 5 it is paused
(nothing written). 1, 2 and 3 move the cursor.
Idempotent: a re-sent call finds the cursor at its fire time and returns 0.
Complexity: O(log N) with N = size of pending, plus the 'ahead' list (the
fires sent and not yet due, a few).
]]
--- @include "checks"
--- @include "clock"
--- @include "finish"
--- @include "header"
--- @include "store"
--- @include "wake"
local head = head_due(KEYS[3])
check_types(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[4], 'hash', KEYS[6], 'zset', KEYS[7], 'hash')
local format = redis.call('HGET', KEYS[7], 'format')
check_format(format, ARGV[8])
local def = redis.call('HMGET', KEYS[2], 'version', 'paused', 'value', 'ahead')
if not def[1] or not def[3] then
  return 4
end
local manual = ARGV[3] == ''
local fire = tonumber(ARGV[4])
if not manual then
  if def[1] ~= ARGV[3] then
    return 4
  end
  if def[2] then
    return 5
  end
  local cursor = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '')
  if not cursor then
    return 4
  end
  if fire <= cursor then
    return 0
  end
end
local now = now_ms()
local delay = 0
if not manual then
  delay = math.max(0, fire - now)
end
local status = store_message(KEYS[5], KEYS[6], KEYS[4], KEYS[8], ARGV[2], def[3], tostring(delay),
  tonumber(ARGV[6]), true, now, true)
if status == 1 then
  redis.call('ZADD', KEYS[3], now + delay, ARGV[2])
end
if not manual then
  redis.call('ZADD', KEYS[1], 'XX', ARGV[5], ARGV[1])
  local ahead = {}
  for t in string.gmatch(def[4] or '', '%d+') do
    if tonumber(t) > now then
      ahead[#ahead + 1] = t
    end
  end
  if status == 1 and fire > now then
    ahead[#ahead + 1] = ARGV[4]
  end
  redis.call('HSET', KEYS[2], 'last', ARGV[4], 'ahead', table.concat(ahead, ' '))
end
if status == 1 then
  redis.call('HINCRBY', KEYS[2], 'fired', 1)
  wake_if_earlier(ARGV[7], now + delay, head, now)
  tally(KEYS[7], 'sent', 1)
  if #def[3] > BIG_VALUE then
    redis.call('HSET', KEYS[7], 'big', 1)
  end
  if group_of(def[3]) then
    redis.call('HSET', KEYS[7], 'groups', 1)
  end
  if not format then
    redis.call('HSET', KEYS[7], 'format', ARGV[8])
  end
  return 1
end
if status == 0 then
  return 3
end
return status
