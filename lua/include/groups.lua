--- @include "checks"

-- Groups (docs/groups.md). A message sent with a group carries it in its
-- header ("=<group>" after the priority); group names are 1 to 64 ASCII
-- letters, digits, '-', '_' and '.', so the header stays parseable. Its
-- keys all start with the queue's group prefix `gp` ("<queue keys>:g"):
--   gp .. 'ring'    zset: the groups that may start a message now, in turn
--                   order (score: position; the member '' stands for the
--                   messages without a group, as one more group)
--   gp .. 'wait'    zset: groups held back until a time (ms of Redis time):
--                   an ordered group whose failed message waits its retry,
--                   a group at its rate until its window lets one more start
--   gp .. 'active'  hash: group -> its messages in processing
--   gp .. 'paused'  hash: group -> 1 while paused
--   gp .. 'limits'  hash: group -> its concurrency; field '' the default
--   gp .. 'rates'   hash: group -> its rate "<n> <period ms>"; field '' the
--                   default (claim.lua)
--   gp .. 'known'   zset: every group with due messages, messages in
--                   processing, a wait or a setting of its own, score 0
--                   (listed by list_groups.lua, in name order)
--   gp .. 'ready'   string: how many messages wait in the groups' zsets
--                   (stats counts them as ready; group_ready)
--   gp .. ':' .. group .. ':ready'  zset: the group's due messages, scored
--                   as the priority zset (prio_score), so priority first,
--                   then due order
--   gp .. ':' .. group .. ':rate'  string: the group's recent leases under
--                   its rate, as the totals' 'rate_used' (TTL: two periods)
-- A group is in the ring exactly when it has due messages, is not paused,
-- is under its concurrency and not waiting (its rate is checked by claim,
-- which sends a group at its rate to wait); claim drops a member that no
-- longer qualifies (a limit lowered since), so the rule is kept lazily
-- where it is cheap and exactly where it matters. Redis deletes an empty
-- zset or hash, and 'active' loses a group's field at 0: an idle group
-- leaves no key.

-- What promote counts for a group's first message in a call, against 1 for
-- each message: its ZADD and ring check cost about that many plain moves,
-- so a batch over many groups is cut as short as a plain one takes.
local GROUP_MOVE_COST = 8

-- Most known groups a listing of the ready state walks (list.lua), in name
-- order: each costs a ZCARD, so a page past them is not reached.
local GROUPS_LISTED = 1000

-- Fails before any write when a queue-wide group key holds another type,
-- or is on another node while a cluster moves the queue's slot: the group
-- keys are built, not declared, so one EXISTS with KEYS[1] fails then (as
-- payloads_here's), where a lone read would find the key missing.
local function check_group_types(gp)
  local keys = {gp .. 'ring', 'zset', gp .. 'wait', 'zset', gp .. 'known', 'zset', gp .. 'ready', 'string',
    gp .. 'active', 'hash', gp .. 'paused', 'hash', gp .. 'limits', 'hash', gp .. 'rates', 'hash'}
  local names = {KEYS[1]}
  for i = 1, #keys, 2 do
    names[#names + 1] = keys[i]
  end
  redis.call('EXISTS', unpack(names))
  check_types(unpack(keys))
end

-- The due messages of group g.
local function group_list(gp, g)
  return gp .. ':' .. g .. ':ready'
end

-- Group g's recent leases under its rate.
local function group_rate_key(gp, g)
  return gp .. ':' .. g .. ':rate'
end

-- A group's concurrency (its own, else the queue's default); nil: no limit.
-- A group of concurrency 1 is ordered: one message at a time, and a failed
-- one keeps its place at the head (group_return).
local function group_limit(gp, g)
  local own = redis.call('HMGET', gp .. 'limits', g, '')
  return tonumber(own[1] or own[2] or '')
end

-- Puts member g at the ring's tail.
local function ring_push(gp, g)
  local last = redis.call('ZRANGE', gp .. 'ring', -1, -1, 'WITHSCORES')[2]
  redis.call('ZADD', gp .. 'ring', (tonumber(last) or 0) + 1, g)
end

-- Puts group g in the ring when it qualifies (above) and is not there
-- yet; true when it did (the caller publishes a wake-up: a consumer may
-- start one of its messages now).
local function group_wake(gp, g)
  if redis.call('ZSCORE', gp .. 'ring', g) or redis.call('ZSCORE', gp .. 'wait', g)
    or redis.call('EXISTS', group_list(gp, g)) == 0 or redis.call('HEXISTS', gp .. 'paused', g) == 1 then
    return false
  end
  local limit = group_limit(gp, g)
  if limit and tonumber(redis.call('HGET', gp .. 'active', g) or '0') >= limit then
    return false
  end
  ring_push(gp, g)
  return true
end

-- group_wake for many groups, each with due messages now, in a few calls
-- whatever their number (promote's batch).
local function groups_wake(gp, groups)
  if #groups == 0 then
    return
  end
  local in_ring = redis.call('ZMSCORE', gp .. 'ring', unpack(groups))
  local waiting = redis.call('ZMSCORE', gp .. 'wait', unpack(groups))
  local paused = redis.call('HMGET', gp .. 'paused', unpack(groups))
  local active = redis.call('HMGET', gp .. 'active', unpack(groups))
  local limits = redis.call('HMGET', gp .. 'limits', '', unpack(groups))
  local last = tonumber(redis.call('ZRANGE', gp .. 'ring', -1, -1, 'WITHSCORES')[2]) or 0
  local entries = {}
  for i, g in ipairs(groups) do
    local limit = tonumber(limits[i + 1] or limits[1] or '')
    if not (in_ring[i] or waiting[i] or paused[i] or (limit and tonumber(active[i] or '0') >= limit)) then
      last = last + 1
      entries[#entries + 1] = last
      entries[#entries + 1] = g
    end
  end
  if #entries > 0 then
    redis.call('ZADD', gp .. 'ring', unpack(entries))
  end
end

-- Adds n (negative: takes) to group g's count in processing; the field
-- goes at 0.
local function group_active(gp, g, n)
  if n ~= 0 and redis.call('HINCRBY', gp .. 'active', g, n) <= 0 then
    redis.call('HDEL', gp .. 'active', g)
  end
end

-- Adds n (negative: takes) to the count of messages waiting in the
-- groups' zsets; the key goes at 0.
local function group_ready(gp, n)
  if n ~= 0 and redis.call('INCRBY', gp .. 'ready', n) <= 0 then
    redis.call('DEL', gp .. 'ready')
  end
end

-- Adds `entries` (score, id pairs) to group g's zset, counted; g is known.
local function group_add(gp, g, entries)
  group_ready(gp, redis.call('ZADD', group_list(gp, g), unpack(entries)))
  redis.call('ZADD', gp .. 'known', 0, g)
end

-- Whether nothing of group g is left: no due message, none in
-- processing, no wait and no setting of its own.
local function group_idle(gp, g)
  return redis.call('EXISTS', group_list(gp, g)) == 0 and redis.call('HEXISTS', gp .. 'active', g) == 0
    and not redis.call('ZSCORE', gp .. 'wait', g) and redis.call('HEXISTS', gp .. 'paused', g) == 0
    and redis.call('HEXISTS', gp .. 'limits', g) == 0 and redis.call('HEXISTS', gp .. 'rates', g) == 0
end

-- Forgets group g (drops it from 'known') once it is idle.
local function group_forget_idle(gp, g)
  if group_idle(gp, g) then
    redis.call('ZREM', gp .. 'known', g)
  end
end
