#!lua flags=no-writes
--[[ stats: read-only snapshot of the queue's sizes, taken atomically.

KEYS[1] pending zset   KEYS[2] ready list   KEYS[3] processing zset
KEYS[4] retry list     KEYS[5] dead zset KEYS[6] totals hash
ARGV[1] priority zset (read only while the totals have 'prios')
ARGV[2] group key prefix: its count of messages waiting in the groups'
        zsets (read only while the totals have 'groups') counts as ready
ARGV[3] waiting zset (docs/workflows.md; read only while the totals have
        'flows')
Returns {pending (not due yet), ready (the ready list, the priority zset, the groups' zsets and the
due messages still in pending: a consumer's next promote moves them), processing, retry,
dead, now_ms, earliest due ms (-1: none), oldest death ms (-1: none), sent, acked,
failed, dead, expired, paused (1 or 0), concurrency limit (0: none),
rate limit (0: none), its period ms (0: none), due ms of the first message not due yet (-1: none),
waiting (flows' parents waiting for their children)}. Lists may hold stale entries of cancelled
messages until a claim pops them.
Idempotent: read-only.
Complexity: O(log N) (N = pending: one ZCOUNT).
]]
check_types(KEYS[1], 'zset', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'list', KEYS[5], 'zset',
  KEYS[6], 'hash')
local totals = redis.call('HMGET', KEYS[6], 'sent', 'acked', 'failed', 'dead', 'expired', 'paused', 'concurrency',
  'rate', 'prios', 'groups', 'flows')
local prio = 0
if totals[9] then
  prio = checked('zset', 'ZCARD', ARGV[1])
end
if totals[10] then
  prio = prio + tonumber(checked('string', 'GET', ARGV[2] .. 'ready') or 0)
end
local now = now_ms()
local due = redis.call('ZCOUNT', KEYS[1], '-inf', now)
local out = {
  redis.call('ZCARD', KEYS[1]) - due,
  redis.call('LLEN', KEYS[2]) + prio + due,
  redis.call('ZCARD', KEYS[3]),
  redis.call('LLEN', KEYS[4]),
  redis.call('ZCARD', KEYS[5]),
  now,
  tonumber(head_due(KEYS[1]) or -1),
  tonumber(redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')[2] or -1),
}
for i = 1, 5 do
  out[#out + 1] = tonumber(totals[i] or 0)
end
out[#out + 1] = totals[6] and 1 or 0
out[#out + 1] = tonumber(totals[7] or 0)
local n, period = string.match(totals[8] or '', '^(%d+) (%d+)$')
out[#out + 1] = tonumber(n or 0)
out[#out + 1] = tonumber(period or 0)
out[#out + 1] = tonumber(redis.call('ZRANGE', KEYS[1], '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')[2] or -1)
out[#out + 1] = totals[11] and checked('zset', 'ZCARD', ARGV[3]) or 0
return out
