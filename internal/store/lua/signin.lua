-- signin.lua: count one sign-in attempt to the operator console, shared by
-- every sidecar: against the client's address and against the credential
-- it is for, each in a sliding window; refuse it when either has had its
-- limit. Both keys carry the hash tag {signin}, so that they share a slot
-- in a Redis Cluster (sign-ins are few: one slot takes them all).
--
-- KEYS[1]  gw:{signin}:addr:ADDR  zset: the address's attempts in the window,
--                                 each a unique member scored by its time (unix ms)
-- KEYS[2]  gw:{signin}:cred:HASH  zset: the credential's attempts, likewise
--
-- ARGV[1]  now, unix ms, from the caller's clock (never Redis TIME)
-- ARGV[2]  the window, ms
-- ARGV[3]  the most attempts per window from one address
-- ARGV[4]  the most attempts per window against one credential
-- ARGV[5]  this attempt's member: unique to it
--
-- Returns {1, 0} when the attempt is counted (in both), or {0, wait_ms}
-- when it is refused and counted in neither: wait_ms is when a counter
-- that is full (the later of the two, if both are) next has room.

local function int(n)
  return string.format('%d', n)
end

local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limits = {tonumber(ARGV[3]), tonumber(ARGV[4])}

local wait = 0
for i = 1, 2 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', int(now - window))
  local n = redis.call('ZCARD', KEYS[i])
  if n >= limits[i] then
    -- Once the n-limit+1 oldest attempts have left, one more fits.
    local e = redis.call('ZRANGE', KEYS[i], int(n - limits[i]), int(n - limits[i]), 'WITHSCORES')
    wait = math.max(wait, tonumber(e[2]) + window - now)
  end
end
if wait > 0 then
  return {0, int(wait)}
end
for i = 1, 2 do
  redis.call('ZADD', KEYS[i], ARGV[1], ARGV[5])
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return {1, 0}
