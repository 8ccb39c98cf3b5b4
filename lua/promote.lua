#!lua flags=allow-oom
--[[ promote: pending -> ready
Moves ids whose due time has come (by Redis's clock) to the ready list,
oldest first, at most ARGV[1] per call so Redis is never blocked long
(fewer over many groups: below).
(An id whose payload is gone is moved too; claim buries and counts it.)
Once the queue has used priorities (the totals' field 'prios'), the
header of each moved id is read: one of priority 1 to 9 goes to the
priority zset (prio_score) instead of the ready list.
Once the queue has used groups (the totals' field 'groups'), the header
is read too: a message of a group goes to its group's zset instead
(include/groups.lua, docs/groups.md), which puts the group in the ring when it
may start one; and groups whose wait is over go back to the ring. Each
moved id costs 1 of a budget of ARGV[1], and GROUP_MOVE_COST more when it
is the first of its group in the call (a ZADD and a ring check each): the
call stops once the budget is spent (having moved at least one id), and
the rest waits for the next (wait_ms 0).

KEYS[1] pending zset   KEYS[2] ready list   KEYS[3] totals hash
ARGV[1] limit (1 to 1000)   ARGV[2] priority zset   ARGV[3] msg key prefix
ARGV[4] the wire format version the caller speaks (docs/wire-format.md):
        fails with a "DQFORMAT ..." error, nothing written, when the
        totals' 'format' field holds another
ARGV[5] group key prefix (read only while the totals have 'groups')
ARGV[6] room: how many the caller claims next (its free handlers)
ARGV[7] wake-up channel: when the ids moved and the groups woken are more
        than the room, a wake-up of 0 ms tells the other consumers to claim
        the rest (the caller may be busy: a consumer at its concurrency
        promotes too)
Returns {moved, wait_ms, woken, late1, late2, ...}: wait_ms is how long
until the next pending id is due, or a waiting group's wait is over (0
when more are due now), -1 when nothing waits; woken how many groups
whose wait was over went back to the ring (a claim has work then, though
no id moved); late_i is how many microseconds after its due time each
moved id moved (the consumer's lateness metric, which a ms would round to 0).
Idempotent: a re-run moves only what is still pending.
Complexity: O(log N + M) with M = moved; O(M log P) more once the queue
uses priorities, with P = size of the priority zset; once it uses groups,
O(M (log G + log P)) more, G = groups, with M at most ARGV[1] /
GROUP_MOVE_COST groups, plus O(log G) per group whose wait is over; at
most one PUBLISH.
]]
--- @include "args"
--- @include "checks"
--- @include "clock"
--- @include "group_moves"
--- @include "groups"
--- @include "header"
--- @include "priorities"
--- @include "wake"
check_types(KEYS[1], 'zset', KEYS[2], 'list')
local fields = checked('hash', 'HMGET', KEYS[3], 'prios', 'format', 'groups')
check_format(fields[2], ARGV[4])
if fields[3] then
  check_group_types(ARGV[5])
end
local now_u = now_us()
local now = math.floor(now_u / 1000)
local budget = limit_arg(1)
local out = {0, -1, 0}
-- due: the ids read, id and score pairs; ids: those moved.
local due, ids = {}, {}
-- Reads up to `count` more due ids, after those read; how many it read.
local function read_due(count)
  local more = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', #due / 2, count, 'WITHSCORES')
  for _, v in ipairs(more) do
    due[#due + 1] = v
  end
  return #more / 2
end
-- grouped: group -> its moved ids' scores and ids; order: the groups in
-- the order they first appear.
local plain, scored, grouped, order = ids, {}, {}, {}
if not (fields[1] or fields[3]) then
  read_due(budget)
  for i = 1, #due, 2 do
    ids[#ids + 1] = due[i]
  end
else
  if fields[1] then
    check_types(ARGV[2], 'zset')
  end
  plain = {}
  -- Each id costs 1 of the budget (ARGV[1]), and GROUP_MOVE_COST more when
  -- it is the first of its group in this call: the rest stays pending for
  -- the next call, so a batch over many groups stays as short as one
  -- without groups. Ids are read in a few slices, each sized by the cost
  -- of those before, so that few are read for nothing.
  local cost, want = 0, fields[3] and math.ceil(budget / (GROUP_MOVE_COST + 1)) or budget
  for _ = 1, 4 do
    local from, cost_before = #due / 2, cost
    local got = read_due(want)
    local slice = {}
    for i = from + 1, from + got do
      slice[#slice + 1] = due[2 * i - 1]
    end
    for j, key in ipairs(payloads_here(ARGV[3], slice)) do
      local i = from + j
      local head = redis.pcall('GETRANGE', key, 0, HEADER_BYTES - 1)
      local p, g = priority_of(head), fields[3] and group_of(head)
      if g then
        if not grouped[g] then
          cost = cost + GROUP_MOVE_COST
          grouped[g], order[#order + 1] = {}, g
        end
        local entries = grouped[g]
        entries[#entries + 1] = prio_score(p, tonumber(due[2 * i]))
        entries[#entries + 1] = slice[j]
      elseif p > 0 then
        scored[#scored + 1] = prio_score(p, tonumber(due[2 * i]))
        scored[#scored + 1] = slice[j]
      else
        plain[#plain + 1] = slice[j]
      end
      ids[#ids + 1] = slice[j]
      cost = cost + 1
      if cost >= budget then
        break
      end
    end
    if cost >= budget or got < want then
      break
    end
    -- The next slice: what is left of the budget at this slice's cost per id.
    want = math.ceil((budget - cost) * got / (cost - cost_before))
  end
end
for i = 1, #ids do
  out[#out + 1] = now_u - tonumber(due[2 * i]) * 1000
end
if #ids > 0 then
  check_group_lists(ARGV[5], order)
  if #plain > 0 then
    redis.call('RPUSH', KEYS[2], unpack(plain))
  end
  if #scored > 0 then
    redis.call('ZADD', ARGV[2], unpack(scored))
  end
  if #order > 0 then
    groups_add(ARGV[5], grouped, order)
  end
  redis.call('ZREM', KEYS[1], unpack(ids))
end
local head = head_due(KEYS[1])
if head then
  out[2] = math.max(0, tonumber(head) - now)
end
if fields[3] then
  local wait, woken = groups_due(ARGV[5], now)
  if wait and (out[2] < 0 or wait < out[2]) then
    out[2] = wait
  end
  out[3] = woken
end
out[1] = #ids
-- More work than its caller will claim: the other consumers hear of it
-- now, not at their next poll.
if #ids + out[3] > (tonumber(ARGV[6]) or 0) then
  wake(ARGV[7], 0)
end
return out
