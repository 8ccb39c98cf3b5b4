-- Attempt records: the attempts hash's values, and its STALE mark.

-- An attempt record is "<deliveries>[@<due ms>][~<deferrals>][:<reason>]":
-- deliveries so far, the due time of the next (or running) delivery when
-- it is not the send's (a retry, a requeue), deliveries the handler
-- deferred without counting, and why the last delivery failed. Its parts
-- (count, due ms or false, deferrals, ":<reason>" or ''); nil when it is
-- missing (false) or malformed.
local function parts(record)
  local n, due, deferred, rest = string.match(record or '', '^(%d+)(@?%d*)(~?%d*)(.*)$')
  if not n or due == '@' or deferred == '~' or (rest ~= '' and string.sub(rest, 1, 1) ~= ':') then
    return nil
  end
  return tonumber(n), tonumber(string.sub(due, 2)) or false, tonumber(string.sub(deferred, 2)) or 0, rest
end

-- The record of those parts (`rest`: ":<reason>" or '').
local function record_from(n, due, deferred, rest)
  return n .. (due and string.format('@%d', due) or '') .. (deferred > 0 and '~' .. deferred or '') .. rest
end

-- The ":<reason>" part for `reason` ('' none).
local function reason_of(reason)
  return reason == '' and '' or ':' .. reason
end

-- Field of the attempts hash (never an id: ids hold no whitespace) that is
-- set while the ready or retry list may hold a stale entry: the id of a
-- message cancelled there, whose entry stays until claim pops it. Only
-- then must claim check where a popped id lives. Claim deletes it once
-- both lists are empty.
local STALE = ' stale'
