#!lua flags=no-writes
--[[ schedules: read-only: schedules with their cursor and definition
One page of the shard's schedules in cursor order (the due ones first),
or one schedule by name.

KEYS[1] schedules zset
ARGV[1] schedule hash prefix (each schedule's hash is built from it)
ARGV[2] horizon ms: only schedules whose cursor is at most Redis now +
this (-1: all, the paused ones too)
ARGV[3] offset   ARGV[4] limit (1..1000)
ARGV[5] a schedule's name: that one only ('' for the page)
Returns {now ms, name, cursor, {field, value, ...}, name, cursor, {...}, ...}
(cursor 'inf' while paused).
Idempotent: read-only.
Complexity: O(log N + page × F), N = schedules, F = fields of one.
]]
local limit = limit_arg(4)
local now = now_ms()
local out = {now}
local names
if ARGV[5] ~= '' then
  local score = checked('zset', 'ZSCORE', KEYS[1], ARGV[5])
  if not score then
    return out
  end
  names = {ARGV[5], score}
else
  local max = '+inf'
  if tonumber(ARGV[2]) >= 0 then
    max = now + tonumber(ARGV[2])
  end
  names = checked('zset', 'ZRANGE', KEYS[1], '-inf', max, 'BYSCORE', 'LIMIT', ARGV[3], limit, 'WITHSCORES')
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
