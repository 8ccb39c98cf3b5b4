#!lua flags=allow-oom
--[[ change_schedule: sets, removes, pauses or resumes a schedule (no fire sent)
A schedule is a hash (its definition: 'spec', 'tz', 'misfire', 'grace',
'value' (the stored value of each fire, as send takes it) and the
scripts' own fields: 'version', new at every change; 'anchor', Redis
time in ms of the last change (where an interval counts from); 'paused',
Redis time when paused; 'ahead', the fire times sent and not yet due;
'last', the last fire time sent and not withdrawn; 'fired', fires sent
and not withdrawn) and its cursor,
its score in the schedules zset: the last fire time sent, or the time of
the last change, from which the next fire is computed; +inf while paused.
Every change but resume withdraws the fires sent and not yet due (those
in 'ahead' still pending: ZREM and DEL of the payload) and restarts the
schedule from now: an update never fires its old definition again, a
paused schedule fires nothing, and the fires a pause covered are not
made up after resume. A version is never given twice in a queue (shard),
so a fire planned from a schedule that was removed and set again, or
changed back, is refused (fire.lua): it is the larger of Redis time in
microseconds and the last version given + 1, kept in the totals'
'schedule_version', which purge keeps.

KEYS[1] schedules zset   KEYS[2] schedule hash   KEYS[3] pending zset
KEYS[4] totals hash
ARGV[1] schedule name
ARGV[2] payload key prefix (the fires' msg keys are built from it)
ARGV[3] mode: 1 set, 2 remove, 3 pause, 4 resume
ARGV[4] wake-up channel: a set or resume that makes the schedule due
        publishes a wake-up, so idle consumers read the shard's schedules
ARGV[5] (set) most schedules the shard may hold
ARGV[6..] (set) field, value pairs of the definition
Returns for set: 1 created, 0 changed, 2 unchanged (the same definition:
nothing written), 3 refused, the shard holds the most schedules already;
for remove, pause and resume: 1 done, 0 it was so already (pause,
resume), 2 no such schedule.
Idempotent: a repeat finds the schedule as the first run left it and
returns 2 (set), or 2 or 0.
Complexity: O(A log N) with A = fires sent and not yet due (a few), N =
size of pending; set adds O(F) for F definition fields.
]]
--- @include "checks"
--- @include "clock"
--- @include "wake"
check_types(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'zset', KEYS[4], 'hash')
local name, mode = ARGV[1], ARGV[3]
local exists = redis.call('EXISTS', KEYS[2]) == 1
local now = now_ms()

-- Withdraws the fires sent and not yet due that are still pending.
local function withdraw()
  local ids = {}
  for t in string.gmatch(redis.call('HGET', KEYS[2], 'ahead') or '', '%d+') do
    if tonumber(t) > now then
      ids[#ids + 1] = '{' .. name .. '}@' .. t
    end
  end
  local keys = payloads_here(ARGV[2], ids)
  local withdrawn = 0
  for i, id in ipairs(ids) do
    if redis.call('ZREM', KEYS[3], id) == 1 then
      redis.call('DEL', keys[i])
      withdrawn = withdrawn + 1
    end
  end
  -- 'fired' counts what will be delivered, so it matches the handler's count.
  if withdrawn > 0 then
    redis.call('HINCRBY', KEYS[2], 'fired', -withdrawn)
  end
  redis.call('HDEL', KEYS[2], 'ahead')
  -- 'last' never names a withdrawn fire (which will not happen).
  if #ids > 0 then
    redis.call('HDEL', KEYS[2], 'last')
  end
end

-- A version no change of any schedule of the queue had: a counter, and
-- Redis time for when the counter is lost.
local function next_version()
  local last = tonumber(redis.call('HGET', KEYS[4], 'schedule_version') or '') or 0
  local v = string.format('%.0f', math.max(last + 1, now_us()))
  redis.call('HSET', KEYS[4], 'schedule_version', v)
  redis.call('HSET', KEYS[2], 'version', v)
end

if mode == '1' then
  if exists then
    local same = true
    for i = 6, #ARGV, 2 do
      if redis.call('HGET', KEYS[2], ARGV[i]) ~= ARGV[i + 1] then
        same = false
        break
      end
    end
    if same then
      return 2
    end
    withdraw()
  elseif redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[5]) then
    return 3
  end
  redis.call('HSET', KEYS[2], 'anchor', now, unpack(ARGV, 6))
  next_version()
  if redis.call('HEXISTS', KEYS[2], 'paused') == 0 then
    redis.call('ZADD', KEYS[1], now, name)
    wake(ARGV[4], 0)
  end
  if exists then
    return 0
  end
  return 1
end
if not exists then
  return 2
end
if mode == '2' then
  withdraw()
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[1], name)
  return 1
end
local paused = redis.call('HEXISTS', KEYS[2], 'paused') == 1
if mode == '3' then
  if paused then
    return 0
  end
  withdraw()
  redis.call('HSET', KEYS[2], 'paused', now)
  next_version()
  redis.call('ZADD', KEYS[1], '+inf', name)
  return 1
end
if not paused then
  return 0
end
redis.call('HDEL', KEYS[2], 'paused')
next_version()
redis.call('ZADD', KEYS[1], now, name)
wake(ARGV[4], 0)
return 1
