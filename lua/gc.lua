#!lua flags=allow-oom
--[[ gc: dead -> (deleted)
Deletes dead messages (payload, attempt record, dead entry), at most
ARGV[2] per call: with ids given, those of them that are dead; else the
ones dead longer than the retention, then the oldest beyond the size cap.

KEYS[1] dead zset   KEYS[2] attempts hash   KEYS[3] totals hash
ARGV[1] msg key prefix   ARGV[2] limit (1 to 1000)
ARGV[3] retention ms (0: every dead message)   ARGV[4] most dead messages kept
ARGV[5..] ids (optional)
Their progress and log keys (written by their last deliveries,
docs/results.md) go with them; built from the msg key prefix's base
("<base>progress:<id>", "<base>log:<id>"), they are touched with one
EXISTS before the first write (docs/design.md §2).
While the totals have 'flows', a deleted child still linked to a parent
(a 'w' link: its death did not finish the parent) records 'c' in the
outbox for it, and a deleted parent's children results go (flow_done in
include/flows.lua, docs/workflows.md).
Returns the number of messages deleted.
Idempotent: a re-run deletes only what is still in dead.
Complexity: O(log N + M) with M = deleted, with flows O(links) more.
]]
--- @include "args"
--- @include "checks"
--- @include "clock"
--- @include "finish"
--- @include "flows"
check_types(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash')
local limit = limit_arg(2)
local ids
if #ARGV >= 5 then
  ids = members_of(KEYS[1], 5, limit)
else
  ids = redis.call('ZRANGE', KEYS[1], '-inf', now_ms() - tonumber(ARGV[3]), 'BYSCORE', 'LIMIT', 0, limit)
  local over = redis.call('ZCARD', KEYS[1]) - #ids - tonumber(ARGV[4])
  if over > 0 and #ids < limit then
    local oldest = redis.call('ZRANGE', KEYS[1], #ids, #ids + math.min(over, limit - #ids) - 1)
    for _, id in ipairs(oldest) do
      ids[#ids + 1] = id
    end
  end
end
if #ids == 0 then
  return 0
end
local keys = payloads_here(ARGV[1], ids)
local base = flow_base(ARGV[1], '')
local notes = {}
for _, id in ipairs(ids) do
  notes[#notes + 1] = base .. 'progress:' .. id
  notes[#notes + 1] = base .. 'log:' .. id
end
keys_here(notes)
local flows = flows_here(redis.call('HGET', KEYS[3], 'flows'), base, ids)
redis.call('ZREM', KEYS[1], unpack(ids))
forget(KEYS[2], keys, ids)
redis.call('DEL', unpack(notes))
flow_done(flows, base, ids, 'c', true)
return #ids
