-- A message's end: buried as a dead letter, or forgotten; the totals' counts.

-- Moves a message to the dead zset (the dead letters, scored by time of death in
-- ms) and gives its payload the retention as TTL: only a dead letter's
-- payload ever has one, so a plain PEXPIRE (GT would skip a key without
-- TTL) cannot shorten a live message's life. `key` false: no payload to keep.
local function bury(dead, id, key, now, retention)
  redis.call('ZADD', dead, now, id)
  if key then
    redis.call('PEXPIRE', key, math.max(retention, 1))
  end
end

-- Adds n to a field of the queue's totals hash.
local function tally(totals, field, n)
  if n > 0 then
    redis.call('HINCRBY', totals, field, n)
  end
end

-- Deletes the payloads `keys` (from payloads_here) and attempt records of `ids`.
local function forget(attempts, keys, ids)
  redis.call('DEL', unpack(keys))
  redis.call('HDEL', attempts, unpack(ids))
end
