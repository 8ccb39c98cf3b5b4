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

-- An attempt record is "<deliveries>[@<due ms>][~<deferrals>][:<reason>]":
-- deliveries so far, the due time of the next (or running) delivery when
-- it is not the send's (a retry, a requeue), deliveries the handler
-- deferred without counting, and why the last delivery failed. Its parts
-- (count, due ms or false, deferrals, ":<reason>" or ''); nil when it is
-- missing (false) or malformed.
local function parts(record)
  local n, due, deferred, rest = string.match(record or '', '^(%d+)(@?%d*)(~?%d*)(.*)$')
  if not n or due == '@' or deferred == '~' or (rest ~= '' and string.sub(rest, 1, 1) ~= ':') then
    return nil
  end
  return tonumber(n), tonumber(string.sub(due, 2)) or false, tonumber(string.sub(deferred, 2)) or 0, rest
end

-- The record of those parts (`rest`: ":<reason>" or '').
local function record_from(n, due, deferred, rest)
  return n .. (due and string.format('@%d', due) or '') .. (deferred > 0 and '~' .. deferred or '') .. rest
end

-- The ":<reason>" part for `reason` ('' none).
local function reason_of(reason)
  return reason == '' and '' or ':' .. reason
end


-- A stored value is
-- "<retry count>[;<backoff>][!<priority>][=<group>][#<n>][/<sent at ms>+<delay ms>][@<expires at ms>]:<payload>"
-- (send writes the times; a value from elsewhere may lack them). The header
-- holds only digits, letters, ',', ';', '!', '=', '-', '_', '.', '#', '/', '+' and '@' (the
-- backoff is "f<ms>" or "e<ms>,<ms>,<per mille>"), so its first ':' ends it,
-- and HEADER_BYTES hold the longest one (HEADER_BYTES in src/store/stored.rs).
-- "#<n>": the n bytes after the ':' are the message's headers
-- ("<name>=<value bytes>:<value>" each), and its payload follows them; a
-- message without headers has neither the '#' nor the section.
local HEADER_BYTES = 169

-- A stored value longer than this is big: send (and a claim that reads
-- one) sets the totals' field 'big', from when on claim reads each popped
-- id's size before its value (claim.lua). MAX_LIMIT values of at most
-- this size make 4 MiB.
local BIG_VALUE = 4096

-- Bytes of the headers section in a stored value or its header (0: none).
local function headers_len(head)
  return tonumber(string.match(head, '^%d+[^:#]*#(%d+)') or '') or 0
end

-- The first `bytes` bytes of the stored value at `key` past its headers
-- section, which is read whole (a second read only for a message with
-- headers that the first cut); not a string when it is gone.
local function head_of(key, bytes)
  local value = redis.pcall('GETRANGE', key, 0, bytes - 1)
  if type(value) == 'string' then
    local n = headers_len(value)
    if n > 0 and #value == bytes then
      value = redis.pcall('GETRANGE', key, 0, bytes + n - 1)
    end
  end
  return value
end

-- Retries allowed for a message, from its stored value's header (read
-- without copying the payload); `default` when the payload is gone or
-- unreadable.
local function max_retries(key, default)
  local head = redis.pcall('GETRANGE', key, 0, HEADER_BYTES - 1)
  return tonumber(type(head) == 'string' and string.match(head, '^(%d+)[:;!=#/@]') or default)
end

-- The priority (1 to 9; 0, the default, is written as nothing) in a stored
-- value or its header; 0 for anything else (a payload gone: false).
local function priority_of(head)
  return type(head) == 'string' and tonumber(string.match(head, '^%d+[^:/@!]*!(%d+)') or '') or 0
end

