-- Writes holder field f (token, lease ending at ending; now: the time) in the hash at lock
-- whose state is s (grant.lua), new or with again renewed: moves the bounds e and x, and past
-- the key's expiry t the expiry to as long again. Pasted (token.lua).
do
  if not again then
    s.count = s.count + 1
  end
  local d = string.format('%d', ending)
  local w = {f, d .. ':' .. token}
  if ending > s.x then
    s.x, w[#w + 1], w[#w + 2] = ending, 'x', d
  end
  if ending < s.e then
    s.e, w[#w + 1], w[#w + 2] = ending, 'e', d
  end
  local moved = ending > s.t
  if moved then
    s.t = 2 * ending - now
    w[#w + 1], w[#w + 2] = 't', string.format('%d', s.t)
  end
  redis.call('HSET', lock, unpack(w))
  if moved then
    redis.call('PEXPIRE', lock, string.format('%d', s.t - now))
  end
end
