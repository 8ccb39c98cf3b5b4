--[[ prelude: helpers prepended to every script in this folder (not a
transition of its own).
]]

-- Redis time in milliseconds and microseconds.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The retry record "attempts:max" of an id; a missing or malformed one
-- counts as `attempts` deliveries so far with `max` retries.
local function record(retries, id, attempts, max)
  local a, m = string.match(redis.call('HGET', retries, id) or '', '^(%d+):(%d+)$')
  return tonumber(a or attempts), tonumber(m or max)
end

-- Keeps a payload alive at least `ms` from now; never shortens its TTL,
-- never gives a TTL to a payload without one, never revives a missing one
-- (GT treats a key without TTL as never expiring; Redis >= 7.0).
local function keep_payload(key, ms)
  redis.call('PEXPIRE', key, ms, 'GT')
end

-- Wakes sleeping consumers: something becomes claimable in `ms` (0: now).
-- Only an optimisation: a lost wake-up costs at most one fetch_interval.
local function wake(channel, ms)
  redis.call('PUBLISH', channel, ms)
end

-- Wakes consumers when `due` is earlier than `head`, the earliest due time
-- pending held before (false when it was empty).
local function wake_if_earlier(channel, due, head, now)
  if due and (not head or due < tonumber(head)) then
    wake(channel, math.max(0, due - now))
  end
end

-- The due time of the earliest pending message, false when there is none.
local function head_due(pending)
  return redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')[2] or false
end

-- Fails before any write when a queue key holds another type (something
-- else wrote to it), so a script never stops half-way. Takes key, type pairs.
local function check_types(...)
  local args = {...}
  for i = 1, #args, 2 do
    local actual = redis.call('TYPE', args[i])['ok']
    if actual ~= 'none' and actual ~= args[i + 1] then
      error(redis.error_reply('WRONGTYPE ' .. args[i] .. ' holds a ' .. actual .. ', not a ' .. args[i + 1]))
    end
  end
end
