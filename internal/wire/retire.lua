-- Retires the exclusive lock at key lock that the includer's value holds, its keys starting
-- with base: writes the memo of the release arguments from m on (memo.lua; m false: none) and
-- renames the lock to its release record, the includer's local record ("<base>r:<value>"),
-- which keeps the lease's TTL, or RECORD_TTL with keep: a call sent again after a lost reply
-- finds it. Pasted, not called (see token.lua).
record = base .. 'r:' .. value
if m then
  -- #include memo.lua
end
redis.call('RENAME', lock, record)
if keep then
  redis.call('PEXPIRE', record, RECORD_TTL)
end
