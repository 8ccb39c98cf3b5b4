#!lua flags=allow-oom
--[[ extend: processing -> processing (lease renewed)
Renews the leases of deliveries whose handlers still run, so a slow but
alive handler keeps its message (a consumer that stops renewing loses it
at its lease's end). Each id is renewed only while its lease is
the one the consumer holds; the consumer chooses the new lease, so a re-run
recognises its own renewal.

KEYS[1] processing zset
ARGV[1] msg key prefix
ARGV[2..] triples of id, current lease, new lease (microseconds of Redis
time; new > current)
Returns one value per triple, in order: 1 renewed, 2 renewed and aborted
(the message was aborted while its handler runs, include/abort.lua: the
consumer tells the handler, in case it missed the abort signal), 0 lease
lost (the delivery timed out and was or will be redelivered; nothing done).
Idempotent: a re-run finds the new lease in place and returns 1 again.
Complexity: O(M log N) with M = triples, in three calls, four while
some message is aborted.
]]
--- @include "abort"
--- @include "args"
--- @include "checks"
--- @include "clock"
check_types(KEYS[1], 'zset')
local ids, out = ids_of(2, 3), {}
if #ids == 0 then
  return {}
end
local scores = redis.call('ZMSCORE', KEYS[1], unpack(ids))
local held = {}
for i, id in ipairs(ids) do
  if scores[i] then
    held[#held + 1] = id
  end
end
local marked = aborted_of(ARGV[1], held)
local now = now_us()
local renew = {}
for i, id in ipairs(ids) do
  local score = tonumber(scores[i])
  local current, new = tonumber(ARGV[3 * i]), tonumber(ARGV[3 * i + 1])
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
-- The fallback of the abort signal: a consumer that missed it learns here.
for i, id in ipairs(ids) do
  if out[i] == 1 and marked[id] then
    out[i] = 2
  end
end
return out
