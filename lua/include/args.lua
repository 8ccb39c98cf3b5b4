-- Arguments: limits on the ids a call reads, and ids passed in ARGV.

-- Most ids a script call reads or moves, so no call blocks Redis for long.
local MAX_LIMIT = 1000

-- ARGV[i] as a limit on the ids a call reads: an integer from `least` (1
-- unless given) to MAX_LIMIT, else the script fails before any write.
-- Below 1 a range bound of limit - 1 would read "to the end": a script that
-- accepts 0 must return before any range read.
local function limit_arg(i, least)
  local n = tonumber(ARGV[i])
  if not n or n ~= math.floor(n) or n < (least or 1) or n > MAX_LIMIT then
    error(redis.error_reply('ERR limit must be an integer from ' .. (least or 1) .. ' to ' .. MAX_LIMIT
      .. ', not ' .. tostring(ARGV[i])))
  end
  return n
end

-- The ids of a batch passed as tuples: every `step`-th argument from ARGV[first].
local function ids_of(first, step)
  local ids = {}
  for i = first, #ARGV, step do
    ids[#ids + 1] = ARGV[i]
  end
  return ids
end

-- The ids among ARGV[first..] (at most `limit` of them) that are members
-- of zset `key`, in order.
local function members_of(key, first, limit)
  local ids, last = {}, math.min(#ARGV, first + limit - 1)
  if last < first then
    return ids
  end
  local scores = redis.call('ZMSCORE', key, unpack(ARGV, first, last))
  for i, score in ipairs(scores) do
    if score then
      ids[#ids + 1] = ARGV[first + i - 1]
    end
  end
  return ids
end
