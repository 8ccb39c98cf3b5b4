#!lua flags=allow-oom
--[[ purge: every state -> (deleted)
Deletes up to ARGV[2] messages of the queue, whatever their state (a
running delivery's ack then finds its lease gone). Once no message is
left, deletes the attempts hash, the aborted hash (include/abort.lua) and the totals' counts and marks ('prios',
'big', 'groups', 'markers') (a paused queue
stays paused, its limits stay, a shard count recorded here by
shards.lua stays, and 'schedule_version' stays: no schedule version
repeats, change_schedule.lua). The wire format version ('format') stays with
the settings, as they are in that format; with nothing else left it goes
too, so a purged queue without settings that never had a schedule leaves
no key (and is no longer found); its next send writes the version again.
Call until it returns 0.

KEYS[1] pending zset   KEYS[2] ready list   KEYS[3] processing zset
KEYS[4] retry list     KEYS[5] dead zset KEYS[6] attempts hash
KEYS[7] totals hash
ARGV[1] msg key prefix   ARGV[2] limit (1 to 1000)
ARGV[3] priority zset (read only while the totals have 'prios'; the
        last call deletes that field too)
ARGV[4] group key prefix (read only while the totals have 'groups'):
        the zsets of the groups in the ring, the wait zset and the known
        groups (the first 100 of each) and of the paused groups and those with messages in
        processing (a first HSCAN page of each) are pages too; the last
        call deletes the ring, the wait zset, the counts in processing and
        of waiting messages, and forgets the first 1000 known groups left
        without settings (returning minus how many it forgot, when any:
        call again); the call that forgets none deletes the field 'groups' (a
        group's limits, rate and pause stay, as the queue's do, and keep
        'format' as they do)
ARGV[5] marker key prefix: the unique_for and throttle markers of the
        removed ids go too (docs/dedup.md)
While the totals have 'flows' (docs/workflows.md) the waiting zset is a
page too, and each removed id's children sets and links to parents go
with it; the last call deletes the outbox (and the sets of the cancelled
parents it names, the first 1000), the parents hash and the field
'flows' (the sets and hashes that grow with children, by UNLINK, which
frees a big one off Redis's main thread). Parents in other queues of the
purged children are not told:
they wait until cancelled. The flow keys are built, not declared: one
EXISTS touches them before the first write, so during a slot migration
the call fails with nothing written (docs/design.md §2).
Returns the number of ids removed (list entries included), or minus the
number of known groups forgotten.
The sweep, once that returned 0: with ARGV[6] a SCAN cursor ("0" to
start) and ARGV[7] the queue's key base ("<prefix>{<name>}:") escaped as
a SCAN pattern, the call only pages through this node's keys of the
queue (SCAN COUNT ARGV[2]) and deletes the result strings and the
progress strings and log lists (docs/results.md) it finds, but the
progress and log of an id in processing (a delivery that started since
still writes them). Returns {next cursor ("0": done), keys deleted}.
Idempotent: a re-run deletes what is left.
Complexity: O(M log N) with M = removed, plus O(log G) per group looked
at (at most 500, G = groups), or O(log G) for each of at most 1000 known
groups forgotten; the last call O(R) with R = the attempts
hash's leftover fields. The sweep: O(ARGV[2]) keys looked at per call
(SCAN), every key of the node once over all its calls.
]]
--- @include "abort"
--- @include "args"
--- @include "checks"
--- @include "finish"
--- @include "flows"
--- @include "group_moves"
--- @include "groups"
--- @include "markers"
check_types(KEYS[1], 'zset', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'list', KEYS[5], 'zset',
  KEYS[6], 'hash', KEYS[7], 'hash')
local limit = limit_arg(2)
local base = flow_base(ARGV[1], '')
if ARGV[6] then
  -- The sweep: one SCAN page. A key SCAN returns is on this node.
  local reply, gone = redis.call('SCAN', ARGV[6], 'MATCH', ARGV[7] .. '*', 'COUNT', limit), {}
  for _, key in ipairs(reply[2]) do
    local kind, id = string.match(string.sub(key, #base + 1), '^(%a+):(.*)$')
    if kind == 'result' or ((kind == 'progress' or kind == 'log') and not redis.call('ZSCORE', KEYS[3], id)) then
      gone[#gone + 1] = key
    end
  end
  if #gone > 0 then
    redis.call('DEL', unpack(gone))
  end
  return {reply[1], #gone}
end
local sources = {KEYS[1], KEYS[3], KEYS[5], KEYS[2], KEYS[4]}
if redis.call('HEXISTS', KEYS[7], 'prios') == 1 then
  check_types(ARGV[3], 'zset')
  sources[#sources + 1] = ARGV[3]
end
local flows = redis.call('HEXISTS', KEYS[7], 'flows') == 1
if flows then
  check_types(base .. 'flow:waiting', 'zset')
  sources[#sources + 1] = base .. 'flow:waiting'
end
local gp = ARGV[4]
local grouped = redis.call('HEXISTS', KEYS[7], 'groups') == 1
-- of[key]: the group whose zset `key` is.
local of = {}
if grouped then
  check_group_types(gp)
  local names = {}
  local function add(g)
    local key = group_list(gp, g)
    if g ~= '' and not of[key] then
      of[key], names[#names + 1] = g, g
      sources[#sources + 1] = key
    end
  end
  for _, zset in ipairs({'ring', 'wait', 'known'}) do
    for _, g in ipairs(redis.call('ZRANGE', gp .. zset, 0, 99)) do
      add(g)
    end
  end
  for _, hash in ipairs({'paused', 'active'}) do
    local fields = redis.call('HSCAN', gp .. hash, 0, 'COUNT', 100)[2]
    for i = 1, #fields, 2 do
      add(fields[i])
    end
  end
  check_group_lists(gp, names)
end
-- Reads every page first, so the payloads are checked before the first write.
local ids, pages = {}, {}
for _, key in ipairs(sources) do
  local want = limit - #ids
  if want <= 0 then
    break
  end
  local is_list = key == KEYS[2] or key == KEYS[4]
  local page = redis.call(is_list and 'LRANGE' or 'ZRANGE', key, 0, want - 1)
  pages[#pages + 1] = {key, is_list, page}
  for _, id in ipairs(page) do
    ids[#ids + 1] = id
  end
end
if #ids == 0 then
  keys_here({aborted_key(ARGV[1])})
  if flows then
    local sets = {base .. 'outbox', base .. 'parents'}
    for _, entry in ipairs(redis.call('ZRANGE', base .. 'outbox', 0, MAX_LIMIT - 1)) do
      local id = string.match(entry, '^x (%S+)$')
      sets[#sets + 1] = id and base .. 'deps:' .. id or nil
    end
    keys_here(sets)
    redis.call('UNLINK', unpack(sets))
  end
  redis.call('DEL', KEYS[6], aborted_key(ARGV[1]))
  if grouped then
    redis.call('DEL', gp .. 'ring', gp .. 'wait', gp .. 'active', gp .. 'ready')
    local before = redis.call('ZCARD', gp .. 'known')
    for _, g in ipairs(redis.call('ZRANGE', gp .. 'known', 0, 999)) do
      group_forget_idle(gp, g)
    end
    local forgotten = before - redis.call('ZCARD', gp .. 'known')
    if forgotten > 0 then
      -- More known groups may be left: the next call forgets them (and
      -- the counts and marks go once none is forgotten).
      return -forgotten
    end
  end
  -- A paused queue stays paused and keeps its limits: only the counts go
  -- (a hash left without fields is gone).
  redis.call('HDEL', KEYS[7], 'sent', 'acked', 'failed', 'dead', 'expired', 'rate_used', 'prios', 'big', 'groups',
    'markers', 'flows')
  local settings = redis.call('HMGET', KEYS[7], 'paused', 'concurrency', 'rate', 'shards')
  local group_settings = redis.call('EXISTS', gp .. 'limits', gp .. 'rates', gp .. 'paused') > 0
  if not (settings[1] or settings[2] or settings[3] or settings[4] or group_settings) then
    redis.call('HDEL', KEYS[7], 'format')
  end
  return 0
end
local keys = payloads_here(ARGV[1], ids)
local markers = markers_of(ARGV[5], ids, KEYS[7])[1]
local sets = {}
if flows then
  sets = {base .. 'flow:waiting', base .. 'parents'}
  for _, id in ipairs(ids) do
    sets[#sets + 1] = base .. 'deps:' .. id
    sets[#sets + 1] = base .. 'children:' .. id
  end
  keys_here(sets)
end
for _, p in ipairs(pages) do
  local key, is_list, page = p[1], p[2], p[3]
  if #page > 0 and is_list then
    redis.call('LTRIM', key, #page, -1)
  elseif #page > 0 then
    redis.call('ZREM', key, unpack(page))
    if of[key] then
      -- A group emptied goes as it would by a cancel.
      group_ready(gp, -#page)
      group_forget_idle(gp, of[key])
    end
  end
end
forget(KEYS[6], keys, ids)
if #markers > 0 then
  redis.call('DEL', unpack(markers))
end
if flows then
  -- Their sets, and their own links to parents (not told, see above).
  redis.call('UNLINK', unpack(sets, 3))
  redis.call('HDEL', base .. 'parents', unpack(ids))
end
return #ids
