-- Retires the exclusive lock at lock that value holds: writes the memo (memo.lua, unless m is
-- false) and renames the lock to its release record, record ("<base>r:<value>"), which keeps
-- the lease's TTL, or RECORD_TTL with keep, for a call sent again. Pasted (token.lua).
record = base .. 'r:' .. value
if m then
  -- #include memo.lua
end
redis.call('RENAME', lock, record)
if keep then
  redis.call('PEXPIRE', record, RECORD_TTL)
end
