-- Deduplication markers (docs/dedup.md).
--- @include "checks"

-- The window markers of `ids` ("<prefix><id>", docs/dedup.md) and what
-- they hold: {keys, values}; none, and nothing read, while the totals
-- hash `totals` lacks 'markers' (set by the first send that stores a
-- marker), so a queue that never used them pays one HEXISTS. One MGET with KEYS[1], as payloads_here's
-- EXISTS, so that while a cluster moves the queue's slot the script fails
-- here, before its first write, rather than half-way.
local function markers_of(prefix, ids, totals)
  if redis.call('HEXISTS', totals, 'markers') == 0 then
    -- No send ever wrote a marker here: nothing to read.
    return {{}, {}}
  end
  local keys = payload_keys(prefix, ids)
  if #keys == 0 then
    return {keys, {}}
  end
  local values = redis.call('MGET', KEYS[1], unpack(keys))
  table.remove(values, 1)
  return {keys, values}
end

-- Starts the window of a marker whose message just finished (acked,
-- cancelled or dead). A unique_for marker holds its window in ms and has
-- no TTL while its message is live: it now expires that long from now. A
-- throttle marker ('t') keeps the TTL its send gave it. `value` is what
-- the marker holds (false or an error reply: none).
local function start_window(key, value)
  local ms = tonumber(type(value) == 'string' and value or '')
  if ms then
    redis.call('PEXPIRE', key, ms)
  end
end
