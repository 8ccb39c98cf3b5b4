-- Wake-ups: telling sleeping consumers that something becomes claimable.
--- @include "checks"

-- Wakes sleeping consumers: something becomes claimable in `ms` (0: now).
-- Only an optimisation: a lost wake-up costs a sleeping consumer at most
-- its idle probe, so a refused PUBLISH (an ACL user without the channel)
-- is ignored rather than failing a script whose writes are done.
local function wake(channel, ms)
  redis.pcall('PUBLISH', channel, ms)
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
  return checked('zset', 'ZRANGE', pending, 0, 0, 'WITHSCORES')[2] or false
end
