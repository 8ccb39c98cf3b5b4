#!lua flags=allow-oom
--[[ claim: retry | ready -> processing | dead
Pops up to ARGV[2] ids, retry list first, then (once the queue has used
priorities: the totals' field 'prios') the priority zset, highest priority
first, then the ready list (priority 0), and leases each valid one: it
enters processing with the visibility deadline and its delivery count goes up
(its attempt record counts deliveries; its due time, deferrals and failure
reason are kept).
A popped id is not leased but buried as a dead letter with reason
"expired" (attempt record "<count>:expired", payload kept for the
retention, counted in the totals' 'expired', its id returned) when the
deadline in its stored value's header (set by send from expire_after)
has passed by Redis's clock, or when its payload is missing (deleted or
evicted by something else): a message is never dropped unseen.
The one exception: while the attempts hash carries the STALE mark, an id
without payload and without attempt record is the leftover entry of a
cancelled message (cancel deletes both) and is skipped; so is an id live
elsewhere (pending, dead: cancelled, then sent again). The mark is
cleared once both lists are empty.
An id already in processing is never leased twice.
Bytes: a call reads and returns at most ARGV[8] bytes of stored values,
but always the first id it pops, however big (a message larger than the
budget goes alone). Values come into Lua only through MGET of the ids it
pops; while the queue never stored a value over BIG_VALUE bytes (the
totals' 'big', set by send and by a claim that reads one), every value
fits BIG_VALUE and MAX_LIMIT of them stay within a few MiB, so no size is
read; with 'big' each popped id's size is read first (STRLEN) and the
call stops before the id that would pass the budget. A request cut short
so says held = 3: more may be ready now. So does one where a list gave
fewer leases than it popped (an entry skipped or buried) while it may hold
more: the lists after it wait for the next request, so a lower priority
never goes ahead of a higher one.
While the queue is paused (the totals hash has the field 'paused') a new request leases nothing
and deletes the receipt, as one that found nothing; a replayed request
still returns what it leased before.
Limits (fields of the totals hash, set by limits.lua; read with 'paused'
in one HMGET, so a queue without them pays nothing): 'concurrency' "<n>"
leases no more than n - ZCARD processing; 'rate' "<n> <period ms>" leases no
more than n in any window of one period by Redis time, counted in
'rate_used' (rate_allowance in include/rate.lua). A request held back by a limit
(it leased all the limit allowed, less than asked) says which, and for
the rate how long until it allows more.
Groups (once the totals have 'groups'; include/claim_groups.lua, docs/groups.md): the
request is shared between the ring's first members (at most ARGV[2] of
them: GROUP_FIRST_TURNS = 16, or up to GROUP_TURNS = 64 while the first
16 have less room than the claim may lease), within a budget of GROUP_CLAIM =
256: 1 a message, GROUP_TURN_COST = 2 more a member (a request cut short
by either bound says held = 3; the member '' is the messages without a
group, taken from the lists above), as evenly as each one's room allows (its due messages,
within its concurrency and its rate, counted as the queue's in
"<group prefix>:<group>:rate"; none while paused); each one served leaves
the ring, and goes back to its tail while it has due messages and room,
or to the wait zset until its window allows one more when its rate is
what it lacks (publishing a wake-up of that many ms when that is the
earliest wait, so every consumer claims then); one found without room
leaves it, and an ack, nack or timeout that frees a slot of it puts it
back (publishing a wake-up). Each group's count in processing goes up by
what it leased. Groups whose wait is over go back to the ring first.

KEYS[1] ready list   KEYS[2] retry list   KEYS[3] processing zset
KEYS[4] attempts hash KEYS[5] pending zset KEYS[6] dead zset
KEYS[7] receipt string of this consumer (its last claim; TTL = max consume duration)
KEYS[8] totals hash
ARGV[1] msg key prefix   ARGV[2] limit (0 to 1000; 0 leases nothing and
        reads no list, only deletes the receipt and clears STALE when both
        lists are empty: what a stopping consumer sends)
ARGV[3] max consume duration ms
ARGV[4] request sequence number: new for each request of the consumer,
        the same when the consumer repeats a request that failed
ARGV[5] dead-letter retention ms
ARGV[6] priority zset (read only while the totals have 'prios')
ARGV[7] the wire format version the caller speaks (docs/wire-format.md):
        fails with a "DQFORMAT ..." error, nothing written, when the
        totals' 'format' field holds another
ARGV[8] byte budget: most bytes of stored values one call reads (above)
ARGV[9] group key prefix (read only while the totals have 'groups')
ARGV[10] marker key prefix
ARGV[11] share: once the queue has groups, while the ring's first members
        are several and one of them has at most share due and room to
        start one, a claim leases at most share a member (0: no cap)
ARGV[12] wake-up channel
Counts 'expired' in the totals. Starts the window of the unique_for
marker of each message it buries as expired (docs/dedup.md). While the
totals have 'flows', each child buried as expired records its death in
the outbox for its parents (flow_done in include/flows.lua, docs/workflows.md).
Returns {popped, expired, lease, left_ms, paused, held, wait_ms, group_ms,
expired id 1 .. expired id n, id1, value1, attempt1, due1, deferrals1, id2,
...} with n =
expired and each value as stored ("<retry count>[;<backoff>][/<sent
at>+<delay>][@<expires at>]:<payload>"); due is the ms this delivery was
due from its attempt record (0: the send's, in the value), deferrals the
deliveries deferred uncounted before it (attempt record).
left_ms is how much of the lease was left when the script ran: the
visibility timeout for a new request, less for a replayed one. paused is
1 while the queue is paused, else 0. held is 0 when no limit of the
queue held the request back, 1 its concurrency limit (it opens when a
processing message leaves processing, which no script foresees), 2 its
rate limit, which opens again in wait_ms (else 0), 3 the byte budget,
GROUP_CLAIM, GROUP_TURNS, the share or a list's skipped entries (claim
again at once). A group's limits hold only that group: its freed slot is
announced by the wake-up of the script that frees it; group_ms is how
long until the earliest waiting group's wait is over (its rate, or an
ordered group's failed head's delay), -1 when none waits (or the queue
has no groups), so the claimer sets a timer to that instant.
lease is the deadline in microseconds of Redis time: it fences ack/nack,
and differs from every earlier lease of the same id (Redis time moved on).
Idempotent: the receipt records what the consumer's last request leased;
a re-sent request (its reply lost on a cut connection) returns the same
deliveries again instead of leasing more. A request that leases nothing
deletes the receipt, so an idle or stopped consumer leaves no key.
Complexity: O(M log N) with M = popped, in a fixed number of calls per
list plus one PEXPIRE per expired id (and one STRLEN per popped id once
the totals have 'big'), plus the bytes read, at most max(ARGV[8], one
value); O(1) for limit 0 and when a limit allows nothing; the rate limit
adds O(RATE_BUCKETS) Lua steps. Once the queue has groups: O(K log G) more,
with K = ring members read (at most GROUP_TURNS) and G = groups, plus
O(RATE_BUCKETS) Lua steps per member with a rate, O(W log G) for the
W groups whose wait is over (at most MAX_LIMIT), and one PUBLISH when it
starts the earliest wait.
]]
--- @include "args"
--- @include "checks"
--- @include "claim_groups"
--- @include "clock"
--- @include "finish"
--- @include "flows"
--- @include "group_moves"
--- @include "lease"
--- @include "rate"
--- @include "records"
--- @include "wake"
-- The totals and the receipt are checked by their reads below.
check_types(KEYS[1], 'list', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'hash', KEYS[5], 'zset',
  KEYS[6], 'zset')
