#!lua
--[[ flow_deps: (nothing) -> a parent's children to wait for
Adds children to the set of those a parent waits for (docs/workflows.md),
before send.lua stores the parent with mode "w": a parent whose set is
empty when it is stored goes to pending, so the set is filled first, in
calls of at most 1000 children. No completion can reach the set before
the parent is stored: a child records completions only once linked to
the parent (flow_link.lua), after the parent's send.

KEYS[1] deps set of the parent
ARGV[1..] the children, each "<child's queue base> <child id>" (at most 1000)
Returns the number of children added.
Idempotent: a re-run adds nothing and returns 0.
Complexity: O(M) with M = children.
]]
check_types(KEYS[1], 'set')
if #ARGV == 0 or #ARGV > MAX_LIMIT then
  error(redis.error_reply('ERR 1 to ' .. MAX_LIMIT .. ' children per call, not ' .. #ARGV))
end
return redis.call('SADD', KEYS[1], unpack(ARGV))
