#!lua
--[[ note: processing -> processing (progress and log lines written)
Writes running deliveries' progress and log lines, each note only while
its delivery's lease is the current one: a note of a delivery that lost
its lease writes nothing. A consumer sends the notes its shard's handlers
wrote meanwhile together, with its acks when it has any (ack.lua), alone
here when not: at most 256 notes and 1 MiB of text a call (cut in Rust;
a progress is at most 4096 bytes, a line 2048).

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
--- @include "notes"
check_types(KEYS[1], 'zset')
local keys = {}
for i = 2, #KEYS do
  keys[i - 1] = KEYS[i]
end
return (write_notes(KEYS[1], keys, 3, #keys, tonumber(ARGV[1]), ARGV[2], {}, 0))
