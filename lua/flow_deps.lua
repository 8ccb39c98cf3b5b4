#!lua
--[[ flow_deps: (nothing) -> a parent's children to wait for
Adds children to the set of those a parent waits for (docs/workflows.md),
before send.lua stores the parent with mode "w": a parent whose set is
empty when it is stored goes to pending, so the set is filled first, in
calls of at most 1000 children. No completion can reach the set before
the parent is stored: a child records completions only once linked to
the parent (flow_link.lua), after the parent's send. A send refused as a
duplicate writes nothing: given its payload key, a parent already live
(stored and no dead letter, whose payload alone has a TTL: bury in
include/finish.lua), which send.lua will refuse, gets no child added; the
children its set holds are those the first send may not have linked yet
(a re-send after a failed one links them). A parent not live yet gets its
set with a TTL of an hour (DEPS_TTL_MS; renewed by each call), which send.lua
removes when it stores the parent: should that send never come (the
producer gave up or died), the set goes on its own. Without the payload
key (a cohort's member joining its live callbacks) the children are
added whatever the parent's state, and no TTL is set.

KEYS[1] deps set of the parent   KEYS[2..] msg the parent's payload (none
or one)
ARGV[1..] the children, each "<child's queue base> <child id>" (at most 1000)
Returns {number of children added}, or for a live parent given its
payload key {-1, then per child 1 if the set holds it, else 0}.
Idempotent: a re-run adds nothing and returns {0} (or the same flags).
Complexity: O(M) with M = children, plus one PEXPIRE for a parent not live
yet.
]]
--- @include "args"
--- @include "checks"
check_types(KEYS[1], 'set')
if #ARGV == 0 or #ARGV > MAX_LIMIT then
  error(redis.error_reply('ERR 1 to ' .. MAX_LIMIT .. ' children per call, not ' .. #ARGV))
end
-- An hour: far beyond the calls that fill a set (1000 children each) and
-- the parent's send that follows them.
local DEPS_TTL_MS = 3600000
if KEYS[2] and redis.call('PTTL', KEYS[2]) == -1 then
  local held = {-1}
  for i = 1, #ARGV do
    held[i + 1] = redis.call('SISMEMBER', KEYS[1], ARGV[i])
  end
  return held
end
local added = redis.call('SADD', KEYS[1], unpack(ARGV))
if KEYS[2] then
  redis.call('PEXPIRE', KEYS[1], DEPS_TTL_MS)
end
return {added}
