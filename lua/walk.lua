#!lua flags=no-writes
--[[ walk: read-only: one step of a walk through one state, in order, from
just after a cursor: a browse page, or a batch of a search (the messages
whose payload holds a text). The cursor is the last entry the previous
step read, so steps find their place again however the state changed.
A zset (pending, processing, dead) is walked in (score, id) order, the id
compared bytewise, and the next step starts strictly after (score, id):
an entry that stays in the zset with its score is read exactly once. A
list (ready, retry) is walked by position from the head; the cursor is
the position and id of the last entry read, found again at that position
or within the first position + 1000 entries (LPOS MAXLEN): claims pop
from the head, releases push there. An id found nowhere was popped with
everything before it: an ascending walk goes on from the head, a
descending one ends.

KEYS[1] pending zset   KEYS[2] ready list   KEYS[3] processing zset
KEYS[4] retry list     KEYS[5] dead zset KEYS[6] attempts hash
KEYS[7] totals hash
ARGV[1] state: 1 to 5 for KEYS[n]   ARGV[2] order: 1 ascending, 0 descending
ARGV[3] cursor: the score (zsets) or position from the head (lists) of the
last entry read, "" to start at the first   ARGV[4] the cursor's id
ARGV[5] entries to read (1 to 1000)   ARGV[6] matches to return (1 to 1000)
ARGV[7] msg key prefix   ARGV[8] bytes of each stored value to return (1 to 1000)
ARGV[9] text the payload must hold ("": every entry matches; an entry whose
id is the text is left out, the caller looks that id up itself)
ARGV[10] priority zset: once the totals have 'prios', state 2 (ready) is
the zset by rank, then the ready list (the order claim takes them), one
sequence of positions
ARGV[11] group key prefix: once the totals have 'groups', state 2 goes on
after those positions with the groups' due messages (docs/groups.md), group
by group in name order, each group's by rank (priority, then due order);
their cursor is "<group>/<score>" and the id, or "<group>/" and "" to go
on after group <group> (a step that visited MAX_LIMIT groups)
Returns {size of the state, entries read, next cursor ("": the walk has
reached the end of the state), its id, then 6 values per match: id, score
("" in lists and groups; as in `list`), attempt record ("" if none), the first ARGV[8]
bytes of its stored value past its headers section, which comes whole ("" if gone), its full length, its TTL ms}. It
stops after the entry that makes ARGV[6] matches. List entries whose
payload is gone (cancelled) or that live in another state are read but
never match. A search (ARGV[9] not empty) looks in the first SEARCH_BYTES
(131072) bytes of each payload, past its headers section: a text that
starts later is not found. It searches at most SEARCH_BYTES in one call:
it reads an entry after the first only while the bytes searched stay
within them, so a step over big payloads reads fewer entries and the walk
goes on from its cursor.
Idempotent: reads only.
Complexity: zsets O(log N + read) (a cursor whose entry left the zset:
O(log² N) to find its place); lists O(position + read); with a text, plus
at most SEARCH_BYTES of payloads searched (GETRANGE); the groups' part
O(log G + log N) per group visited, at most MAX_LIMIT (1000) groups a
step, G = known groups.
]]
--- @include "args"
--- @include "checks"
--- @include "groups"
--- @include "header"
--- @include "paging"
--- @include "records"
check_types(KEYS[1], 'zset', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'list', KEYS[5], 'zset',
  KEYS[6], 'hash', KEYS[7], 'hash')
local state, asc, at, after = tonumber(ARGV[1]), ARGV[2] == '1', ARGV[3], ARGV[4]
local read, want, bytes, text = limit_arg(5), limit_arg(6), limit_arg(8), ARGV[9]
local key, is_list = KEYS[state], state == 2 or state == 4
local fields = state == 2 and redis.call('HMGET', KEYS[7], 'prios', 'groups') or {}
local prio, gp = fields[1] and ARGV[10], fields[2] and ARGV[11]
if gp then
  check_group_types(gp)
