#!lua flags=no-writes
--[[ inspect: read-only: where each of a batch of ids lives, taken
atomically.

KEYS[1] pending zset   KEYS[2] ready list   KEYS[3] processing zset
KEYS[4] retry list     KEYS[5] dead zset KEYS[6] attempts hash
ARGV[1] msg key prefix   ARGV[2] priority zset   ARGV[3] group key prefix
ARGV[4] marker key prefix   ARGV[5..] ids
Returns {stale, then 9 values per id: pending score ("" if none), times in
ready (the list, plus 1 in the priority zset, looked up for a payload
with a priority, plus 1 in its group's zset, for a payload with a group), processing score ("" if none), times in retry, 1 if in dead, 1 if its
payload key exists, its attempt record ("" if none), 1 if its marker
exists without TTL (docs/dedup.md), 1 if in the waiting zset (a flow's
parent, docs/workflows.md; "<msg key prefix without m:>flow:waiting")}; stale is 1 when the
attempts hash carries the STALE mark.
Idempotent: reads only.
Complexity: O(M (log N + L)) with M = ids and L = the length of the ready
and retry lists (LPOS scans them); callers keep M small for long lists.
]]
--- @include "args"
--- @include "checks"
--- @include "flows"
--- @include "groups"
--- @include "header"
--- @include "records"
check_types(KEYS[1], 'zset', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'list', KEYS[5], 'zset',
  KEYS[6], 'hash')
local keys = payloads_here(ARGV[1], ids_of(5, 1))
local markers = payloads_here(ARGV[4], ids_of(5, 1))
local out = {redis.call('HEXISTS', KEYS[6], STALE)}
local waiting = flow_base(ARGV[1], '') .. 'flow:waiting'
keys_here({waiting})
for i = 5, #ARGV do
  local id = ARGV[i]
  local ready = #redis.call('LPOS', KEYS[2], id, 'COUNT', 0)
  local head = redis.pcall('GETRANGE', keys[i - 4], 0, HEADER_BYTES - 1)
  if priority_of(head) > 0 and checked('zset', 'ZSCORE', ARGV[2], id) then
    ready = ready + 1
  end
  local group = group_of(head)
  if group and checked('zset', 'ZSCORE', group_list(ARGV[3], group), id) then
    ready = ready + 1
  end
  out[#out + 1] = redis.call('ZSCORE', KEYS[1], id) or ''
  out[#out + 1] = ready
  out[#out + 1] = redis.call('ZSCORE', KEYS[3], id) or ''
  out[#out + 1] = #redis.call('LPOS', KEYS[4], id, 'COUNT', 0)
  out[#out + 1] = redis.call('ZSCORE', KEYS[5], id) and 1 or 0
  out[#out + 1] = redis.call('EXISTS', keys[i - 4])
  out[#out + 1] = redis.call('HGET', KEYS[6], id) or ''
  out[#out + 1] = redis.call('PTTL', markers[i - 4]) == -1 and 1 or 0
  out[#out + 1] = checked('zset', 'ZSCORE', waiting, id) and 1 or 0
end
return out
