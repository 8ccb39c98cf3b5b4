--- @include "checks"
--- @include "clock"

-- Flows (docs/workflows.md). A message may wait for others (its children)
-- before it becomes due: its parent keys live with it, in its queue's slot,
-- under the queue's base B ("<prefix>{<name>}:", the msg prefix without
-- its "m:"):
--   B .. 'flow:waiting'     zset: parents waiting for children, scored by
--                           their own due time (ms)
--   B .. 'deps:' .. id      set: the children parent id still waits for,
--                           each "<child's base> <child id>"
--   B .. 'children:' .. id  hash: its finished children, "<child's base>
--                           <child id>" -> "<outcome><result bytes>"
--   B .. 'outbox'           zset: completions recorded here for parents
--                           elsewhere, "<outcome> <child id> <link>", scored
--                           by when (ms); and "x <parent id>": a cancelled
--                           parent whose children are still to be cancelled
--   B .. 'parents'          hash: child id -> its links, one a line, each
--                           "<policy> <parent's base> <parent id>" (policy:
--                           'f' fail, 'i' ignore, 'w' wait)
-- Outcomes: 'a' acked (or unknown when linked), 'd' dead, 'c' cancelled or
-- deleted. Every script touches these only while the totals have 'flows'
-- (set by the first parent sent or child linked), so a queue without flows
-- pays one HGET per call (a command every ACL role of docs/scaling.md may
-- run). Ids, bases and policies hold no whitespace, so a space separates
-- the parts and a newline the links.
--
-- The base of a queue's keys, from a msg key of `id` (or the msg prefix, id '').
local function flow_base(msg_key, id)
  return string.sub(msg_key, 1, #msg_key - #id - 2)
end

-- A member of a parent's deps set that no child is (a child is "<base>
-- <id>", with a space): a completion that came before the parent was
-- stored puts it there (plan_completions in include/completions.lua), and
-- the parent's send takes it out and says so (send.lua's status 8): the
-- sender links the children again, which completes those that finished.
local OVERTAKEN = '!'

-- The keys flow_done writes, built rather than declared: the parents
-- hash, the outbox, and the children hashes of `deleted`, the ids whose
-- payloads go.
local function flow_keys(base, deleted)
  local keys = {base .. 'parents', base .. 'outbox'}
  for _, id in ipairs(deleted) do
    keys[#keys + 1] = base .. 'children:' .. id
  end
  return keys
end

-- The links of `ids` (for flow_done), read before the caller's first write:
-- the read checks the parents hash, and the outbox is checked only when a
-- link is found (flow_done writes it then).
local function flow_links(base, ids)
  local links = checked('hash', 'HMGET', base .. 'parents', unpack(ids))
  for i = 1, #ids do
    if links[i] then
      check_types(base .. 'outbox', 'zset')
      break
    end
  end
  return links
end

-- Whether `flows` (the totals' field 'flows', read by the caller: one
-- HGET, all a queue without flows pays) is set, and if so fails, before the
-- script's first write, unless the flow_keys of `deleted` are on this node
-- (keys_here) and the parents hash and the outbox hold their types (flow_done
-- writes them after its caller's first write).
local function flows_here(flows, base, deleted)
  if not flows then
    return false
  end
  keys_here(flow_keys(base, deleted))
  check_types(base .. 'parents', 'hash', base .. 'outbox', 'zset')
  return true
end

-- Records that `ids` finished with `outcome`: for each link of each of them
-- an outbox entry, which the relay delivers to the parent's slot. A dead
-- child keeps its 'w' (wait) links: requeued, it may still finish them.
-- `deleted`: their payloads are gone, so their own children's results go
-- too. Nothing unless `flows` (from flows_here, called before the script's
-- first write). `links`: their links as flow_links read them, else read
-- here. O(1) calls per batch plus O(links). Returns, per id that recorded
-- entries, the list of them.
local function flow_done(flows, base, ids, outcome, deleted, links)
  local recorded = {}
  if #ids == 0 or not flows then
    return recorded
  end
  local parents, now = base .. 'parents', now_ms()
  links = links or redis.call('HMGET', parents, unpack(ids))
  local entries, gone, children = {}, {}, {}
  for i, id in ipairs(ids) do
    children[i] = base .. 'children:' .. id
    if links[i] then
      local kept, all = {}, 0
      for link in string.gmatch(links[i], '[^\n]+') do
        all = all + 1
        if outcome == 'd' and string.sub(link, 1, 1) == 'w' then
          kept[#kept + 1] = link
        else
          local entry = outcome .. ' ' .. id .. ' ' .. link
          entries[#entries + 1] = now
          entries[#entries + 1] = entry
          recorded[id] = recorded[id] or {}
          table.insert(recorded[id], entry)
        end
      end
      if #kept == 0 then
        gone[#gone + 1] = id
      elseif #kept < all then
        redis.call('HSET', parents, id, table.concat(kept, '\n'))
      end
    end
  end
  if #entries > 0 then
    redis.call('ZADD', base .. 'outbox', unpack(entries))
  end
  if #gone > 0 then
    redis.call('HDEL', parents, unpack(gone))
  end
  if deleted then
    -- A children hash grows with the parent's children (up to a million):
    -- UNLINK frees a big one off Redis's main thread, so this stays O(1).
    redis.call('UNLINK', unpack(children))
  end
  return recorded
end
