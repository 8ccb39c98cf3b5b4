#!lua flags=allow-oom
--[[ extend: processing -> processing (lease renewed)
Renews the leases of deliveries whose handlers still run, so a slow but
alive handler keeps its message (a consumer that stops renewing loses it
at its lease's end). Each id is renewed only while its lease is
the one the consumer holds; the consumer chooses the new lease, so a re-run
recognises its own renewal.

KEYS[1] processing zset
ARGV[1..] triples of id, current lease, new lease (microseconds of Redis
time; new > current)
Returns one value per triple, in order: 1 renewed, 0 lease lost (the
delivery timed out and was or will be redelivered; nothing done).
Idempotent: a re-run finds the new lease in place and returns 1 again.
Complexity: O(M log N) with M = triples, in two calls.
]]
--- @include "args"
--- @include "checks"
--- @include "clock"
check_types(KEYS[1], 'zset')
local ids, out = ids_of(1, 3), {}
if #ids == 0 then
  return {}
end
local scores = redis.call('ZMSCORE', KEYS[1], unpack(ids))
local now = now_us()
local renew = {}
for i, id in ipairs(ids) do
  local score = tonumber(scores[i])
  local current, new = tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])
  out[i] = 0
  if score and (score == current or score == new) and new > now then
    out[i] = 1
    if score == current then
      renew[#renew + 1] = new
      renew[#renew + 1] = id
    end
  end
end
if #renew > 0 then
  redis.call('ZADD', KEYS[1], 'XX', unpack(renew))
end
return out
