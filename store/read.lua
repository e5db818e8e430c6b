-- Read a fenced record written by write.lua.
--
-- KEYS[1]: the record, a hash with the fields "value" and "fence".
-- ARGV: none.
--
-- Returns {value, fence}, both strings, or nil (a null reply) when the record has no
-- "fence" field, that is when it was never written.
local r = redis.call('HMGET', KEYS[1], 'value', 'fence')
if not r[2] then
  return nil
end
return {r[1] or '', r[2]}
