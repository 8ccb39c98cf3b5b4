-- Groups (groups.lua): moving messages into, out of and back to their groups.
--- @include "args"
--- @include "checks"
--- @include "groups"
--- @include "header"
--- @include "priorities"

-- Puts message `id` of group g (header `head`) back in its group after a
-- delivery that did not finish (failed, deferred, timed out, released),
-- by priority then `due`. In an ordered group (`ordered`: concurrency 1)
-- it stays the head: scored by `due` alone, below every prio_score
-- (PRIO_SPAN and up), so neither a message sent since, of any priority,
-- nor one due before this message's retry passes it.
local function group_return(gp, g, id, head, due, ordered)
  group_add(gp, g, {ordered and due or prio_score(priority_of(head), due), id})
end

-- Queues a message of group g in its group, at score prio_score(p, due),
-- and puts the group in the ring when it qualifies.
local function group_enqueue(gp, g, id, p, due)
  group_add(gp, g, {prio_score(p, due), id})
  group_wake(gp, g)
end

-- Fails before any write when the zset of a group in `groups` holds
-- another type or is on another node.
local function check_group_lists(gp, groups)
  if #groups == 0 then
    return
  end
  local keys, names = {}, {KEYS[1]}
  for _, g in ipairs(groups) do
    keys[#keys + 1], keys[#keys + 2] = group_list(gp, g), 'zset'
    names[#names + 1] = group_list(gp, g)
  end
  -- The EXISTS of check_group_types, for these keys.
  redis.call('EXISTS', unpack(names))
  check_types(unpack(keys))
end

-- Queues due messages in their groups: grouped[g] holds score, id pairs of
-- group g, `groups` the groups in the order they first appear; counted,
-- known, and each group put in the ring when it qualifies, in a few calls
-- per group whatever the number of messages.
local function groups_add(gp, grouped, groups)
  local added, known = 0, {}
  for _, g in ipairs(groups) do
    added = added + redis.call('ZADD', group_list(gp, g), unpack(grouped[g]))
    known[#known + 1] = 0
    known[#known + 1] = g
  end
  group_ready(gp, added)
  redis.call('ZADD', gp .. 'known', unpack(known))
  groups_wake(gp, groups)
end

-- The ms until the earliest waiting group's wait is over (0: over
-- already), false when none waits.
local function group_wait_ms(gp, now)
  local next = redis.call('ZRANGE', gp .. 'wait', 0, 0, 'WITHSCORES')[2]
  return next and math.max(0, tonumber(next) - now) or false
end

-- Moves the groups whose wait is over (at most MAX_LIMIT) back to the
-- ring, and forgets those with nothing left (their messages cancelled
-- while they waited: the cancel could not forget a waiting group); the
-- ms until the next one's is over (group_wait_ms), and how many went
-- back to the ring.
local function groups_due(gp, now)
  local over = redis.call('ZRANGE', gp .. 'wait', '-inf', now, 'BYSCORE', 'LIMIT', 0, MAX_LIMIT)
  local woken = 0
  if #over > 0 then
    redis.call('ZREM', gp .. 'wait', unpack(over))
    for _, g in ipairs(over) do
      woken = woken + (group_wake(gp, g) and 1 or 0)
      group_forget_idle(gp, g)
    end
  end
  return group_wait_ms(gp, now), woken
end

-- The groups of the messages at `keys` (payload keys): {group, how many}
-- pairs, in the order the groups first appear.
local function groups_of(keys)
  local counts, at = {}, {}
  for _, key in ipairs(keys) do
    local g = group_of(redis.pcall('GETRANGE', key, 0, HEADER_BYTES - 1))
    if g and at[g] then
      counts[at[g]][2] = counts[at[g]][2] + 1
    elseif g then
      counts[#counts + 1], at[g] = {g, 1}, #counts + 1
    end
  end
  return counts
end

-- Messages of groups left processing (`counts`, from groups_of): each
-- group's count goes down and it goes back to the ring when it may start
-- another; true when any did (group_wake). In four calls whatever the
-- number of groups in the ring (a backlog's groups are), plus a few
-- calls for each group out of it.
local function groups_finished(gp, counts)
  if #counts == 0 then
    return false
  end
  local names = {}
  for i, c in ipairs(counts) do
    names[i] = c[1]
  end
  local active = redis.call('HMGET', gp .. 'active', unpack(names))
  local left, gone = {}, {}
  for i, c in ipairs(counts) do
    local n = (tonumber(active[i]) or 0) - c[2]
    if n > 0 then
      left[#left + 1], left[#left + 2] = c[1], n
    else
      gone[#gone + 1] = c[1]
    end
  end
  if #left > 0 then
    redis.call('HSET', gp .. 'active', unpack(left))
  end
  if #gone > 0 then
    redis.call('HDEL', gp .. 'active', unpack(gone))
  end
  -- A group in the ring is where it may start another already; a claim
  -- serves it, and forgets it once nothing of it is left.
  local in_ring = redis.call('ZMSCORE', gp .. 'ring', unpack(names))
  local back = false
  for i, g in ipairs(names) do
    if not in_ring[i] then
      back = group_wake(gp, g) or back
      group_forget_idle(gp, g)
    end
  end
  return back
end
