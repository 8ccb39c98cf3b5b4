-- Claim's groups (claim.lua, groups.lua, docs/groups.md): the ring's
-- first members (at most the request) share the request, as evenly as
-- their room allows; the messages without a group are the member ''.
--- @include "group_moves"
--- @include "groups"
--- @include "lease"
--- @include "rate"

-- Most ring members one claim reads: a member costs a few calls on its
-- group's keys, so 64 keep the longest claim over 100,000 groups within a
-- few ms; the request is shared among them (docs/groups.md).
local GROUP_TURNS = 64

-- Ring members a claim reads first: more only while those read have less
-- room than the claim may lease. Each member served costs calls on its
-- group's keys and fields in the groups' hashes and ring (each O(groups)
-- while those are small enough for Redis's listpack encoding), so groups
-- with backlogs are served a few at a time, many messages each.
local GROUP_FIRST_TURNS = 16

-- A claim's budget once the queue has groups: 1 a message leased and
-- GROUP_TURN_COST more a ring member served (its ZCARD, ZRANGE,
-- ZREMRANGEBYRANK and ring moves cost about two leases), so a claim over
-- 64 groups leases at most 128 messages and one over a single group 254:
-- as short as a plain claim of the consumer's largest request (256).
local GROUP_CLAIM = 256
local GROUP_TURN_COST = 2

-- Each member's room (read, not yet written): {member, room, share, gate,
-- paused, rated, due, active} of each of `members`, the ring's first;
-- `waiting` is the room of the member '' (its lists' length). room: how
-- many it may give (its due messages, within its concurrency and rate);
-- share: 0, for group_shares; gate: its concurrency's room alone (false:
-- no limit); rated: its rate_allowance (false: no rate), with its period.
local function group_rooms(gp, members, waiting, now_u)
  local named = {}
  for _, g in ipairs(members) do
    if g ~= '' then
      named[#named + 1] = g
    end
  end
  local pauses, active_g, own_g, rates_g = {}, {}, {}, {}
  if #named > 0 then
    pauses = redis.call('HMGET', gp .. 'paused', unpack(named))
    active_g = redis.call('HMGET', gp .. 'active', unpack(named))
    own_g = redis.call('HMGET', gp .. 'limits', unpack(named))
    rates_g = redis.call('HMGET', gp .. 'rates', unpack(named))
  end
  local default = redis.call('HGET', gp .. 'limits', '')
  local default_rate = redis.call('HGET', gp .. 'rates', '')
  local plan, j = {}, 0
  for _, g in ipairs(members) do
    local room, gate, paused_g, rated, avail = waiting, false, false, false, waiting
    if g ~= '' then
      j = j + 1
      local lim
      avail, lim = redis.call('ZCARD', group_list(gp, g)), tonumber(own_g[j] or default or '')
      room, paused_g = avail, pauses[j] and true or false
      if lim then
        gate = lim - (tonumber(active_g[j]) or 0)
        room = math.min(avail, gate)
      end
      local rate_g = rates_g[j] or default_rate
      if rate_g then
        rated = rate_allowance(rate_g, redis.call('GET', group_rate_key(gp, g)), now_u)
        rated.period = tonumber(string.match(rate_g, ' (%d+)$'))
        room = math.min(room, rated.allowed)
      end
      if paused_g then
        room = 0
      end
    end
    plan[#plan + 1] = {g, math.max(room, 0), 0, gate, paused_g, rated, avail, g ~= '' and tonumber(active_g[j] or 0) or 0}
  end
  return plan
end

-- Shares `limit` among the members of `plan` (each one's m[3]) by
-- water-filling: each pass gives every member with room an equal part of
-- what is left (at least 1, in ring order), until nothing is left or no
-- member has room.
local function group_shares(plan, limit)
  local left = limit
  while left > 0 do
    local open = 0
    for _, m in ipairs(plan) do
      if m[3] < m[2] then
        open = open + 1
      end
    end
    if open == 0 then
      break
    end
    local part = math.max(1, math.floor(left / open))
    for _, m in ipairs(plan) do
      local give = math.min(part, m[2] - m[3], left)
      if give > 0 then
        m[3], left = m[3] + give, left - give
      end
    end
  end
end

-- The plan of a claim of `limit` once the queue has groups, before its
-- first write but for the groups' own bookkeeping (groups whose wait is
-- over go back to the ring), over the ring's first GROUP_FIRST_TURNS
-- members, or up to GROUP_TURNS when those have too little room: {plan
-- (group_rooms, shared), heads (each served group's ids, by name), ucap
-- (what the member '' takes from the lists), limit (cut by GROUP_CLAIM or
-- the share), capped (whether GROUP_CLAIM, GROUP_TURNS or the share cut
-- it), waited_before (when the earliest group's wait ended before this
-- call, false: none waited)}.
-- `waiting()`: how many wait in the lists; `share`: ARGV[11].
local function group_plan(gp, limit, waiting, share, now, now_u)
  check_group_types(gp)
  local before = groups_due(gp, now)
  local out = {heads = {}, ucap = 0, waited_before = before and now + before}
  local ungrouped = waiting()
  if ungrouped > 0 and not redis.call('ZSCORE', gp .. 'ring', '') then
    ring_push(gp, '')
  end
  -- At most GROUP_TURNS members, and a budget of GROUP_CLAIM: 1 a
  -- message, GROUP_TURN_COST more a member (a few calls on its group's
  -- keys), whatever the request, so that one claim stays short.
  local turns = math.min(limit, GROUP_TURNS)
  local first = math.min(turns, GROUP_FIRST_TURNS)
  local members = redis.call('ZRANGE', gp .. 'ring', 0, first - 1)
  local plan = group_rooms(gp, members, ungrouped, now_u)
  if #members == first and first < turns then
    local room = 0
    for _, m in ipairs(plan) do
      room = room + m[2]
    end
    if room < math.min(limit, GROUP_CLAIM - GROUP_TURN_COST * #members) then
      local more = redis.call('ZRANGE', gp .. 'ring', first, turns - 1)
      if #more > 0 then
        for _, m in ipairs(group_rooms(gp, more, ungrouped, now_u)) do
          plan[#plan + 1] = m
        end
      end
    end
  end
  -- One plan entry a member read.
  local capped = #plan == GROUP_TURNS and limit > GROUP_TURNS
  local most = GROUP_CLAIM - GROUP_TURN_COST * #plan
  if limit > most then
    limit, capped = most, true
  end
  -- While one of several members has at most `share` due and may start
  -- one (a group just come due beside a backlog), at most `share` a
  -- member: the claim that serves it stays short, and backlogs alone (or
  -- beside a paused or limited group) still get full claims.
  if share > 0 and #plan > 1 and limit > share * #plan then
    for _, m in ipairs(plan) do
      if m[7] <= share and m[2] > 0 then
        limit, capped = share * #plan, true
        break
      end
    end
  end
  group_shares(plan, limit)
  for _, m in ipairs(plan) do
    if m[1] == '' then
      out.ucap = m[3]
    elseif m[3] > 0 then
      out.heads[m[1]] = redis.call('ZRANGE', group_list(gp, m[1]), 0, m[3] - 1)
    end
  end
  out.plan, out.limit, out.capped = plan, limit, capped
  return out
end

-- Where group member m (of group_rooms) goes once served, having leased
-- n (took: how many it popped): back to the ring's tail (true) while it has due
-- messages and room, or to the wait zset until its rate lets one more
-- start (returns when); forgotten when nothing of it may be left.
local function group_after(gp, m, n, took, now)
  local g, gate, paused_g, rated, avail = m[1], m[4], m[5], m[6], m[7]
  if rated and n > 0 then
    redis.call('SET', group_rate_key(gp, g), rated.record(n), 'PX', 2 * rated.period)
  end
  if not paused_g and (not gate or gate - n > 0) and avail > took then
    if rated and rated.allowed - n <= 0 then
      -- At its rate: it waits until its window lets one more start.
      local opens = now + math.max(rated.wait_ms(n), 1)
      redis.call('ZADD', gp .. 'wait', opens, g)
      return false, opens
    end
    return true
  elseif n == 0 then
    -- Its messages all buried as expired, say: nothing may be left.
    group_forget_idle(gp, g)
  end
  return false
end

-- Leases, for claim c, the heads of the groups plan p serves, in one
-- batch; then each member served (or found without room) leaves the
-- ring, and goes back to its tail while it still has due messages and
-- room. `ungrouped`: what the lists gave (the member ''); `waiting()`: how
-- many the lists hold now. Returns how many it popped and the earliest wait it
-- starts (false: none).
local function group_lease(c, gp, p, ungrouped, waiting)
  local batch, took, waits_from = {}, {}, false
  for _, m in ipairs(p.plan) do
    local ids = p.heads[m[1]]
    local take = 0
    if ids and not c.cut then
      take = fitting(c, ids, #ids)
    end
    if take > 0 then
      redis.call('ZREMRANGEBYRANK', group_list(gp, m[1]), 0, take - 1)
      for i = 1, take do
        batch[#batch + 1] = ids[i]
      end
    end
    took[m[1]] = take
  end
  group_ready(gp, -#batch)
  if #batch > 0 then
    lease_all(c, batch)
  end
  -- leaving: members that leave the ring; back: those that go back to
  -- its tail; counts: group, count in processing pairs for one HSET.
  local leaving, back, counts = {}, {}, {}
  for _, m in ipairs(p.plan) do
    local g, room = m[1], m[2]
    if g == '' then
      -- Served when its lists gave any; back while they hold more.
      if room == 0 or ungrouped > 0 then
        leaving[#leaving + 1] = g
        if waiting() > 0 then
          back[#back + 1] = g
        end
      end
    elseif room == 0 or took[g] > 0 then
      local n = 0
      for i = 1, took[g] do
        n = n + (c.leased_ids[p.heads[g][i]] and 1 or 0)
      end
      if n > 0 then
        counts[#counts + 1] = g
        counts[#counts + 1] = m[8] + n
      end
      leaving[#leaving + 1] = g
      local again, opens = group_after(gp, m, n, took[g], c.now)
      if again then
        back[#back + 1] = g
      elseif opens then
        waits_from = math.min(waits_from or opens, opens)
      end
    end
  end
  if #counts > 0 then
    redis.call('HSET', gp .. 'active', unpack(counts))
  end
  if #leaving > 0 then
    redis.call('ZREM', gp .. 'ring', unpack(leaving))
  end
  if #back > 0 then
    local last = tonumber(redis.call('ZRANGE', gp .. 'ring', -1, -1, 'WITHSCORES')[2]) or 0
    local entries = {}
    for i, g in ipairs(back) do
      entries[#entries + 1] = last + i
      entries[#entries + 1] = g
    end
    redis.call('ZADD', gp .. 'ring', unpack(entries))
  end
  return #batch, waits_from
end
