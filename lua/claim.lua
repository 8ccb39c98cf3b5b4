#!lua flags=allow-oom
--[[ claim: retry | ready -> unack
Pops up to ARGV[2] ids, retry list first, and leases each valid one: it
enters unack with the visibility deadline and its delivery count goes up
(its retry record counts deliveries; a failure reason in it is kept). A leased payload is kept at least
msg ttl past the lease, so it cannot expire during the delivery or before
its retry. An id whose payload is gone is dropped: counted as expired,
unless the retries hash says stale entries may exist (then a missing
payload may be a cancelled message, counted only when its retry record
remained). While stale entries may exist, an id live elsewhere (pending,
garbage) is skipped too; the mark is cleared once both lists are empty.
An id already in unack is never leased twice.

KEYS[1] ready list   KEYS[2] retry list   KEYS[3] unack zset
KEYS[4] retries hash KEYS[5] pending zset KEYS[6] garbage zset
KEYS[7] receipt string of this consumer (its last claim; TTL = visibility timeout)
KEYS[8] totals hash
ARGV[1] msg key prefix   ARGV[2] limit (<= 1000)
ARGV[3] visibility timeout ms
ARGV[4] request sequence number: new for each request of the consumer,
        the same when the consumer repeats a request that failed
ARGV[5] msg ttl ms
Counts 'expired' in the totals.
Returns {popped, expired, lease, left_ms, id1, value1, attempt1, id2, ...}
with each value as stored ("<retry count>[;<backoff>]:<payload>").
left_ms is how much of the lease was left when the script ran: the
visibility timeout for a new request, less for a replayed one.
lease is the deadline in microseconds of Redis time: it fences ack/nack,
and differs from every earlier lease of the same id (Redis time moved on).
Idempotent: the receipt records what the consumer's last request leased;
a re-sent request (its reply lost on a cut connection) returns the same
deliveries again instead of leasing more. A request that leases nothing
deletes the receipt, so an idle or stopped consumer leaves no key.
Complexity: O(M log N) with M = popped; a fixed number of calls per list
plus one PEXPIRE per leased id.
]]
check_types(KEYS[1], 'list', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'hash', KEYS[5], 'zset',
  KEYS[6], 'zset', KEYS[7], 'string', KEYS[8], 'hash')
local receipt = redis.call('GET', KEYS[7])
if receipt and string.match(receipt, '^%S+') == ARGV[4] then
  local words, ids = string.gmatch(receipt, '%S+'), {}
  words()
  local out = {0, 0, tonumber(words() or '') or 0, 0}
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

local limit = tonumber(ARGV[2])
local vis = tonumber(ARGV[3])
local lease = now_us() + vis * 1000
local out = {0, 0, lease, vis}
local leased = {ARGV[4], string.format('%d', lease)}
local popped, expired = 0, 0
local stale = redis.call('HEXISTS', KEYS[4], STALE) == 1
local seen = {}

-- Leases what can be leased of ids popped from one list, a few calls for
-- the whole batch rather than several per id.
local function lease_all(ids)
  local keys = payload_keys(ARGV[1], ids)
  -- MGET gives false for a missing payload and for a key of another type
  -- (written by something else: unreadable, so dropped like a missing one).
  local values = redis.call('MGET', unpack(keys))
  local in_unack = redis.call('ZMSCORE', KEYS[3], unpack(ids))
  local in_pending, in_garbage = {}, {}
  if stale then
    in_pending = redis.call('ZMSCORE', KEYS[5], unpack(ids))
    in_garbage = redis.call('ZMSCORE', KEYS[6], unpack(ids))
  end
  local take, gone = {}, {}
  for i, id in ipairs(ids) do
    if in_unack[i] or seen[id] then
      -- Being processed, or popped twice: a stale duplicate entry.
    elseif not values[i] then
      gone[#gone + 1] = id
    elseif not (in_pending[i] or in_garbage[i]) then
      seen[id] = true
      take[#take + 1] = i
    end
  end
  if #gone > 0 then
    local had_records = redis.call('HDEL', KEYS[4], unpack(gone))
    expired = expired + (stale and had_records or #gone)
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
    keep_payload(keys[i], vis + tonumber(ARGV[5]))
    leased[#leased + 1] = ids[i]
    out[#out + 1] = ids[i]
    out[#out + 1] = values[i]
    out[#out + 1] = a
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
if stale and redis.call('LLEN', KEYS[1]) == 0 and redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('HDEL', KEYS[4], STALE)
end
if #leased > 2 then
  redis.call('SET', KEYS[7], table.concat(leased, ' '), 'PX', vis)
else
  redis.call('DEL', KEYS[7])
end
tally(KEYS[8], 'expired', expired)
out[1] = popped
out[2] = expired
return out
