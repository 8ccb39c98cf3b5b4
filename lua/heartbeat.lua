#!lua flags=allow-oom
--[[ heartbeat: writes one consumer's entry in the registry of live
consumers (docs/operations.md, "Live consumers"), or removes it.
The registry has a hash tag of its own, so one call writes a consumer's
entry whatever queues (and slots) it reads. The entry is a string with a
TTL; the index lists the consumers by the time their entry expires, so a
listing reads the live ones without a SCAN. Each call also drops up to
PRUNE = 100 members of the index whose time has passed (killed processes:
their entries expired already), so the index stays as long as the set
of consumers alive within the last few heartbeats; its own TTL is that
of its longest-lived entry, so killed consumers leave no key behind once
their TTLs passed. allow-oom: a live consumer that could not beat while
Redis is full would look dead.

KEYS[1] consumers zset (index: consumer id -> expiry ms)
KEYS[2] entry string (the consumer's entry)
ARGV[1] consumer id
ARGV[2] TTL in ms; 0 removes the entry and its index member (a clean stop)
ARGV[3] the entry (JSON, at most MAX_ENTRY = 65536 bytes)
Returns the number of expired members dropped from the index.
Idempotent: a repeat writes the same entry, its expiry counted from the
repeat's time.
Complexity: O(log N + PRUNE) for N consumers in the index.
]]
--- @include "clock"
local PRUNE = 100
local MAX_ENTRY = 65536
local ttl = tonumber(ARGV[2])
if not ttl or ttl < 0 or ttl ~= math.floor(ttl) then
  error(redis.error_reply('ERR TTL must be a whole number of ms, not ' .. tostring(ARGV[2])))
end
if #ARGV[3] > MAX_ENTRY then
  error(redis.error_reply('ERR a consumer entry must be at most ' .. MAX_ENTRY .. ' bytes, not ' .. #ARGV[3]))
end
local now = now_ms()
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, PRUNE)
if #dead > 0 then
  redis.call('ZREM', KEYS[1], unpack(dead))
end
if ttl == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('DEL', KEYS[2])
else
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ttl)
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  -- The index lives as long as its longest-lived entry, so consumers that
  -- were all killed leave no key behind.
  if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIREAT', KEYS[1], now + ttl)
  end
end
return #dead
