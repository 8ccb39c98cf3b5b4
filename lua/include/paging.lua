-- Paging through a zset that moves between calls.

-- Whether a sorts before b byte by byte, as a zset orders equal scores
-- (Lua's < follows the server's locale).
local function bytes_before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- The ranks in zset `key` of the first entry after (score, member) in the
-- zset's order and of the last one before it, whether the member is still
-- there with that score or left or moved since (then a binary search by
-- rank among the entries of that score): a cursor that pages on from the
-- last entry read, skipping none that stayed, however the others moved.
-- O(log N), O(log² N) when the member left or moved.
local function ranks_around(key, score, member)
  local now = redis.call('ZSCORE', key, member)
  if now and tonumber(now) == tonumber(score) then
    local rank = redis.call('ZRANK', key, member)
    return rank + 1, rank - 1
  end
  local lo, hi = redis.call('ZCOUNT', key, '-inf', '(' .. score), redis.call('ZCOUNT', key, '-inf', score)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if bytes_before(redis.call('ZRANGE', key, mid, mid)[1], member) then
      lo = mid + 1
    else
      hi = mid
    end
  end
  return lo, lo - 1
end