end
local ranked = prio and checked('zset', 'ZCARD', prio) or 0
-- Positions 0 to size - 1; the groups' due messages come after them.
local size = redis.call(is_list and 'LLEN' or 'ZCARD', key) + ranked
local total = size + (gp and tonumber(redis.call('GET', gp .. 'ready') or '0') or 0)

-- Positions from..to of a list state; the ready state with priorities is
-- the zset's `ranked` entries, then the list.
local function list_range(from, to)
  local page = {}
  if from < ranked then
    page = redis.call('ZRANGE', prio, from, math.min(to, ranked - 1))
  end
  if to >= ranked then
    for _, id in ipairs(redis.call('LRANGE', key, math.max(from - ranked, 0), to - ranked)) do
      page[#page + 1] = id
    end
  end
  return page
end

-- Entries in walk order: {id, cursor (score, position or group/score)}.
local entries = {}

-- Adds the entries of positions from..to (none when from > to) in walk order.
local function add_positions(from, to)
  if from > to then
    return
  end
  local page = is_list and list_range(from, to) or redis.call('ZRANGE', key, from, to, 'WITHSCORES')
  local step, n = is_list and 1 or 2, #entries
  for i = 1, #page, step do
    entries[#entries + 1] = {page[i], is_list and tostring(from + (i - 1)) or page[i + 1]}
  end
  if not asc then
    for i = 1, math.floor((#entries - n) / 2) do
      entries[n + i], entries[#entries + 1 - i] = entries[#entries + 1 - i], entries[n + i]
    end
  end
end

-- Adds group g's entries of ranks first..last in walk order.
local function add_ranks(g, first, last)
  if first > last then
    return
  end
  local page = checked('zset', 'ZRANGE', group_list(gp, g), first, last, 'WITHSCORES')
  local from, to, by = 1, #page - 1, 2
  if not asc then
    from, to, by = #page - 1, 1, -2
  end
  for i = from, to, by do
    entries[#entries + 1] = {page[i], g .. '/' .. page[i + 1]}
  end
end

-- Adds the groups' due messages until there are read + 1 entries (one
-- more than the step reads: it tells whether the walk goes on), from just
-- after message `id` at `score` of group g ("": after all of group g; g
-- nil: from the first group), visiting at most MAX_LIMIT groups. Returns
-- whether the groups were read to their end, and the group it stopped
-- after when the visits ran out.
local function add_groups(g, score, id)
  if not gp then
    return true
  end
  local function room()
    return read + 1 - #entries
  end
  if g and score ~= '' then
    local first, last = ranks_around(group_list(gp, g), score, id)
    if asc then
      add_ranks(g, first, first + room() - 1)
    else
      add_ranks(g, math.max(last - room() + 1, 0), last)
    end
  end
  local visited = 0
  while room() > 0 do
    local batch = math.min(64, MAX_LIMIT - visited)
    local names = asc and redis.call('ZRANGEBYLEX', gp .. 'known', g and '(' .. g or '-', '+', 'LIMIT', 0, batch)
      or redis.call('ZREVRANGEBYLEX', gp .. 'known', g and '(' .. g or '+', '-', 'LIMIT', 0, batch)
    if #names == 0 then
      return true
    end
    for _, name in ipairs(names) do
      g, visited = name, visited + 1
      if asc then
        add_ranks(name, 0, room() - 1)
      else
        local n_in = checked('zset', 'ZCARD', group_list(gp, name))
        add_ranks(name, math.max(n_in - room(), 0), n_in - 1)
      end
      if room() <= 0 then
        return false
      end
      if visited >= MAX_LIMIT then
        return false, g
      end
    end
  end
  return false
end

-- Whether the entries read to the state's end, and where a step that
-- found nothing more to read in the groups' visits goes on.
local complete, tail = true, nil
-- A cursor in the groups' part (should the queue have none now, add_groups
-- finds that part over).
local g_at, g_score = string.match(at, '^([^/]*)/(.*)$')
if g_at then
  at = '/'
end
if at == '/' or (at == '' and not asc) then
  -- In the groups' part (descending, the walk starts there).
  complete, tail = add_groups(g_at, g_score or '', after)
  if complete and not asc then
    local from = math.max(size - math.max(read - #entries, 0), 0)
    add_positions(from, size - 1)
    complete = from == 0
  end
else
  -- The rank range to read: an ascending walk reads from `first` on, a
  -- descending one from `last` down.
  local first, last
  if at == '' then
    first, last = 0, size - 1
  elseif is_list then
    local pos = tonumber(at)
    if list_range(pos, pos)[1] ~= after then
      pos = prio and redis.call('ZRANK', prio, after)
      if not pos then
        pos = redis.call('LPOS', key, after, 'MAXLEN', math.max(tonumber(at) - ranked, 0) + 1 + MAX_LIMIT)
        pos = pos and pos + ranked
      end
    end
    if pos then
      first, last = pos + 1, pos - 1
    else
      first, last = 0, -1
    end
  else
    first, last = ranks_around(key, at, after)
  end
  if asc then
    local to = math.min(first + read, size) - 1
    add_positions(first, to)
    complete = to >= size - 1
    if complete then
      complete, tail = add_groups(nil, '', '')
    end
  else
    local from = math.max(last - read + 1, 0)
    add_positions(from, math.min(last, size - 1))
    complete = from == 0
  end
end
if #entries > read then
  -- The one read ahead: the walk goes on.
  entries[#entries] = nil
  complete = false
end

local ids = {}
for i, e in ipairs(entries) do
  ids[i] = e[1]
end
local keys = payloads_here(ARGV[7], ids)
local stale = is_list and redis.call('HEXISTS', KEYS[6], STALE) == 1
-- A search's cost grows with the bytes it searches (up to their number
-- times the text's length): bounded per call, so Redis serves others
-- between the calls of a search through big payloads.
local SEARCH_BYTES = 131072
local out, matches, done, searched = {total, 0, '', ''}, 0, 0, 0
for j, e in ipairs(entries) do
  local id, msg = e[1], keys[j]
  local len = redis.pcall('STRLEN', msg)
  if type(len) ~= 'number' then
    len = 0
  end
  local cost = text == '' and 0 or math.min(len, SEARCH_BYTES)
  if j > 1 and searched + cost > SEARCH_BYTES then
    break
  end
  searched = searched + cost
  done = j
  local value = head_of(msg, bytes)
  if type(value) ~= 'string' then
    value, len = '', 0
  end
  local moved = stale and (redis.call('ZSCORE', KEYS[1], id) or redis.call('ZSCORE', KEYS[5], id))
  local match = not (is_list and (len == 0 or moved))
  if match and text ~= '' then
    local header = string.find(value, ':', 1, true)
    match = id ~= text and header ~= nil
    if match then
      -- The payload's first byte, counted from 0.
      local from = header + headers_len(value)
      match = string.find(redis.call('GETRANGE', msg, from, from + SEARCH_BYTES - 1), text, 1, true) ~= nil
    end
  end
  if match then
    out[#out + 1] = id
    out[#out + 1] = is_list and '' or e[2]
    out[#out + 1] = redis.call('HGET', KEYS[6], id) or ''
    out[#out + 1] = string.sub(value, 1, bytes + headers_len(value))
    out[#out + 1] = len
    out[#out + 1] = redis.call('PTTL', msg)
    matches = matches + 1
    if matches == want then
      break
    end
  end
end
out[2] = done
-- The walk goes on after the last entry read unless that was the state's
-- last, or after the last group visited when that is further on.
if done == #entries and not complete and tail then
  out[3], out[4] = tail .. '/', ''
elseif done > 0 and not (done == #entries and complete) then
  out[3], out[4] = entries[done][2], entries[done][1]
end
return out