-- The wire format version a queue's data is in (docs/wire-format.md): the
-- field 'format' of its totals hash, set by the first send (or fire) that
-- stores a message; missing while the queue has none. The caller passes
-- the version it speaks in ARGV (`speaks`): the scripts never name one of
-- their own. `found` is the field's value (false: missing), read by the
-- caller with its other reads of the hash. Fails, to be called before the
-- script's first write, when the queue's version is another, with an error
-- ("DQFORMAT ...") the caller reads as a format version error naming both.
local function check_format(found, speaks)
  if not string.match(speaks or '', '^%d+$') then
    error(redis.error_reply('ERR format version must be a decimal integer, not ' .. tostring(speaks)))
  end
  if found and found ~= speaks then
    error(redis.error_reply('DQFORMAT the queue is in wire format ' .. found
      .. ', this client speaks format ' .. speaks .. ' (docs/wire-format.md)'))
  end
end

-- A sharded queue's shard count is recorded in the field 'shards' of the
-- totals hash of its unsharded layout ({<name>}, docs/scaling.md), so every
-- client agrees on where its messages live. `found` is the field's value
-- (false: none recorded), `uses` the caller's count. Fails, to be called
-- before the script's first write, when a count is recorded and is another,
-- with an error ("DQSHARDS ...") the caller reads as a shard count error.
local function check_shards(found, uses)
  if found and found ~= uses then
    error(redis.error_reply('DQSHARDS the queue is spread over ' .. found
      .. ' shards, this client uses ' .. uses .. ' (docs/scaling.md)'))
  end
end

-- Due messages of priority 1 to 9 wait in one zset (those of priority 0 in
-- the ready list), scored so that ZRANGE gives the highest priority first
-- and, within one priority, the earliest due first: (10 - p) * PRIO_SPAN +
-- due ms. PRIO_SPAN = 2^42 ms (past the year 2100); every score stays an
-- exact double. The zset is touched only while the totals hash has the
-- field 'prios' (set by the first send of a priority), so a queue that
-- never uses priorities pays nothing (promote reads 'prios' in the HMGET
-- that reads 'format').
local PRIO_SPAN = 4398046511104
local function prio_score(p, due)
  return (10 - p) * PRIO_SPAN + due
end

-- The deadline (ms of Redis time) in a stored value or its header, false
-- when the message has none (it never expires).
local function expires_at(value)
  return tonumber(string.match(value, '^%d+[^:@]*@(%d+):') or '') or false
end

-- Moves a message to the dead zset (the dead letters, scored by time of death in
-- ms) and gives its payload the retention as TTL: only a dead letter's
-- payload ever has one, so a plain PEXPIRE (GT would skip a key without
-- TTL) cannot shorten a live message's life. `key` false: no payload to keep.
local function bury(dead, id, key, now, retention)
  redis.call('ZADD', dead, now, id)
  if key then
    redis.call('PEXPIRE', key, math.max(retention, 1))
  end
end

-- Adds n to a field of the queue's totals hash.
local function tally(totals, field, n)
  if n > 0 then
    redis.call('HINCRBY', totals, field, n)
  end
end

-- Field of the attempts hash (never an id: ids hold no whitespace) that is
-- set while the ready or retry list may hold a stale entry: the id of a
-- message cancelled there, whose entry stays until claim pops it. Only
-- then must claim check where a popped id lives. Claim deletes it once
-- both lists are empty.
local STALE = ' stale'

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

-- Wakes sleeping consumers: something becomes claimable in `ms` (0: now).
-- Only an optimisation: a lost wake-up costs at most one fetch_interval,
-- so a refused PUBLISH (an ACL user without the channel) is ignored rather
-- than failing a script whose writes are done.
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

-- The payload keys (`prefix .. id`) of `ids`.
local function payload_keys(prefix, ids)
  local keys = {}
  for i, id in ipairs(ids) do
    keys[i] = prefix .. id
  end
  return keys
end

-- Fails, before the script's first write, unless every key of `keys` (keys
-- the script builds rather than declares) is on this node: see
-- payloads_here, the same check for payloads.
local function keys_here(keys)
  if #keys > 0 then
    redis.call('EXISTS', KEYS[1], unpack(keys))
  end
end

