-- Writes holder field f (token, lease ending at ending; now: the time) in the hash at lock
-- whose state is s (grant.lua), new or with again renewed: moves the bounds e and x, and past
-- the key's expiry t the expiry to as long again. Pasted (token.lua).
do
  local d = string.format('%d', ending)
  if not again then
    s.count = s.count + 1
  end
  if ending > s.x and ending >= s.e and ending <= s.t then -- the usual case: the latest end, in time
    s.x = ending
    redis.call('HSET', lock, f, d .. ':' .. token, 'x', d)
  else
    local w = {f, d .. ':' .. token}
    if ending > s.x then
      s.x, w[#w + 1], w[#w + 2] = ending, 'x', d
    end
    if ending < s.e then
      s.e, w[#w + 1], w[#w + 2] = ending, 'e', d
    end
    if ending > s.t then
      s.t = 2 * ending - now
      w[#w + 1], w[#w + 2] = 't', string.format('%d', s.t)
      redis.call('PEXPIRE', lock, string.format('%d', s.t - now))
    end
    redis.call('HSET', lock, unpack(w))
  end
end
