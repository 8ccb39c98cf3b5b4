#!lua flags=allow-oom
--[[ nack: processing -> retry | ready | pending | dead
Ends one delivery that did not succeed, only while its lease is current
(a late nack of a redelivered message adds no second copy).
mode 'fail': the delivery counts and its reason is recorded; with
deliveries left the message goes to pending (delay > 0) or retry, its
next delivery due at now + delay (in its attempt record), else to the dead zset
(dead).
mode 'dead': like 'fail', but straight to the dead zset (the handler said a
retry cannot help).
mode 'release': the delivery never started (consumer shutting down, or
its handlers stalled); it does not count and the message goes back where
a claim takes it next, its due time kept: a retry (a delivery counted
before) to the front of retry, a first delivery among the due messages
of its priority (priority 0: the front of ready), so a stalled batch
handed back one by one keeps its priorities' order.
mode 'defer': the handler asked for a later delivery without this one
counting (a RetryAfter marked uncounted: rate limited upstream); its
reason is recorded, the count goes back down by one, the record's
deferrals go up by one, and the message goes to pending (delay > 0) or
retry, whatever deliveries it has left.

KEYS[1] processing zset   KEYS[2] attempts hash   KEYS[3] retry list
KEYS[4] pending zset KEYS[5] dead zset   KEYS[6] msg string of this id
KEYS[7] totals hash   KEYS[8] marker string of this id
ARGV[1] id   ARGV[2] lease   ARGV[3] delay ms
ARGV[4] mode   ARGV[5] default retry count   ARGV[6] wake-up channel
ARGV[7] reason of the failure ('' none)   ARGV[8] dead-letter retention ms
ARGV[9] the delivery's count (its attempt number)
ARGV[10] group key prefix
ARGV[11] ready list   ARGV[12] priority zset (where a released first
delivery goes back)
Groups (include/groups.lua, docs/groups.md): while any group has a message in
processing (the prefix's 'active' hash exists) the header is read for
the message's group. A grouped message's group counts one fewer in
processing; where it would go to retry it goes to its group's zset
instead (release: at its due time, so first among its priority; else due
now). In an ordered group (concurrency 1) a message that is released, or
fails or defers with deliveries left, goes back to the head of its group
whatever the priorities and due times there (group_return in
include/group_moves.lua), and after a failure or deferral the group waits its delay
in the wait zset: nothing else of the group starts before it is retried
or dead. The group goes back to the ring when it may start another.
Moved to the dead zset while the totals have 'flows', a child records
its death in the outbox for its parents ('w' links stay: flow_done in
include/flows.lua, docs/workflows.md).
A message aborted while its handler ran (include/abort.lua) ends as
aborted in every mode: not retried, not a dead letter.
Returns 0 lease lost (nothing done), 1 retried, 2 moved to the dead zset,
4 ended as aborted, 3 nothing left (neither in processing nor stored: finished since, as when
claimed again and acked; nothing done).
Counts 'failed' and 'dead' in the totals (not for release and defer).
Moved to the dead zset, it starts the window of its unique_for marker
(docs/dedup.md).
Publishes a wake-up when the message can be claimed again now, or is due
before every other pending message, or its group went back to the ring
(its slot freed: another of its messages may start now).
Idempotent: a re-run finds the lease gone and its own work done (its
attempt record as this call left it, or one delivery on, if the message was
claimed again since; a release's, also once that delivery failed, unless
the sweep took it back) and returns what the first run returned, or 3 when
the message finished since, so a re-sent nack is not mistaken for a lost
lease.
Complexity: O(log N), plus O(log G) with G = groups for a grouped message;
one EXISTS more, and about ten calls for an aborted message.
]]
--- @include "abort"
--- @include "checks"
--- @include "clock"
--- @include "finish"
--- @include "flows"
--- @include "group_moves"
--- @include "groups"
--- @include "header"
--- @include "markers"
--- @include "priorities"
--- @include "records"
--- @include "wake"
check_types(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'list', KEYS[4], 'zset', KEYS[5], 'zset',
  KEYS[7], 'hash')
local id, mode = ARGV[1], ARGV[4]
local score = redis.call('ZSCORE', KEYS[1], id)
if not score or tonumber(score) ~= tonumber(ARGV[2]) then
  -- Not this delivery's lease. An earlier run of this call may have done
  -- the work: it left the record so (release takes one delivery off the
  -- count; fail and dead record this reason with it), plus one delivery
  -- if the message was claimed again since. A lease taken back by the
  -- sweep leaves another record (reason timeout, one more delivery).
  local record, attempt = redis.call('HGET', KEYS[2], id), tonumber(ARGV[9])
  local n, _, _, rest = parts(record)
  local again = score and 1 or 0
  if mode == 'release' and n == attempt - 1 + again then
    return 1
  end
  -- Claimed again since and that delivery failed: its count is this one's
  -- again. Only the sweep's record (reason timeout) says this lease ran out.
  if mode == 'release' and not score and n == attempt and rest ~= ':timeout' then
    return 1
  end
  if mode == 'defer' and n == attempt - 1 + again and rest == reason_of(ARGV[7]) then
    return 1
  end
  if (mode == 'fail' or mode == 'dead') and n == attempt + again and rest == reason_of(ARGV[7]) then
    return (not score and redis.call('ZSCORE', KEYS[5], id)) and 2 or 1
  end
  -- Claimed again since and finished (acked): the record is gone with the
  -- payload, so a re-run cannot tell its own work from a lost lease, and
  -- either way nothing is left to hand back or fail.
  if not score and redis.call('EXISTS', KEYS[6]) == 0 then
    return 3
  end
  return 0
end
local prefix = string.sub(KEYS[6], 1, #KEYS[6] - #id)
if aborted_of(prefix, {id})[id] then
  -- Aborted while its handler ran: it ends so, whatever the mode.
  local c = {prefix = prefix, markers = string.sub(KEYS[8], 1, #KEYS[8] - #id), totals = KEYS[7], gp = ARGV[10]}
  if abort_end(c, KEYS[1], KEYS[2], abort_plan(c, {id})) then
    wake(ARGV[6], 0)
  end
  return 4
end
local gp, head, group = ARGV[10], false, false
local grouped = redis.call('EXISTS', gp .. 'active') == 1
if grouped then
  check_group_types(gp)
end
local base = flow_base(KEYS[6], id)
local flows = flows_here(redis.call('HGET', KEYS[7], 'flows'), base, {})
redis.call('ZREM', KEYS[1], id)
local n, due, deferred, rest = parts(redis.call('HGET', KEYS[2], id))
n, deferred = n or 1, deferred or 0
if grouped then
  head = redis.pcall('GETRANGE', KEYS[6], 0, HEADER_BYTES - 1)
  group = group_of(head)
  if group then
    group_active(gp, group, -1)
  end
end
local ordered = group and group_limit(gp, group) == 1
if mode == 'release' then
  -- The delivery never started: it keeps its due time.
  redis.call('HSET', KEYS[2], id, record_from(math.max(n - 1, 0), due, deferred, rest or ''))
  if group then
    group_return(gp, group, id, head, due_of(head, due), ordered)
    group_wake(gp, group)
  elseif n > 1 then
    redis.call('LPUSH', KEYS[3], id)
  else
    head = head or redis.pcall('GETRANGE', KEYS[6], 0, HEADER_BYTES - 1)
    local p = priority_of(head)
    if p > 0 then
      check_types(ARGV[12], 'zset')
      redis.call('ZADD', ARGV[12], prio_score(p, due_of(head, due)), id)
    else
      check_types(ARGV[11], 'list')
      redis.call('LPUSH', ARGV[11], id)
    end
  end
  wake(ARGV[6], 0)
  return 1
end
local now, delay = now_ms(), tonumber(ARGV[3])
if mode == 'defer' then
  n, deferred = math.max(n - 1, 0), deferred + 1
else
  tally(KEYS[7], 'failed', 1)
end
if mode ~= 'defer' and (mode == 'dead' or n > max_retries(KEYS[6], tonumber(ARGV[5]))) then
  redis.call('HSET', KEYS[2], id, record_from(n, false, deferred, reason_of(ARGV[7])))
  bury(KEYS[5], id, KEYS[6], now, tonumber(ARGV[8]))
  start_window(KEYS[8], redis.pcall('GET', KEYS[8]))
  tally(KEYS[7], 'dead', 1)
  flow_done(flows, base, {id}, 'd', false)
  if group then
    if group_wake(gp, group) then
      wake(ARGV[6], 0)
    end
    group_forget_idle(gp, group)
  end
  return 2
end
-- The next delivery is due when this call makes it claimable.
redis.call('HSET', KEYS[2], id, record_from(n, now + math.max(delay, 0), deferred, reason_of(ARGV[7])))
if ordered then
  -- Back at the head of its group, which waits out the delay.
  group_return(gp, group, id, head, due_of(head, due), true)
  if delay > 0 then
    redis.call('ZADD', gp .. 'wait', now + delay, group)
  else
    group_wake(gp, group)
  end
  wake(ARGV[6], math.max(delay, 0))
elseif delay > 0 then
  local head_at = head_due(KEYS[4])
  redis.call('ZADD', KEYS[4], now + delay, id)
  wake_if_earlier(ARGV[6], now + delay, head_at, now)
  if group then
    if group_wake(gp, group) then
      wake(ARGV[6], 0)
    end
    group_forget_idle(gp, group)
  end
elseif group then
  group_return(gp, group, id, head, now, false)
  group_wake(gp, group)
  wake(ARGV[6], 0)
else
  redis.call('RPUSH', KEYS[3], id)
  wake(ARGV[6], 0)
end
return 1
