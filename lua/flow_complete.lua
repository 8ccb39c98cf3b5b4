#!lua flags=allow-oom
--[[ flow_complete: waiting -> ready | pending | dead, as a parent's children finish
Applies completions the relay read from a child queue's outbox to their
parents in this queue (docs/workflows.md), at least once: each child
leaves its parent's set of children to wait for, and its outcome and
result go to the parent's children hash, whose fields " a", " d" and " c"
count the children acked, dead and cancelled. A dead child under 'f', or a
cancelled one under 'f' or 'w' (nothing can finish it any more), makes the
parent a dead letter with reason "child <queue>/<id> dead" (or
"cancelled"; the queue's name, a shard's tag less its "#<n>"): out of
waiting, into the dead zset, its payload kept for the retention, its set
of children to wait for deleted; its children hash (that child's outcome
included) stays until the dead letter is requeued and acked, or deleted
(flow_done in include/flows.lua). Under 'r' (a cohort's on_success) such a
child removes the parent: its payload and keys are deleted. Sets and
hashes that grow with the children go by UNLINK, which frees a big one
off Redis's main thread. Outcome 'o'
is a cohort's close: its member (the parent's own base and an empty id)
leaves the set, nothing is recorded. A parent whose set is empty is due
at its own due time or now, whichever is later: due now, it goes where
promote would put it (ready, or the priority zset by its priority), so
its claim follows this call's wake-up without a promote; due later, or in
a group (promote moves it to its group), it goes to pending. A parent made
a dead letter or removed is a child that finished for its own parents:
recorded in this queue's outbox as dead ('d') or deleted ('c'), as nack
and cancel record theirs (flow_done in include/flows.lua).

KEYS[1] waiting zset   KEYS[2] pending zset   KEYS[3] dead zset
KEYS[4] attempts hash   KEYS[5] totals hash
ARGV[1] msg key prefix   ARGV[2] wake-up channel
ARGV[3] dead-letter retention ms
ARGV[4..] per completion, 4 values: parent id, the child "<child's queue
base> <child id>", outcome then policy (two letters: 'a' acked, 'd' dead,
'c' cancelled or 'o' closed; 'f', 'i', 'w' or 'r'), the child's result
('' none)
Returns {applied, parents made due (ready or pending), parents moved to
dead, parents removed}.
Publishes a wake-up of 0 when a parent went to ready, else when a parent
became due before every pending message.
Its parents' deps and children keys and payloads, the ready list and the
priority zset (the queue's base followed by 'ready' and 'ready:prio'),
and the parents hash and outbox it records in, are built, not declared: they are touched with
one EXISTS each before the first write, so during a slot migration it
fails with nothing written (docs/design.md §2).
Idempotent: a re-delivered completion finds its child gone from the set
(or the parent no longer waiting) and changes nothing; a completion for a
parent no longer waiting (cancelled, dead) only leaves the set.
Complexity: O(M log N) with M = completions (at most 1000 per call), in
a fixed number of calls per parent P named (SMISMEMBER, SREM, ZSCORE,
HSET, a HINCRBY per outcome, EXISTS) and one EXISTS of 3P keys, plus
O(links) of the parents made dead or removed; never O(children of a
parent).
]]
--- @include "args"
--- @include "checks"
--- @include "clock"
--- @include "finish"
--- @include "flows"
--- @include "header"
--- @include "priorities"
--- @include "wake"
check_types(KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4], 'hash', KEYS[5], 'hash')
local m = (#ARGV - 3) / 4
if m ~= math.floor(m) or m > MAX_LIMIT then
  error(redis.error_reply('ERR completions come as 4 values each, at most ' .. MAX_LIMIT))
end
local base = flow_base(ARGV[1], '')
-- Every key it may write, touched before the first write (keys_here).
-- Completions by parent, parents in order of first appearance: a
-- parent's completions cost a few calls together, not a few each.
local order, by = {}, {}
for i = 1, m do
  local id = ARGV[4 * i]
  if not by[id] then
    by[id] = {}
    order[#order + 1] = id
  end
  table.insert(by[id], 4 * i)
end
local ready_list, prios = base .. 'ready', base .. 'ready:prio'
local built = {ready_list, prios}
for _, id in ipairs(order) do
  built[#built + 1] = base .. 'deps:' .. id
  built[#built + 1] = base .. 'children:' .. id
  built[#built + 1] = ARGV[1] .. id
end
keys_here(built)
local flows = flows_here(redis.call('HGET', KEYS[5], 'flows'), base, {})
local head, now = head_due(KEYS[2]), now_ms()
local applied, due, dead, removed, earliest, ready = 0, 0, 0, 0, false, false
local buried, deleted = {}, {}
for _, id in ipairs(order) do
  local deps, children = base .. 'deps:' .. id, base .. 'children:' .. id
  local members = {}
  for j, a in ipairs(by[id]) do
    members[j] = ARGV[a + 1]
  end
  -- Which children the parent still waits for; every one leaves the set,
  -- whether or not the parent still waits.
  local present = redis.call('SMISMEMBER', deps, unpack(members))
  redis.call('SREM', deps, unpack(members))
  local score = redis.call('ZSCORE', KEYS[1], id)
  local fields, counts, seen, ended = {}, {}, {}, false
  for j, a in ipairs(by[id]) do
    local child = members[j]
    if score and not ended and present[j] == 1 and not seen[child] then
      seen[child] = true
      applied = applied + 1
      local how, result = ARGV[a + 2], ARGV[a + 3]
      local outcome, policy = string.sub(how, 1, 1), string.sub(how, 2, 2)
      local bad = outcome == 'd' or outcome == 'c'
      if outcome ~= 'o' and not (bad and policy == 'r') then
        fields[#fields + 1] = child
        fields[#fields + 1] = outcome .. result
        counts[outcome] = (counts[outcome] or 0) + 1
      end
      if bad and policy == 'r' then
        ended = 'r'
      elseif (outcome == 'd' and policy == 'f') or (outcome == 'c' and policy ~= 'i') then
        ended = {child, outcome}
      end
    end
  end
  if #fields > 0 then
    redis.call('HSET', children, unpack(fields))
    for outcome, n in pairs(counts) do
      redis.call('HINCRBY', children, ' ' .. outcome, n)
    end
  end
  if ended == 'r' then
    redis.call('ZREM', KEYS[1], id)
    redis.call('UNLINK', deps, children, ARGV[1] .. id)
    removed = removed + 1
    deleted[#deleted + 1] = id
  elseif ended then
    redis.call('ZREM', KEYS[1], id)
    redis.call('UNLINK', deps)
    -- The shard's tag less its '#<n>' (never in a queue name): the queue.
    local child, outcome = ended[1], ended[2]
    local tag, cid = string.match(child, '{(.-)}:? (.*)$')
    local queue = tag and string.match(tag, '^[^#]*')
    local word = outcome == 'd' and 'dead' or 'cancelled'
    redis.call('HSET', KEYS[4], id, '0:child ' .. (queue or '?') .. '/' .. (cid or child) .. ' ' .. word)
    bury(KEYS[3], id, ARGV[1] .. id, now, tonumber(ARGV[3]))
    tally(KEYS[5], 'dead', 1)
    dead = dead + 1
    buried[#buried + 1] = id
  elseif next(seen) and redis.call('EXISTS', deps) == 0 then
    redis.call('ZREM', KEYS[1], id)
    local at = math.max(tonumber(score), now)
    local header = at <= now and redis.pcall('GETRANGE', ARGV[1] .. id, 0, HEADER_BYTES - 1)
    if header and not group_of(header) then
      local p = priority_of(header)
      if p > 0 then
        check_types(prios, 'zset')
        redis.call('ZADD', prios, prio_score(p, at), id)
        -- Claims read the zset once the totals say so (set by its send).
        redis.call('HSET', KEYS[5], 'prios', 1)
      else
        check_types(ready_list, 'list')
        redis.call('RPUSH', ready_list, id)
      end
      ready = true
    else
      redis.call('ZADD', KEYS[2], at, id)
      if not earliest or at < earliest then
        earliest = at
      end
    end
    due = due + 1
  end
end
flow_done(flows, base, buried, 'd', false)
flow_done(flows, base, deleted, 'c', true)
if ready then
  wake(ARGV[2], 0)
else
  wake_if_earlier(ARGV[2], earliest, head, now)
end
return {applied, due, dead, removed}
