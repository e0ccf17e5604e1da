-- claim.lua: take the due members of a schedule and push each to its next
-- time, so that of several sidecars polling one schedule each member is
-- handed to one of them per period.
--
-- KEYS[1]  the schedule: a sorted set of members scored by when they are
--          due (unix ms)
--
-- ARGV[1]  now, unix ms: members scored at or before it are due
-- ARGV[2]  the next time, unix ms, given to every member taken
-- ARGV[3]  the most members to take
--
-- Returns the members taken.

local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, m in ipairs(due) do
  redis.call('ZADD', KEYS[1], 'XX', ARGV[2], m)
end
return due
