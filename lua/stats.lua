#!lua flags=no-writes
--[[ stats: read-only snapshot of the queue's sizes, taken atomically.

KEYS[1] pending zset   KEYS[2] ready list   KEYS[3] unack zset
KEYS[4] retry list     KEYS[5] garbage set
ARGV none
Returns {pending, ready, processing, retry, garbage}. Lists may hold
stale entries of cancelled messages until a claim pops them.
Idempotent: read-only.
Complexity: O(1).
]]
check_types(KEYS[1], 'zset', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'list', KEYS[5], 'set')
return {
  redis.call('ZCARD', KEYS[1]),
  redis.call('LLEN', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
  redis.call('LLEN', KEYS[4]),
  redis.call('SCARD', KEYS[5]),
}
