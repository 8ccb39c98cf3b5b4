#!lua flags=no-writes
--[[ read_schedules: read-only: schedules with their cursor and definition
One page of the shard's schedules in cursor order (the due ones first),
or one schedule by name. A page starts after the last schedule the page
before read, by (cursor, name) as the zset orders them, not at an offset:
a scheduler's fires move the cursors of the schedules it read, and an
offset would then skip as many that it has not read. A schedule whose
cursor moved past that point since is read again.

KEYS[1] schedules zset
ARGV[1] schedule hash prefix (each schedule's hash is built from it)
ARGV[2] horizon ms: only schedules whose cursor is at most Redis now +
this (-1: all, the paused ones too)
ARGV[3] the cursor of the last schedule the page before read, as read
('inf' while paused; '' for the first page)   ARGV[4] its name
ARGV[5] limit (1..1000)
ARGV[6] a schedule's name: that one only ('' for a page)
Returns {now ms, name, cursor, {field, value, ...}, name, cursor, {...}, ...}
(cursor 'inf' while paused).
Idempotent: read-only.
Complexity: O(log² N + page × F), N = schedules, F = fields of one.
]]
--- @include "args"
--- @include "checks"
--- @include "clock"
--- @include "paging"
check_types(KEYS[1], 'zset')
local limit = limit_arg(5)
local now = now_ms()
local out = {now}
local names = {}
if ARGV[6] ~= '' then
  local score = redis.call('ZSCORE', KEYS[1], ARGV[6])
  if not score then
    return out
  end
  names = {ARGV[6], score}
else
  local max = math.huge
  if tonumber(ARGV[2]) >= 0 then
    max = now + tonumber(ARGV[2])
  end
  local first = 0
  if ARGV[3] ~= '' then
    first = ranks_around(KEYS[1], ARGV[3], ARGV[4])
  end
  local page = redis.call('ZRANGE', KEYS[1], first, first + limit - 1, 'WITHSCORES')
  for i = 1, #page, 2 do
    if tonumber(page[i + 1]) > max then
      break
    end
    names[#names + 1] = page[i]
    names[#names + 1] = page[i + 1]
  end
end
-- The hashes are built, not declared: while a cluster moves the slot,
-- one may be on the other node already, and this fails rather than
-- answer from half the queue (a schedule without its definition).
local found = {}
for i = 1, #names, 2 do
  found[#found + 1] = names[i]
end
local hashes = payloads_here(ARGV[1], found)
for i = 1, #names, 2 do
  out[#out + 1] = names[i]
  out[#out + 1] = names[i + 1]
  out[#out + 1] = redis.call('HGETALL', hashes[(i + 1) / 2])
end
return out
