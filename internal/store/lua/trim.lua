-- trim.lua: record how far a reader has copied an account's ledger, and trim
-- entries every reader has copied that are older than the retention.
--
-- KEYS[1]  gw:{acct:ID}:ledger            stream: one entry per settled request
-- KEYS[2]  gw:{acct:ID}:exported          string: id of the last exported entry
-- KEYS[3]  gw:{acct:ID}:sunk              string: id of the last entry the SQL sink copied
--
-- ARGV[1]  id of the last entry the reader has written ("" only trims, and
--          registers a reader that never committed at 0-0)
-- ARGV[2]  oldest entry id to keep by retention ("0" keeps everything)
-- ARGV[3]  the reader whose mark ARGV[1] moves: "exported" or "sunk"
--
-- Marks only move forward, and only to an entry of this ledger: an id it
-- does not hold (another account's, a made-up one) is refused, since a mark
-- past entries never copied would let them be trimmed. An entry is trimmed only if it is at or before
-- every mark that exists (the exporter's and the sink's) and older than the
-- retention: an entry some reader has not copied is never removed. A reader
-- exists from its first call on (the sink calls before it copies anything).
--
-- Returns {the reader's mark, trimmed}, or the error "no such entry".

local function less(a, b)
  local a1, a2 = string.match(a, '^(%d+)-(%d+)$')
  local b1, b2 = string.match(b, '^(%d+)-(%d+)$')
  a1, a2, b1, b2 = tonumber(a1), tonumber(a2), tonumber(b1), tonumber(b2)
  return a1 < b1 or (a1 == b1 and a2 < b2)
end

local own = KEYS[2]
if ARGV[3] == 'sunk' then
  own = KEYS[3]
end
local mark = redis.call('GET', own) or '0-0'
local want = ARGV[1]
if want ~= '' then
  if not string.match(want, '^%d+%-%d+$') then
    return redis.error_reply('bad entry id')
  end
  if less(mark, want) then
    if #redis.call('XRANGE', KEYS[1], want, want) == 0 then
      return redis.error_reply('no such entry')
    end
    mark = want
    redis.call('SET', own, mark)
  end
end
if redis.call('EXISTS', own) == 0 then
  redis.call('SET', own, mark)
end

-- The trim limit is the lowest existing mark.
local limit = nil
for i = 2, 3 do
  local m = redis.call('GET', KEYS[i])
  if m and (limit == nil or less(m, limit)) then
    limit = m
  end
end

local trimmed = 0
if ARGV[2] ~= '0' and limit ~= nil and limit ~= '0-0' then
  -- Keep everything after the limit; of what is at or before it, keep what
  -- is younger than the retention. XTRIM MINID removes ids below its bound.
  local ms, seq = string.match(limit, '^(%d+)-(%d+)$')
  local afterLimit = ms .. '-' .. string.format('%d', tonumber(seq) + 1)
  local bound = ARGV[2]
  if less(afterLimit, bound) then
    bound = afterLimit
  end
  trimmed = redis.call('XTRIM', KEYS[1], 'MINID', bound)
end
return {mark, trimmed}
