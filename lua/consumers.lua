#!lua flags=no-writes
--[[ consumers: reads the registry of live consumers (docs/operations.md,
"Live consumers"): the members of the index whose entry has not expired
yet, soonest to expire first, each with its entry. A stale member (its time
passed: a killed process) is never listed, and neither is a member whose
entry is gone. An entry longer than ARGV[3] is not read: its length comes
instead, so a huge or hostile entry costs the listing nothing; -1 comes
for a key of another type (written by something else).

KEYS[1] consumers zset (index: consumer id -> expiry ms)
ARGV[1] entry key prefix (the consumer's id follows it)
ARGV[2] most consumers to list
ARGV[3] most bytes of one entry to read
Returns {live (members of the index not expired), then per consumer listed:
id, entry (a string), or its length (an integer) when longer than ARGV[3],
or -1 when its key is no string}.
Idempotent: read-only.
Complexity: O(log N + M) for N consumers in the index and M = ARGV[2],
reading at most M × ARGV[3] bytes of entries.
]]
--- @include "clock"
local now = now_ms()
local limit = tonumber(ARGV[2])
local most = tonumber(ARGV[3])
local out = {redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')}
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'LIMIT', 0, limit)
for _, id in ipairs(ids) do
  local key = ARGV[1] .. id
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'string' then
    local len = redis.call('STRLEN', key)
    out[#out + 1] = id
    if len > most then
      out[#out + 1] = len
    else
      out[#out + 1] = redis.call('GET', key)
    end
  elseif kind ~= 'none' then
    out[#out + 1] = id
    out[#out + 1] = -1
  end
end
return out
