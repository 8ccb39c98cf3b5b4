--- @include "checks"
--- @include "clock"
--- @include "finish"
--- @include "flows"
--- @include "header"
--- @include "priorities"
--- @include "wake"

-- Completions applied to the waiting parents of a slot (flow_complete.lua
-- for those given, relay.lua for those of the slot's own outbox;
-- docs/workflows.md).

-- Applies `list` (each {parent id, child "<child's base> <child id>",
-- outcome then policy letters, the child's result ('' none)}) to parents
-- of the queue whose msg key prefix is `prefix`: each child leaves its
-- parent's set (not for a parent not sent yet, whose set still has the TTL
-- flow_deps gives it: its set only gets OVERTAKEN, for its send to say
-- that its children need linking again), its outcome and result go to the
-- parent's children hash
-- (fields " a", " d", " c" count them); a dead child under 'f', or a
-- cancelled one under 'f' or 'w', makes the parent a dead letter; under
-- 'r' such a child removes the parent; outcome 'o' (a cohort's close) only
-- leaves the set. A parent whose set is empty goes where promote would put
-- it when due now and ungrouped (ready, or the priority zset), else to
-- pending at max(its due time, now). A parent made dead or removed is
-- recorded in this slot's outbox for its own parents (flow_done).
-- `k`: {waiting, pending, dead, attempts, totals}; `retention`: the
-- dead-letter retention in ms. In two steps: plan_completions touches
-- every key it builds, checks the type of every key apply_completions
-- writes and reads what the parents wait for, all before the caller's
-- first write (keys_here); apply_completions writes, after the caller's
-- own writes if it has any. Publishes a wake-up of 0 when a parent went
-- to ready, else when one became due before every pending message.
-- Returns {applied, parents made due, made dead, removed}. A fixed number
-- of calls per parent named (one more, PTTL, for one not waiting), plus
-- O(links) of those made dead or removed.
-- `flows`: whether the totals have 'flows', the flow keys checked
-- (flows_here, or the caller's own checks).
local function plan_completions(k, prefix, list, flows)
  local base = flow_base(prefix, '')
  local ready_list, prios = base .. 'ready', base .. 'ready:prio'
  -- The keys it writes are checked before the first write: pending,
  -- waiting, the totals and the parents' sets by their reads, the others
  -- (where a parent may go, the parents' children hashes) by TYPE.
  local types = {k[3], 'zset', k[4], 'hash', ready_list, 'list', prios, 'zset'}
  -- Completions by parent, parents in order of first appearance: a
  -- parent's completions cost a few calls together, not a few each.
  local order, by = {}, {}
  for _, c in ipairs(list) do
    local id = c[1]
    if not by[id] then
      by[id] = {}
      order[#order + 1] = id
    end
    table.insert(by[id], c)
  end
  local built = {ready_list, prios}
  for _, id in ipairs(order) do
    built[#built + 1] = base .. 'deps:' .. id
    built[#built + 1] = base .. 'children:' .. id
    built[#built + 1] = prefix .. id
    types[#types + 1], types[#types + 2] = base .. 'children:' .. id, 'hash'
  end
  keys_here(built)
  check_types(unpack(types))
  local head, now = head_due(k[2]), now_ms()
  local scores = #order > 0 and checked('zset', 'ZMSCORE', k[1], unpack(order)) or {}
  -- A parent not waiting whose set still has the TTL flow_deps gives it
  -- is not sent yet (its children's send and links may go out with its
  -- own send): its set is left whole but for OVERTAKEN.
  local unsent = {}
  for i, id in ipairs(order) do
    unsent[i] = not scores[i] and redis.call('PTTL', base .. 'deps:' .. id) > 0
  end
  -- Which children each parent still waits for, read before any write.
  local members_by, present_by = {}, {}
  for _, id in ipairs(order) do
    local members = {}
    for j, c in ipairs(by[id]) do
      members[j] = c[2]
    end
    members_by[id] = members
    present_by[id] = checked('set', 'SMISMEMBER', base .. 'deps:' .. id, unpack(members))
  end
  return {k = k, prefix = prefix, base = base, ready_list = ready_list, prios = prios, order = order, by = by,
    flows = flows, head = head, now = now, scores = scores, unsent = unsent, members_by = members_by,
    present_by = present_by}
end

local function apply_completions(plan, channel, retention)
  local k, prefix, base, ready_list, prios = plan.k, plan.prefix, plan.base, plan.ready_list, plan.prios
  local order, by, flows, head, now = plan.order, plan.by, plan.flows, plan.head, plan.now
  local scores, unsent, members_by, present_by = plan.scores, plan.unsent, plan.members_by, plan.present_by
  local applied, due, dead, removed, earliest, ready = 0, 0, 0, 0, false, false
  local buried, deleted = {}, {}
  for i, id in ipairs(order) do
    local deps, children = base .. 'deps:' .. id, base .. 'children:' .. id
    local members, present, score = members_by[id], present_by[id], scores[i]
    -- Every child leaves the set, whether or not the parent still waits,
    -- but for a parent not sent yet: its set is marked instead.
    if not unsent[i] then
      redis.call('SREM', deps, unpack(members))
    else
      for j = 1, #members do
        if present[j] == 1 then
          redis.call('SADD', deps, OVERTAKEN)
          break
        end
      end
    end
    local fields, counts, seen, ended = {}, {}, {}, false
    for j, c in ipairs(by[id]) do
      local child = members[j]
      if score and not ended and present[j] == 1 and not seen[child] then
        seen[child] = true
        applied = applied + 1
        local how, result = c[3], c[4]
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
      redis.call('ZREM', k[1], id)
      redis.call('UNLINK', deps, children, prefix .. id)
      removed = removed + 1
      deleted[#deleted + 1] = id
    elseif ended then
      redis.call('ZREM', k[1], id)
      redis.call('UNLINK', deps)
      -- The shard's tag less its '#<n>' (never in a queue name): the queue.
      local child, outcome = ended[1], ended[2]
      local tag, cid = string.match(child, '{(.-)}:? (.*)$')
      local queue = tag and string.match(tag, '^[^#]*')
      local word = outcome == 'd' and 'dead' or 'cancelled'
      redis.call('HSET', k[4], id, '0:child ' .. (queue or '?') .. '/' .. (cid or child) .. ' ' .. word)
      bury(k[3], id, prefix .. id, now, retention)
      tally(k[5], 'dead', 1)
      dead = dead + 1
      buried[#buried + 1] = id
    elseif next(seen) and redis.call('EXISTS', deps) == 0 then
      redis.call('ZREM', k[1], id)
      local at = math.max(tonumber(score), now)
      local header = at <= now and redis.pcall('GETRANGE', prefix .. id, 0, HEADER_BYTES - 1)
      if header and not group_of(header) then
        local p = priority_of(header)
        if p > 0 then
          redis.call('ZADD', prios, prio_score(p, at), id)
          -- Claims read the zset once the totals say so (set by its send).
          redis.call('HSET', k[5], 'prios', 1)
        else
          redis.call('RPUSH', ready_list, id)
        end
        ready = true
      else
        redis.call('ZADD', k[2], at, id)
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
    wake(channel, 0)
  else
    wake_if_earlier(channel, earliest, head, now)
  end
  return {applied, due, dead, removed}
end

-- Both steps at once, for a caller that writes nothing before.
local function complete_parents(k, prefix, channel, retention, list)
  local flows = flows_here(checked('hash', 'HGET', k[5], 'flows'), flow_base(prefix, ''), {})
  return apply_completions(plan_completions(k, prefix, list, flows), channel, retention)
end
