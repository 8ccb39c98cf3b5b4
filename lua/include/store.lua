-- Storing a message: send's and fire's one store.
--- @include "checks"
--- @include "header"
--- @include "records"

-- A staged value: one the producer SET at `key` (in the same pipeline,
-- with a TTL) before the send, so that the payload never passes through
-- Lua, whose strings cost Redis about 1.5 ns a byte to hash. It is the
-- stored value with the send times as placeholders of 13 zeros:
-- "/0000000000000+<delay>" and, sent with an expire_after (`expires`),
-- "@0000000000000" right after; store_message writes the times over them
-- (SETRANGE: the value is not copied). Returns {key, offset of the sent-at
-- zeros, offset of the deadline's or false, the value's size, its first
-- HEADER_BYTES bytes}, or {false}
-- when the key is gone (expired or evicted before the call); fails, to be
-- called before the script's first write, on a value without the
-- placeholders its message needs.
local PLACEHOLDER = '0000000000000'
local function staged(key, expires, id)
  local head = redis.pcall('GETRANGE', key, 0, HEADER_BYTES - 1)
  if type(head) ~= 'string' or head == '' then
    return {false}
  end
  local sent, after = string.match(head, '^%d+[^:/@]*/()' .. PLACEHOLDER .. '%+%d+()')
  local deadline = after and string.sub(head, after, after + #PLACEHOLDER) == '@' .. PLACEHOLDER and after + 1
  local ends = after and (deadline and after + 1 + #PLACEHOLDER or after)
  if not sent or (deadline and true or false) ~= expires or string.sub(head, ends, ends) ~= ':' then
    error(redis.error_reply('ERR the staged value of ' .. id .. ' lacks its time placeholders'))
  end
  return {key, sent - 1, deadline and deadline - 1, redis.call('STRLEN', key), head}
end

-- Writes due time `due` (ms) of message `id`, whose value is at `key`,
-- where it is recorded besides its pending entry. The delay in the value's
-- header ("/<sent at>+<delay>", from send) becomes due - sent at, so the
-- consumer reports the new due time; it is written in place (SETRANGE, with
-- leading zeros when it has fewer digits) unless it has more digits, when
-- the value is rewritten (a staged send writes the delay with 12 digits, so
-- a big value never is). A retry's attempt record (it holds a due time)
-- gets the new due time too, the due time its delivery reports.
local function set_due(key, attempts, id, due)
  local header = redis.call('GETRANGE', key, 0, HEADER_BYTES - 1)
  local sent, at, old = string.match(header, '^%d+[^:/@]*/(%d+)%+()(%d+)[:@]')
  if at then
    -- Due no earlier than sent: a Redis clock that stepped back says nothing
    -- about when the message was meant for.
    local delay = string.format('%d', math.max(0, due - tonumber(sent)))
    if #delay <= #old then
      -- Leading zeros keep the width: no payload byte moves.
      redis.call('SETRANGE', key, at - 1, string.rep('0', #old - #delay) .. delay)
    else
      local value = redis.call('GET', key)
      redis.call('SET', key, string.sub(value, 1, at - 1) .. delay .. string.sub(value, at + #old))
    end
  end
  local n, was, deferred, rest = parts(redis.call('HGET', attempts, id))
  if was then
    redis.call('HSET', attempts, id, record_from(n, due, deferred, rest))
  end
end

-- Stores one message as send does, unless its id is live. Its value gets
-- the send times in its header, before the ':': "/<now>+<delay ms>" and,
-- when `expire` (ms) > 0, "@<now + delay + expire>". `value` is the value
-- without them (inserted here), or a staged value (`staged`), whose
-- placeholders get them. `delay` is the delay in ms as a string, written
-- as given. A caller-chosen id (`own`)
-- may have had an earlier message: its dead letter and attempt record go,
-- and STALE is set when an entry of it may remain in a list. `first`:
-- this is the script's first read of `processing`, which then checks its type.
-- `mode` (docs/dedup.md): nil for a plain send, else {kind, ms, marker
-- key, pending zset}, kind one of
--   'u' unique_for: refused while the id's marker exists; stores the
--       marker holding ms, without TTL (start_window gives it one),
--   't' throttle: refused while the marker exists; stores it with TTL ms,
--   'd' debounce: a pending message of the id (one not due yet: a due one
--       still in pending is live) is replaced, due now + delay,
--   'r' replace: a pending message of the id is replaced, its due time kept,
--   'R' replace, due now + delay.
-- Adds nothing to pending: the caller ZADDs the due time returned with
-- status 1 or 5.
-- Returns a status and, for 1 and 5 the due time, for 4 when the marker
-- expires (ms, -1: it has no TTL, its message is live):
-- 1 stored, 0 the id is live (pending, ready, retry or processing; for
-- debounce and replace: due or processing), 2 its
-- payload key holds another type (nothing written), 3 its staged value is
-- gone (nothing written), 4 refused by the id's marker, 5 a pending
-- message replaced (its attempt record kept), 6 replace found no live
-- message. A staged value not stored is deleted.
local function store_message(processing, dead, attempts, key, id, value, delay, expire, own, now, first, mode)
  local live
  if first then
    live = checked('zset', 'ZSCORE', processing, id)
  else
    live = redis.call('ZSCORE', processing, id)
  end
  local kind = mode and mode[1]
  local windowed = kind == 'u' or kind == 't'
  -- The due time of a pending message that debounce or replace replaces.
  local was_due = kind and not windowed and not live and redis.call('ZSCORE', mode[4], id)
  if was_due and tonumber(was_due) <= now then
    -- Due already, only not yet moved out of pending by a consumer's
    -- promote: ready, as counts and get name it, so live, not replaced.
    live, was_due = true, false
  end
  if kind == 'r' and was_due then
    -- Its due time kept: the delay (and an expiry) count from it.
    delay = string.format('%d', math.max(0, tonumber(was_due) - now))
  end
  local status, extra = 0, now + tonumber(delay)
  -- Writes the value at `key`, over what it holds when `replace`, else
  -- only where there is none; whether it wrote.
  local put
  if type(value) == 'table' then
    put = function(replace)
      if not replace and redis.call('EXISTS', key) == 1 then
        return false
      end
      redis.call('RENAME', value[1], key)
      redis.call('PERSIST', key)
      redis.call('SETRANGE', key, value[2], string.format('%013d', now))
      if value[3] then
        redis.call('SETRANGE', key, value[3], string.format('%013d', now + tonumber(delay) + expire))
      end
      return true
    end
  else
    local colon = string.find(value, ':', 1, true)
    if colon then
      local times = string.format('/%d+', now) .. delay
      if expire > 0 then
        times = times .. string.format('@%d', now + tonumber(delay) + expire)
      end
      value = string.sub(value, 1, colon - 1) .. times .. string.sub(value, colon)
    end
    put = function(replace)
      if replace then
        return redis.call('SET', key, value)
      end
      return redis.call('SET', key, value, 'NX')
    end
  end
  if live then
    -- Left as it is.
  elseif type(value) == 'table' and not value[1] then
    return 3
  elseif was_due and redis.call('TYPE', key)['ok'] ~= 'string' then
    status = 2
  elseif was_due then
    put(true)
    set_due(key, attempts, id, extra)
    status = 5
  elseif kind == 'r' or kind == 'R' then
    -- Not pending: ready, retry (live), or dead or unknown (nothing to replace).
    if redis.call('EXISTS', key) == 0 or checked('zset', 'ZSCORE', dead, id) then
      status = 6
    end
  elseif windowed and redis.call('EXISTS', mode[3]) == 1 then
    local left = redis.call('PTTL', mode[3])
    status, extra = 4, left >= 0 and now + left or -1
  elseif put(false) then
    status = 1
  elseif redis.call('TYPE', key)['ok'] ~= 'string' then
    status = 2
  elseif own and checked('zset', 'ZSCORE', dead, id) then
    -- A dead message with the same id is replaced by the new one, without
    -- the dead payload's TTL. (A generated id's dead message is this
    -- call's own, delivered and dead before a re-run: left dead.)
    put(true)
    status = 1
  end
  if type(value) == 'table' and value[1] and status ~= 1 and status ~= 5 then
    redis.call('DEL', value[1])
  end
  if status == 1 and own then
    local was_dead = redis.call('ZREM', dead, id)
    if redis.call('HDEL', attempts, id) == 1 and was_dead == 0 then
      -- Delivered before, neither dead nor processing, and its payload gone
      -- (deleted by something else): an entry of it may remain in a list.
      redis.call('HSET', attempts, STALE, 1)
    end
  end
  if status == 1 and kind == 'u' then
    redis.call('SET', mode[3], mode[2])
  elseif status == 1 and kind == 't' then
    redis.call('SET', mode[3], 't', 'PX', mode[2])
  end
  return status, extra
end
