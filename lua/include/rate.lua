-- Rate limits: a sliding window of leases (claim.lua; the queue's 'rate' and
-- each group's).

-- The rate limiter: a sliding window of RATE_BUCKETS buckets per period,
-- counting leases. A lease is allowed while the last RATE_BUCKETS + 1
-- buckets (the current one included) hold fewer than n: any window of one
-- period lies within that many buckets, so none ever holds more than n.
-- A bucket takes at most ceil(n / RATE_BUCKETS), which paces a backlog
-- evenly instead of in bursts of n: a stream that never lets up gets
-- RATE_BUCKETS / (RATE_BUCKETS + 1) of n. 'rate_used' is
-- "<bucket> <count> <count of the bucket before> ...", the bucket numbered
-- by Redis time in units of period / RATE_BUCKETS (20 us per ms of period).
local RATE_BUCKETS = 50
local function rate_allowance(rate, used, now_u)
  local n, period = string.match(rate, '^(%d+) (%d+)$')
  n, period = tonumber(n), tonumber(period)
  if not n or period < 1 then
    error(redis.error_reply('ERR malformed rate limit ' .. rate))
  end
  local width = period * 1000 / RATE_BUCKETS
  local bucket = math.floor(now_u / width)
  -- counts[i]: leases in bucket - i, for i = 0 .. RATE_BUCKETS.
  local counts = {}
  for i = 0, RATE_BUCKETS do
    counts[i] = 0
  end
  local words = string.gmatch(used or '', '%d+')
  local last = tonumber(words() or '')
  if last then
    local i = bucket - last
    for word in words do
      if i > RATE_BUCKETS then
        break
      end
      -- A bucket ahead of now (Redis's clock stepped back since) counts as
      -- this one: its leases happened, and the window keeps them a period.
      local at = math.max(i, 0)
      counts[at] = counts[at] + tonumber(word)
      i = i + 1
    end
  end
  local total = 0
  for i = 0, RATE_BUCKETS do
    total = total + counts[i]
  end
  local per_bucket = math.ceil(n / RATE_BUCKETS)
  local r = {allowed = math.max(0, math.min(n - total, per_bucket - counts[0]))}
  -- The record once `granted` more are leased in this bucket.
  function r.record(granted)
    counts[0] = counts[0] + granted
    local last_used = 0
    for i = 0, RATE_BUCKETS do
      if counts[i] > 0 then
        last_used = i
      end
    end
    local out = {string.format('%d', bucket)}
    for i = 0, last_used do
      out[#out + 1] = counts[i]
    end
    return table.concat(out, ' ')
  end
  -- Ms until a later bucket allows a lease, once `granted` more are leased
  -- in this one: the first whose window has dropped enough old leases.
  function r.wait_ms(granted)
    local left = total + granted
    for m = 1, RATE_BUCKETS + 1 do
      left = left - counts[RATE_BUCKETS - m + 1]
      if left < n then
        return math.max(0, math.ceil(((bucket + m) * width - now_u) / 1000))
      end
    end
    return 0
  end
  return r
end
