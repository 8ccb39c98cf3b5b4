#!lua flags=allow-oom
--[[ timeout: processing -> retry | dead
Takes back deliveries whose visibility deadline passed (the consumer died,
hung or was too slow): each counts as a failed delivery, with reason
"timeout". With deliveries left the id goes to retry, its next delivery
due now (in its attempt record), else to the dead zset.

KEYS[1] processing zset   KEYS[2] attempts hash   KEYS[3] retry list
KEYS[4] dead zset KEYS[5] totals hash
ARGV[1] msg key prefix   ARGV[2] limit (1 to 1000)
ARGV[3] default retry count   ARGV[4] wake-up channel
ARGV[5] dead-letter retention ms
ARGV[6] group key prefix   ARGV[7] marker key prefix
Groups (as nack.lua's 'fail' with no delay): while any group has a
message in processing, each id's group (from the header it reads anyway)
counts one fewer in processing; a grouped id goes to its group's zset
instead of retry (an ordered group's at its head, whatever the
priorities and due times there: group_return in include/group_moves.lua), and its
group back to the ring when it may start another.
A message aborted while its handler ran (include/abort.lua) is not
taken back: it ends as aborted (a consumer that crashed holding it
delivers it no more).
Returns {timed_out, moved_to_dead, aborted, then for each id moved to
the dead zset: id, its delivery count, then each aborted id}; timed_out
counts those taken back, not the aborted. Counts 'failed' and 'dead' in the totals.
Starts the window of the unique_for marker of each id moved to the dead
zset (docs/dedup.md).
While the totals have 'flows', each child moved to the dead zset records
its death in the outbox for its parents (flow_done in include/flows.lua,
docs/workflows.md).
Publishes a wake-up when it moved anything to retry or a group back to
the ring.
Idempotent: a re-run moves only what is still overdue.
Complexity: O(log N + M log N) with M = timed out; a fixed number of
calls per batch plus one per id (payload header) and two per dead id;
O(log G) more per grouped id, G = groups; one EXISTS more, and with
aborted ids about ten calls per batch.
]]
--- @include "abort"
--- @include "args"
--- @include "checks"
--- @include "clock"
--- @include "finish"
--- @include "flows"
--- @include "group_moves"
--- @include "groups"
--- @include "header"
--- @include "markers"
--- @include "records"
--- @include "wake"
check_types(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'list', KEYS[4], 'zset', KEYS[5], 'hash')
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_us(), 'LIMIT', 0, limit_arg(2))
if #ids == 0 then
  return {0, 0, 0}
end
local c = {prefix = ARGV[1], markers = ARGV[7], totals = KEYS[5], gp = ARGV[6]}
local ended
ids, ended = split_aborted(ids, aborted_of(ARGV[1], ids))
local plan = abort_plan(c, ended)
if #ids == 0 then
  if abort_end(c, KEYS[1], KEYS[2], plan) then
    wake(ARGV[4], 0)
  end
  return {0, 0, #ended, unpack(ended)}
end
local now, default = now_ms(), tonumber(ARGV[3])
-- A few calls for the whole batch; per id only the payload's header is
-- read (a call per id would make 1000 ids take ~10 ms).
local keys = payloads_here(ARGV[1], ids)
local markers = markers_of(ARGV[7], ids, KEYS[5])
local gp = ARGV[6]
local grouped = redis.call('EXISTS', gp .. 'active') == 1
if grouped then
  check_group_types(gp)
end
local base = flow_base(ARGV[1], '')
local flows = flows_here(redis.call('HGET', KEYS[5], 'flows'), base, {})
redis.call('ZREM', KEYS[1], unpack(ids))
local records = redis.call('HMGET', KEYS[2], unpack(ids))
-- out: {timed_out, dead, aborted, then id and delivery count of each dead one}.
local reasons, retry, out, dead = {}, {}, {#ids, 0, #ended}, 0
-- back: {group, id, head, due} of each grouped id that goes back to its group.
local back, left = {}, {}
for i, id in ipairs(ids) do
  local key = keys[i]
  local n, due, deferred = parts(records[i])
  n, deferred = n or 1, deferred or 0
  local head = grouped and redis.pcall('GETRANGE', key, 0, HEADER_BYTES - 1)
  local group = grouped and group_of(head)
  if group then
    group_active(gp, group, -1)
    left[#left + 1] = group
  end
  reasons[#reasons + 1] = id
  if n > max_retries(key, default) then
    reasons[#reasons + 1] = record_from(n, false, deferred, ':timeout')
    bury(KEYS[4], id, key, now, tonumber(ARGV[5]))
    start_window(markers[1][i], markers[2][i])
    dead = dead + 1
    out[#out + 1] = id
    out[#out + 1] = n
  else
    -- Its next delivery is due now, when it goes to retry.
    reasons[#reasons + 1] = record_from(n, now, deferred, ':timeout')
    if group then
      back[#back + 1] = {group, id, head, due}
    else
      retry[#retry + 1] = id
    end
  end
end
redis.call('HSET', KEYS[2], unpack(reasons))
if #retry > 0 then
  redis.call('RPUSH', KEYS[3], unpack(retry))
end
for _, b in ipairs(back) do
  local ordered = group_limit(gp, b[1]) == 1
  group_return(gp, b[1], b[2], b[3], ordered and due_of(b[3], b[4]) or now, ordered)
end
-- ringed: a group went back to the ring (a slot of it freed).
local ringed = false
for _, group in ipairs(left) do
  ringed = group_wake(gp, group) or ringed
  group_forget_idle(gp, group)
end
ringed = abort_end(c, KEYS[1], KEYS[2], plan) or ringed
if #retry + #back > 0 or ringed then
  wake(ARGV[4], 0)
end
tally(KEYS[5], 'failed', #ids)
tally(KEYS[5], 'dead', dead)
if dead > 0 then
  local buried = {}
  for i = 4, #out, 2 do
    buried[#buried + 1] = out[i]
  end
  flow_done(flows, base, buried, 'd', false)
end
out[2] = dead
for _, id in ipairs(ended) do
  out[#out + 1] = id
end
return out
