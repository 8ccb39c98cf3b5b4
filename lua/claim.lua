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
'rate_used' (rate_allowance below). A request held back by a limit
(it leased all the limit allowed, less than asked) says which, and for
the rate how long until it allows more.
Groups (once the totals have 'groups'; prelude.lua, docs/groups.md): the
request is shared between the ring's first members (at most ARGV[2] of
them, and at most GROUP_TURNS = 64), within a budget of GROUP_CLAIM =
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
the outbox for its parents (flow_done in prelude.lua, docs/workflows.md).
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
check_types(KEYS[1], 'list', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'hash', KEYS[5], 'zset',
  KEYS[6], 'zset', KEYS[7], 'string', KEYS[8], 'hash')
local fields = redis.call('HMGET', KEYS[8], 'paused', 'concurrency', 'rate', 'rate_used', 'prios', 'format', 'big',
  'groups', 'flows')
check_format(fields[6], ARGV[7])
-- The due messages of priority 1 to 9 (prio_score), once there are any.
local prio = fields[5] and ARGV[6]
if prio then
  check_types(prio, 'zset')
end
local paused = fields[1] and 1 or 0
local receipt = redis.call('GET', KEYS[7])
if receipt and string.match(receipt, '^%S+') == ARGV[4] then
  local words, ids = string.gmatch(receipt, '%S+'), {}
  words()
  local out = {0, 0, tonumber(words() or '') or 0, 0, paused, 0, 0, -1}
  for word in words do
    ids[#ids + 1] = word
  end
  for i, key in ipairs(payloads_here(ARGV[1], ids)) do
    local score = redis.call('ZSCORE', KEYS[3], ids[i])
    local value = redis.pcall('GET', key)
    if score and tonumber(score) == out[3] and type(value) == 'string' then
      out[#out + 1] = ids[i]
      out[#out + 1] = value
      local n, due, deferred = parts(redis.call('HGET', KEYS[4], ids[i]))
      out[#out + 1] = n or 1
      out[#out + 1] = due or 0
      out[#out + 1] = deferred or 0
    end
  end
  out[4] = math.max(0, math.floor((out[3] - now_us()) / 1000))
  return out
end

-- The STALE mark goes once both lists (and the priority zset) are empty:
-- no stale entry is left.
local function clear_stale()
  if redis.call('LLEN', KEYS[1]) == 0 and redis.call('LLEN', KEYS[2]) == 0
    and not (prio and redis.call('ZCARD', prio) > 0) then
    redis.call('HDEL', KEYS[4], STALE)
  end
end

-- The rate limiter: a sliding window of RATE_BUCKETS buckets per period,
-- counting leases. A lease is allowed while the last RATE_BUCKETS + 1
-- buckets (the current one included) hold fewer than n: any window of one
-- period lies within that many buckets, so none ever holds more than n.
-- A bucket takes at most ceil(n / RATE_BUCKETS), which paces a backlog
-- evenly instead of in bursts of n: a stream that never lets up gets
-- RATE_BUCKETS / (RATE_BUCKETS + 1) of n. 'rate_used' is
-- "<bucket> <count> <count of the bucket before> ...", the bucket numbered
-- by Redis time in units of period / RATE_BUCKETS (20 us per ms of period).
local RATE_BUCKETS = 50
local function rate_allowance(rate, used, now_u)
  local n, period = string.match(rate, '^(%d+) (%d+)$')
  n, period = tonumber(n), tonumber(period)
  if not n or period < 1 then
    error(redis.error_reply('ERR malformed rate limit ' .. rate))
  end
  local width = period * 1000 / RATE_BUCKETS
  local bucket = math.floor(now_u / width)
  -- counts[i]: leases in bucket - i, for i = 0 .. RATE_BUCKETS.
  local counts = {}
  for i = 0, RATE_BUCKETS do
    counts[i] = 0
  end
  local words = string.gmatch(used or '', '%d+')
  local last = tonumber(words() or '')
  if last then
    local i = bucket - last
    for word in words do
      if i > RATE_BUCKETS then
        break
      end
      -- A bucket ahead of now (Redis's clock stepped back since) counts as
      -- this one: its leases happened, and the window keeps them a period.
      local at = math.max(i, 0)
      counts[at] = counts[at] + tonumber(word)
      i = i + 1
    end
  end
  local total = 0
  for i = 0, RATE_BUCKETS do
    total = total + counts[i]
  end
  local per_bucket = math.ceil(n / RATE_BUCKETS)
  local r = {allowed = math.max(0, math.min(n - total, per_bucket - counts[0]))}
  -- The record once `granted` more are leased in this bucket.
  function r.record(granted)
    counts[0] = counts[0] + granted
    local last_used = 0
    for i = 0, RATE_BUCKETS do
      if counts[i] > 0 then
        last_used = i
      end
    end
    local out = {string.format('%d', bucket)}
    for i = 0, last_used do
      out[#out + 1] = counts[i]
    end
    return table.concat(out, ' ')
  end
  -- Ms until a later bucket allows a lease, once `granted` more are leased
  -- in this one: the first whose window has dropped enough old leases.
  function r.wait_ms(granted)
    local left = total + granted
    for m = 1, RATE_BUCKETS + 1 do
      left = left - counts[RATE_BUCKETS - m + 1]
      if left < n then
        return math.max(0, math.ceil(((bucket + m) * width - now_u) / 1000))
      end
    end
    return 0
  end
  return r
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
local leased = {ARGV[4], string.format('%d', lease)}
local popped = 0
local stale = redis.call('HEXISTS', KEYS[4], STALE) == 1
local budget = tonumber(ARGV[8]) or 0
-- Bytes of stored values read so far; cut: the budget ended the request.
local big, read, cut = fields[7], 0, false

-- How many of the first n of ids fit what is left of the byte budget:
-- all n while no value can be big; the first of the call always.
local function fitting(ids, n)
  if not big then
    return n
  end
  for i = 1, n do
    local size = redis.pcall('STRLEN', ARGV[1] .. ids[i])
    -- Another type reads as missing, as MGET gives it.
    size = type(size) == 'number' and size or 0
    if read > 0 and read + size > budget then
      cut = true
      return i - 1
    end
    read = read + size
  end
  return n
end
local seen, expired, deliveries, leased_ids = {}, {}, {}, {}

-- Leases what can be leased of ids popped from one list, a few calls for
-- the whole batch rather than several per id.
local function lease_all(ids)
  local keys = payload_keys(ARGV[1], ids)
  -- MGET gives false for a missing payload and for a key of another type
  -- (written by something else: unreadable, so buried like a missing one,
  -- its key left alone).
  local values = redis.call('MGET', unpack(keys))
  if not big then
    local found = false
    for _, v in ipairs(values) do
      read = read + (v and #v or 0)
      found = found or (v and #v > BIG_VALUE)
    end
    if found then
      -- Stored by a producer that does not mark big values: from now on
      -- (the rest of this call too) sizes are read first.
      big = true
      redis.call('HSET', KEYS[8], 'big', 1)
    end
  end
  local in_processing = redis.call('ZMSCORE', KEYS[3], unpack(ids))
  local in_pending, in_dead = {}, {}
  if stale then
    in_pending = redis.call('ZMSCORE', KEYS[5], unpack(ids))
    in_dead = redis.call('ZMSCORE', KEYS[6], unpack(ids))
  end
  local take, dead = {}, {}
  for i, id in ipairs(ids) do
    if in_processing[i] or seen[id] or in_pending[i] or in_dead[i] then
      -- Being processed, popped twice, or live elsewhere: a stale entry.
    elseif values[i] then
      seen[id] = true
      local deadline = expires_at(values[i])
      if deadline and deadline <= now then
        dead[#dead + 1] = i
      else
        take[#take + 1] = i
      end
    else
      seen[id] = true
      dead[#dead + 1] = i
    end
  end
  if #dead > 0 then
    local dead_ids = {}
    for j, i in ipairs(dead) do
      dead_ids[j] = ids[i]
    end
    local counts = redis.call('HMGET', KEYS[4], unpack(dead_ids))
    local markers = markers_of(ARGV[10], dead_ids, KEYS[8])
    local records = {}
    for j, i in ipairs(dead) do
      -- No payload and no record while STALE: a cancelled message's entry.
      if values[i] or counts[j] or not stale then
        bury(KEYS[6], ids[i], values[i] and keys[i], now, tonumber(ARGV[5]))
        start_window(markers[1][j], markers[2][j])
        records[#records + 1] = ids[i]
        local n, _, deferred = parts(counts[j])
        records[#records + 1] = record_from(n or 0, false, deferred or 0, ':expired')
        expired[#expired + 1] = ids[i]
      end
    end
    if #records > 0 then
      redis.call('HSET', KEYS[4], unpack(records))
    end
  end
  if #take == 0 then
    return
  end
  local scored, taken = {}, {}
  for _, i in ipairs(take) do
    scored[#scored + 1] = lease
    scored[#scored + 1] = ids[i]
    taken[#taken + 1] = ids[i]
  end
  redis.call('ZADD', KEYS[3], unpack(scored))
  local counts = redis.call('HMGET', KEYS[4], unpack(taken))
  local records = {}
  for j, i in ipairs(take) do
    local n, due, deferred, rest = parts(counts[j])
    local a = (n or 0) + 1
    records[#records + 1] = ids[i]
    records[#records + 1] = record_from(a, due, deferred or 0, rest or '')
    leased[#leased + 1] = ids[i]
    leased_ids[ids[i]] = true
    deliveries[#deliveries + 1] = ids[i]
    deliveries[#deliveries + 1] = values[i]
    deliveries[#deliveries + 1] = a
    deliveries[#deliveries + 1] = due or 0
    deliveries[#deliveries + 1] = deferred or 0
  end
  redis.call('HSET', KEYS[4], unpack(records))
end

-- Groups (prelude.lua, docs/groups.md): the ring's first members (at
-- most limit) share the request, as evenly as their room allows; the
-- messages without a group are the member ''. A queue without groups
-- takes everything from its lists, as `ucap` says.
-- waited_before: when the earliest group's wait ended before this call
-- (false: none waited); waits_from: the earliest wait this call starts.
local gp, ucap, capped, waited_before, waits_from = ARGV[9], limit, false, false, false
-- plan: {member, room, share} of each member read; gheads: each group's heads.
local plan, gheads = {}, {}
if fields[8] then
  check_group_types(gp)
  local before = groups_due(gp, now)
  waited_before = before and now + before
  local waiting = redis.call('LLEN', KEYS[1]) + redis.call('LLEN', KEYS[2]) + (prio and redis.call('ZCARD', prio) or 0)
  if waiting > 0 and not redis.call('ZSCORE', gp .. 'ring', '') then
    ring_push(gp, '')
  end
  -- At most GROUP_TURNS members, and a budget of GROUP_CLAIM: 1 a
  -- message, GROUP_TURN_COST more a member (a few calls on its group's
  -- keys), whatever the request, so that one claim stays short.
  local turns = math.min(limit, GROUP_TURNS)
  local members = redis.call('ZRANGE', gp .. 'ring', 0, turns - 1)
  capped = #members == GROUP_TURNS and limit > GROUP_TURNS
  local most = GROUP_CLAIM - GROUP_TURN_COST * #members
  if limit > most then
    limit, capped = most, true
  end
  local named = {}
  for _, g in ipairs(members) do
    if g ~= '' then
      named[#named + 1] = g
    end
  end
  local pauses, active_g, own_g, rates_g = {}, {}, {}, {}
  if #named > 0 then
    pauses = redis.call('HMGET', gp .. 'paused', unpack(named))
    active_g = redis.call('HMGET', gp .. 'active', unpack(named))
    own_g = redis.call('HMGET', gp .. 'limits', unpack(named))
    rates_g = redis.call('HMGET', gp .. 'rates', unpack(named))
  end
  local default = redis.call('HGET', gp .. 'limits', '')
  local default_rate = redis.call('HGET', gp .. 'rates', '')
  local j = 0
  for _, g in ipairs(members) do
    -- room: how many it may give (its due messages, within its
    -- concurrency and rate); gate: its concurrency's room alone (false: no
    -- limit); rated: its rate_allowance (false: no rate).
    local room, gate, paused_g, rated, avail = waiting, false, false, false, waiting
    if g ~= '' then
      j = j + 1
      local lim
      avail, lim = redis.call('ZCARD', group_list(gp, g)), tonumber(own_g[j] or default or '')
      room, paused_g = avail, pauses[j] and true or false
      if lim then
        gate = lim - (tonumber(active_g[j]) or 0)
        room = math.min(avail, gate)
      end
      local rate_g = rates_g[j] or default_rate
      if rate_g then
        rated = rate_allowance(rate_g, redis.call('GET', group_rate_key(gp, g)), now_u)
        rated.period = tonumber(string.match(rate_g, ' (%d+)$'))
        room = math.min(room, rated.allowed)
      end
      if paused_g then
        room = 0
      end
    end
    plan[#plan + 1] = {g, math.max(room, 0), 0, gate, paused_g, rated, avail, g ~= '' and tonumber(active_g[j] or 0) or 0}
  end
  -- While one of several members has at most ARGV[11] due and may start
  -- one (a group just come due beside a backlog), at most ARGV[11] a
  -- member: the claim that serves it stays short, and backlogs alone (or
  -- beside a paused or limited group) still get full claims.
  local share = tonumber(ARGV[11]) or 0
  if share > 0 and #plan > 1 and limit > share * #plan then
    for _, m in ipairs(plan) do
      if m[7] <= share and m[2] > 0 then
        limit, capped = share * #plan, true
        break
      end
    end
  end
  -- Water-filling: each pass gives every member with room an equal part
  -- of what is left (at least 1, in ring order), until nothing is left
  -- or no member has room.
  local left = limit
  while left > 0 do
    local open = 0
    for _, m in ipairs(plan) do
      if m[3] < m[2] then
        open = open + 1
      end
    end
    if open == 0 then
      break
    end
    local part = math.max(1, math.floor(left / open))
    for _, m in ipairs(plan) do
      local give = math.min(part, m[2] - m[3], left)
      if give > 0 then
        m[3], left = m[3] + give, left - give
      end
    end
  end
  ucap = 0
  for _, m in ipairs(plan) do
    if m[1] == '' then
      ucap = m[3]
    elseif m[3] > 0 then
      gheads[m[1]] = redis.call('ZRANGE', group_list(gp, m[1]), 0, m[3] - 1)
    end
  end
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
for _, ids in pairs(gheads) do
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
  if not (cut or skipped) then
    take = fitting(heads[n], math.min(ucap - (#leased - 2), #heads[n]))
  end
  if take > 0 then
    if list == prio then
      redis.call('ZREMRANGEBYRANK', list, 0, take - 1)
    else
      redis.call('LTRIM', list, take, -1)
    end
    popped = popped + take
    local before = #leased
    lease_all({unpack(heads[n], 1, take)})
    -- It may hold more: its heads were not all taken, or were a full page.
    skipped = #leased - before < take and (take < #heads[n] or #heads[n] == ucap)
  end
end
if #plan > 0 then
  -- The groups' heads, leased in one batch; then each member served (or
  -- found without room) leaves the ring, and goes back to its tail while
  -- it still has due messages and room.
  local batch, took = {}, {}
  for _, m in ipairs(plan) do
    local ids = gheads[m[1]]
    local take = 0
    if ids and not cut then
      take = fitting(ids, #ids)
    end
    if take > 0 then
      redis.call('ZREMRANGEBYRANK', group_list(gp, m[1]), 0, take - 1)
      for i = 1, take do
        batch[#batch + 1] = ids[i]
      end
    end
    took[m[1]] = take
  end
  local ungrouped_popped = popped
  popped = popped + #batch
  group_ready(gp, -#batch)
  if #batch > 0 then
    lease_all(batch)
  end
  -- leaving: members that leave the ring; back: those that go back to
  -- its tail; counts: group, count in processing pairs for one HSET.
  local leaving, back, counts = {}, {}, {}
  for _, m in ipairs(plan) do
    local g, room, gate, paused_g, avail = m[1], m[2], m[4], m[5], m[7]
    if g == '' then
      -- Served when its lists gave any; back while they hold more.
      if room == 0 or ungrouped_popped > 0 then
        leaving[#leaving + 1] = g
        if redis.call('LLEN', KEYS[1]) + redis.call('LLEN', KEYS[2]) + (prio and redis.call('ZCARD', prio) or 0) > 0 then
          back[#back + 1] = g
        end
      end
    elseif room == 0 or (took[g] or 0) > 0 then
      local n, rated = 0, m[6]
      for i = 1, took[g] or 0 do
        n = n + (leased_ids[gheads[g][i]] and 1 or 0)
      end
      if n > 0 then
        counts[#counts + 1] = g
        counts[#counts + 1] = m[8] + n
      end
      leaving[#leaving + 1] = g
      if rated and n > 0 then
        redis.call('SET', group_rate_key(gp, g), rated.record(n), 'PX', 2 * rated.period)
      end
      if not paused_g and (not gate or gate - n > 0) and avail > (took[g] or 0) then
        if rated and rated.allowed - n <= 0 then
          -- At its rate: it waits until its window lets one more start.
          local opens = now + math.max(rated.wait_ms(n), 1)
          redis.call('ZADD', gp .. 'wait', opens, g)
          waits_from = math.min(waits_from or opens, opens)
        else
          back[#back + 1] = g
        end
      elseif n == 0 then
        -- Its messages all buried as expired, say: nothing may be left.
        group_forget_idle(gp, g)
      end
    end
  end
  if #counts > 0 then
    redis.call('HSET', gp .. 'active', unpack(counts))
  end
  if #leaving > 0 then
    redis.call('ZREM', gp .. 'ring', unpack(leaving))
  end
  if #back > 0 then
    local last = tonumber(redis.call('ZRANGE', gp .. 'ring', -1, -1, 'WITHSCORES')[2]) or 0
    local entries = {}
    for i, g in ipairs(back) do
      entries[#entries + 1] = last + i
      entries[#entries + 1] = g
    end
    redis.call('ZADD', gp .. 'ring', unpack(entries))
  end
end
if stale then
  clear_stale()
end
if #leased > 2 then
  redis.call('SET', KEYS[7], table.concat(leased, ' '), 'PX', vis)
else
  redis.call('DEL', KEYS[7])
end
tally(KEYS[8], 'expired', #expired)
flow_done(flows, base, expired, 'd', false)
local leased_n = #leased - 2
local wait = 0
if rate and leased_n > 0 then
  redis.call('HSET', KEYS[8], 'rate_used', rate.record(leased_n))
end
-- Held back only when the limit, not the lists, ended the request.
if cut or skipped then
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
  wake_if_earlier(ARGV[12], waits_from, waited_before, now)
  group_ms = group_wait_ms(gp, now) or -1
end
local out = {popped, #expired, lease, vis, 0, held, wait, group_ms}
for _, id in ipairs(expired) do
  out[#out + 1] = id
end
for _, v in ipairs(deliveries) do
  out[#out + 1] = v
end
return out
