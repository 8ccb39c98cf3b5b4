#!lua flags=allow-oom
--[[ outbox: reads or drops a queue's outbox entries (docs/workflows.md)
The relay reads the oldest entries, delivers them to the parents' slots
(flow_complete.lua, or cancel.lua for each child of a cancelled parent),
then drops them: an entry is delivered at least once, and a relay that
crashed in between leaves it for the next.

KEYS[1] outbox zset
ARGV[1] msg key prefix   ARGV[2] result key prefix   ARGV[3] mode
mode 'read': ARGV[4] limit (1 to 1000), ARGV[5] byte budget: most bytes
of results one call reads (the first entry is read whatever its result's
size). Returns 1 when entries may be left after those it read (it
stopped at the limit or the budget), else 0; then the oldest entries,
each followed by one value: for a completion of an acked child ("a
<child id> <link>") its result string (false: none, or no longer kept),
for a cancelled parent ("x <parent id>") up to 100 of the children it
still waits for (an array, empty once none is left), false otherwise.
mode 'drop': ARGV[4..] per entry, 2 values: the entry, then the children
of a cancelled parent that were cancelled (space separated; '' for any
other entry). Those leave the parent's set; the entry goes once nothing
is left in it. Returns the number of entries dropped.
The result strings and deps sets it reads or writes are built, not
declared: one EXISTS touches them before it reads them (a result not yet
moved would read as missing) or writes, so during a slot migration it
fails with nothing read or written (docs/design.md §2).
Idempotent: a re-read reads the same; a re-run drop finds the entries
gone and drops nothing.
Complexity: read O(log N + M) with M = entries, one STRLEN and GET of a
result per acked completion (at most 1000, and at most max(ARGV[5], one
result) bytes) and SRANDMEMBER of 100 per cancelled parent; drop
O(M log N).
]]
--- @include "args"
--- @include "checks"
--- @include "flows"
check_types(KEYS[1], 'zset')
local base = flow_base(ARGV[1], '')
if ARGV[3] == 'read' then
  local limit, budget = limit_arg(4), tonumber(ARGV[5])
  if not budget or budget < 1 then
    error(redis.error_reply('ERR the byte budget must be a positive number, not ' .. tostring(ARGV[5])))
  end
  local entries, keys, built = redis.call('ZRANGE', KEYS[1], 0, limit - 1), {}, {}
  for i, entry in ipairs(entries) do
    local kind, id = string.match(entry, '^(%a) (%S+)')
    keys[i] = (kind == 'a' and ARGV[2] .. id) or (kind == 'x' and base .. 'deps:' .. id) or false
    built[#built + 1] = keys[i] or nil
  end
  -- A result or set not yet moved would read as missing (keys_here).
  keys_here(built)
  local out, bytes = {#entries == limit and 1 or 0}, 0
  for i, entry in ipairs(entries) do
    local kind = string.sub(entry, 1, 1)
    if kind == 'a' then
      -- A result read into Lua costs Redis time by the byte: the read
      -- stops before the one that would pass the budget (the next read
      -- starts there).
      bytes = bytes + redis.call('STRLEN', keys[i])
      if i > 1 and bytes > budget then
        out[1] = 1
        break
      end
    end
    out[#out + 1] = entry
    if kind == 'a' then
      out[#out + 1] = redis.call('GET', keys[i])
    elseif kind == 'x' then
      out[#out + 1] = redis.call('SRANDMEMBER', keys[i], 100)
    else
      out[#out + 1] = false
    end
  end
  return out
elseif ARGV[3] ~= 'drop' then
  error(redis.error_reply('ERR mode must be read or drop, not ' .. tostring(ARGV[3])))
end
local sets = {}
for i = 4, #ARGV - 1, 2 do
  local id = string.match(ARGV[i], '^x (%S+)$')
  if id then
    sets[#sets + 1] = base .. 'deps:' .. id
  end
end
keys_here(sets)
local dropped = {}
for i = 4, #ARGV - 1, 2 do
  local entry, done = ARGV[i], ARGV[i + 1]
  local id = string.match(entry, '^x (%S+)$')
  local deps = id and base .. 'deps:' .. id
  if deps and done ~= '' then
    local members = {}
    for member in string.gmatch(done, '%S+ %S+') do
      members[#members + 1] = member
    end
    redis.call('SREM', deps, unpack(members))
  end
  if not deps or redis.call('EXISTS', deps) == 0 then
    dropped[#dropped + 1] = entry
  end
end
if #dropped == 0 then
  return 0
end
return redis.call('ZREM', KEYS[1], unpack(dropped))
