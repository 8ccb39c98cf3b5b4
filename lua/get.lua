#!lua flags=no-writes
--[[ get: read-only: one message by id, with its state, taken atomically.

KEYS[1] pending zset   KEYS[2] ready list   KEYS[3] processing zset
KEYS[4] retry list     KEYS[5] dead zset KEYS[6] attempts hash
KEYS[7] msg string of this id   KEYS[8] result string   KEYS[9] progress string
KEYS[10] log list
ARGV[1] id   ARGV[2] priority zset (read for a value with a priority)
ARGV[3] group key prefix (its group's zset read for a value with a group)
ARGV[4] waiting zset (docs/workflows.md)
Returns {state, score, attempt record, stored value, TTL ms, now ms,
result, progress, log lines} (result and progress "" when there is none):
state 1 to 5 is the KEYS[n] holding the id (0: none; 2 also for the
priority zset, the zset of the message's group, and pending once due:
a due message there waits only for a promote, and stats counts it as
ready; 9 the waiting zset); score as in `list` ("" for lists; its due ms
for a due one in pending); "" for a missing record or value.
Idempotent: reads only.
Complexity: O(log N) when the id is in a zset (its group's too); otherwise O(L) to find it
in the ready and retry lists (LPOS stops at the first match); plus O(G)
for the G log lines.
]]
--- @include "checks"
--- @include "clock"
--- @include "groups"
--- @include "header"
check_types(KEYS[1], 'zset', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'list', KEYS[5], 'zset',
  KEYS[6], 'hash')
local id = ARGV[1]
local value = redis.pcall('GET', KEYS[7])
if type(value) ~= 'string' then
  value = ''
end
local state, score = 0, ''
local now = now_ms()
for _, n in ipairs({1, 3, 5}) do
  local s = redis.call('ZSCORE', KEYS[n], id)
  if s then
    state, score = n, s
    break
  end
end
if state == 1 and tonumber(score) <= now then
  -- Due, only not yet moved out of pending by a consumer's promote: ready,
  -- as stats counts it.
  state = 2
end
if state == 0 and value ~= '' and checked('zset', 'ZSCORE', ARGV[4], id) then
  state = 9
elseif state == 0 and value ~= '' then
  local group = group_of(value)
  if group and checked('zset', 'ZSCORE', group_list(ARGV[3], group), id) then
    state = 2
  elseif redis.call('LPOS', KEYS[4], id) then
    state = 4
  elseif redis.call('LPOS', KEYS[2], id)
    or (priority_of(value) > 0 and checked('zset', 'ZSCORE', ARGV[2], id)) then
    state = 2
  end
end
local function text(key)
  local v = redis.pcall('GET', key)
  return type(v) == 'string' and v or ''
end
local lines = redis.pcall('LRANGE', KEYS[10], 0, -1)
if lines.err then
  lines = {}
end
return {state, score, redis.call('HGET', KEYS[6], id) or '', value, redis.call('PTTL', KEYS[7]), now,
  text(KEYS[8]), text(KEYS[9]), lines}
