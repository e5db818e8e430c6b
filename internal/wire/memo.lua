-- Writes what a release of one resource (keys from base) commits while it holds it: the memo
-- of ARGV[m] (name; '' none), ARGV[m + 1] (value), ARGV[m + 2] (TTL ms) at "<base><name>", and
-- ARGV[m + 3], an expiry (ms) for the counter unless it has one ('0' none). Pasted (token.lua).
if (ARGV[m] or '') ~= '' then
  redis.call('SET', base .. ARGV[m], ARGV[m + 1], 'PX', ARGV[m + 2])
end
if (ARGV[m + 3] or '0') ~= '0' then
  redis.call('PEXPIRE', base .. 'fence', ARGV[m + 3], 'NX')
end
