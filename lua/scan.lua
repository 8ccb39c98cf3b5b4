#!lua flags=no-writes
--[[ scan: read-only: one page of the ids held by one of the queue's keys,
for the integrity check. Pages of a key that changes meanwhile may miss or
repeat ids; the check confirms what it finds with `inspect`.

KEYS[1] pending zset   KEYS[2] ready list   KEYS[3] processing zset
KEYS[4] retry list     KEYS[5] dead zset KEYS[6] attempts hash
ARGV[1] what to page through: 1 to 6 for KEYS[n], 7 for payload keys,
8 for marker keys without TTL (unique_for markers of live messages,
docs/dedup.md); 11, 12, 13 for result, progress and log keys without TTL
(always an anomaly: every script that writes them sets one)
ARGV[2] cursor, "0" to start   ARGV[3] page size (1 to 1000)
ARGV[4] msg key prefix   ARGV[5] the same, escaped as a SCAN pattern
ARGV[6] marker key prefix   ARGV[7] the same, escaped as a SCAN pattern
ARGV[8] group key prefix   ARGV[9] the same, escaped as a SCAN pattern
(docs/groups.md); ARGV[1] 9 pages through the known groups and returns
those with nothing in them (no due message, none in processing, no wait,
no pause, limit or rate of their own), 10 through the groups' zsets and
the counts in processing and returns the groups they name that are not
known: each group checked in the call that reads it (every script that
empties a group forgets it, every one that fills it makes it known).
ARGV[10], ARGV[11]; ARGV[12], ARGV[13]; ARGV[14], ARGV[15]: the result,
progress and log key prefixes, each with its SCAN pattern (11, 12, 13)
ARGV[16] the queue's key base ("<prefix>{<name>}:") as a SCAN pattern,
ARGV[17] ms: flow keys (docs/workflows.md), each judged in the call that
reads it: 14 pages through the parents' deps sets and returns the parents
not waiting (not in "<base>flow:waiting") whose cancel is not being relayed
(no "x <parent>" in "<base>outbox") and whose set has no TTL (one with a
TTL is a set whose parent is not sent yet: it goes on its own); 15 through the children hashes and
returns the parents not stored, 16 through the parents hash and returns
the children not stored, but those in the dead zset (their payload
expired: gc deletes those keys with them); 17 through the outbox entries recorded more
than ARGV[17] ms ago, returning each as "<age ms> <entry>".
Returns {next cursor ("0": done), id1, id2, ...}; for the attempts hash the
ids are its fields, for payload and marker keys the ids their keys end with,
for 9 and 10 group names.
Idempotent: reads only.
Complexity: O(page) per call (O(log N + page) for zsets, O(offset + page) for lists;
a PTTL per marker, result, progress or log key; O(log G) per group, G =
groups, for 9 and 10; two ZSCOREs (and a PTTL for a deps set not
waiting), or an EXISTS and a ZSCORE, per flow key or link, 14 to 16;
O(log N + page) for 17).
]]
--- @include "args"
--- @include "checks"
--- @include "clock"
--- @include "flows"
--- @include "groups"
check_types(KEYS[1], 'zset', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'list', KEYS[5], 'zset',
  KEYS[6], 'hash')
