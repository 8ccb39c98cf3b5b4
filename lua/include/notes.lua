-- Notes (note.lua, ack.lua): running deliveries' progress and log lines,
-- each written only while its delivery's lease is the current one.

-- Writes the `n` notes of ARGV[first..] (four each: id, lease, "p"
-- progress or "l" log line, the text) to `keys` (each note's progress or
-- log key, in order), fenced by zset `processing`. A note's key gets
-- `ttl` ms, or `ending_ttl` when its id is in `ending` (id -> the lease
-- its ack, which follows in this call, found current: a note of that
-- lease needs no read of its own); `ending_ttl` 0: such a note is
-- not written (its ack deletes the notes). A log keeps its last `keep`
-- lines. Returns the outcomes, one per note (1 written, 0 lease lost:
-- nothing written, 2 its log key holds another type: nothing written),
-- and the set of keys given `ending_ttl` (key -> true).
-- O(n log N) for the leases (one ZMSCORE of those not in `ending`), then one or two calls a
-- note (a third, LTRIM, only once a log is longer than `keep`).
local function write_notes(processing, keys, first, n, keep, ttl, ending, ending_ttl)
  local out, ended = {}, {}
  if n == 0 then
    return out, ended
  end
  local ids, held, asked = {}, {}, {}
  for i = 1, n do
    local a = first + 4 * (i - 1)
    ids[i] = ARGV[a]
    if ending[ids[i]] then
      held[i] = tonumber(ending[ids[i]]) == tonumber(ARGV[a + 1])
    else
      asked[#asked + 1] = i
    end
  end
  if #asked > 0 then
    local read = {}
    for j, i in ipairs(asked) do
      read[j] = ids[i]
    end
    local scores = redis.call('ZMSCORE', processing, unpack(read))
    for j, i in ipairs(asked) do
      held[i] = scores[j] and tonumber(scores[j]) == tonumber(ARGV[first + 4 * (i - 1) + 1])
    end
  end
  for i = 1, n do
    local key, a = keys[i], first + 4 * (i - 1)
    local px = ttl
    if ending[ids[i]] then
      px = ending_ttl
    end
    if not held[i] then
      out[i] = 0
    elseif px == 0 then
      out[i] = 1
    elseif ARGV[a + 2] == 'p' then
      redis.call('SET', key, ARGV[a + 3], 'PX', px)
      out[i] = 1
    else
      local len = redis.pcall('RPUSH', key, ARGV[a + 3])
      if type(len) == 'table' then
        -- Another type: this note alone fails, the others are written.
        out[i] = 2
      else
        if len > keep then
          redis.call('LTRIM', key, -keep, -1)
        end
        redis.call('PEXPIRE', key, px)
        out[i] = 1
      end
    end
    if out[i] == 1 and ending[ids[i]] and px ~= 0 then
      ended[key] = true
    end
  end
  return out, ended
end
