#!lua flags=allow-oom
--[[ flow_link: links children to a parent (docs/workflows.md)
Records the parent's link with each child (in the child's queue, whose
slot this script runs on), from when on the child's ack, death or cancel
records its completion in the outbox (flow_done in include/flows.lua). A child
may have several parents: a link already there is not added twice.

KEYS[1] parents hash   KEYS[2] dead zset   KEYS[3] totals hash
ARGV[1] msg key prefix
ARGV[2] the link: "<policy> <parent's queue base> <parent id>", policy
'f' (a dead child fails the parent), 'i' (ignored), 'w' (the parent
waits for it to be requeued and finish) or 'r' (a dead child removes the
parent: a cohort's on_success); then " new" when the children's send
was pipelined with this call and may not have run yet (not stored in the
link)
ARGV[3..] child ids (1 to 1000)
Returns one status per child: 1 linked (live, or dead under 'w'), 2 dead
(not linked: the parent takes it as dead), 0 not stored (finished or
never sent: the parent takes it as finished, acked), 3 not stored but
its result kept (acked): its completion is recorded in the outbox as its
ack would have, so the relay delivers it with the result, bounded by
bytes as any; with " new", 4 instead of 0, 2 or 3: nothing written for
it (the caller links it again once its send has returned, when its
state is not a leftover of an earlier message of its id). Sets the
totals' 'flows' when it linked or recorded one.
Its payloads, results ("<base>result:<id>") and outbox are built, not
declared: one EXISTS touches them first (docs/design.md §2); the outbox's
type is checked before the first write when an entry is due. One more
over the payloads says whether every child is stored; only when not is
each child's read.
Idempotent: a re-run finds its links and returns the same statuses (a
child that finished since: 0, 2 or 3; a 3 records its entry again, which
the parent's set then takes once).
Complexity: O(M log N) with M = children, plus O(links) of each; one
EXISTS more per child when not all are stored, and one more for each not
stored.
]]
--- @include "args"
--- @include "checks"
--- @include "clock"
--- @include "flows"
-- The parents hash and the dead zset are checked by their reads below,
-- the totals by this one.
local flows = checked('hash', 'HGET', KEYS[3], 'flows')
local link, new = string.match(ARGV[2], '^([fiwr] %S+ %S+)$'), false
if not link then
  link = string.match(ARGV[2], '^([fiwr] %S+ %S+) new$')
  new = true
end
if not link or #ARGV < 3 or #ARGV - 2 > MAX_LIMIT then
  error(redis.error_reply('ERR a link "<f|i|w|r> <base> <id>[ new]" and 1 to ' .. MAX_LIMIT .. ' children'))
end
local policy = string.sub(link, 1, 1)
local ids = ids_of(3, 1)
local keys = payload_keys(ARGV[1], ids)
local base = flow_base(ARGV[1], '')
local built = {base .. 'outbox'}
for i, id in ipairs(ids) do
  built[#built + 1] = keys[i]
  built[#built + 1] = base .. 'result:' .. id
end
keys_here(built)
-- All stored (the common case): no child needs a read of its own.
local all_stored = redis.call('EXISTS', unpack(keys)) == #keys
local dead = checked('zset', 'ZMSCORE', KEYS[2], unpack(ids))
local links = checked('hash', 'HMGET', KEYS[1], unpack(ids))
local out, writes, entries, now = {}, {}, {}, false
for i, id in ipairs(ids) do
  local stored = all_stored or redis.call('EXISTS', keys[i]) == 1
  if new and (not stored or dead[i]) then
    out[i] = 4
  elseif not stored then
    out[i] = 0
    if redis.call('EXISTS', base .. 'result:' .. id) == 1 then
      out[i] = 3
      now = now or now_ms()
      entries[#entries + 1], entries[#entries + 2] = now, 'a ' .. id .. ' ' .. link
    end
  elseif dead[i] and policy ~= 'w' then
    out[i] = 2
  else
    out[i] = 1
    local have = links[i]
    if not have then
      writes[#writes + 1], writes[#writes + 2] = id, link
    elseif not string.find('\n' .. have .. '\n', '\n' .. link .. '\n', 1, true) then
      writes[#writes + 1], writes[#writes + 2] = id, have .. '\n' .. link
    end
  end
end
if #entries > 0 then
  -- Written after the links: checked before them.
  check_types(base .. 'outbox', 'zset')
end
if #writes > 0 then
  redis.call('HSET', KEYS[1], unpack(writes))
end
if #entries > 0 then
  redis.call('ZADD', base .. 'outbox', unpack(entries))
end
if (#writes > 0 or #entries > 0) and not flows then
  redis.call('HSET', KEYS[3], 'flows', 1)
end
return out
