#!lua
--[[ note: processing -> processing (progress and log lines written)
Writes running deliveries' progress and log lines, each note only while
its delivery's lease is the current one: a note of a delivery that lost
its lease writes nothing. A consumer sends the notes its shard's handlers
wrote meanwhile together: at most 128 notes and 64 KiB of text a call
(cut in Rust; a progress is at most 4096 bytes, a line 2048).

KEYS[1] processing zset   KEYS[2..] note the key each note writes, in
order: the progress string or the log list of its message
ARGV[1] log lines kept   ARGV[2] TTL ms of the keys written (past any end
of the delivery: the ack sets the result retention)
ARGV[3..] four per note: id, lease, "p" progress or "l" log line, the
progress (JSON text) or the line
Returns one outcome per note, in order: 1 written, 0 lease lost (nothing
written), 2 its log key holds another type (nothing written).
Idempotent: for progress; a re-run of a line after a lost reply appends it again.
Complexity: O(M log N) for the leases of the M notes (one ZMSCORE), plus
per note O(1) for progress or O(T) for a line, T = lines trimmed (at
most one but after a smaller ARGV[1]).
]]
--- @include "checks"
check_types(KEYS[1], 'zset')
local n = #KEYS - 1
if n == 0 then
  return {}
end
local ids = {}
for i = 1, n do
  ids[i] = ARGV[4 * i - 1]
end
local scores = redis.call('ZMSCORE', KEYS[1], unpack(ids))
local keep, ttl = -tonumber(ARGV[1]), ARGV[2]
local out = {}
for i = 1, n do
  local key, a = KEYS[i + 1], 4 * i - 1
  if not scores[i] or tonumber(scores[i]) ~= tonumber(ARGV[a + 1]) then
    out[i] = 0
  elseif ARGV[a + 2] == 'p' then
    redis.call('SET', key, ARGV[a + 3], 'PX', ttl)
    out[i] = 1
  elseif type(redis.pcall('RPUSH', key, ARGV[a + 3])) == 'table' then
    -- Another type: this note alone fails, the others are written.
    out[i] = 2
  else
    redis.call('LTRIM', key, keep, -1)
    redis.call('PEXPIRE', key, ttl)
    out[i] = 1
  end
end
return out
