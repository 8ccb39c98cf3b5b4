#!lua flags=allow-oom
--[[ claim: retry | ready -> unack | garbage
Pops up to ARGV[2] ids, retry list first, and leases each valid one: it
enters unack with the visibility deadline and its delivery count goes up
(its retry record counts deliveries; a failure reason in it is kept).
A popped id is not leased but buried as a dead letter with reason
"expired" (retry record "<count>:expired", payload kept for the
retention, counted in the totals' 'expired', its id returned) when the
deadline in its stored value's header (set by send from expire_after)
has passed by Redis's clock, or when its payload is missing (deleted or
evicted by something else): a message is never dropped unseen.
The one exception: while the retries hash carries the STALE mark, an id
without payload and without retry record is the leftover entry of a
cancelled message (cancel deletes both) and is skipped; so is an id live
elsewhere (pending, garbage: cancelled, then sent again). The mark is
cleared once both lists are empty.
An id already in unack is never leased twice.
While the queue is paused (the totals hash has the field 'paused') a new request leases nothing
and deletes the receipt, as one that found nothing; a replayed request
still returns what it leased before.

KEYS[1] ready list   KEYS[2] retry list   KEYS[3] unack zset
KEYS[4] retries hash KEYS[5] pending zset KEYS[6] garbage zset
KEYS[7] receipt string of this consumer (its last claim; TTL = visibility timeout)
KEYS[8] totals hash
ARGV[1] msg key prefix   ARGV[2] limit (0 to 1000; 0 leases nothing and
        reads no list, only deletes the receipt and clears STALE when both
        lists are empty: what a stopping consumer sends)
ARGV[3] visibility timeout ms
ARGV[4] request sequence number: new for each request of the consumer,
        the same when the consumer repeats a request that failed
ARGV[5] dead-letter retention ms
Counts 'expired' in the totals.
Returns {popped, expired, lease, left_ms, paused, expired id 1 .. expired id n,
id1, value1, attempt1, id2, ...} with n = expired and each value as
stored ("<retry count>[;<backoff>][/<sent at>+<delay>][@<expires at>]:<payload>").
left_ms is how much of the lease was left when the script ran: the
visibility timeout for a new request, less for a replayed one. paused is
1 while the queue is paused, else 0.
lease is the deadline in microseconds of Redis time: it fences ack/nack,
and differs from every earlier lease of the same id (Redis time moved on).
Idempotent: the receipt records what the consumer's last request leased;
a re-sent request (its reply lost on a cut connection) returns the same
deliveries again instead of leasing more. A request that leases nothing
deletes the receipt, so an idle or stopped consumer leaves no key.
Complexity: O(M log N) with M = popped, in a fixed number of calls per
list plus one PEXPIRE per expired id; O(1) for limit 0.
]]
check_types(KEYS[1], 'list', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'hash', KEYS[5], 'zset',
  KEYS[6], 'zset', KEYS[7], 'string', KEYS[8], 'hash')
