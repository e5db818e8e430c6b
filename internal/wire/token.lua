-- Issues the next token of the resource whose keys start with base under rules (an element's
-- or ''; 'f' first: at or above the server clock in microseconds; 'e<ms>': so, and the counter
-- expires) into the includer's locals token (nil before; a decimal string, as a Lua number
-- would round one above 2^53) and behind (0 before: microseconds the clock was behind the last
-- token, past a second). Pasted where used, not called: a function is created on every run.
do
  local fence, c = base .. 'fence', rules ~= '' and string.byte(rules) -- 'e' or 'f' first, when there
  if c == 101 or c == 102 then -- 'e<ms>' or 'f': at or above the server clock
    local t = redis.call('TIME')
    local now = t[1] .. string.sub('00000' .. t[2], -6) -- microseconds
    local last
    if c == 101 then
      last = redis.call('SET', fence, now, 'PX', string.match(rules, '^e(%d+)'), 'GET')
    else
      last = redis.call('SET', fence, now, 'KEEPTTL', 'GET')
    end
    if not last or string.byte(last) == 45 or #last < #now or (#last == #now and last < now) then
      token = now
    else
      if tonumber(last) - tonumber(now) > 1000000 then
        behind = tonumber(last) - tonumber(now)
      end
      redis.call('SET', fence, last, 'KEEPTTL') -- the clock is behind: count on from the last
    end
  end
  if not token then
    local n = redis.call('INCR', fence)
    token = n < 9007199254740992 and string.format('%d', n) or redis.call('GET', fence)
  end
end
