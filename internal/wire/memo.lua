-- Writes what the release of one resource whose keys start with base commits with it, only
-- while the releasing acquisition holds it: the memo of the release script's trailing
-- arguments from m on (ARGV[m] its name, '' for none; ARGV[m + 1] its value; ARGV[m + 2] its TTL
-- in ms) at "<base><name>", and the counter's expiry (ARGV[m + 3], ms, unless it has one; '0'
-- for none). Pasted, not called (token.lua).
if (ARGV[m] or '') ~= '' then
  redis.call('SET', base .. ARGV[m], ARGV[m + 1], 'PX', ARGV[m + 2])
end
if (ARGV[m + 3] or '0') ~= '0' then
  redis.call('PEXPIRE', base .. 'fence', ARGV[m + 3], 'NX')
end
