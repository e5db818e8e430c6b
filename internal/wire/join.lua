-- Queues element at the tail of the queue (keys from base), once: a call sent again finds the
-- holders marked and the element near the tail. Marks the holders (held: an exclusive value,
-- given '+'; else q, a hash's mark, set to '1'; neither: nobody holds it), gives a new queue
-- its TTL, and with entry (the waiter value; '' when fresh) renews both. Pasted (token.lua).
do
  local marked, n = q == '1', 0
  if held then
    marked = string.byte(held, -1) == 43 -- '+'
  end
  if not (marked and redis.call('LPOS', base .. 'queue', element, 'RANK', -1, 'MAXLEN', 16)) then
    n = redis.call('RPUSH', base .. 'queue', element)
  end
  if marked or not (held or q) then
  elseif held then
    redis.call('APPEND', lock, '+')
  else
    redis.call('HSET', lock, 'q', '1')
  end
  if entry ~= '' or n == 1 then -- a new queue always gets its TTL
    redis.call('PEXPIRE', base .. 'queue', ENTRY_TTL)
  end
  if entry ~= '' then
    redis.call('SET', base .. 'w:' .. string.match(element, '^[^.]*'), entry, 'PX', ENTRY_TTL)
  end
end
