#!lua flags=no-writes
--[[ list: read-only: one page of the messages in one state, with what an
operator wants to see of each. Pages are by position, so a queue that
changes between calls may shift entries across page boundaries.

KEYS[1] pending zset   KEYS[2] ready list   KEYS[3] processing zset
KEYS[4] retry list     KEYS[5] dead zset KEYS[6] attempts hash
KEYS[7] totals hash
ARGV[1] state: 1 to 5 for KEYS[n]   ARGV[2] offset   ARGV[3] page size (1 to 1000)
ARGV[4] msg key prefix   ARGV[5] bytes of each stored value to return (1 to 1000)
ARGV[6] priority zset: once the totals have 'prios', state 2 (ready) is
        the zset by rank, then the ready list (the order claim takes them)
ARGV[7] group key prefix: once the totals have 'groups', state 2 goes on
        with the groups' due messages (docs/groups.md), group by group in
        name order, each group's by rank (priority, then due order), among
        the first GROUPS_LISTED (1000) known groups: a page past them ends
        the listing
Returns {size of the state, now ms, next offset (-1: last page), then 6
values per message: id, score ("" in lists: due ms in pending, lease
deadline us in processing, time of death ms in dead), attempt record ("" if
none), the first ARGV[5] bytes of its stored value not counting its
headers section, which comes whole ("" if gone), its full
length, its TTL ms}. List entries whose payload is gone (cancelled) or
that live in another state are left out.
Idempotent: reads only.
Complexity: O(log N + page) for zsets, O(offset + page) for lists; the
ready state of a queue with groups O(log G) more per group walked, at
most GROUPS_LISTED, G = groups.
]]
--- @include "args"
--- @include "checks"
--- @include "clock"
--- @include "groups"
--- @include "header"
--- @include "records"
check_types(KEYS[1], 'zset', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'list', KEYS[5], 'zset',
  KEYS[6], 'hash', KEYS[7], 'hash')
local state, from, size, bytes = tonumber(ARGV[1]), tonumber(ARGV[2]), limit_arg(3), limit_arg(5)
local key, is_list = KEYS[state], state == 2 or state == 4
local page, total
local fields = state == 2 and redis.call('HMGET', KEYS[7], 'prios', 'groups') or {}
if fields[1] or fields[2] then
  local ranked = fields[1] and checked('zset', 'ZCARD', ARGV[6]) or 0
  page = {}
  if from < ranked then
    page = redis.call('ZRANGE', ARGV[6], from, from + size - 1)
  end
  local start, length = math.max(0, from - ranked), redis.call('LLEN', key)
  if #page < size and start < length then
    for _, id in ipairs(redis.call('LRANGE', key, start, start + size - #page - 1)) do
      page[#page + 1] = id
    end
  end
  total = ranked + length
  if fields[2] then
    -- Then the groups' due messages, group by group in name order, among
    -- the first GROUPS_LISTED known groups.
    local gp = ARGV[7]
    check_group_types(gp)
    total = total + tonumber(redis.call('GET', gp .. 'ready') or '0')
    local skip = math.max(0, from - ranked - length)
    for _, g in ipairs(redis.call('ZRANGE', gp .. 'known', 0, GROUPS_LISTED - 1)) do
      if #page >= size then
        break
      end
      local n = checked('zset', 'ZCARD', group_list(gp, g))
      if skip >= n then
        skip = skip - n
      else
        for _, id in ipairs(redis.call('ZRANGE', group_list(gp, g), skip, skip + size - #page - 1)) do
          page[#page + 1] = id
        end
        skip = 0
      end
    end
  end
elseif is_list then
  page, total = redis.call('LRANGE', key, from, from + size - 1), redis.call('LLEN', key)
else
  page, total = redis.call('ZRANGE', key, from, from + size - 1, 'WITHSCORES'), redis.call('ZCARD', key)
end
local step = is_list and 1 or 2
local count = #page / step
local out = {total, now_ms(), from + count < total and count == size and from + count or -1}
local stale = is_list and redis.call('HEXISTS', KEYS[6], STALE) == 1
local ids = {}
for i = 1, #page, step do
  ids[#ids + 1] = page[i]
end
local keys = payloads_here(ARGV[4], ids)
for j, id in ipairs(ids) do
  local i, msg = (j - 1) * step + 1, keys[j]
  local value = head_of(msg, bytes)
  local len = redis.pcall('STRLEN', msg)
  if type(value) ~= 'string' then
    value, len = '', 0
  end
  local moved = stale and (redis.call('ZSCORE', KEYS[1], id) or redis.call('ZSCORE', KEYS[5], id))
  if not (is_list and (len == 0 or moved)) then
    out[#out + 1] = id
    out[#out + 1] = is_list and '' or page[i + 1]
    out[#out + 1] = redis.call('HGET', KEYS[6], id) or ''
    out[#out + 1] = value
    out[#out + 1] = len
    out[#out + 1] = redis.call('PTTL', msg)
  end
end
return out
