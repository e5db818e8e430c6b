-- Issues the next fencing token of the resource whose keys start with base, under the
-- includer's rules ('' or an element's rules, which start with 'f' to keep the token at or
-- above the server clock in microseconds, or with 'e<ms>' to do so and give the counter an
-- expiry), into its locals
-- token (nil before: a decimal string after, as a Lua number would round a token above 2^53)
-- and behind (how many microseconds the clock was behind the last token, when more than a
-- second, else 0). Pasted where a token is issued, not called: a function would be created on
-- every run of a script. With the floor, the token is the clock when the clock is ahead of the
-- last token, as it is below a million tokens a second, set in one write that also gives the
-- counter its expiry; without it, INCR.
do
  local fence, c = base .. 'fence', string.byte(rules) -- 'e' or 'f' first, when there
  behind = 0
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
