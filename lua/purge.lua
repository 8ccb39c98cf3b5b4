#!lua flags=allow-oom
--[[ purge: every state -> (deleted)
Deletes up to ARGV[2] messages of the queue, whatever their state (a
running delivery's ack then finds its lease gone). Once no message is
left, deletes the attempts hash and the totals' counts and marks ('prios',
'big') (a paused queue
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
ARGV[4] marker key prefix: the unique_for and throttle markers of the
        removed ids go too (docs/dedup.md)
Returns the number of ids removed (list entries included).
Idempotent: a re-run deletes what is left.
Complexity: O(M log N) with M = removed; the last call O(R) with R = the
attempts hash's leftover fields.
]]
check_types(KEYS[1], 'zset', KEYS[2], 'list', KEYS[3], 'zset', KEYS[4], 'list', KEYS[5], 'zset',
  KEYS[6], 'hash', KEYS[7], 'hash')
local limit = limit_arg(2)
local sources = {KEYS[1], KEYS[3], KEYS[5], KEYS[2], KEYS[4]}
if redis.call('HEXISTS', KEYS[7], 'prios') == 1 then
  check_types(ARGV[3], 'zset')
  sources[#sources + 1] = ARGV[3]
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
  redis.call('DEL', KEYS[6])
  -- A paused queue stays paused and keeps its limits: only the counts go
  -- (a hash left without fields is gone).
  redis.call('HDEL', KEYS[7], 'sent', 'acked', 'failed', 'dead', 'expired', 'rate_used', 'prios', 'big')
  local settings = redis.call('HMGET', KEYS[7], 'paused', 'concurrency', 'rate', 'shards')
  if not (settings[1] or settings[2] or settings[3] or settings[4]) then
    redis.call('HDEL', KEYS[7], 'format')
  end
  return 0
end
local keys = payloads_here(ARGV[1], ids)
local markers = markers_of(ARGV[4], ids)[1]
for _, p in ipairs(pages) do
  local key, is_list, page = p[1], p[2], p[3]
  if #page > 0 and is_list then
    redis.call('LTRIM', key, #page, -1)
  elseif #page > 0 then
    redis.call('ZREM', key, unpack(page))
  end
end
forget(KEYS[6], keys, ids)
redis.call('DEL', unpack(markers))
return #ids
