-- deadLetter: fenced and atomic: copy a pending entry to the shard's
-- dead-letter stream and ack it. Never both kept and dead-lettered, never lost.
-- KEYS[1] shard stream   KEYS[2] owner token   KEYS[3] dead-letter stream <prefix>{<stream>:<shard>}:dlq
-- ARGV[1] token  ARGV[2] group  ARGV[3] entry id  ARGV[4] reason
-- ARGV[5..8] field names for: original id, reason, group, delivery count
-- -> {0, dlqId} | {0} not pending (nothing changed) | {1, current} | {12} | {13, what} | {2, key, msg}
return run(function()
  local stream, owner, dlq = KEYS[1], KEYS[2], KEYS[3]
  local group, id = ARGV[2], ARGV[3]
  fence(owner, tonumber(ARGV[1]))
  local p = rcall(stream, 'XPENDING', stream, group, id, id, 1)
  -- the group (or the stream) vanished under the token: VANISHED, not "not pending"
  if is_err(p, 'NOGROUP') then vanished(stream) end
  if type(p) == 'table' and p.err then error(p) end
  if #p == 0 then return { 0 } end
  local entry = ccall(stream, 'XRANGE', stream, id, id)
  local args = { 'XADD', dlq, '*' }
  if #entry > 0 then
    for _, v in ipairs(entry[1][2]) do args[#args + 1] = v end
  end
  for _, v in ipairs({ ARGV[5], id, ARGV[6], ARGV[4], ARGV[7], group, ARGV[8], tostring(p[1][4]) }) do
    args[#args + 1] = v
  end
  -- XADD first: a foreign value at the dead-letter key fails before the ack
  local dlq_id = ccall(dlq, unpack(args))
  ccall(stream, 'XACK', stream, group, id)
  return { 0, dlq_id }
end)
