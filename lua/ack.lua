#!lua flags=allow-oom
--[[ ack: processing -> (deleted)
Finishes a batch of deliveries. Each id is acked only while its lease is
the current one, so a late ack of a delivery that timed out and was
redelivered deletes nothing.

KEYS[1] processing zset   KEYS[2] attempts hash   KEYS[3] totals hash
ARGV[1] msg key prefix   ARGV[2] group key prefix   ARGV[3] marker key prefix
ARGV[4..] pairs of id, lease
Returns one value per pair, in order: 1 acked, 3 acked and its
completion recorded in the outbox for its parent (the caller runs the
relay, docs/workflows.md), 0 lease lost (the message
was taken back: it is or will be delivered again), 2 nothing left to ack
(neither in processing nor stored: finished already, by an earlier run of this
call whose reply was lost, or by the ack of a redelivery). Counts 'acked'
in the totals. Starts the window of each acked message's unique_for
marker (docs/dedup.md).
While any group has a message in processing (the group prefix's 'active'
hash exists), each acked id's header is read for its group: the group's
count in processing goes down, and the group goes back to the ring when
it may start another (prelude.lua, docs/groups.md).
While the totals have 'flows', an acked id that is a child records its
completion in the outbox and an acked parent's children results go
(flow_done in prelude.lua, docs/workflows.md).
Idempotent: a re-run finds nothing left and returns 2s, so a re-sent ack
is not mistaken for a lost lease.
Complexity: O(M log N) with M = pairs, in eight calls whatever M, plus one
EXISTS per id not in processing and one PEXPIRE per unique_for marker;
with groups in processing one GETRANGE per acked id and O(log G) per
group, G = groups; with flows four calls more and O(links).
]]
check_types(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash')
local ids, out = ids_of(4, 2), {}
if #ids == 0 then
  return {}
end
local scores = redis.call('ZMSCORE', KEYS[1], unpack(ids))
local done, absent = {}, {}
for i, id in ipairs(ids) do
  if scores[i] and tonumber(scores[i]) == tonumber(ARGV[2 * i + 3]) then
    done[#done + 1] = id
    out[i] = 1
  else
    out[i] = 0
    if not scores[i] then
      absent[#absent + 1] = i
    end
  end
end
-- Not in processing: taken back (still stored) or finished (not stored).
if #absent > 0 then
  local absent_ids = {}
  for j, i in ipairs(absent) do
    absent_ids[j] = ids[i]
  end
  for j, key in ipairs(payloads_here(ARGV[1], absent_ids)) do
    if redis.call('EXISTS', key) == 0 then
      out[absent[j]] = 2
    end
  end
end
if #done > 0 then
  local keys = payloads_here(ARGV[1], done)
  local markers = markers_of(ARGV[3], done, KEYS[3])
  local finished = {}
  if redis.call('EXISTS', ARGV[2] .. 'active') == 1 then
    check_group_types(ARGV[2])
    finished = groups_of(keys)
  end
  redis.call('ZREM', KEYS[1], unpack(done))
  for i, key in ipairs(markers[1]) do
    start_window(key, markers[2][i])
  end
  forget(KEYS[2], keys, done)
  groups_finished(ARGV[2], finished)
  local recorded = flow_done(KEYS[3], flow_base(ARGV[1], ''), done, 'a', true)
  for i, id in ipairs(ids) do
    if out[i] == 1 and recorded[id] then
      out[i] = 3
    end
  end
  tally(KEYS[3], 'acked', #done)
end
return out
