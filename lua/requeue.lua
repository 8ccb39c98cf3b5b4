#!lua flags=allow-oom
--[[ requeue: dead -> ready
Gives dead messages a new life: each leaves dead for the end of the
ready list (one with a priority: the priority zset, scored as due now), with its attempt record reset to no delivery, due now (so it gets
its full retries again, and its next delivery is due at the requeue), its payload made persistent again (PERSIST: a
live payload has no TTL) and its expire_after deadline, if any, removed
(an operator who requeues a message wants it delivered): in place, the
header's "+<delay>@<deadline>" overwritten by the delay with as many
leading zeros as the deadline took. A dead message
whose payload is gone is deleted instead.

KEYS[1] dead zset   KEYS[2] attempts hash   KEYS[3] ready list
ARGV[1] msg key prefix   ARGV[2] limit (1 to 1000)
ARGV[3] wake-up channel   ARGV[4] priority zset
ARGV[5] group key prefix
ARGV[6..] ids (optional; without: the oldest dead)
A message of a group (its header says which) goes to its group's zset
instead, scored as due now, and its group to the ring when it may start
one (docs/groups.md).
Returns {requeued, taken out of dead (requeued or deleted)}.
Publishes a wake-up when it requeued any.
Idempotent: a re-run finds them gone from dead and requeues nothing.
Complexity: O(M log N) with M = ids looked at (O(log G) more per grouped
one, G = groups); no payload is read or
copied (one without send times but with a deadline, from elsewhere: O(its
size)).
]]
--- @include "args"
--- @include "checks"
--- @include "clock"
--- @include "group_moves"
--- @include "groups"
--- @include "header"
--- @include "priorities"
--- @include "records"
--- @include "wake"
check_types(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'list')
local limit = limit_arg(2)
local ids
if #ARGV >= 6 then
  ids = members_of(KEYS[1], 6, limit)
else
  ids = redis.call('ZRANGE', KEYS[1], 0, limit - 1)
end
if #ids == 0 then
  return {0, 0}
end
local keys = payloads_here(ARGV[1], ids)
-- The headers are read before the first write: one with a priority means
-- the zset is written, so it is checked first.
local heads, scored, now = {}, {}, now_ms()
for i, id in ipairs(ids) do
  heads[i] = redis.pcall('GETRANGE', keys[i], 0, HEADER_BYTES - 1)
  local p = priority_of(heads[i])
  if p > 0 and not group_of(heads[i]) then
    scored[#scored + 1] = prio_score(p, now)
    scored[#scored + 1] = id
  end
end
if #scored > 0 then
  check_types(ARGV[4], 'zset')
end
local groups = {}
for _, head in ipairs(heads) do
  groups[#groups + 1] = group_of(head) or nil
end
if #groups > 0 then
  check_group_types(ARGV[5])
  check_group_lists(ARGV[5], groups)
end
redis.call('ZREM', KEYS[1], unpack(ids))
redis.call('HDEL', KEYS[2], unpack(ids))
-- grouped: {group, id, priority} of each grouped message requeued.
local live, grouped = {}, {}
for i, id in ipairs(ids) do
  local head = heads[i]
  if type(head) == 'string' and head ~= '' then
    redis.call('PERSIST', keys[i])
    if expires_at(head) then
      -- "+<delay>@<deadline>" becomes "+<zeros><delay>", as long: the
      -- same delay without a deadline, written in place (the payload is
      -- not copied).
      local at, delay, deadline = string.match(head, '^%d+[^:@]*%+()(%d+)@(%d+):')
      if at then
        redis.call('SETRANGE', keys[i], at - 1, string.rep('0', 1 + #deadline) .. delay)
      else
        -- No send times (a value from elsewhere): rewritten whole.
        local value = redis.call('GET', keys[i])
        redis.call('SET', keys[i], (string.gsub(value, '^([^:@]*)@%d+:', '%1:', 1)))
      end
    end
    local group = group_of(head)
    if group then
      grouped[#grouped + 1] = {group, id, priority_of(head)}
    elseif priority_of(head) == 0 then
      live[#live + 1] = id
    end
  end
end
-- A new record with no delivery, due now: the due time of its next delivery.
local records = {}
for _, id in ipairs(live) do
  records[#records + 1] = id
  records[#records + 1] = record_from(0, now, 0, '')
end
for i = 2, #scored, 2 do
  records[#records + 1] = scored[i]
  records[#records + 1] = record_from(0, now, 0, '')
end
for _, g in ipairs(grouped) do
  records[#records + 1] = g[2]
  records[#records + 1] = record_from(0, now, 0, '')
end
if #live > 0 then
  redis.call('RPUSH', KEYS[3], unpack(live))
end
if #scored > 0 then
  redis.call('ZADD', ARGV[4], unpack(scored))
end
if #records > 0 then
  redis.call('HSET', KEYS[2], unpack(records))
end
for _, g in ipairs(grouped) do
  group_enqueue(ARGV[5], g[1], g[2], g[3], now)
end
if #records > 0 then
  wake(ARGV[3], 0)
end
return {#records / 2, #ids}