local fields = checked('hash', 'HMGET', KEYS[8], 'paused', 'concurrency', 'rate', 'rate_used', 'prios', 'format', 'big',
  'groups', 'flows')
check_format(fields[6], ARGV[7])
-- The due messages of priority 1 to 9 (prio_score), once there are any.
local prio = fields[5] and ARGV[6]
if prio then
  check_types(prio, 'zset')
end
local paused = fields[1] and 1 or 0
local receipt = checked('string', 'GET', KEYS[7])
if receipt and string.match(receipt, '^%S+') == ARGV[4] then
  return replay(receipt, paused)
end

-- How many wait in the lists (and the priority zset).
local function waiting()
  return redis.call('LLEN', KEYS[1]) + redis.call('LLEN', KEYS[2]) + (prio and redis.call('ZCARD', prio) or 0)
end

-- The STALE mark goes once both lists (and the priority zset) are empty:
-- no stale entry is left.
local function clear_stale()
  if waiting() == 0 then
    redis.call('HDEL', KEYS[4], STALE)
  end
end

local limit = limit_arg(2, 0)
if limit == 0 or paused == 1 then
  redis.call('DEL', KEYS[7])
  clear_stale()
  return {0, 0, 0, 0, paused, 0, 0, -1}
end
local now_u = now_us()
local asked, held = limit, 0
if fields[2] then
  local free = math.max(0, tonumber(fields[2]) - redis.call('ZCARD', KEYS[3]))
  if free < limit then
    limit, held = free, 1
  end
end
local rate
if fields[3] then
  rate = rate_allowance(fields[3], fields[4], now_u)
  if rate.allowed < limit then
    limit, held = rate.allowed, 2
  end