-- Fails, before the script's first write, unless the payloads of `ids` are
-- all on this node; returns their keys. Scripts build payload keys from ids
-- they find rather than declare them, and Redis checks only declared keys
-- before it runs a script. While a cluster moves the queue's slot to
-- another node, a payload may already be on the other side: touching it
-- mid-script fails there, after earlier writes, on the old owner, and reads
-- as missing on the new one. One EXISTS together with KEYS[1] (here for
-- the script to run at all) applies Redis's multi-key rule up front:
-- outside a move it only counts; during one it fails the script with
-- nothing written, and the caller's retry finds the queue as it was.
local function payloads_here(prefix, ids)
  local keys = payload_keys(prefix, ids)
  keys_here(keys)
  return keys
end

-- Deletes the payloads `keys` (from payloads_here) and attempt records of `ids`.
local function forget(attempts, keys, ids)
  redis.call('DEL', unpack(keys))
  redis.call('HDEL', attempts, unpack(ids))
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

-- redis.call(command, key, ...) where `key` must hold type `want`: a read
-- that checks the type on the way, failing as check_types does (naming the
-- key) when it is another. A key read before a script's first write needs
-- no TYPE call of its own.
local function checked(want, command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    check_types(key, want)
    error(reply)
  end
  return reply
end

-- The due time of the earliest pending message, false when there is none.
local function head_due(pending)
  return checked('zset', 'ZRANGE', pending, 0, 0, 'WITHSCORES')[2] or false
end

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

-- The window markers of `ids` ("<prefix><id>", docs/dedup.md) and what
-- they hold: {keys, values}; none, and nothing read, while the totals
-- hash `totals` lacks 'markers' (set by the first send that stores a
-- marker), so a queue that never used them pays one HEXISTS. One MGET with KEYS[1], as payloads_here's
-- EXISTS, so that while a cluster moves the queue's slot the script fails
-- here, before its first write, rather than half-way.
local function markers_of(prefix, ids, totals)
  if redis.call('HEXISTS', totals, 'markers') == 0 then
    -- No send ever wrote a marker here: nothing to read.
    return {{}, {}}
  end
  local keys = payload_keys(prefix, ids)
  if #keys == 0 then
    return {keys, {}}
  end
  local values = redis.call('MGET', KEYS[1], unpack(keys))
  table.remove(values, 1)
  return {keys, values}
end

-- Starts the window of a marker whose message just finished (acked,
-- cancelled or dead). A unique_for marker holds its window in ms and has
-- no TTL while its message is live: it now expires that long from now. A
-- throttle marker ('t') keeps the TTL its send gave it. `value` is what
-- the marker holds (false or an error reply: none).
local function start_window(key, value)
  local ms = tonumber(type(value) == 'string' and value or '')
  if ms then
    redis.call('PEXPIRE', key, ms)
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

-- Groups (docs/groups.md). A message sent with a group carries it in its
-- header ("=<group>" after the priority); group names are 1 to 64 ASCII
-- letters, digits, '-', '_' and '.', so the header stays parseable. Its
-- keys all start with the queue's group prefix `gp` ("<queue keys>:g"):
--   gp .. 'ring'    zset: the groups that may start a message now, in turn
--                   order (score: position; the member '' stands for the
--                   messages without a group, as one more group)
--   gp .. 'wait'    zset: groups held back until a time (ms of Redis time):
--                   an ordered group whose failed message waits its retry,
--                   a group at its rate until its window lets one more start
--   gp .. 'active'  hash: group -> its messages in processing
--   gp .. 'paused'  hash: group -> 1 while paused
--   gp .. 'limits'  hash: group -> its concurrency; field '' the default
--   gp .. 'rates'   hash: group -> its rate "<n> <period ms>"; field '' the
--                   default (claim.lua)
--   gp .. 'known'   zset: every group with due messages, messages in
--                   processing, a wait or a setting of its own, score 0
--                   (listed by list_groups.lua, in name order)
--   gp .. 'ready'   string: how many messages wait in the groups' zsets
--                   (stats counts them as ready; group_ready)
--   gp .. ':' .. group .. ':ready'  zset: the group's due messages, scored
--                   as the priority zset (prio_score), so priority first,
--                   then due order
--   gp .. ':' .. group .. ':rate'  string: the group's recent leases under
--                   its rate, as the totals' 'rate_used' (TTL: two periods)
-- A group is in the ring exactly when it has due messages, is not paused,
-- is under its concurrency and not waiting (its rate is checked by claim,
-- which sends a group at its rate to wait); claim drops a member that no
-- longer qualifies (a limit lowered since), so the rule is kept lazily
-- where it is cheap and exactly where it matters. Redis deletes an empty
-- zset or hash, and 'active' loses a group's field at 0: an idle group
-- leaves no key.
--
-- What promote counts for a group's first message in a call, against 1 for
-- each message: its ZADD and ring check cost about that many plain moves,
-- so a batch over many groups is cut as short as a plain one takes.
local GROUP_MOVE_COST = 8

-- Most ring members one claim reads: a member costs a few calls on its
-- group's keys, so 64 keep the longest claim over 100,000 groups within a
-- few ms; the request is shared among them (docs/groups.md).
local GROUP_TURNS = 64

-- A claim's budget once the queue has groups: 1 a message leased and
-- GROUP_TURN_COST more a ring member served (its ZCARD, ZRANGE,
-- ZREMRANGEBYRANK and ring moves cost about two leases), so a claim over
-- 64 groups leases at most 128 messages and one over a single group 254:
-- as short as a plain claim of the consumer's largest request (256).
local GROUP_CLAIM = 256
local GROUP_TURN_COST = 2

-- Most known groups a listing of the ready state walks (list.lua), in name
-- order: each costs a ZCARD, so a page past them is not reached.
local GROUPS_LISTED = 1000

-- Fails before any write when a queue-wide group key holds another type,
-- or is on another node while a cluster moves the queue's slot: the group
-- keys are built, not declared, so one EXISTS with KEYS[1] fails then (as
-- payloads_here's), where a lone read would find the key missing.
local function check_group_types(gp)
  local keys = {gp .. 'ring', 'zset', gp .. 'wait', 'zset', gp .. 'known', 'zset', gp .. 'ready', 'string',
    gp .. 'active', 'hash', gp .. 'paused', 'hash', gp .. 'limits', 'hash', gp .. 'rates', 'hash'}
  local names = {KEYS[1]}
  for i = 1, #keys, 2 do
    names[#names + 1] = keys[i]
  end
  redis.call('EXISTS', unpack(names))
  check_types(unpack(keys))
end

-- The group in a stored value or its header; false for none (or a payload gone).
local function group_of(head)
  return type(head) == 'string' and string.match(head, '^%d+[^:/@=#]*=([%w%-_%.]+)[#/@:]') or false
end

-- The due messages of group g.
local function group_list(gp, g)
  return gp .. ':' .. g .. ':ready'
end

-- Group g's recent leases under its rate.
local function group_rate_key(gp, g)
  return gp .. ':' .. g .. ':rate'
end

-- A group's concurrency (its own, else the queue's default); nil: no limit.
-- A group of concurrency 1 is ordered: one message at a time, and a failed
-- one keeps its place at the head (group_return).
local function group_limit(gp, g)
  local own = redis.call('HMGET', gp .. 'limits', g, '')
  return tonumber(own[1] or own[2] or '')
end

-- Puts member g at the ring's tail.
local function ring_push(gp, g)
  local last = redis.call('ZRANGE', gp .. 'ring', -1, -1, 'WITHSCORES')[2]
  redis.call('ZADD', gp .. 'ring', (tonumber(last) or 0) + 1, g)
end

-- Puts group g in the ring when it qualifies (above) and is not there
-- yet; true when it did (the caller publishes a wake-up: a consumer may
-- start one of its messages now).
local function group_wake(gp, g)
  if redis.call('ZSCORE', gp .. 'ring', g) or redis.call('ZSCORE', gp .. 'wait', g)
    or redis.call('EXISTS', group_list(gp, g)) == 0 or redis.call('HEXISTS', gp .. 'paused', g) == 1 then
    return false
  end
  local limit = group_limit(gp, g)
  if limit and tonumber(redis.call('HGET', gp .. 'active', g) or '0') >= limit then
    return false
  end
  ring_push(gp, g)
  return true
end

-- group_wake for many groups, each with due messages now, in a few calls
-- whatever their number (promote's batch).
local function groups_wake(gp, groups)
  if #groups == 0 then
    return
  end
  local in_ring = redis.call('ZMSCORE', gp .. 'ring', unpack(groups))
  local waiting = redis.call('ZMSCORE', gp .. 'wait', unpack(groups))
  local paused = redis.call('HMGET', gp .. 'paused', unpack(groups))
  local active = redis.call('HMGET', gp .. 'active', unpack(groups))
  local limits = redis.call('HMGET', gp .. 'limits', '', unpack(groups))
  local last = tonumber(redis.call('ZRANGE', gp .. 'ring', -1, -1, 'WITHSCORES')[2]) or 0
  local entries = {}
  for i, g in ipairs(groups) do
    local limit = tonumber(limits[i + 1] or limits[1] or '')
    if not (in_ring[i] or waiting[i] or paused[i] or (limit and tonumber(active[i] or '0') >= limit)) then
      last = last + 1
      entries[#entries + 1] = last
      entries[#entries + 1] = g
    end
  end
  if #entries > 0 then
    redis.call('ZADD', gp .. 'ring', unpack(entries))
  end
end

-- Adds n (negative: takes) to group g's count in processing; the field
-- goes at 0.
local function group_active(gp, g, n)
  if n ~= 0 and redis.call('HINCRBY', gp .. 'active', g, n) <= 0 then
    redis.call('HDEL', gp .. 'active', g)
  end
end

-- The due time (ms) of the delivery a message's attempt record or else its
-- header names: where it queues in its group.
local function due_of(head, record_due)
  if record_due then
    return record_due
  end
  local sent, delay = string.match(type(head) == 'string' and head or '', '^%d+[^:/]*/(%d+)%+(%d+)')
  return sent and tonumber(sent) + tonumber(delay) or 0
end

-- Adds n (negative: takes) to the count of messages waiting in the
-- groups' zsets; the key goes at 0.
local function group_ready(gp, n)
  if n ~= 0 and redis.call('INCRBY', gp .. 'ready', n) <= 0 then
    redis.call('DEL', gp .. 'ready')
  end
end

-- Adds `entries` (score, id pairs) to group g's zset, counted; g is known.
local function group_add(gp, g, entries)
  group_ready(gp, redis.call('ZADD', group_list(gp, g), unpack(entries)))
  redis.call('ZADD', gp .. 'known', 0, g)
end

-- Whether nothing of group g is left: no due message, none in
-- processing, no wait and no setting of its own.
local function group_idle(gp, g)
  return redis.call('EXISTS', group_list(gp, g)) == 0 and redis.call('HEXISTS', gp .. 'active', g) == 0
    and not redis.call('ZSCORE', gp .. 'wait', g) and redis.call('HEXISTS', gp .. 'paused', g) == 0
    and redis.call('HEXISTS', gp .. 'limits', g) == 0 and redis.call('HEXISTS', gp .. 'rates', g) == 0
end

-- Forgets group g (drops it from 'known') once it is idle.
local function group_forget_idle(gp, g)
  if group_idle(gp, g) then
    redis.call('ZREM', gp .. 'known', g)
  end
end

-- Puts message `id` of group g (header `head`) back in its group after a
-- delivery that did not finish (failed, deferred, timed out, released),
-- by priority then `due`. In an ordered group (`ordered`: concurrency 1)
-- it stays the head: scored by `due` alone, below every prio_score
-- (PRIO_SPAN and up), so neither a message sent since, of any priority,
-- nor one due before this message's retry passes it.
local function group_return(gp, g, id, head, due, ordered)
  group_add(gp, g, {ordered and due or prio_score(priority_of(head), due), id})
end

-- Queues a message of group g in its group, at score prio_score(p, due),
-- and puts the group in the ring when it qualifies.
local function group_enqueue(gp, g, id, p, due)
  group_add(gp, g, {prio_score(p, due), id})
  group_wake(gp, g)
end

-- Fails before any write when the zset of a group in `groups` holds
-- another type or is on another node.
local function check_group_lists(gp, groups)
  if #groups == 0 then
    return
  end
  local keys, names = {}, {KEYS[1]}
  for _, g in ipairs(groups) do
    keys[#keys + 1], keys[#keys + 2] = group_list(gp, g), 'zset'
    names[#names + 1] = group_list(gp, g)
  end
  -- The EXISTS of check_group_types, for these keys.
  redis.call('EXISTS', unpack(names))
  check_types(unpack(keys))
end

-- Queues due messages in their groups: grouped[g] holds score, id pairs of
-- group g, `groups` the groups in the order they first appear; counted,
-- known, and each group put in the ring when it qualifies, in a few calls
-- per group whatever the number of messages.
local function groups_add(gp, grouped, groups)
  local added, known = 0, {}
  for _, g in ipairs(groups) do
    added = added + redis.call('ZADD', group_list(gp, g), unpack(grouped[g]))
    known[#known + 1] = 0
    known[#known + 1] = g
  end
  group_ready(gp, added)
  redis.call('ZADD', gp .. 'known', unpack(known))
  groups_wake(gp, groups)
end

-- The ms until the earliest waiting group's wait is over (0: over
-- already), false when none waits.
local function group_wait_ms(gp, now)
  local next = redis.call('ZRANGE', gp .. 'wait', 0, 0, 'WITHSCORES')[2]
  return next and math.max(0, tonumber(next) - now) or false
end

-- Moves the groups whose wait is over (at most MAX_LIMIT) back to the
-- ring, and forgets those with nothing left (their messages cancelled
-- while they waited: the cancel could not forget a waiting group); the
-- ms until the next one's is over (group_wait_ms), and how many went
-- back to the ring.
local function groups_due(gp, now)
  local over = redis.call('ZRANGE', gp .. 'wait', '-inf', now, 'BYSCORE', 'LIMIT', 0, MAX_LIMIT)
  local woken = 0
  if #over > 0 then
    redis.call('ZREM', gp .. 'wait', unpack(over))
    for _, g in ipairs(over) do
      woken = woken + (group_wake(gp, g) and 1 or 0)
      group_forget_idle(gp, g)
    end
  end
  return group_wait_ms(gp, now), woken
end

-- The groups of the messages at `keys` (payload keys): {group, how many}
-- pairs, in the order the groups first appear.
local function groups_of(keys)
  local counts, at = {}, {}
  for _, key in ipairs(keys) do
    local g = group_of(redis.pcall('GETRANGE', key, 0, HEADER_BYTES - 1))
    if g and at[g] then
      counts[at[g]][2] = counts[at[g]][2] + 1
    elseif g then
      counts[#counts + 1], at[g] = {g, 1}, #counts + 1
    end
  end
  return counts
end

-- Messages of groups left processing (`counts`, from groups_of): each
-- group's count goes down and it goes back to the ring when it may start
-- another; true when any did (group_wake).
local function groups_finished(gp, counts)
  local back = false
  for _, c in ipairs(counts) do
    group_active(gp, c[1], -c[2])
    back = group_wake(gp, c[1]) or back
    group_forget_idle(gp, c[1])
  end
  return back
end

-- Flows (docs/workflows.md). A message may wait for others (its children)
-- before it becomes due: its parent keys live with it, in its queue's slot,
-- under the queue's base B ("<prefix>{<name>}:", the msg prefix without
-- its "m:"):
--   B .. 'flow:waiting'     zset: parents waiting for children, scored by
--                           their own due time (ms)
--   B .. 'deps:' .. id      set: the children parent id still waits for,
--                           each "<child's base> <child id>"
--   B .. 'children:' .. id  hash: its finished children, "<child's base>
--                           <child id>" -> "<outcome><result bytes>"
--   B .. 'outbox'           zset: completions recorded here for parents
--                           elsewhere, "<outcome> <child id> <link>", scored
--                           by when (ms); and "x <parent id>": a cancelled
--                           parent whose children are still to be cancelled
--   B .. 'parents'          hash: child id -> its links, one a line, each
--                           "<policy> <parent's base> <parent id>" (policy:
--                           'f' fail, 'i' ignore, 'w' wait)
-- Outcomes: 'a' acked (or unknown when linked), 'd' dead, 'c' cancelled or
-- deleted. Every script touches these only while the totals have 'flows'
-- (set by the first parent sent or child linked), so a queue without flows
-- pays one HGET per call (a command every ACL role of docs/scaling.md may
-- run). Ids, bases and policies hold no whitespace, so a space separates
-- the parts and a newline the links.
--
-- The base of a queue's keys, from a msg key of `id` (or the msg prefix, id '').
local function flow_base(msg_key, id)
  return string.sub(msg_key, 1, #msg_key - #id - 2)
end

-- Whether `flows` (the totals' field 'flows', read by the caller: one
-- HGET, all a queue without flows pays) is set, and if so fails, before the
-- script's first write, unless the keys flow_done writes are on this node
-- (keys_here): the parents hash, the outbox, and the children hashes of
-- `deleted`, the ids whose payloads go.
local function flows_here(flows, base, deleted)
  if not flows then
    return false
  end
  local keys = {base .. 'parents', base .. 'outbox'}
  for _, id in ipairs(deleted) do
    keys[#keys + 1] = base .. 'children:' .. id
  end
  keys_here(keys)
  return true
end

-- Records that `ids` finished with `outcome`: for each link of each of them
-- an outbox entry, which the relay delivers to the parent's slot. A dead
-- child keeps its 'w' (wait) links: requeued, it may still finish them.
-- `deleted`: their payloads are gone, so their own children's results go
-- too. Nothing unless `flows` (from flows_here, called before the script's
-- first write). O(1) calls per batch plus O(links). Returns the set of ids
-- that recorded an entry.
local function flow_done(flows, base, ids, outcome, deleted)
  local recorded = {}
  if #ids == 0 or not flows then
    return recorded
  end
  local parents, now = base .. 'parents', now_ms()
  local links = redis.call('HMGET', parents, unpack(ids))
  local entries, gone, children = {}, {}, {}
  for i, id in ipairs(ids) do
    children[i] = base .. 'children:' .. id
    if links[i] then
      local kept, all = {}, 0
      for link in string.gmatch(links[i], '[^\n]+') do
        all = all + 1
        if outcome == 'd' and string.sub(link, 1, 1) == 'w' then
          kept[#kept + 1] = link
        else
          entries[#entries + 1] = now
          entries[#entries + 1] = outcome .. ' ' .. id .. ' ' .. link
          recorded[id] = true
        end
      end
      if #kept == 0 then
        gone[#gone + 1] = id
      elseif #kept < all then
        redis.call('HSET', parents, id, table.concat(kept, '\n'))
      end
    end
  end
  if #entries > 0 then
    redis.call('ZADD', base .. 'outbox', unpack(entries))
  end
  if #gone > 0 then
    redis.call('HDEL', parents, unpack(gone))
  end
  if deleted then
    -- A children hash grows with the parent's children (up to a million):
    -- UNLINK frees a big one off Redis's main thread, so this stays O(1).
    redis.call('UNLINK', unpack(children))
  end
  return recorded
end
