#!lua
--[[ note: processing -> processing (progress or a log line written)
Writes a running delivery's progress or one log line, only while its lease
is the current one: a delivery that lost its lease writes nothing.

KEYS[1] processing zset   KEYS[2] progress string   KEYS[3] log list
ARGV[1] id   ARGV[2] lease   ARGV[3] "p" progress or "l" log line
ARGV[4] the progress (JSON text) or the line   ARGV[5] log lines kept
ARGV[6] TTL ms of both keys (past any end of the delivery: the ack sets
the result retention)
Returns 1 written, 0 lease lost (nothing written).
Idempotent: for progress; a re-run of a line after a lost reply appends it again.
Complexity: O(log N) for the lease, plus O(1) for progress or O(T) for a
line, T = lines trimmed (at most one but after a smaller ARGV[5]).
]]
--- @include "checks"
check_types(KEYS[1], 'zset')
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then
  return 0
end
if ARGV[3] == 'p' then
  checked('string', 'SET', KEYS[2], ARGV[4], 'PX', ARGV[6])
else
  checked('list', 'RPUSH', KEYS[3], ARGV[4])
  redis.call('LTRIM', KEYS[3], -tonumber(ARGV[5]), -1)
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
end
return 1
