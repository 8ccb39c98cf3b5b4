#!lua flags=allow-oom
--[[ shards: reads, and records once, how many shards a queue is spread over.
The count is the field 'shards' of the totals hash of the queue's
unsharded layout ({<name>}, even for a sharded queue, whose messages live
under {<name>#<i>}): one key per queue name, found by name alone, in the
slot of that name, so every handle, producer and tool can read it, on a
cluster too. A sharded handle records its count before its first send or
consumer start; a handle (or a send.lua call on the unsharded layout)
whose count differs is refused, so a queue is never split between
layouts. An ordinary queue (1 shard) records nothing: its own totals are
this hash.

KEYS[1] totals hash (of the unsharded layout)
ARGV[1] the caller's shard count, 1 to 1024: recorded when above 1 and
        none is; 0 only reads
Returns the recorded count, 0 when none is.
Fails with a "DQSHARDS ..." error, nothing written, when a count is
recorded and ARGV[1] is another (not 0).
Idempotent: a repeat finds its own count.
Complexity: O(1).
]]
--- @include "checks"
check_types(KEYS[1], 'hash')
local n = tonumber(ARGV[1])
if not n or n ~= math.floor(n) or n < 0 or n > 1024 then
  error(redis.error_reply('ERR shard count must be 0 to 1024, not ' .. tostring(ARGV[1])))
end
local found = redis.call('HGET', KEYS[1], 'shards')
if n == 0 then
  return tonumber(found or 0)
end
check_shards(found, ARGV[1])
if not found and n > 1 then
  redis.call('HSET', KEYS[1], 'shards', ARGV[1])
  return n
end
return tonumber(found or 0)
