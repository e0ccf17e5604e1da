-- hold.lua: the value of one entry of an account's holds hash, shared by the
-- scripts that read or write holds (it is prepended to each of them).
--
-- gw:{acct:ID}:holds maps a request id to one string:
--
--   "<amount> <expiry> <record>" or "<amount> <expiry> <record>\n<checkpoint>"
--
-- amount: the held worst-case cost, nano-USD; expiry: the end of the hold's
-- lease, unix ms; record: the admission record (JSON, "" when unknown);
-- checkpoint: the last usage checkpoint (JSON), present once a renewal wrote
-- one. JSON as the sidecar writes it never holds a raw newline. One entry per
-- running request keeps admission, renewal and settlement to one field each.
--
-- A bare "<amount>" is a hold written before leases lived in the value: it
-- has no expiry (nil) and no record.

local function hold_parse(v)
  local amount, expiry, rest = string.match(v, '^(%d+) (%d+) (.*)$')
  if not amount then
    return tonumber(v) or 0, nil, '', ''
  end
  local nl = string.find(rest, '\n', 1, true)
  if nl then
    return tonumber(amount), tonumber(expiry), string.sub(rest, 1, nl - 1), string.sub(rest, nl + 1)
  end
  return tonumber(amount), tonumber(expiry), rest, ''
end

local function hold_format(amount, expiry, record, ckpt)
  local v = string.format('%d %d ', amount, expiry) .. record
  if ckpt ~= '' then
    v = v .. '\n' .. ckpt
  end
  return v
end

