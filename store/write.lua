-- Fenced write: store a value only if its fencing token is at least the record's mark.
--
-- KEYS[1]: the record, a hash with the fields "value" and "fence" (one key, so one
--          Cluster hash slot).
-- ARGV[1]: the token, in canonical decimal: digits only, no sign, no leading zero.
-- ARGV[2]: the value to store.
--
-- Returns {1, token} after writing, or {0, mark} without writing when the token is
-- below the stored mark. Returns an error reply if the stored mark is not canonical.
--
-- Tokens never become Lua numbers: those are doubles and lose precision above 2^53.
-- Two canonical decimals compare by length, then digit by digit (string.byte, not
-- the locale-dependent string '<').
local function less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return false
end

local token = ARGV[1]
local mark = redis.call('HGET', KEYS[1], 'fence')
if mark then
  if mark ~= '0' and not string.match(mark, '^[1-9]%d*$') then
    return redis.error_reply('store: malformed fence field')
  end
  if less(token, mark) then
    return {0, mark}
  end
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', token)
return {1, token}
