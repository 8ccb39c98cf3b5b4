#!lua flags=allow-oom
--[[ ack: unack -> (deleted)
Finishes a batch of deliveries. Each id is acked only while its lease is
the current one, so a late ack of a delivery that timed out and was
redelivered deletes nothing.

KEYS[1] unack zset   KEYS[2] retries hash   KEYS[3] totals hash
ARGV[1] msg key prefix   ARGV[2..] pairs of id, lease
Returns one 1 (acked) or 0 (lease lost) per pair, in order. Counts
'acked' in the totals.
Idempotent: a re-run finds nothing left and returns 0s.
Complexity: O(M log N) with M = pairs, in six calls whatever M.
]]
check_types(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash')
local ids, out = ids_of(2, 2), {}
if #ids == 0 then
  return {}
end
local scores = redis.call('ZMSCORE', KEYS[1], unpack(ids))
local done = {}
for i, id in ipairs(ids) do
  if scores[i] and tonumber(scores[i]) == tonumber(ARGV[2 * i + 1]) then
    done[#done + 1] = id
    out[i] = 1
  else
    out[i] = 0
  end
end
if #done > 0 then
  local keys = payloads_here(ARGV[1], done)
  redis.call('ZREM', KEYS[1], unpack(done))
  forget(KEYS[2], keys, done)
  tally(KEYS[3], 'acked', #done)
end
return out
