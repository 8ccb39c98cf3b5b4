#!lua flags=allow-oom
--[[ cancel: pending | ready | retry | dead -> (deleted); abort: also processing -> processing (aborted)
Deletes a message that is waiting for delivery. A message being processed
(in processing) is left alone by a cancel: its running delivery decides its
fate. An abort (ARGV[3] 'abort') marks it aborted instead, in the aborted
hash (include/abort.lua), and publishes the abort signal on the wake-up
channel ARGV[4], so the consumer holding it tells its handler; its ack,
nack or lease's end then ends it as aborted. An id left
in the ready or retry list is skipped when claim pops it (cancel marks the
attempts hash STALE so claim looks), so cancel never scans a list.

KEYS[1] pending zset   KEYS[2] attempts hash   KEYS[3] processing zset
KEYS[4] dead zset   KEYS[5] totals hash   KEYS[6] msg string of this id
KEYS[7] marker string of this id
ARGV[1] id   ARGV[2] group key prefix   ARGV[3] 'abort' for an abort
(absent: a cancel)   ARGV[4] wake-up channel (an abort's)
A message of a group (its header says which) waiting in its group's zset
is removed from there (docs/groups.md); an empty group's zset goes with
it, and claim drops the group from the ring when it finds it empty.
Starts the window of its unique_for marker when it removed one
(docs/dedup.md). Deletes its progress and log keys (written by an earlier
delivery, docs/results.md; built from the msg key's base, "<base>progress:<id>"
and "<base>log:<id>"): nothing of a cancelled message is left.
The keys it builds (those, and with flows the flow keys) are touched with
one EXISTS before its first write, so during a slot migration it fails
with nothing written (docs/design.md §2).
While the totals have 'flows' (docs/workflows.md): a parent waiting for
its children (in the waiting zset) is removed from there, with its
finished children's results, and "x <id>" goes to the outbox while it
still waits for some: the relay cancels those children, then drops its
set of them. A cancelled child records 'c' in the outbox for its parents
(flow_done in include/flows.lua).
Returns 1 when a waiting message was removed, 0 when the id is unknown
or (a cancel) being processed; an abort of a message being processed: 2
marked aborted, 3 aborted already (nothing written).
Idempotent: a re-run finds nothing and returns 0 (an abort: 3).
Complexity: O(log N), with flows O(links) more.
]]
--- @include "abort"
--- @include "checks"
--- @include "clock"
--- @include "flows"
--- @include "group_moves"
--- @include "groups"
--- @include "header"
--- @include "markers"
--- @include "records"
check_types(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'zset', KEYS[4], 'zset', KEYS[5], 'hash')
local id = ARGV[1]
if redis.call('ZSCORE', KEYS[3], id) then
  if ARGV[3] ~= 'abort' then
    return 0
  end
  local key = aborted_key(string.sub(KEYS[6], 1, #KEYS[6] - #id))
  keys_here({key})
  if redis.call('HEXISTS', key, id) == 1 then
    return 3
  end
  redis.call('HSET', key, id, now_ms())
  abort_signal(ARGV[4], id)
  return 2
end
local group = group_of(redis.pcall('GETRANGE', KEYS[6], 0, HEADER_BYTES - 1))
if group then
  check_group_types(ARGV[2])
  check_group_lists(ARGV[2], {group})
end
local base = flow_base(KEYS[6], id)
local flows = flows_here(redis.call('HGET', KEYS[5], 'flows'), base, {id})
local notes = {base .. 'progress:' .. id, base .. 'log:' .. id}
keys_here(flows and {notes[1], notes[2], base .. 'flow:waiting', base .. 'deps:' .. id} or notes)
local payload = redis.call('DEL', KEYS[6])
local waiting = redis.call('ZREM', KEYS[1], id) + redis.call('ZREM', KEYS[4], id)
if flows and redis.call('ZREM', base .. 'flow:waiting', id) == 1 then
  waiting = waiting + 1
  if redis.call('EXISTS', base .. 'deps:' .. id) == 1 then
    redis.call('ZADD', base .. 'outbox', now_ms(), 'x ' .. id)
  end
end
if group then
  local removed = redis.call('ZREM', group_list(ARGV[2], group), id)
  group_ready(ARGV[2], -removed)
  group_forget_idle(ARGV[2], group)
  waiting = waiting + removed
end
redis.call('HDEL', KEYS[2], id)
if payload == 1 and waiting == 0 then
  -- Neither pending nor dead: it waits in the ready or retry list, where
  -- its entry stays until claim pops it.
  redis.call('HSET', KEYS[2], STALE, 1)
end
if payload + waiting > 0 then
  redis.call('DEL', unpack(notes))
  flow_done(flows, base, {id}, 'c', true)
  start_window(KEYS[7], redis.pcall('GET', KEYS[7]))
  return 1
end
return 0
