-- renew.lua: extend the holds of running requests of one account, and
-- checkpoint what each has used so far.
--
-- KEYS[1]  gw:{acct:ID}:holds             hash: request id -> hold (hold.lua)
--
-- ARGV[1]  the new expiry, unix ms
-- ARGV[2k], ARGV[2k+1] (k >= 1)  a request id and its checkpoint ("" keeps the last one)
--
-- A request whose hold is gone (settled, or settled by the sweeper after its
-- lease ran out) is left alone: renewing never recreates a hold. The new
-- expiry and checkpoint are written into the hold's value, with its amount
-- and admission record unchanged.
--
-- Returns the request ids whose hold is gone.

local expiry = tonumber(ARGV[1])
local gone = {}
for i = 2, #ARGV, 2 do
  local req = ARGV[i]
  local v = redis.call('HGET', KEYS[1], req)
  if v then
    local amount, _, record, ckpt = hold_parse(v)
    if ARGV[i + 1] ~= '' then
      ckpt = ARGV[i + 1]
    end
    redis.call('HSET', KEYS[1], req, hold_format(amount, expiry, record, ckpt))
  else
    table.insert(gone, req)
  end
end
return gone
