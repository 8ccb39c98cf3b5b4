#!lua flags=no-writes
--[[ probe: read-only: which of a consumer's periodic steps have work
One call per tick and shard tells the consumer whether to sweep (leases
run out, dead letters to delete), when to promote, whether to claim and
whether to read schedules, so an idle shard costs this call and nothing
else. It calls no TYPE: it only reads, and its reads check the type on
the way, failing with "WRONGTYPE <key> ..." as the other scripts do; the
scripts it leads to check their keys before they write.

KEYS[1] pending zset   KEYS[2] ready list   KEYS[3] processing zset
KEYS[4] retry list     KEYS[5] dead zset
ARGV[1] priority zset   ARGV[2] schedules zset
ARGV[3] dead letter retention ms   ARGV[4] most dead messages kept
ARGV[5] group key prefix: its ring and wait zsets (docs/groups.md) count
        as ready messages and pending ones
ARGV[6] outbox zset (docs/workflows.md)
Returns {sweep, wait_ms, claim, schedules, relay}: sweep 1 when a lease has run
out or a dead letter is past its retention or beyond the cap; wait_ms how
long until the earliest pending id is due or a waiting group's wait is
over (0: due now), -1 when neither waits; claim 1 when ready, retry, the
priority zset or the group ring hold ids;
schedules 1 when the shard has schedules; relay 1 when its outbox holds
completions or cancels for the relay to deliver.
Idempotent: read-only.
Complexity: O(1): one EXISTS on an empty shard, at most nine calls.
]]
--- @include "checks"
--- @include "clock"
--- @include "wake"
local ring, waiting = ARGV[5] .. 'ring', ARGV[5] .. 'wait'
if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2], ring, waiting, ARGV[6]) == 0 then
  return {0, -1, 0, 0, 0}
end
local now_u = now_us()
local now = math.floor(now_u / 1000)
local sweep = 0
-- Leases are scored in µs, due times and deaths in ms.
local lease = checked('zset', 'ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
if lease and tonumber(lease) <= now_u then
  sweep = 1
end
local oldest = checked('zset', 'ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')[2]
if oldest and (tonumber(oldest) <= now - tonumber(ARGV[3])
    or redis.call('ZCARD', KEYS[5]) > tonumber(ARGV[4])) then
  sweep = 1
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
