-- Aborts (docs/handlers.md, "Aborting a running handler"). A message
-- aborted while in processing is marked in the queue's aborted hash,
-- B .. 'aborted' (B the queue's base, as in include/flows.lua): id -> ms of
-- the abort. The scripts that end or renew a delivery read the mark: ack,
-- nack and timeout end an aborted message as aborted, whatever its
-- delivery's outcome; extend tells the consumer. The mark goes with the
-- message, so the hash holds only messages in processing.
--- @include "checks"
--- @include "finish"
--- @include "flows"
--- @include "group_moves"
--- @include "groups"
--- @include "markers"

-- The aborted hash of the queue whose msg key prefix is `prefix`.
local function aborted_key(prefix)
  return flow_base(prefix, '') .. 'aborted'
end

-- The abort signal on the wake-up channel: "abort <id>" (ids hold no
-- whitespace). A consumer holding the delivery fires its handler's token;
-- an older consumer reads it as a wake-up. Ignored when refused, as wake.
local function abort_signal(channel, id)
  redis.pcall('PUBLISH', channel, 'abort ' .. id)
end

-- Which of `ids` (members of the processing zset KEYS[1]) are aborted,
-- as a set. One EXISTS of KEYS[1] (which holds them: it counts 1) with the
-- hash tells whether any abort is outstanding and, as keys_here, fails
-- before the script's first write while the slot migrates; only then one
-- HMGET. So a queue without aborts pays one call.
local function aborted_of(prefix, ids)
  local marked, key = {}, aborted_key(prefix)
  if #ids == 0 or redis.call('EXISTS', KEYS[1], key) < 2 then
    return marked
  end
  local found = redis.call('HMGET', key, unpack(ids))
  for i, id in ipairs(ids) do
    if found[i] then
      marked[id] = true
    end
  end
  return marked
end

-- Splits `ids` by `marked` (from aborted_of): {the others, the aborted}.
local function split_aborted(ids, marked)
  local others, aborted = {}, {}
  for _, id in ipairs(ids) do
    if marked[id] then
      aborted[#aborted + 1] = id
    else
      others[#others + 1] = id
    end
  end
  return others, aborted
end

-- Reads what ending `ids` (aborted, in processing) as aborted writes,
-- before the script's first write: c = {prefix = msg key prefix, markers
-- = marker key prefix, totals = totals hash, gp = group key prefix}.
-- Returns the plan abort_end carries out.
local function abort_plan(c, ids)
  local plan = {ids = ids, base = flow_base(c.prefix, '')}
  if #ids == 0 then
    return plan
  end
  plan.keys = payloads_here(c.prefix, ids)
  plan.notes = {}
  for _, id in ipairs(ids) do
    plan.notes[#plan.notes + 1] = plan.base .. 'progress:' .. id
    plan.notes[#plan.notes + 1] = plan.base .. 'log:' .. id
  end
  keys_here(plan.notes)
  plan.markers = markers_of(c.markers, ids, c.totals)
  plan.groups = {}
  if redis.call('EXISTS', c.gp .. 'active') == 1 then
    check_group_types(c.gp)
    plan.groups = groups_of(plan.keys)
  end
  plan.flows = flows_here(redis.call('HGET', c.totals, 'flows'), plan.base, ids)
  return plan
end

-- Ends the aborted messages of `plan` (abort_plan): out of processing
-- (`processing`), gone with their payloads, attempt records, progress,
-- log and marks; their markers' windows start; a child tells its parents
-- 'c', as a cancelled one; their groups' slots are freed. Counts 'aborted'
-- in the totals. True when a group went back to the ring (the caller
-- publishes a wake-up).
local function abort_end(c, processing, attempts, plan)
  local ids = plan.ids
  if #ids == 0 then
    return false
  end
  redis.call('ZREM', processing, unpack(ids))
  for i, key in ipairs(plan.markers[1]) do
    start_window(key, plan.markers[2][i])
  end
  forget(attempts, plan.keys, ids)
  redis.call('DEL', unpack(plan.notes))
  redis.call('HDEL', plan.base .. 'aborted', unpack(ids))
  flow_done(plan.flows, plan.base, ids, 'c', true)
  tally(c.totals, 'aborted', #ids)
  return groups_finished(c.gp, plan.groups)
end
