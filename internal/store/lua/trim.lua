-- trim.lua: record how far an account's ledger has been exported, and trim
-- exported entries older than the retention.
--
-- KEYS[1]  gw:{acct:ID}:ledger            stream: one entry per settled request
-- KEYS[2]  gw:{acct:ID}:exported          string: id of the last exported entry
--
-- ARGV[1]  id of the last entry the exporter has written ("" only trims)
-- ARGV[2]  oldest entry id to keep by retention ("0" keeps everything)
--
-- The export mark only moves forward. An entry is trimmed only if it is at
-- or before the mark and older than the retention: an unexported entry is
-- never removed.
--
-- Returns {mark, trimmed}.

local function less(a, b)
  local a1, a2 = string.match(a, '^(%d+)-(%d+)$')
  local b1, b2 = string.match(b, '^(%d+)-(%d+)$')
  a1, a2, b1, b2 = tonumber(a1), tonumber(a2), tonumber(b1), tonumber(b2)
  return a1 < b1 or (a1 == b1 and a2 < b2)
end

local mark = redis.call('GET', KEYS[2]) or '0-0'
local want = ARGV[1]
if want ~= '' then
  if not string.match(want, '^%d+%-%d+$') then
    return redis.error_reply('bad entry id')
  end
  if less(mark, want) then
    mark = want
    redis.call('SET', KEYS[2], mark)
  end
end

local trimmed = 0
if ARGV[2] ~= '0' and mark ~= '0-0' then
  -- Keep everything after the mark; of what is at or before it, keep what
  -- is younger than the retention. XTRIM MINID removes ids below its bound.
  local ms, seq = string.match(mark, '^(%d+)-(%d+)$')
  local afterMark = ms .. '-' .. string.format('%d', tonumber(seq) + 1)
  local bound = ARGV[2]
  if less(afterMark, bound) then
    bound = afterMark
  end
  trimmed = redis.call('XTRIM', KEYS[1], 'MINID', bound)
end
return {mark, trimmed}
