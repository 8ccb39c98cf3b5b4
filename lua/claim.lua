--[[ claim: retry | ready -> unack
Pops up to ARGV[2] ids, retry list first, and leases each valid one: it
enters unack with the visibility deadline and its delivery count goes up
(the first delivery creates its retry record "attempts:max", max read from
the stored value "<retry count>:<payload>"). A leased payload is kept at
least msg ttl past the lease, so it cannot expire during the delivery or
before its retry. An id is skipped (a stale list entry) when its payload is
gone (cancelled or expired) or it is live elsewhere (pending, unack,
garbage). An id whose payload expired (or holds another type) while its
retry record remained is counted as expired.

KEYS[1] ready list   KEYS[2] retry list   KEYS[3] unack zset
KEYS[4] retries hash KEYS[5] pending zset KEYS[6] garbage set
KEYS[7] receipt string of this consumer (its last claim; TTL = visibility timeout)
ARGV[1] msg key prefix   ARGV[2] limit (<= 1000)
ARGV[3] visibility timeout ms
ARGV[4] request sequence number: new for each request of the consumer,
        the same when the consumer repeats a request that failed
ARGV[5] msg ttl ms
Returns {popped, expired, lease, left_ms, id1, value1, attempt1, id2, ...}
with each value as stored ("<retry count>:<payload>").
left_ms is how much of the lease was left when the script ran: the
visibility timeout for a new request, less for a replayed one.
lease is the deadline in microseconds of Redis time: it fences ack/nack,
and differs from every earlier lease of the same id (Redis time moved on).
Idempotent: the receipt records what the consumer's last request leased;
a re-sent request (its reply lost on a cut connection) returns the same
deliveries again instead of leasing more. A request that leases nothing
deletes the receipt, so an idle or stopped consumer leaves no key.
Complexity: O(M log N) with M = popped.
]]
check_types(KEYS[1], 'list', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'hash', KEYS[5], 'zset',
  KEYS[6], 'set', KEYS[7], 'string')
local receipt = redis.call('GET', KEYS[7])
if receipt and string.match(receipt, '^%S+') == ARGV[4] then
  local out = {0, 0, 0, 0}
  local words = string.gmatch(receipt, '%S+')
  words()
  for word in words do
    if out[3] == 0 then
      out[3] = tonumber(word)
    else
      local score = redis.call('ZSCORE', KEYS[3], word)
      local value = redis.call('GET', ARGV[1] .. word)
      if score and tonumber(score) == out[3] and value then
        out[#out + 1] = word
        out[#out + 1] = value
        out[#out + 1] = record(KEYS[4], word, 1, 0)
      end
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
for _, list in ipairs({KEYS[2], KEYS[1]}) do
  if #leased - 2 < limit then
    local ids = redis.call('LPOP', list, limit - (#leased - 2))
    for _, id in ipairs(ids or {}) do
      popped = popped + 1
      local key = ARGV[1] .. id
      -- A payload key of another type was written by something else: unreadable, so dropped like a missing one.
      local value = redis.pcall('GET', key)
      local elsewhere = redis.call('ZSCORE', KEYS[5], id) or redis.call('SISMEMBER', KEYS[6], id) == 1
      if type(value) ~= 'string' then
        if not elsewhere and not redis.call('ZSCORE', KEYS[3], id) then
          expired = expired + redis.call('HDEL', KEYS[4], id)
        end
      elseif not elsewhere and redis.call('ZADD', KEYS[3], 'NX', lease, id) == 1 then
        local a, m = record(KEYS[4], id, 0, string.match(value, '^(%d+):') or 0)
        a = a + 1
        redis.call('HSET', KEYS[4], id, a .. ':' .. m)
        keep_payload(key, vis + tonumber(ARGV[5]))
        leased[#leased + 1] = id
        out[#out + 1] = id
        out[#out + 1] = value
        out[#out + 1] = a
      end
    end
  end
end
if #leased > 2 then
  redis.call('SET', KEYS[7], table.concat(leased, ' '), 'PX', vis)
else
  redis.call('DEL', KEYS[7])
end
out[1] = popped
out[2] = expired
return out
