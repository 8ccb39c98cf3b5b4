#!lua
--[[ send: (nothing) -> pending | ready (a grouped message due now)
Stores a batch of messages. Each one is written whole or not at all:
payload string (no TTL: a live message never expires on its own) and
pending entry. A caller-chosen id may have had an earlier message: its dead
dead entry and attempt record are removed, and its dead payload (TTL =
retention) is overwritten by the new one, without TTL. An attempt record of
an id neither dead nor processing whose payload is gone (deleted by
something else) means a list entry of it may remain: then the attemptshash is marked STALE, so claim skips that entry. Its attempt record is
created at its first delivery; until then its retry count travels in the
stored value ("<retry count>:<payload>"), which keeps a pending message
small. Every message gets "/<now ms>+<delay ms>" (when it was stored, by
Redis's clock, and how long after that it is due: what the consumer
reports as its send and due times) in the stored value's header, before
the ':'. A message sent with expire_after then gets "@<expires at ms>"
(Redis time now + delay + expire_after); claim buries it as expired once
that time has passed.

KEYS[1] pending zset   KEYS[2] attempts hash   KEYS[3] processing zset
KEYS[4] dead zset   KEYS[5] totals hash
KEYS[6..] msg string of each message, in order, then the staging string
of each staged message, in order, then the marker string of each message
sent with unique_for or throttle, in order
ARGV[1] wake-up channel
ARGV[2] the wire format version the caller speaks (docs/wire-format.md)
ARGV[3..] per message, 5 values: id, stored value
("<retry count>[;<backoff>]:<payload>"; '' for a staged message), delay
ms, expire_after ms (0: never expires), and 1 when the caller chose the id
(0: generated, so it has no past), followed by its mode when it has one
(docs/dedup.md): "u<ms>" unique_for (refused while the id is live or its
marker exists; stores the marker holding <ms>, without TTL until the
message finishes), "t<ms>" throttle (refused while the marker exists;
stores it with TTL <ms>), "d" debounce (a pending message of the id not
due yet is replaced, due at now + delay; a due one is live), "r" replace
(a pending message of the id not due yet is replaced, its due time kept),
"R" replace, due at now + delay; or "w"
(a parent of a flow, docs/workflows.md): while its set of children to
wait for ("<base>deps:<id>", filled before by flow_deps.lua) is not
empty, it is stored in the waiting zset ("<base>flow:waiting", scored by its
due time) instead of pending, its set loses the TTL flow_deps gave it,
and the totals get 'flows'; with the set
empty it is refused (7) unless live (the caller's flow_deps, pipelined
with this call, has not run yet). Those two keys
are built, not declared: one EXISTS touches them before the first write,
so during a slot migration the script fails with nothing written
(docs/design.md §2).
A staged message's value does not pass through ARGV: the caller SETs it
(with a TTL) at its staging string before the call, as it is to be
stored but with placeholders of 13 zeros for the times:
"/0000000000000+<delay ms>" and, with an expire_after,
"@0000000000000" after it. The script renames it to the msg string,
removes its TTL and writes the times over the placeholders, so the
payload is never copied: Lua would hash every byte of it (staged in
include/store.lua). A staged value not stored is deleted.
Fails with a "DQFORMAT ..." error, nothing written, when the totals'
'format' field holds another version than ARGV[2]; sets it to ARGV[2]
when it is missing and a message was stored. Fails with a "DQSHARDS ..."
error, nothing written, when the totals hold a shard count ('shards',
written by shards.lua): the queue is sharded, and these keys are its
unsharded layout, which its consumers do not read.
Counts 'sent' in the totals. A message with a priority ("!<p>" in its
header) sets the totals' 'prios' field, from when on promote reads the
priority of each message it moves (docs/priorities.md).
A message with a group ("=<group>" in its header) sets the totals'
'groups' field, from when on promote and claim serve groups
(docs/groups.md). One sent with delay 0 (and not debounced) while no
pending message is due goes to its group's zset instead of pending
(ready: so no other group's backlog waiting for promote is ahead of it),
which puts the group in the ring when it may start one; the group keys
are named after the pending key: its name less "pending", then "g" (the
group prefix, docs/wire-format.md).
A message stored with a marker (unique_for, throttle) sets the totals'
'markers' field, from when on the scripts that finish messages read
their markers (markers_of in include/markers.lua).
A value over BIG_VALUE bytes sets the totals' 'big' field, from when on
claim reads sizes before values (claim.lua).
Returns one status per message: 1 stored, 0 the id is already live
(pending, ready, retry or processing; the caller reports a duplicate),
2 its msg key holds another type (nothing written for it), 3 its staged
value is gone (expired or evicted before the call; nothing written: send
it again), 4 refused by the id's marker, 5 a pending message replaced
(debounce, replace; its attempt record kept, 'sent' not counted), 6
replace found no live message (nothing written), 7 a parent ("w") whose
set of children is empty (nothing written: send it again once flow_deps
has run), 8 a parent stored whose set held "!" (OVERTAKEN, taken out
now): a child finished before it was stored (link its children again,
which completes those that finished); then, for each 4 in
order, when the marker expires (ms of Redis time; -1: no TTL, its message
is live).
Publishes a wake-up when the batch holds a message due before every
message pending until now.
Idempotent: a re-sent call finds its own messages (with a generated id,
even dead since) and returns 0s (4s with unique_for or throttle); a
debounce or replace replaces again (5).
Complexity: O(M log N) with M = messages, N = size of pending (or of a
group's zset, plus O(log G) per group, G = groups, for those sent to
their group), plus the
bytes of the values in ARGV (staged ones: O(1) each; a replace whose
delay header gains a digit: O(payload size)).
]]
--- @include "checks"
--- @include "clock"
--- @include "finish"
--- @include "flows"
--- @include "group_moves"
--- @include "groups"
--- @include "header"
--- @include "priorities"
--- @include "store"
--- @include "wake"
-- Nothing may fail after the first write, so each key the batch may touch
-- after one is checked before it. Reads before the first write check their
-- keys on the way (`checked`): pending here, processing by the first
-- message's read, and totals by the read of its settings. TYPE calls go
-- only to keys touched later, by caller-chosen ids alone (a generated id
-- has no dead letter or attempt record of an earlier message): dead and
-- attempts. Every call adds to the round trip of a single awaited send.
local head = head_due(KEYS[1])
local m = (#ARGV - 2) / 5
local chosen, prio, big, grouped = false, false, false, false
-- Each message's value: ARGV's, or its staged one (read here, before the
-- first write, as its placeholders are checked), and its mode.
local values, modes, waits, own, s = {}, {}, {}, {}, 5 + m
for i = 1, m do
  local a = (i - 1) * 5 + 3
  local flag, kind, ms = string.match(ARGV[a + 4], '^([01])([utdrRw]?)(%d*)$')
  if not flag or (flag == '0' and kind ~= '' and kind ~= 'w') or ((kind == 'u' or kind == 't') ~= ((tonumber(ms) or 0) > 0))
    or (kind ~= 'u' and kind ~= 't' and ms ~= '') then
    error(redis.error_reply('ERR bad id flag and mode of ' .. ARGV[a] .. ': ' .. ARGV[a + 4]))
  end
  own[i] = flag == '1'
  chosen = chosen or own[i]
  if kind == 'w' then
    waits[i] = true
  elseif kind ~= '' then
    modes[i] = {kind, ms, false, KEYS[1]}
  end
  local value, size = ARGV[a + 1], #ARGV[a + 1]
  if value == '' then
    s = s + 1
    value = staged(KEYS[s], tonumber(ARGV[a + 3]) > 0, ARGV[a])
    size = value[4] or 0
    prio = prio or priority_of(value[5]) > 0
    grouped = grouped or group_of(value[5])
  else
    prio = prio or priority_of(value) > 0
    grouped = grouped or group_of(value)
  end
  big = big or size > BIG_VALUE
  values[i] = value
end
for i = 1, m do
  local kind = modes[i] and modes[i][1]
  if kind == 'u' or kind == 't' then
    s = s + 1
    modes[i][3] = KEYS[s]
  end
end
-- Only a caller-chosen id's message reads or writes dead and attempts.
local later = {}
if chosen then
  later = {KEYS[4], 'zset', KEYS[2], 'hash'}
end
check_types(unpack(later))
local settings = checked('hash', 'HMGET', KEYS[5], 'format', 'shards', 'flows')
local format = settings[1]
check_format(format, ARGV[2])
check_shards(settings[2], '1')
-- A parent's deps set and the waiting zset are built, not declared.
local flow_keys, deps = {}, {}
for i = 1, m do
  if waits[i] then
    local id = ARGV[(i - 1) * 5 + 3]
    local base = flow_base(KEYS[5 + i], id)
    deps[i] = base .. 'deps:' .. id
    flow_keys[#flow_keys + 1] = deps[i]
    flow_keys[#flow_keys + 1] = base .. 'flow:waiting'
  end
end
keys_here(flow_keys)
-- A parent whose set is empty was sent before flow_deps filled it (a
-- pipeline whose order broke): refused unless live (a re-send).
local unfilled = {}
for i = 1, m do
  if deps[i] and redis.call('SCARD', deps[i]) == 0 then
    unfilled[i] = redis.call('PTTL', KEYS[5 + i]) ~= -1
  end
end
local now = now_ms()
-- A grouped message due now (delay 0) goes straight to its group's zset
-- while nothing pending is due: then every message due before it is in
-- its group already, so its group's due order holds, and no other group's
-- backlog waiting for promote is ahead of it (docs/groups.md). direct[i]:
-- message i's group when it goes so.
local gp, direct, direct_groups = string.sub(KEYS[1], 1, -8) .. 'g', {}, {}
if grouped and not (head and tonumber(head) <= now) then
  local seen = {}
  for i = 1, m do
    local v = values[i]
    -- A debounced message stays pending, where the next send of its id
    -- finds it to replace.
    local g = tonumber(ARGV[(i - 1) * 5 + 5]) == 0 and not (modes[i] and modes[i][1] == 'd')
      and group_of(type(v) == 'table' and v[5] or v)
    if g then
      direct[i] = g
      if not seen[g] then
        seen[g], direct_groups[#direct_groups + 1] = true, g
      end
    end
  end
  if #direct_groups > 0 then
    check_group_types(gp)
    check_group_lists(gp, direct_groups)
  end
end
local out, held, earliest = {}, {}, false
-- Every stored message's pending entry goes in with one ZADD at the end;
-- grouped[g]: the score, id pairs of group g's messages that go straight
-- to it, order: those groups in the order they first get one.
local entries, sent, grouped_entries, order, marked, parked_any = {}, 0, {}, {}, false, false
for i = 1, m do
  local a = (i - 1) * 5 + 3
  local id = ARGV[a]
  local status, extra = 7, nil
  if not unfilled[i] then
    status, extra = store_message(KEYS[3], KEYS[4], KEYS[2], KEYS[5 + i], id, values[i], ARGV[a + 2],
      tonumber(ARGV[a + 3]), own[i], now, i == 1, modes[i])
  end
  local base = waits[i] and flow_base(KEYS[5 + i], id)
  local parked = status == 1 and base
  local g = status == 1 and not parked and direct[i]
  if parked then
    redis.call('ZADD', base .. 'flow:waiting', extra, id)
    -- Its set lives as long as it waits (flow_deps gave it a TTL).
    redis.call('PERSIST', deps[i])
    if not settings[3] then
      redis.call('HSET', KEYS[5], 'flows', 1)
      settings[3] = '1'
    end
    parked_any = true
  elseif g then
    if not grouped_entries[g] then
      grouped_entries[g], order[#order + 1] = {}, g
    end
    local e, v = grouped_entries[g], values[i]
    e[#e + 1] = prio_score(priority_of(type(v) == 'table' and v[5] or v), extra)
    e[#e + 1] = id
  elseif status == 1 or status == 5 then
    entries[#entries + 1] = extra
    entries[#entries + 1] = id
  end
  if (status == 1 or status == 5) and not parked then
    if not earliest or extra < earliest then
      earliest = extra
    end
  end
  if status == 1 then
    sent = sent + 1
    if modes[i] and modes[i][3] then
      marked = true
    end
  elseif status == 4 then
    held[#held + 1] = extra
  end
  -- A child's completion came first: its sender links the children again.
  if parked and redis.call('SREM', deps[i], OVERTAKEN) == 1 then
    status = 8
  end
  out[#out + 1] = status
end
if #entries > 0 then
  redis.call('ZADD', KEYS[1], unpack(entries))
end
if #order > 0 then
  groups_add(gp, grouped_entries, order)
end
wake_if_earlier(ARGV[1], earliest, head, now)
tally(KEYS[5], 'sent', sent)
-- A parent parked in waiting counts: it is promoted and claimed by its
-- priority and group once its children finished.
local stored = #entries > 0 or #order > 0 or parked_any
if prio and stored then
  redis.call('HSET', KEYS[5], 'prios', 1)
end
if big and stored then
  redis.call('HSET', KEYS[5], 'big', 1)
end
if marked then
  redis.call('HSET', KEYS[5], 'markers', 1)
end
if grouped and stored then
  redis.call('HSET', KEYS[5], 'groups', 1)
end
if not format and stored then
  redis.call('HSET', KEYS[5], 'format', ARGV[2])
end
for _, ms in ipairs(held) do
  out[#out + 1] = ms
end
return out
