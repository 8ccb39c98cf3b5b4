#!lua flags=no-writes
--[[ list_groups: read-only: one page of the queue's known groups (include/groups.lua,
docs/groups.md), in name order, with their counts and settings, taken
atomically.

KEYS[1] totals hash (the queue's: the call runs where the queue lives)
ARGV[1] group key prefix   ARGV[2] offset   ARGV[3] limit (0 to 1000)
ARGV[4] optional: one group's name; then the page is that group alone if
it is known (offset and limit ignored unless the limit is 0)
Returns {known groups in all, default concurrency ('' none), default rate
('' none), then 7 values per group: name, its due messages, its messages
in processing, 1 if paused else 0, its own concurrency ('' none), its own
rate "<n> <period ms>" ('' none), ms of Redis time its wait ends (''
none)}.
Idempotent: read-only.
Complexity: O(log G + L) with G = known groups, L = ARGV[3] (1 with ARGV[4]).
]]
--- @include "args"
--- @include "checks"
--- @include "groups"
local gp = ARGV[1]
check_group_types(gp)
local offset, limit = tonumber(ARGV[2]), limit_arg(3, 0)
if not offset or offset < 0 or offset ~= math.floor(offset) then
  error(redis.error_reply('ERR offset must be a non-negative integer, not ' .. tostring(ARGV[2])))
end
local out = {checked('zset', 'ZCARD', gp .. 'known'), checked('hash', 'HGET', gp .. 'limits', '') or '',
  checked('hash', 'HGET', gp .. 'rates', '') or ''}
if limit == 0 then
  return out
end
local names
if ARGV[4] then
  names = checked('zset', 'ZSCORE', gp .. 'known', ARGV[4]) and {ARGV[4]} or {}
else
  names = redis.call('ZRANGE', gp .. 'known', offset, offset + limit - 1)
end
if #names == 0 then
  return out
end
local active = checked('hash', 'HMGET', gp .. 'active', unpack(names))
local paused = checked('hash', 'HMGET', gp .. 'paused', unpack(names))
local limits = redis.call('HMGET', gp .. 'limits', unpack(names))
local rates = checked('hash', 'HMGET', gp .. 'rates', unpack(names))
for i, g in ipairs(names) do
  out[#out + 1] = g
  out[#out + 1] = checked('zset', 'ZCARD', group_list(gp, g))
  out[#out + 1] = tonumber(active[i] or 0)
  out[#out + 1] = paused[i] and 1 or 0
  out[#out + 1] = limits[i] or ''
  out[#out + 1] = rates[i] or ''
  out[#out + 1] = checked('zset', 'ZSCORE', gp .. 'wait', g) or ''
end
return out
