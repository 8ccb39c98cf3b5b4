-- The stored value's header: what scripts read of a message without its payload.

-- A stored value is
-- "<retry count>[;<backoff>][!<priority>][=<group>][#<n>][/<sent at ms>+<delay ms>][@<expires at ms>]:<payload>"
-- (send writes the times; a value from elsewhere may lack them). The header
-- holds only digits, letters, ',', ';', '!', '=', '-', '_', '.', '#', '/', '+' and '@' (the
-- backoff is "f<ms>" or "e<ms>,<ms>,<per mille>"), so its first ':' ends it,
-- and HEADER_BYTES hold the longest one (HEADER_BYTES in src/store/stored.rs).
-- "#<n>": the n bytes after the ':' are the message's headers
-- ("<name>=<value bytes>:<value>" each), and its payload follows them; a
-- message without headers has neither the '#' nor the section.
local HEADER_BYTES = 169

-- A stored value longer than this is big: send (and a claim that reads
-- one) sets the totals' field 'big', from when on claim reads each popped
-- id's size before its value (claim.lua). MAX_LIMIT values of at most
-- this size make 4 MiB.
local BIG_VALUE = 4096

-- Bytes of the headers section in a stored value or its header (0: none).
local function headers_len(head)
  return tonumber(string.match(head, '^%d+[^:#]*#(%d+)') or '') or 0
end

-- The first `bytes` bytes of the stored value at `key` past its headers
-- section, which is read whole (a second read only for a message with
-- headers that the first cut); not a string when it is gone.
local function head_of(key, bytes)
  local value = redis.pcall('GETRANGE', key, 0, bytes - 1)
  if type(value) == 'string' then
    local n = headers_len(value)
    if n > 0 and #value == bytes then
      value = redis.pcall('GETRANGE', key, 0, bytes + n - 1)
    end
  end
  return value
end

-- Retries allowed for a message, from its stored value's header (read
-- without copying the payload); `default` when the payload is gone or
-- unreadable.
local function max_retries(key, default)
  local head = redis.pcall('GETRANGE', key, 0, HEADER_BYTES - 1)
  return tonumber(type(head) == 'string' and string.match(head, '^(%d+)[:;!=#/@]') or default)
end

-- The priority (1 to 9; 0, the default, is written as nothing) in a stored
-- value or its header; 0 for anything else (a payload gone: false).
local function priority_of(head)
  return type(head) == 'string' and tonumber(string.match(head, '^%d+[^:/@!]*!(%d+)') or '') or 0
end

-- The deadline (ms of Redis time) in a stored value or its header, false
-- when the message has none (it never expires).
local function expires_at(value)
  return tonumber(string.match(value, '^%d+[^:@]*@(%d+):') or '') or false
end

-- The group in a stored value or its header; false for none (or a payload gone).
local function group_of(head)
  return type(head) == 'string' and string.match(head, '^%d+[^:/@=#]*=([%w%-_%.]+)[#/@:]') or false
end

-- The due time (ms) of the delivery a message's attempt record or else its
-- header names: where it queues in its group.
local function due_of(head, record_due)
  if record_due then
    return record_due
  end
  local sent, delay = string.match(type(head) == 'string' and head or '', '^%d+[^:/]*/(%d+)%+(%d+)')
  return sent and tonumber(sent) + tonumber(delay) or 0
end
