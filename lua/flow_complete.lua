#!lua flags=allow-oom
--[[ flow_complete: waiting -> ready | pending | dead, as a parent's children finish
Applies completions the relay read from a child queue's outbox to their
parents in this queue (docs/workflows.md), at least once: each child
leaves its parent's set of children to wait for, and its outcome and
result go to the parent's children hash, whose fields " a", " d" and " c"
count the children acked, dead and cancelled. A dead child under 'f', or a
cancelled one under 'f' or 'w' (nothing can finish it any more), makes the
parent a dead letter with reason "child <queue>/<id> dead" (or
"cancelled"; the queue's name, a shard's tag less its "#<n>"): out of
waiting, into the dead zset, its payload kept for the retention, its set
of children to wait for deleted; its children hash (that child's outcome
included) stays until the dead letter is requeued and acked, or deleted
(flow_done in include/flows.lua). Under 'r' (a cohort's on_success) such a
child removes the parent: its payload and keys are deleted. Sets and
hashes that grow with the children go by UNLINK, which frees a big one
off Redis's main thread. Outcome 'o'
is a cohort's close: its member (the parent's own base and an empty id)
leaves the set, nothing is recorded. A parent whose set is empty is due
at its own due time or now, whichever is later: due now, it goes where
promote would put it (ready, or the priority zset by its priority), so
its claim follows this call's wake-up without a promote; due later, or in
a group (promote moves it to its group), it goes to pending. A parent made
a dead letter or removed is a child that finished for its own parents:
recorded in this queue's outbox as dead ('d') or deleted ('c'), as nack
and cancel record theirs (flow_done in include/flows.lua).

KEYS[1] waiting zset   KEYS[2] pending zset   KEYS[3] dead zset
KEYS[4] attempts hash   KEYS[5] totals hash
ARGV[1] msg key prefix   ARGV[2] wake-up channel
ARGV[3] dead-letter retention ms
ARGV[4..] per completion, 4 values: parent id, the child "<child's queue
base> <child id>", outcome then policy (two letters: 'a' acked, 'd' dead,
'c' cancelled or 'o' closed; 'f', 'i', 'w' or 'r'), the child's result
('' none)
Returns {applied, parents made due (ready or pending), parents moved to
dead, parents removed}.
Publishes a wake-up of 0 when a parent went to ready, else when a parent
became due before every pending message.
Its parents' deps and children keys and payloads, the ready list and the
priority zset (the queue's base followed by 'ready' and 'ready:prio'),
and the parents hash and outbox it records in, are built, not declared: they are touched with
one EXISTS each before the first write, so during a slot migration it
fails with nothing written (docs/design.md §2).
Idempotent: a re-delivered completion finds its child gone from the set
(or the parent no longer waiting) and changes nothing; a completion for a
parent no longer waiting (cancelled, dead) only leaves the set; one for a
parent not sent yet (its set still has the TTL flow_deps gives it: a
flow's children may be sent and linked in the round trip of their
parent's send) leaves the set whole but for the member "!" (OVERTAKEN
in include/flows.lua), whose presence the parent's send reports (send.lua's
status 8): its sender links the children again, which completes the
child then.
Complexity: O(M log N) with M = completions (at most 1000 per call), in
a fixed number of calls per parent P named (TYPE of its children hash,
SMISMEMBER, SREM, HSET, a HINCRBY per outcome, EXISTS; PTTL of its set
when it is not waiting), one ZMSCORE of
the P parents and one EXISTS of 3P keys, plus
O(links) of the parents made dead or removed; never O(children of a
parent).
]]
--- @include "args"
--- @include "completions"
local m = (#ARGV - 3) / 4
if m ~= math.floor(m) or m > MAX_LIMIT then
  error(redis.error_reply('ERR completions come as 4 values each, at most ' .. MAX_LIMIT))
end
local list = {}
for i = 1, m do
  local a = 4 * i
  list[i] = {ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]}
end
return complete_parents(KEYS, ARGV[1], ARGV[2], tonumber(ARGV[3]), list)
