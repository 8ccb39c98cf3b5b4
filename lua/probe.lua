#!lua flags=no-writes
--[[ probe: read-only: which of a consumer's periodic steps have work
One call tells the consumer whether to sweep (leases run out, dead
letters to delete) now or when it will have to, when to promote, whether
to claim and whether to read schedules, so an idle shard costs this call
and nothing else, and its consumer sleeps until the first of those times
or a wake-up. It calls no TYPE: it only reads, and its reads check the
type on the way, failing with "WRONGTYPE <key> ..." as the other scripts
do; the scripts it leads to check their keys before they write.

KEYS[1] pending zset   KEYS[2] ready list   KEYS[3] processing zset
KEYS[4] retry list     KEYS[5] dead zset
ARGV[1] priority zset   ARGV[2] schedules zset
ARGV[3] dead letter retention ms   ARGV[4] most dead messages kept
ARGV[5] group key prefix: its ring and wait zsets (docs/groups.md) count
        as ready messages and pending ones
ARGV[6] outbox zset (docs/workflows.md)
Returns {sweep_ms, wait_ms, claim, schedules, relay}: sweep_ms how long
until the earliest lease runs out or the oldest dead letter is past its
retention (0: now, or dead letters beyond the cap), -1 when no lease is
held and no dead letter kept; wait_ms how long until the earliest pending
id is due or a waiting group's wait is over (0: due now), -1 when neither
waits; claim 1 when ready, retry, the priority zset or the group ring
hold ids; schedules 1 when the shard has schedules; relay 1 when its
outbox holds completions or cancels for the relay to deliver.
Idempotent: read-only.
Complexity: O(1): one EXISTS on an empty shard, at most nine calls.
]]
--- @include "checks"
--- @include "clock"
--- @include "wake"
local ring, waiting = ARGV[5] .. 'ring', ARGV[5] .. 'wait'
if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2], ring, waiting, ARGV[6]) == 0 then
  return {-1, -1, 0, 0, 0}
end
local now_u = now_us()
local now = math.floor(now_u / 1000)
local sweep = -1
-- Leases are scored in µs, due times and deaths in ms.
local lease = checked('zset', 'ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
if lease then
  sweep = math.max(0, math.ceil((tonumber(lease) - now_u) / 1000))
end
local oldest = checked('zset', 'ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')[2]
if oldest then
  local expires = math.max(0, tonumber(oldest) + tonumber(ARGV[3]) - now)
  if expires > 0 and redis.call('ZCARD', KEYS[5]) > tonumber(ARGV[4]) then
    expires = 0
  end
  if sweep < 0 or expires < sweep then
    sweep = expires
  end
end
local wait = -1
for _, key in ipairs({KEYS[1], waiting}) do
  local due = head_due(key)
  if due and (wait < 0 or tonumber(due) - now < wait) then
    wait = math.max(0, tonumber(due) - now)
  end
end
local claim = redis.call('EXISTS', KEYS[2], KEYS[4], ARGV[1], ring) > 0 and 1 or 0
return {sweep, wait, claim, redis.call('EXISTS', ARGV[2]), redis.call('EXISTS', ARGV[6])}
