#!lua flags=no-writes
--[[ flow_status: read-only: where a parent's children stand, taken atomically
What a cohort's status (docs/workflows.md, Cohorts) reads of its callback,
a parent: whether it still waits, how many children it still waits for,
how many finished each way, and whether its cohort is still open.

KEYS[1] waiting zset
ARGV[1] msg key prefix   ARGV[2] parent id
ARGV[3] the member that keeps it open ("<base> ", a cohort's, '' none)
Returns {waiting (1 or 0), stored (1 if its payload exists), children
left (the open member not counted), acked, dead, cancelled, open (1 or 0)}.
Its deps set, children hash and payload are built, not declared: one
EXISTS touches them first, so during a slot migration it fails rather
than read half of them (docs/design.md §2).
Idempotent: read-only.
Complexity: O(1).
]]
--- @include "checks"
--- @include "flows"
local base, id = flow_base(ARGV[1], ''), ARGV[2]
local deps, children = base .. 'deps:' .. id, base .. 'children:' .. id
-- Built keys not yet moved would read as missing (keys_here).
keys_here({deps, children, ARGV[1] .. id})
local open = ARGV[3] ~= '' and checked('set', 'SISMEMBER', deps, ARGV[3]) or 0
local counts = checked('hash', 'HMGET', children, ' a', ' d', ' c')
return {
  checked('zset', 'ZSCORE', KEYS[1], id) and 1 or 0,
  redis.call('EXISTS', ARGV[1] .. id),
  redis.call('SCARD', deps) - open,
  tonumber(counts[1] or 0), tonumber(counts[2] or 0), tonumber(counts[3] or 0),
  open,
}
