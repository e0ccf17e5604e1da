-- hsetx.lua: set fields of a hash that already exists; never create it.
--
-- KEYS[1]  the hash
-- ARGV     field, value pairs
--
-- Returns 1 when set, 0 when the hash does not exist.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
