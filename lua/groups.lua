#!lua flags=allow-oom
--[[ groups: sets a group's concurrency or rate, or the default of every
group, or pauses or resumes one group (no message moves; docs/groups.md).
The concurrencies live in the group prefix's 'limits' hash (group ->
"<n>", the field '' the default of every group without its own), the
rates in its 'rates' hash (group -> "<n> <period ms>", the same way), the
paused groups in its 'paused' hash. A group's changed rate drops its
count of recent leases, so it starts with a full window. The group is
known (listed) while it has a setting of its own or anything else
(include/groups.lua). Claim reads both for each group it serves; a group that
may start a message now goes to the ring here (a raised limit, a resume),
and claim drops one that may not (a lowered limit, a pause) when it
finds it. A change wakes sleeping consumers.

KEYS[1] totals hash (the queue's: the call runs where the queue lives)
ARGV[1] group key prefix
ARGV[2] what: 'limit', 'rate', 'pause' or 'resume'
ARGV[3] the group; '' with 'limit' or 'rate': the default of every group
ARGV[4] with 'limit': the concurrency "<n>" (n >= 1); with 'rate': "<n>
        <period ms>" (both >= 1); '' clears it
ARGV[5] wake-up channel
Returns 1 when something changed, 0 when it already was so.
Idempotent: a repeat changes nothing and returns 0.
Complexity: O(log G) with G = groups; a changed default O(A log G) with
A = groups with messages in processing (each may have room now).
]]
--- @include "checks"
--- @include "groups"
--- @include "wake"
local gp, what, group, value = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
check_types(KEYS[1], 'hash')
check_group_types(gp)
local valid = {limit = '^[1-9]%d*$', rate = '^[1-9]%d* [1-9]%d*$'}
if (group ~= '' or not valid[what]) and not string.match(group, '^[%w%-_%.]+$') then
  error(redis.error_reply('ERR invalid group ' .. group))
end
if valid[what] then
  if value ~= '' and not string.match(value, valid[what]) then
    error(redis.error_reply('ERR invalid group ' .. what .. ' ' .. value))
  end
  local hash = gp .. (what == 'limit' and 'limits' or 'rates')
  if (redis.call('HGET', hash, group) or '') == value then
    return 0
  end
  if value == '' then
    redis.call('HDEL', hash, group)
  else
    redis.call('HSET', hash, group, value)
  end
  if what == 'rate' and group ~= '' then
    redis.call('DEL', group_rate_key(gp, group))
  end
  if group == '' then
    for _, g in ipairs(redis.call('HKEYS', gp .. 'active')) do
      group_wake(gp, g)
    end
  else
    group_wake(gp, group)
  end
elseif what == 'pause' then
  if redis.call('HSETNX', gp .. 'paused', group, 1) == 0 then
    return 0
  end
elseif what == 'resume' then
  if redis.call('HDEL', gp .. 'paused', group) == 0 then
    return 0
  end
  group_wake(gp, group)
else
  error(redis.error_reply('ERR invalid groups call ' .. what))
end
if group ~= '' then
  redis.call('ZADD', gp .. 'known', 0, group)
  group_forget_idle(gp, group)
end
wake(ARGV[5], 0)
return 1
