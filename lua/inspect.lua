#!lua flags=no-writes
--[[ inspect: read-only: where each of a batch of ids lives, taken
atomically.

KEYS[1] pending zset   KEYS[2] ready list   KEYS[3] unack zset
KEYS[4] retry list     KEYS[5] garbage zset KEYS[6] retries hash
ARGV[1] msg key prefix   ARGV[2..] ids
Returns {stale, then 7 values per id: pending score ("" if none), times in
ready, unack score ("" if none), times in retry, 1 if in garbage, 1 if its
payload key exists, its retry record ("" if none)}; stale is 1 when the
retries hash carries the STALE mark.
Idempotent: reads only.
Complexity: O(M (log N + L)) with M = ids and L = the length of the ready
and retry lists (LPOS scans them); callers keep M small for long lists.
]]
check_types(KEYS[1], 'zset', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'list', KEYS[5], 'zset',
  KEYS[6], 'hash')
local keys = payloads_here(ARGV[1], ids_of(2, 1))
local out = {redis.call('HEXISTS', KEYS[6], STALE)}
for i = 2, #ARGV do
  local id = ARGV[i]
  out[#out + 1] = redis.call('ZSCORE', KEYS[1], id) or ''
  out[#out + 1] = #redis.call('LPOS', KEYS[2], id, 'COUNT', 0)
  out[#out + 1] = redis.call('ZSCORE', KEYS[3], id) or ''
  out[#out + 1] = #redis.call('LPOS', KEYS[4], id, 'COUNT', 0)
  out[#out + 1] = redis.call('ZSCORE', KEYS[5], id) and 1 or 0
  out[#out + 1] = redis.call('EXISTS', keys[i - 1])
  out[#out + 1] = redis.call('HGET', KEYS[6], id) or ''
end
return out