local what, cursor, size = tonumber(ARGV[1]), ARGV[2], limit_arg(3)
local key = KEYS[what]
local out, page = {}, nil
local base = flow_base(ARGV[4], '')
-- Not stored, and not dead (gc deletes a dead one's flow keys with it).
local function gone(id)
  return redis.call('EXISTS', ARGV[4] .. id) == 0 and not redis.call('ZSCORE', KEYS[5], id)
end
if what == 14 or what == 15 then
  local kind = what == 14 and 'deps:' or 'children:'
  local reply = redis.call('SCAN', cursor, 'MATCH', ARGV[16] .. kind .. '*', 'COUNT', size)
  out[1], page = reply[1], {}
  for _, k in ipairs(reply[2]) do
    local id = string.sub(k, #base + #kind + 1)
    local orphan
    if what == 14 then
      orphan = not checked('zset', 'ZSCORE', base .. 'flow:waiting', id)
        and not checked('zset', 'ZSCORE', base .. 'outbox', 'x ' .. id)
        and redis.call('PTTL', k) == -1
    else
      orphan = gone(id)
    end
    page[#page + 1] = orphan and id or nil
  end
elseif what == 16 then
  local reply = checked('hash', 'HSCAN', base .. 'parents', cursor, 'COUNT', size)
  out[1], page = reply[1], {}
  for i = 1, #reply[2], 2 do
    local id = reply[2][i]
    page[#page + 1] = gone(id) and id or nil
  end
elseif what == 17 then
  local from, now = tonumber(cursor), now_ms()
  local old = checked('zset', 'ZRANGE', base .. 'outbox', '-inf', now - tonumber(ARGV[17]), 'BYSCORE', 'LIMIT',
    from, size, 'WITHSCORES')
  out[1], page = #old == 2 * size and tostring(from + size) or '0', {}
  for i = 1, #old, 2 do
    page[#page + 1] = string.format('%d', now - tonumber(old[i + 1])) .. ' ' .. old[i]
  end
elseif what <= 5 then
  local from = tonumber(cursor)
  if what == 1 or what == 3 or what == 5 then
    page = redis.call('ZRANGE', key, from, from + size - 1)
  else
    page = redis.call('LRANGE', key, from, from + size - 1)
  end
  out[1] = #page == size and tostring(from + size) or '0'
elseif what == 6 then
  local reply = redis.call('HSCAN', key, cursor, 'COUNT', size)
  out[1], page = reply[1], {}
  for i = 1, #reply[2], 2 do
    page[#page + 1] = reply[2][i]
  end
elseif what == 9 then
  local gp, from = ARGV[8], tonumber(cursor)
  check_group_types(gp)
  page = {}
  local known = redis.call('ZRANGE', gp .. 'known', from, from + size - 1)
  out[1] = #known == size and tostring(from + size) or '0'
  for _, g in ipairs(known) do
    if group_idle(gp, g) then
      page[#page + 1] = g
    end
  end
elseif what == 10 then
  -- The cursor: "z<SCAN cursor>" through the zsets, then "a<HSCAN cursor>"
  -- through the counts in processing.
  local gp, names = ARGV[8], {}
  check_group_types(gp)
  local kind, at = string.sub(cursor, 1, 1), string.sub(cursor, 2)
  if kind ~= 'a' then
    local reply = redis.call('SCAN', kind == 'z' and at or '0', 'MATCH', ARGV[9] .. ':*:ready', 'COUNT', size)
    out[1] = reply[1] == '0' and 'a0' or 'z' .. reply[1]
    for _, k in ipairs(reply[2]) do
      names[#names + 1] = string.sub(k, #gp + 2, -7)
    end
  else
    local reply = redis.call('HSCAN', gp .. 'active', at, 'COUNT', size)
    out[1] = reply[1] == '0' and '0' or 'a' .. reply[1]
    for i = 1, #reply[2], 2 do
      names[#names + 1] = reply[2][i]
    end
  end
  page = {}
  for _, g in ipairs(names) do
    if not redis.call('ZSCORE', gp .. 'known', g) then
      page[#page + 1] = g
    end
  end
else
  -- 7 -> ARGV[4], 8 -> ARGV[6], 11 -> ARGV[10], 12 -> ARGV[12], 13 ->
  -- ARGV[14]; each pattern follows its prefix.
  local at = what <= 8 and 2 * what - 10 or 2 * what - 12
  local prefix = ARGV[at]
  local reply = redis.call('SCAN', cursor, 'MATCH', ARGV[at + 1] .. '*', 'COUNT', size)
  out[1], page = reply[1], {}
  for _, k in ipairs(reply[2]) do
    if what == 7 or redis.call('PTTL', k) == -1 then
      page[#page + 1] = string.sub(k, #prefix + 1)
    end
  end
end
for _, id in ipairs(page) do
  out[#out + 1] = id
end
return out
