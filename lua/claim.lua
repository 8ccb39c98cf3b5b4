--[[ claim: retry | ready -> unack
Pops up to ARGV[2] ids, retry list first, and leases each valid one: it
enters unack with the visibility deadline and its delivery count goes up.
A leased payload is kept at least msg ttl past the lease, so it cannot
expire during the delivery or before its retry. An id is skipped (a stale
list entry) when its payload is gone (cancelled or expired) or it is live
elsewhere (pending, unack, garbage). An id whose
payload expired (or holds another type) while its retry record remained
is counted as expired.

KEYS[1] ready list   KEYS[2] retry list   KEYS[3] unack zset
KEYS[4] retries hash KEYS[5] pending zset KEYS[6] garbage set
KEYS[7] receipt string of this consumer (its last claim; TTL = visibility timeout)
ARGV[1] msg key prefix   ARGV[2] limit (<= 1000)
ARGV[3] visibility timeout ms   ARGV[4] default retry count
ARGV[5] request sequence number: new for each request of the consumer,
        the same when the consumer repeats a request that failed
ARGV[6] msg ttl ms
Returns {popped, expired, lease, left_ms, id1, payload1, attempt1, id2, ...}.
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
local function delivery(out, id, attempt)
  local payload = redis.call('GET', ARGV[1] .. id)
  if payload then
    out[#out + 1] = id
    out[#out + 1] = payload
    out[#out + 1] = attempt
  end
end

check_types(KEYS[1], 'list', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'hash', KEYS[5], 'zset',
  KEYS[6], 'set', KEYS[7], 'string')
local receipt = redis.call('GET', KEYS[7])
if receipt and string.match(receipt, '^%S+') == ARGV[5] then
  local out = {0, 0, 0, 0}
  local words = string.gmatch(receipt, '%S+')
  words()
  for word in words do
    if out[3] == 0 then
      out[3] = tonumber(word)
    else
      local score = redis.call('ZSCORE', KEYS[3], word)
      if score and tonumber(score) == out[3] then
        delivery(out, word, record(KEYS[4], word, 1, 0))
      end
    end
  end
  out[4] = math.max(0, math.floor((out[3] - now_us()) / 1000))
  return out
end

local limit = tonumber(ARGV[2])
local lease = now_us() + tonumber(ARGV[3]) * 1000
local out = {0, 0, lease, tonumber(ARGV[3])}
local leased = {ARGV[5], string.format('%d', lease)}
local popped, expired = 0, 0
for _, list in ipairs({KEYS[2], KEYS[1]}) do
  if #leased - 2 < limit then
    local ids = redis.call('LPOP', list, limit - (#leased - 2))
    for _, id in ipairs(ids or {}) do
      popped = popped + 1
      -- A payload key of another type was written by something else: unreadable, so dropped like a missing one.
      local has_payload = redis.call('TYPE', ARGV[1] .. id)['ok'] == 'string'
      local elsewhere = redis.call('ZSCORE', KEYS[3], id) or redis.call('ZSCORE', KEYS[5], id)
        or redis.call('SISMEMBER', KEYS[6], id) == 1
      if not has_payload then
        if not elsewhere then
          expired = expired + redis.call('HDEL', KEYS[4], id)
        end
      elseif not elsewhere then
        local a, m = record(KEYS[4], id, 0, ARGV[4])
        a = a + 1
        redis.call('HSET', KEYS[4], id, a .. ':' .. m)
        redis.call('ZADD', KEYS[3], lease, id)
        keep_payload(ARGV[1] .. id, tonumber(ARGV[3]) + tonumber(ARGV[6]))
        leased[#leased + 1] = id
        delivery(out, id, a)
      end
    end
  end
end
if #leased > 2 then
  redis.call('SET', KEYS[7], table.concat(leased, ' '), 'PX', tonumber(ARGV[3]))
else
  redis.call('DEL', KEYS[7])
end
out[1] = popped
out[2] = expired
return out
