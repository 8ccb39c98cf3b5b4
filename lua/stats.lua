#!lua flags=no-writes
--[[ stats: read-only snapshot of the queue's sizes, taken atomically.

KEYS[1] pending zset   KEYS[2] ready list   KEYS[3] processing zset
KEYS[4] retry list     KEYS[5] dead zset KEYS[6] totals hash
KEYS[7] attempts hash
ARGV[1] priority zset (read only while the totals have 'prios')
ARGV[2] group key prefix: its count of messages waiting in the groups'
        zsets (read only while the totals have 'groups') counts as ready
ARGV[3] waiting zset (docs/workflows.md; read only while the totals have
        'flows')
ARGV[4] msg key prefix
Returns {pending (not due yet), ready (the ready list, the priority zset, the groups' zsets and the
due messages still in pending: a consumer's next promote moves them), processing, retry,
dead, now_ms, oldest due ms (-1: none; below), oldest death ms (-1: none), sent, acked,
failed, dead, expired, paused (1 or 0), concurrency limit (0: none),
rate limit (0: none), its period ms (0: none), due ms of the first message not due yet (-1: none),
waiting (flows' parents waiting for their children), aborted (messages
ended as aborted, include/abort.lua)}. Lists may hold stale entries of cancelled
messages until a claim pops them.
The oldest due ms is the due time of the message that has waited longest
to start (the queue's latency), wherever it waits: due in pending (not
promoted yet), at the head of the retry or the ready list (the first of
its first LATENCY_HEADS = 4 entries whose payload exists: the others are
cancelled messages' entries), the first live one of each priority's
scores in the priority zset (looked for only while the attempts hash has
STALE), and the head of each group's zset among
the ring's first LATENCY_GROUPS = 16 members (those a claim serves first). Groups
out of the ring (paused, at their concurrency, waiting out their rate or
an ordered retry) are not read: their own limit holds them.
Idempotent: read-only.
Complexity: O(log N) (N = pending: one ZCOUNT), plus O(log P) per
priority (P = the priority zset) and O(LATENCY_GROUPS log M) for the groups
(M = a group's due messages): a bounded number of calls.
]]
--- @include "checks"
--- @include "clock"
--- @include "groups"
--- @include "header"
--- @include "priorities"
--- @include "records"
--- @include "wake"
-- Entries read at the head of a list (or of a priority) for one whose
-- payload exists.
local LATENCY_HEADS = 4
-- Groups whose next message is read: the ring's first, those a claim
-- serves first. Each costs a call on a key of its own (about 4 µs), so
-- the call over many groups stays within a few times one without.
local LATENCY_GROUPS = 16
check_types(KEYS[1], 'zset', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'list', KEYS[5], 'zset',
  KEYS[6], 'hash', KEYS[7], 'hash')
local totals = redis.call('HMGET', KEYS[6], 'sent', 'acked', 'failed', 'dead', 'expired', 'paused', 'concurrency',
  'rate', 'prios', 'groups', 'flows', 'aborted')
local prio = 0
if totals[9] then
  prio = checked('zset', 'ZCARD', ARGV[1])
end
if totals[10] then
  prio = prio + tonumber(checked('string', 'GET', ARGV[2] .. 'ready') or 0)
end
local now = now_ms()
local due = redis.call('ZCOUNT', KEYS[1], '-inf', now)

-- The oldest due time found so far (false: none). A value without send
-- times (written by something else) has due time 0: unknown, left out.
local oldest = false
local function seen(at)
  if at and at > 0 and at <= now and (not oldest or at < oldest) then
    oldest = at
  end
end
seen(tonumber(head_due(KEYS[1]) or ''))
-- A list's head: the due time of the first of its first entries whose
-- payload exists, from its attempt record (a retry's) or its header.
for _, list in ipairs({KEYS[4], KEYS[2]}) do
  for _, id in ipairs(redis.call('LRANGE', list, 0, LATENCY_HEADS - 1)) do
    local head = redis.pcall('GETRANGE', ARGV[4] .. id, 0, HEADER_BYTES - 1)
    if type(head) == 'string' and head ~= '' then
      local _, record_due = parts(redis.call('HGET', KEYS[7], id))
      seen(due_of(head, record_due))
      break
    end
  end
end
if totals[9] then
  -- Each priority's first entry whose payload exists: the zset, too, may
  -- hold cancelled messages' entries, but only while STALE is set.
  local stale = redis.call('HEXISTS', KEYS[7], STALE) == 1
  for p = 1, 9 do
    local low = prio_score(p, 0)
    local band = redis.call('ZRANGE', ARGV[1], string.format('%d', low), string.format('(%d', low + PRIO_SPAN),
      'BYSCORE', 'LIMIT', 0, stale and LATENCY_HEADS or 1, 'WITHSCORES')
    for i = 1, #band, 2 do
      if not stale or redis.call('EXISTS', ARGV[4] .. band[i]) == 1 then
        seen(tonumber(band[i + 1]) - low)
        break
      end
    end
  end
end
if totals[10] then
  -- A group's zset holds no cancelled message's entry: its head is live.
  for _, g in ipairs(checked('zset', 'ZRANGE', ARGV[2] .. 'ring', 0, LATENCY_GROUPS - 1)) do
    if g ~= '' then
      local first = checked('zset', 'ZRANGE', group_list(ARGV[2], g), 0, 0, 'WITHSCORES')[2]
      if first then
        seen(tonumber(first) % PRIO_SPAN)
      end
    end
  end
end

local out = {
  redis.call('ZCARD', KEYS[1]) - due,
  redis.call('LLEN', KEYS[2]) + prio + due,
  redis.call('ZCARD', KEYS[3]),
  redis.call('LLEN', KEYS[4]),
  redis.call('ZCARD', KEYS[5]),
  now,
  oldest or -1,
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
out[#out + 1] = tonumber(totals[12] or 0)
return out
