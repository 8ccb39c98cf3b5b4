-- Claim's leases (claim.lua, whose KEYS and ARGV these read): the replay
-- of a repeated request, and the leasing of the ids a claim pops. A claim
-- in progress is a table `c`:
--   now, lease       Redis time in ms, the lease's deadline in us
--   stale            whether the attempts hash has the STALE mark
--   big, budget      the totals' 'big' (sizes are read first), the byte budget
--   read, cut        bytes of stored values read so far; whether the budget
--                    ended the request
--   seen             ids popped so far (one popped twice is leased once)
--   leased           the receipt's words: request, lease, then each id leased
--   leased_ids       id -> true for each id leased
--   expired          ids buried as expired, in order
--   deliveries       id, value, attempt, due, deferrals of each lease
--- @include "checks"
--- @include "clock"
--- @include "finish"
--- @include "header"
--- @include "markers"
--- @include "records"

-- The reply to a request the receipt `receipt` says was made already (its
-- reply lost on a cut connection): the deliveries it leased, those still
-- leased by it, again; `paused` as the reply says it.
local function replay(receipt, paused)
  local words, ids = string.gmatch(receipt, '%S+'), {}
  words()
  local out = {0, 0, tonumber(words() or '') or 0, 0, paused, 0, 0, -1}
  for word in words do
    ids[#ids + 1] = word
  end
  for i, key in ipairs(payloads_here(ARGV[1], ids)) do
    local score = redis.call('ZSCORE', KEYS[3], ids[i])
    local value = redis.pcall('GET', key)
    if score and tonumber(score) == out[3] and type(value) == 'string' then
      out[#out + 1] = ids[i]
      out[#out + 1] = value
      local n, due, deferred = parts(redis.call('HGET', KEYS[4], ids[i]))
      out[#out + 1] = n or 1
      out[#out + 1] = due or 0
      out[#out + 1] = deferred or 0
    end
  end
  out[4] = math.max(0, math.floor((out[3] - now_us()) / 1000))
  return out
end

-- How many of the first n of ids fit what is left of claim c's byte
-- budget: all n while no value can be big; the first of the call always.
local function fitting(c, ids, n)
  if not c.big then
    return n
  end
  for i = 1, n do
    local size = redis.pcall('STRLEN', ARGV[1] .. ids[i])
    -- Another type reads as missing, as MGET gives it.
    size = type(size) == 'number' and size or 0
    if c.read > 0 and c.read + size > c.budget then
      c.cut = true
      return i - 1
    end
    c.read = c.read + size
  end
  return n
end

-- Buries the ids at positions `dead` of `ids` (values: their stored
-- values, keys: their payload keys) as expired, for claim c.
local function bury_expired(c, ids, keys, values, dead)
  local dead_ids = {}
  for j, i in ipairs(dead) do
    dead_ids[j] = ids[i]
  end
  local counts = redis.call('HMGET', KEYS[4], unpack(dead_ids))
  local markers = markers_of(ARGV[10], dead_ids, KEYS[8])
  local records = {}
  for j, i in ipairs(dead) do
    -- No payload and no record while STALE: a cancelled message's entry.
    if values[i] or counts[j] or not c.stale then
      bury(KEYS[6], ids[i], values[i] and keys[i], c.now, tonumber(ARGV[5]))
      start_window(markers[1][j], markers[2][j])
      records[#records + 1] = ids[i]
      local n, _, deferred = parts(counts[j])
      records[#records + 1] = record_from(n or 0, false, deferred or 0, ':expired')
      c.expired[#c.expired + 1] = ids[i]
    end
  end
  if #records > 0 then
    redis.call('HSET', KEYS[4], unpack(records))
  end
end

-- Leases, for claim c, what can be leased of ids popped from one list, a
-- few calls for the whole batch rather than several per id.
local function lease_all(c, ids)
  local keys = payload_keys(ARGV[1], ids)
  -- MGET gives false for a missing payload and for a key of another type
  -- (written by something else: unreadable, so buried like a missing one,
  -- its key left alone).
  local values = redis.call('MGET', unpack(keys))
  if not c.big then
    local found = false
    for _, v in ipairs(values) do
      c.read = c.read + (v and #v or 0)
      found = found or (v and #v > BIG_VALUE)
    end
    if found then
      -- Stored by a producer that does not mark big values: from now on
      -- (the rest of this call too) sizes are read first.
      c.big = true
      redis.call('HSET', KEYS[8], 'big', 1)
    end
  end
  local in_processing = redis.call('ZMSCORE', KEYS[3], unpack(ids))
  local in_pending, in_dead = {}, {}
  if c.stale then
    in_pending = redis.call('ZMSCORE', KEYS[5], unpack(ids))
    in_dead = redis.call('ZMSCORE', KEYS[6], unpack(ids))
  end
  local take, dead, seen = {}, {}, c.seen
  for i, id in ipairs(ids) do
    if in_processing[i] or seen[id] or in_pending[i] or in_dead[i] then
      -- Being processed, popped twice, or live elsewhere: a stale entry.
    elseif values[i] then
      seen[id] = true
      local deadline = expires_at(values[i])
      if deadline and deadline <= c.now then
        dead[#dead + 1] = i
      else
        take[#take + 1] = i
      end
    else
      seen[id] = true
      dead[#dead + 1] = i
    end
  end
  if #dead > 0 then
    bury_expired(c, ids, keys, values, dead)
  end
  if #take == 0 then
    return
  end
  local scored, taken = {}, {}
  for _, i in ipairs(take) do
    scored[#scored + 1] = c.lease
    scored[#scored + 1] = ids[i]
    taken[#taken + 1] = ids[i]
  end
  redis.call('ZADD', KEYS[3], unpack(scored))
  local counts = redis.call('HMGET', KEYS[4], unpack(taken))
  local records, leased, deliveries = {}, c.leased, c.deliveries
  for j, i in ipairs(take) do
    local n, due, deferred, rest = parts(counts[j])
    local a = (n or 0) + 1
    records[#records + 1] = ids[i]
    records[#records + 1] = record_from(a, due, deferred or 0, rest or '')
    leased[#leased + 1] = ids[i]
    c.leased_ids[ids[i]] = true
    deliveries[#deliveries + 1] = ids[i]
    deliveries[#deliveries + 1] = values[i]
    deliveries[#deliveries + 1] = a
    deliveries[#deliveries + 1] = due or 0
    deliveries[#deliveries + 1] = deferred or 0
  end
  redis.call('HSET', KEYS[4], unpack(records))
end
