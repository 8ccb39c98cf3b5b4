-- Priorities: the priority zset's scores.

-- Due messages of priority 1 to 9 wait in one zset (those of priority 0 in
-- the ready list), scored so that ZRANGE gives the highest priority first
-- and, within one priority, the earliest due first: (10 - p) * PRIO_SPAN +
-- due ms. PRIO_SPAN = 2^42 ms (past the year 2100); every score stays an
-- exact double. The zset is touched only while the totals hash has the
-- field 'prios' (set by the first send of a priority), so a queue that
-- never uses priorities pays nothing (promote reads 'prios' in the HMGET
-- that reads 'format').
local PRIO_SPAN = 4398046511104
local function prio_score(p, due)
  return (10 - p) * PRIO_SPAN + due
end
