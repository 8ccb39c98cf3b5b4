#!lua flags=allow-oom
--[[ outbox: drops the outbox entries the relay delivered (docs/workflows.md)
The entries relay.lua left (completions for parents in other slots,
cancelled parents) go once the relay delivered them to the parents' slots
(flow_complete.lua, or cancel.lua for each child of a cancelled parent):
an entry is delivered at least once, and a relay that crashed in between
leaves it for the next.

KEYS[1] outbox zset
ARGV[1] msg key prefix
ARGV[2..] per entry, 2 values: the entry, then the children of a
cancelled parent that were cancelled (space separated; '' for any other
entry). Those leave the parent's set; the entry goes once nothing is left
in it.
Returns the number of entries dropped.
The deps sets it writes are built, not declared: one EXISTS touches them
before it writes, so during a slot migration it fails with nothing
written (docs/design.md §2).
Idempotent: a re-run finds the entries gone and drops nothing.
Complexity: O(M log N) with M = entries.
]]
--- @include "checks"
--- @include "flows"
check_types(KEYS[1], 'zset')
local base = flow_base(ARGV[1], '')
local sets = {}
for i = 2, #ARGV - 1, 2 do
  local id = string.match(ARGV[i], '^x (%S+)$')
  if id then
    sets[#sets + 1] = base .. 'deps:' .. id
  end
end
keys_here(sets)
local dropped = {}
for i = 2, #ARGV - 1, 2 do
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
