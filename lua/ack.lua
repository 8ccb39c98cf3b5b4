#!lua flags=allow-oom
--[[ ack: processing -> (deleted), and waiting parents of this slot -> ready | pending
Finishes a batch of deliveries. Each id is acked only while its lease is
the current one, so a late ack of a delivery that timed out and was
redelivered deletes nothing.

KEYS[1] processing zset   KEYS[2] attempts hash   KEYS[3] totals hash
KEYS[4] waiting zset (flows' parents)   KEYS[5] pending zset   KEYS[6] dead zset
ARGV[1] msg key prefix   ARGV[2] group key prefix   ARGV[3] marker key prefix
ARGV[4] result key prefix   ARGV[5] progress key prefix   ARGV[6] log key prefix
ARGV[7] waiters zset   ARGV[8] done channel
ARGV[9] result retention ms (0: keep no result)   ARGV[10] wake-up channel
ARGV[11] log lines kept   ARGV[12] TTL ms of the notes of deliveries not
acked here (as note.lua's)   ARGV[13] N, the notes
ARGV[14..13+4N] the notes, four each as in note.lua: running deliveries'
progress and log lines, written first, each fenced by its delivery's
lease (include/notes.lua); a delivery's notes sent with its ack get the
result retention as TTL at once (with retention 0 they are not written)
ARGV[14+4N..] triples of id, lease, outcome: "" (no result, no progress
or log written), else a flag then the result bytes: "r" a result, "n" no
result but progress or log written, "b" both
Returns one value per triple, in order, then one per note as note.lua,
then for each 3 in order the outbox entries it recorded (an array; the
consumer delivers those of parents in other slots at once,
docs/workflows.md):
1 acked, 4 aborted (the message
was aborted while its handler ran: it ends as aborted whatever the
handler returned, include/abort.lua; no result kept, its progress and
log deleted, its parents told as of a cancelled child), 3 acked and its
completion recorded in the outbox for a parent in another slot (the
caller runs the relay, docs/workflows.md), 0 lease lost (the message
was taken back: it is or will be delivered again), 2 nothing left to ack
(neither in processing nor stored: finished already, by an earlier run of this
call whose reply was lost, or by the ack of a redelivery). Counts 'acked'
in the totals. Starts the window of each acked message's unique_for
marker (docs/dedup.md).
While any group has a message in processing (the group prefix's 'active'
hash exists), each acked id's header is read for its group: the group's
count in processing goes down, and the group goes back to the ring when
it may start another (include/groups.lua, docs/groups.md): then it publishes a
wake-up (0), so a consumer anywhere starts the group's next message at
once.
Each acked id's result is written to its result key with the retention
as TTL (one SET each). The progress and log keys of each acked id whose
delivery wrote them get the retention as TTL (deleted when it is 0). These
keys, the acked ids' payloads and, with flows, the flow keys it writes
are built, not declared: before the first write one EXISTS touches them
all with the processing zset, so during a slot migration the script
fails with nothing written (docs/design.md §2). While anybody waits for a result (the waiters zset exists) each
acked id waited for is published on the done channel and leaves the zset.
While the totals have 'flows', an acked id that is a child completes
its parents in this slot here, as flow_complete does (complete_parents'
two steps in include/completions.lua: planned before the first write,
applied after the ack's writes; publishes as flow_complete does), and
records its completion for parents in other slots in the outbox; an
acked parent's children results go (flow_done in include/flows.lua,
docs/workflows.md).
Idempotent: a re-run finds nothing left and returns 2s, so a re-sent ack
is not mistaken for a lost lease (its notes find no lease: 0s).
Complexity: O(M log N) with M = triples, in ten calls whatever M, plus one
EXISTS per id not in processing, one PEXPIRE per unique_for marker, one
EXISTS of the payloads, results, progress and log keys, one SET per result
and two PEXPIREs per delivery that wrote progress or log (none for a
key its notes in this call wrote); the notes as note.lua (a note of a
delivery acked here reads no lease: its ack's read serves);
with groups in processing one GETRANGE per acked id, four calls for
their groups (include/group_moves.lua) and O(log G) for each group not
in the ring, G = groups, and one PUBLISH when a group went back to the ring;
with waiters one ZMSCORE and a PUBLISH per acked id waited for; with
flows four calls more and O(links), and for parents in this slot
flow_complete's calls; with aborted ids about ten calls more
and one PEXPIRE per unique_for marker of theirs.
]]
--- @include "abort"
--- @include "args"
--- @include "checks"
--- @include "completions"
--- @include "finish"
--- @include "flows"
--- @include "group_moves"
--- @include "groups"
--- @include "markers"
--- @include "notes"
--- @include "wake"
-- The completions of `ids` (acked, links as flow_links read them) for
-- parents in this slot, whose base is `base`, as complete_parents takes
-- them ({parent id, child, 'a' .. policy, result}), and the links left
-- for flow_done to record: an id whose links all went keeps '', so that
-- flow_done still drops its entry in the parents hash.
local function split_links(base, ids, links, results)
  local list, rest, here = {}, {}, ' ' .. base .. ' '
  for i, id in ipairs(ids) do
    rest[i] = links[i]
    if links[i] and string.find(links[i], here, 1, true) then
      local others = {}
      for link in string.gmatch(links[i], '[^\n]+') do
        local policy, parent_base, parent = string.match(link, '^(%a) (%S+) (%S+)$')
        if parent_base == base then
          list[#list + 1] = {parent, base .. ' ' .. id, 'a' .. policy, results[id] or ''}
        else
          others[#others + 1] = link
        end
      end
      rest[i] = table.concat(others, '\n')
    end
  end
  return list, rest
end

check_types(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash')
local n = tonumber(ARGV[13])
local first = 14 + 4 * n
local ids, out = ids_of(first, 3), {}
local retention = tonumber(ARGV[9])
if #ids == 0 and n == 0 then
  return {}
end
local scores = {}
if #ids > 0 then
  scores = redis.call('ZMSCORE', KEYS[1], unpack(ids))
end
local held = {}
for i, id in ipairs(ids) do
  if scores[i] and tonumber(scores[i]) == tonumber(ARGV[3 * i + first - 2]) then
    held[#held + 1] = id
  end
end
local marked = aborted_of(ARGV[1], held)
local done, ended, absent, results, noted, built, acking = {}, {}, {}, {}, {}, {}, {}
-- The result each acked id keeps, which a parent in this slot reads.
local kept_result = {}
-- Each key built once into `built`: an acked id's notes in this call name
-- the keys its flag names too.
local seen = {}
local function build(key)
  if not seen[key] then
    seen[key], built[#built + 1] = true, key
  end
end
for i, id in ipairs(ids) do
  local lease, kept = ARGV[3 * i + first - 2], ARGV[3 * i + first - 1]
  if marked[id] and scores[i] and tonumber(scores[i]) == tonumber(lease) then
    ended[#ended + 1] = id
    out[i] = 4
  elseif scores[i] and tonumber(scores[i]) == tonumber(lease) then
    done[#done + 1] = id
    acking[id] = lease
    out[i] = 1
    local flag = string.sub(kept, 1, 1)
    if retention > 0 and (flag == 'r' or flag == 'b') then
      kept_result[id] = string.sub(kept, 2)
      results[#results + 1] = {ARGV[4] .. id, kept_result[id]}
      build(ARGV[4] .. id)
    end
    if flag == 'n' or flag == 'b' then
      noted[#noted + 1] = {ARGV[5] .. id, ARGV[6] .. id}
      build(ARGV[5] .. id)
      build(ARGV[6] .. id)
    end
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
local c = {prefix = ARGV[1], markers = ARGV[3], totals = KEYS[3], gp = ARGV[2]}
local recorded = {}
local plan = abort_plan(c, ended)
local keys, markers, finished, base, flows, links
if #done > 0 then
  -- Checked with the other built keys, before the first write.
  keys = payload_keys(ARGV[1], done)
  for _, key in ipairs(keys) do
    build(key)
  end
  markers = markers_of(ARGV[3], done, KEYS[3])
  finished = {}
  if redis.call('EXISTS', ARGV[2] .. 'active') == 1 then
    check_group_types(ARGV[2])
    finished = groups_of(keys)
  end
end
local note_keys = {}
for i = 1, n do
  local a = 14 + 4 * (i - 1)
  local prefix = ARGV[a + 2] == 'p' and ARGV[5] or ARGV[6]
  note_keys[i] = prefix .. ARGV[a]
  build(note_keys[i])
end
if #done > 0 then
  base = flow_base(ARGV[1], '')
  flows = redis.call('HGET', KEYS[3], 'flows')
  if flows then
    for _, key in ipairs(flow_keys(base, done)) do
      build(key)
    end
  end
end
keys_here(built)
-- Completions of parents in this slot are applied here, planned before
-- the first write; those of parents elsewhere go to the outbox.
local completing
if flows then
  links = flow_links(base, done)
  local list
  list, links = split_links(base, done, links, kept_result)
  if #list > 0 then
    -- The flow keys are checked: built above, and the outbox by flow_links.
    completing = plan_completions({KEYS[4], KEYS[5], KEYS[6], KEYS[2], KEYS[3]}, ARGV[1], list, flows)
  end
end
-- The notes go first: the acks below end their leases.
local notes_out, fresh = write_notes(KEYS[1], note_keys, 14, n, tonumber(ARGV[11]), ARGV[12], acking, retention)
if #done > 0 then
  redis.call('ZREM', KEYS[1], unpack(done))
  for i, key in ipairs(markers[1]) do
    start_window(key, markers[2][i])
  end
  forget(KEYS[2], keys, done)
  for _, r in ipairs(results) do
    redis.call('SET', r[1], r[2], 'PX', retention)
  end
  for _, both in ipairs(noted) do
    for _, key in ipairs(both) do
      if retention == 0 then
        redis.call('DEL', key)
      elseif not fresh[key] then
        redis.call('PEXPIRE', key, retention)
      end
    end
  end
  if redis.call('EXISTS', ARGV[7]) == 1 then
    local waited = redis.call('ZMSCORE', ARGV[7], unpack(done))
    local told = {}
    for i, id in ipairs(done) do
      if waited[i] then
        redis.call('PUBLISH', ARGV[8], id)
        told[#told + 1] = id
      end
    end
    if #told > 0 then
      redis.call('ZREM', ARGV[7], unpack(told))
    end
  end
  if groups_finished(ARGV[2], finished) then
    wake(ARGV[10], 0)
  end
  recorded = flow_done(flows, base, done, 'a', true, links)
  if completing then
    -- An acked child never makes its parent a dead letter: no retention.
    apply_completions(completing, ARGV[10], 0)
  end
  for i, id in ipairs(ids) do
    if out[i] == 1 and recorded[id] then
      out[i] = 3
    end
  end
  tally(KEYS[3], 'acked', #done)
end
if abort_end(c, KEYS[1], KEYS[2], plan) then
  wake(ARGV[10], 0)
end
for i = 1, n do
  out[#ids + i] = notes_out[i]
end
for i, id in ipairs(ids) do
  if out[i] == 3 then
    out[#out + 1] = recorded[id]
  end
end
return out
