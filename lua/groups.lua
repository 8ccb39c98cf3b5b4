#!lua flags=allow-oom
--[[ groups: sets a group's concurrency or the default of every group, or
pauses or resumes one group (no message moves; docs/groups.md).
The limits live in the group prefix's 'limits' hash (group -> "<n>", the
field '' the default of every group without its own), the paused groups in
its 'paused' hash. Claim reads both for each group it serves; a group that
may start a message now goes to the ring here (a raised limit, a resume),
and claim drops one that may not (a lowered limit, a pause) when it
finds it. A change wakes sleeping consumers.

KEYS[1] totals hash (the queue's: the call runs where the queue lives)
ARGV[1] group key prefix
ARGV[2] what: 'limit', 'pause' or 'resume'
ARGV[3] the group; '' with 'limit': the default of every group
ARGV[4] with 'limit': the concurrency "<n>" (n >= 1), '' to clear it
ARGV[5] wake-up channel
Returns 1 when something changed, 0 when it already was so.
Idempotent: a repeat changes nothing and returns 0.
Complexity: O(log G) with G = groups; a changed default O(A log G) with
A = groups with messages in processing (each may have room now).
]]
local gp, what, group, value = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
check_types(KEYS[1], 'hash', gp .. 'limits', 'hash', gp .. 'paused', 'hash', gp .. 'ring', 'zset',
  gp .. 'wait', 'zset', gp .. 'active', 'hash')
if (group ~= '' or what ~= 'limit') and not string.match(group, '^[%w%-_%.]+$') then
  error(redis.error_reply('ERR invalid group ' .. group))
end
local changed
if what == 'limit' then
  if value ~= '' and not string.match(value, '^[1-9]%d*$') then
    error(redis.error_reply('ERR invalid group concurrency ' .. value))
  end
  if (redis.call('HGET', gp .. 'limits', group) or '') == value then
    return 0
  end
  if value == '' then
    redis.call('HDEL', gp .. 'limits', group)
  else
    redis.call('HSET', gp .. 'limits', group, value)
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
wake(ARGV[5], 0)
return 1