end
if limit == 0 then
  redis.call('DEL', KEYS[7])
  return {0, 0, 0, 0, 0, held, held == 2 and rate.wait_ms(0) or 0, -1}
end
local vis = tonumber(ARGV[3])
local lease = now_u + vis * 1000
local now = math.floor(now_u / 1000)
-- The claim in progress (include/lease.lua).
local c = {now = now, lease = lease, stale = redis.call('HEXISTS', KEYS[4], STALE) == 1, big = fields[7],
  budget = tonumber(ARGV[8]) or 0, read = 0, cut = false, seen = {}, leased = {ARGV[4], string.format('%d', lease)},
  leased_ids = {}, expired = {}, deliveries = {}}
local popped = 0

-- Groups (include/claim_groups.lua): the ring's first members share the
-- request; a queue without groups takes everything from its lists, as
-- `ucap` says. waits_from: the earliest wait this call starts.
local gp, ucap, capped, waits_from = ARGV[9], limit, false, false
local groups
if fields[8] then
  groups = group_plan(gp, limit, waiting, tonumber(ARGV[11]) or 0, now, now_u)
  ucap, limit, capped = groups.ucap, groups.limit, groups.capped
end

-- The heads of both lists (and of the priority zset, and of the groups
-- served) are read, and their payloads checked, before the first write
-- (but for the groups' own bookkeeping above); then each gives up what its
-- lease_all takes.
local sources = {KEYS[2], KEYS[1]}
if prio then
  sources = {KEYS[2], prio, KEYS[1]}
end
local heads, all = {}, {}
for n, list in ipairs(sources) do
  heads[n] = ucap > 0 and redis.call(list == prio and 'ZRANGE' or 'LRANGE', list, 0, ucap - 1) or {}
  for _, id in ipairs(heads[n]) do
    all[#all + 1] = id
  end
end
for _, ids in pairs(groups and groups.heads or {}) do
  for _, id in ipairs(ids) do
    all[#all + 1] = id
  end
end
payloads_here(ARGV[1], all)
local base = flow_base(ARGV[1], '')
local flows = flows_here(fields[9], base, {})
-- skipped: a list gave fewer leases than it popped (a cancelled message's
-- entry skipped, or an id buried as expired) while it may hold more: the
-- lists after it wait for the next claim, so that a lower priority never
-- goes ahead of a higher one.
local skipped = false
for n, list in ipairs(sources) do
  local take = 0
  if not (c.cut or skipped) then
    take = fitting(c, heads[n], math.min(ucap - (#c.leased - 2), #heads[n]))
  end
  if take > 0 then
    if list == prio then
      redis.call('ZREMRANGEBYRANK', list, 0, take - 1)
    else
      redis.call('LTRIM', list, take, -1)
    end
    popped = popped + take
    local before = #c.leased
    lease_all(c, {unpack(heads[n], 1, take)})
    -- It may hold more: its heads were not all taken, or were a full page.
    skipped = #c.leased - before < take and (take < #heads[n] or #heads[n] == ucap)
  end
end
if groups and #groups.plan > 0 then
  local grouped
  grouped, waits_from = group_lease(c, gp, groups, popped, waiting)
  popped = popped + grouped
end
if c.stale then
  clear_stale()
end
if #c.leased > 2 then
  redis.call('SET', KEYS[7], table.concat(c.leased, ' '), 'PX', vis)
else
  redis.call('DEL', KEYS[7])
end
local expired = c.expired
tally(KEYS[8], 'expired', #expired)
flow_done(flows, base, expired, 'd', false)
local leased_n = #c.leased - 2
local wait = 0
if rate and leased_n > 0 then
  redis.call('HSET', KEYS[8], 'rate_used', rate.record(leased_n))
end
-- Held back only when the limit, not the lists, ended the request.
if c.cut or skipped then
  held = 3
elseif popped < limit or limit == asked then
  held = 0
elseif held == 2 then
  wait = rate.wait_ms(leased_n)
end
if capped and popped < asked and held ~= 2 and not (held == 1 and popped < limit) then
  -- Cut short by GROUP_CLAIM or GROUP_TURNS: more may wait, claim again at once.
  held = 3
end
local group_ms = -1
if fields[8] then
  wake_if_earlier(ARGV[12], waits_from, groups.waited_before, now)
  group_ms = group_wait_ms(gp, now) or -1
end
local out = {popped, #expired, lease, vis, 0, held, wait, group_ms}
for _, id in ipairs(expired) do
  out[#out + 1] = id
end
for _, v in ipairs(c.deliveries) do
  out[#out + 1] = v
end
return out