local paused = redis.call('HEXISTS', KEYS[8], 'paused')
local receipt = redis.call('GET', KEYS[7])
if receipt and string.match(receipt, '^%S+') == ARGV[4] then
  local words, ids = string.gmatch(receipt, '%S+'), {}
  words()
  local out = {0, 0, tonumber(words() or '') or 0, 0, paused}
  for word in words do
    ids[#ids + 1] = word
  end
  for i, key in ipairs(payloads_here(ARGV[1], ids)) do
    local score = redis.call('ZSCORE', KEYS[3], ids[i])
    local value = redis.pcall('GET', key)
    if score and tonumber(score) == out[3] and type(value) == 'string' then
      out[#out + 1] = ids[i]
      out[#out + 1] = value
      out[#out + 1] = attempts(KEYS[4], ids[i], 1)
    end
  end
  out[4] = math.max(0, math.floor((out[3] - now_us()) / 1000))
  return out
end

-- The STALE mark goes once both lists are empty: no stale entry is left.
local function clear_stale()
  if redis.call('LLEN', KEYS[1]) == 0 and redis.call('LLEN', KEYS[2]) == 0 then
    redis.call('HDEL', KEYS[4], STALE)
  end
end

local limit = limit_arg(2, 0)
if limit == 0 or paused == 1 then
  redis.call('DEL', KEYS[7])
  clear_stale()
  return {0, 0, 0, 0, paused}
end
local vis = tonumber(ARGV[3])
local lease = now_us() + vis * 1000
local now = now_ms()
local leased = {ARGV[4], string.format('%d', lease)}
local popped = 0
local stale = redis.call('HEXISTS', KEYS[4], STALE) == 1
local seen, expired, deliveries = {}, {}, {}

-- Leases what can be leased of ids popped from one list, a few calls for
-- the whole batch rather than several per id.
local function lease_all(ids)
  local keys = payload_keys(ARGV[1], ids)
  -- MGET gives false for a missing payload and for a key of another type
  -- (written by something else: unreadable, so buried like a missing one,
  -- its key left alone).
  local values = redis.call('MGET', unpack(keys))
  local in_unack = redis.call('ZMSCORE', KEYS[3], unpack(ids))
  local in_pending, in_garbage = {}, {}
  if stale then
    in_pending = redis.call('ZMSCORE', KEYS[5], unpack(ids))
    in_garbage = redis.call('ZMSCORE', KEYS[6], unpack(ids))
  end
  local take, dead = {}, {}
  for i, id in ipairs(ids) do
    if in_unack[i] or seen[id] or in_pending[i] or in_garbage[i] then
      -- Being processed, popped twice, or live elsewhere: a stale entry.
    elseif values[i] then
      seen[id] = true
      local deadline = expires_at(values[i])
      if deadline and deadline <= now then
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
    local dead_ids = {}
    for j, i in ipairs(dead) do
      dead_ids[j] = ids[i]
    end
    local counts = redis.call('HMGET', KEYS[4], unpack(dead_ids))
    local records = {}
    for j, i in ipairs(dead) do
      -- No payload and no record while STALE: a cancelled message's entry.
      if values[i] or counts[j] or not stale then
        bury(KEYS[6], ids[i], values[i] and keys[i], now, tonumber(ARGV[5]))
        records[#records + 1] = ids[i]
        records[#records + 1] = count(counts[j], 0) .. ':expired'
        expired[#expired + 1] = ids[i]
      end
    end
    if #records > 0 then
      redis.call('HSET', KEYS[4], unpack(records))
    end
  end
  if #take == 0 then
    return
  end
  local scored, taken = {}, {}
  for _, i in ipairs(take) do
    scored[#scored + 1] = lease
    scored[#scored + 1] = ids[i]
    taken[#taken + 1] = ids[i]
  end
  redis.call('ZADD', KEYS[3], unpack(scored))
  local counts = redis.call('HMGET', KEYS[4], unpack(taken))
  local records = {}
  for j, i in ipairs(take) do
    local a = count(counts[j], 0) + 1
    records[#records + 1] = ids[i]
    records[#records + 1] = a .. reason_part(counts[j])
    leased[#leased + 1] = ids[i]
    deliveries[#deliveries + 1] = ids[i]
    deliveries[#deliveries + 1] = values[i]
    deliveries[#deliveries + 1] = a
  end
  redis.call('HSET', KEYS[4], unpack(records))
end

-- The heads of both lists are read, and their payloads checked, before
-- the first write; then each list gives up what its lease_all takes.
local heads, all = {}, {}
for n, list in ipairs({KEYS[2], KEYS[1]}) do
  heads[n] = redis.call('LRANGE', list, 0, limit - 1)
  for _, id in ipairs(heads[n]) do
    all[#all + 1] = id
  end
end
payloads_here(ARGV[1], all)
for n, list in ipairs({KEYS[2], KEYS[1]}) do
  local take = math.min(limit - (#leased - 2), #heads[n])
  if take > 0 then
    redis.call('LTRIM', list, take, -1)
    popped = popped + take
    lease_all({unpack(heads[n], 1, take)})
  end
end
if stale then
  clear_stale()
end
if #leased > 2 then
  redis.call('SET', KEYS[7], table.concat(leased, ' '), 'PX', vis)
else
  redis.call('DEL', KEYS[7])
end
tally(KEYS[8], 'expired', #expired)
local out = {popped, #expired, lease, vis, 0}
for _, id in ipairs(expired) do
  out[#out + 1] = id
end
for _, v in ipairs(deliveries) do
  out[#out + 1] = v
end
return out
