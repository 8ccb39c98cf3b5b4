-- Checks a script makes before its first write, so it never stops half-way.

-- The wire format version a queue's data is in (docs/wire-format.md): the
-- field 'format' of its totals hash, set by the first send (or fire) that
-- stores a message; missing while the queue has none. The caller passes
-- the version it speaks in ARGV (`speaks`): the scripts never name one of
-- their own. `found` is the field's value (false: missing), read by the
-- caller with its other reads of the hash. Fails, to be called before the
-- script's first write, when the queue's version is another, with an error
-- ("DQFORMAT ...") the caller reads as a format version error naming both.
local function check_format(found, speaks)
  if not string.match(speaks or '', '^%d+$') then
    error(redis.error_reply('ERR format version must be a decimal integer, not ' .. tostring(speaks)))
  end
  if found and found ~= speaks then
    error(redis.error_reply('DQFORMAT the queue is in wire format ' .. found
      .. ', this client speaks format ' .. speaks .. ' (docs/wire-format.md)'))
  end
end

-- A sharded queue's shard count is recorded in the field 'shards' of the
-- totals hash of its unsharded layout ({<name>}, docs/scaling.md), so every
-- client agrees on where its messages live. `found` is the field's value
-- (false: none recorded), `uses` the caller's count. Fails, to be called
-- before the script's first write, when a count is recorded and is another,
-- with an error ("DQSHARDS ...") the caller reads as a shard count error.
local function check_shards(found, uses)
  if found and found ~= uses then
    error(redis.error_reply('DQSHARDS the queue is spread over ' .. found
      .. ' shards, this client uses ' .. uses .. ' (docs/scaling.md)'))
  end
end

-- Fails before any write when a queue key holds another type (something
-- else wrote to it), so a script never stops half-way. Takes key, type pairs.
local function check_types(...)
  local args = {...}
  for i = 1, #args, 2 do
    local actual = redis.call('TYPE', args[i])['ok']
    if actual ~= 'none' and actual ~= args[i + 1] then
      error(redis.error_reply('WRONGTYPE ' .. args[i] .. ' holds a ' .. actual .. ', not a ' .. args[i + 1]))
    end
  end
end

-- redis.call(command, key, ...) where `key` must hold type `want`: a read
-- that checks the type on the way, failing as check_types does (naming the
-- key) when it is another. A key read before a script's first write needs
-- no TYPE call of its own.
local function checked(want, command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    check_types(key, want)
    error(reply)
  end
  return reply
end

-- The payload keys (`prefix .. id`) of `ids`.
local function payload_keys(prefix, ids)
  local keys = {}
  for i, id in ipairs(ids) do
    keys[i] = prefix .. id
  end
  return keys
end

-- Fails, before the script's first write, unless every key of `keys` (keys
-- the script builds rather than declares) is on this node: see
-- payloads_here, the same check for payloads.
local function keys_here(keys)
  if #keys > 0 then
    redis.call('EXISTS', KEYS[1], unpack(keys))
  end
end

-- Fails, before the script's first write, unless the payloads of `ids` are
-- all on this node; returns their keys. Scripts build payload keys from ids
-- they find rather than declare them, and Redis checks only declared keys
-- before it runs a script. While a cluster moves the queue's slot to
-- another node, a payload may already be on the other side: touching it
-- mid-script fails there, after earlier writes, on the old owner, and reads
-- as missing on the new one. One EXISTS together with KEYS[1] (here for
-- the script to run at all) applies Redis's multi-key rule up front:
-- outside a move it only counts; during one it fails the script with
-- nothing written, and the caller's retry finds the queue as it was.
local function payloads_here(prefix, ids)
  local keys = payload_keys(prefix, ids)
  keys_here(keys)
  return keys
end
