#!lua flags=allow-oom
--[[ relay: outbox -> waiting parents of this slot (waiting -> ready | pending | dead), and the rest read
The relay's call on a queue's outbox (docs/workflows.md). It takes the
oldest entries: the completions of parents in this same slot (whose
base is this queue's) are applied as flow_complete applies those it is
given (complete_parents in include/completions.lua) and dropped, in this
call; the others are returned for the relay to deliver to the parents'
slots (flow_complete.lua, or cancel.lua for each child of a cancelled
parent) and then drop (outbox.lua): at least once, and a relay that
crashed in between leaves them for the next.

KEYS[1] outbox zset   KEYS[2] waiting zset   KEYS[3] pending zset
KEYS[4] dead zset   KEYS[5] attempts hash   KEYS[6] totals hash
ARGV[1] msg key prefix   ARGV[2] result key prefix   ARGV[3] wake-up channel
ARGV[4] dead-letter retention ms   ARGV[5] limit (1 to 1000): the oldest
entries it takes   ARGV[6] byte budget: most bytes of results one call
reads (the first entry is read whatever its result's size)
Returns {more, entries applied and dropped, parents made due, parents
moved to dead, parents removed}, more 1 when entries may be left after those it took (it stopped
at the limit or the budget) else 0; then the entries it left, each
followed by one value: for a completion of an acked child ("a <child id>
<link>") its result string (false: none, or no longer kept), for a
cancelled parent ("x <parent id>") up to 100 of the children it still
waits for (an array, empty once none is left), false otherwise.
Publishes as flow_complete does.
The result strings and deps sets it reads are built, not declared: one
EXISTS touches them before it reads them (a result not yet moved would
read as missing); complete_parents touches the keys it writes before its
first write, so during a slot migration it fails with nothing written
(docs/design.md §2).
Idempotent: an entry applied is dropped in the same call; one left is
read the same again until outbox.lua drops it.
Complexity: O(log N + M) with M = entries (at most 1000), one STRLEN and
GET of a result per acked completion (at most max(ARGV[6], one result)
bytes), SRANDMEMBER of 100 per cancelled parent, then flow_complete's
calls per parent of this slot and one ZREM.
]]
--- @include "args"
--- @include "checks"
--- @include "completions"
--- @include "flows"
check_types(KEYS[1], 'zset')
local limit, budget = limit_arg(5), tonumber(ARGV[6])
if not budget or budget < 1 then
  error(redis.error_reply('ERR the byte budget must be a positive number, not ' .. tostring(ARGV[6])))
end
local base = flow_base(ARGV[1], '')
local entries, keys, built = redis.call('ZRANGE', KEYS[1], 0, limit - 1), {}, {}
for i, entry in ipairs(entries) do
  local kind, id = string.match(entry, '^(%a) (%S+)')
  keys[i] = (kind == 'a' and ARGV[2] .. id) or (kind == 'x' and base .. 'deps:' .. id) or false
  built[#built + 1] = keys[i] or nil
end
-- A result or set not yet moved would read as missing (keys_here).
keys_here(built)
-- The reply's counts (set at the end), then the entries it leaves.
local out, more, bytes, list, applied = {0, 0, 0, 0, 0}, #entries == limit and 1 or 0, 0, {}, {}
-- What an entry for a parent here holds (a plain find, before the full
-- match, which only those entries pay).
local here = ' ' .. base .. ' '
for i, entry in ipairs(entries) do
  local kind = string.sub(entry, 1, 1)
  local value = false
  if kind == 'a' then
    -- A result read into Lua costs Redis time by the byte: the call stops
    -- before the one that would pass the budget (the next starts there).
    bytes = bytes + redis.call('STRLEN', keys[i])
    if i > 1 and bytes > budget then
      more = 1
      break
    end
    value = redis.call('GET', keys[i])
  elseif kind == 'x' then
    value = redis.call('SRANDMEMBER', keys[i], 100)
  end
  -- "<outcome> <child id> <policy> <parent's base> <parent id>"
  local child, policy, parent_base, parent
  if string.find(entry, here, 1, true) then
    child, policy, parent_base, parent = string.match(entry, '^%a (%S+) (%a) (%S+) (%S+)$')
  end
  if parent_base == base then
    list[#list + 1] = {parent, base .. ' ' .. child, kind .. policy, value or ''}
    applied[#applied + 1] = entry
  else
    out[#out + 1] = entry
    out[#out + 1] = value
  end
end
out[1] = more
if #list > 0 then
  local done = complete_parents({KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, ARGV[1], ARGV[3], tonumber(ARGV[4]), list)
  redis.call('ZREM', KEYS[1], unpack(applied))
  out[2], out[3], out[4], out[5] = #applied, done[2], done[3], done[4]
end
return out
