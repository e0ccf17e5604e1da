-- renew.lua: extend the holds of running requests of one account, and
-- checkpoint what each has used so far.
--
-- KEYS[1]  gw:{acct:ID}:holds             hash: request id -> held amount
-- KEYS[2]  gw:{acct:ID}:holdexp           zset: request id scored by hold expiry (unix ms)
-- KEYS[3]  gw:{acct:ID}:holdckpt          hash: request id -> usage checkpoint (opaque JSON)
--
-- ARGV[1]  the new expiry, unix ms
-- ARGV[2k], ARGV[2k+1] (k >= 1)  a request id and its checkpoint ("" keeps the last one)
--
-- A request whose hold is gone (settled, or settled by the sweeper after its
-- lease ran out) is left alone: renewing never recreates a hold.
--
-- Returns the request ids whose hold is gone.

local gone = {}
for i = 2, #ARGV, 2 do
  local req = ARGV[i]
  if redis.call('HEXISTS', KEYS[1], req) == 1 then
    redis.call('ZADD', KEYS[2], 'XX', ARGV[1], req)
    if ARGV[i + 1] ~= '' then
      redis.call('HSET', KEYS[3], req, ARGV[i + 1])
    end
  else
    table.insert(gone, req)
  end
end
return gone
