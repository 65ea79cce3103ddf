-- nack: fenced negative ack; the entry stays pending with the same consumer,
-- its delivery count +1 and its idle time reset (XCLAIM to its own consumer).
-- KEYS[1] shard stream   KEYS[2] owner token
-- ARGV[1] token  ARGV[2] group  ARGV[3] entry id
-- -> {0, 1} still pending | {0, 0} was not pending (or its entry was deleted:
--    XCLAIM drops such a PEL reference) | {1, current} | {12} | {13, what} | {2, key, msg}
return run(function()
  local stream, owner, group, id = KEYS[1], KEYS[2], ARGV[2], ARGV[3]
  fence(owner, tonumber(ARGV[1]))
  local p = rcall(stream, 'XPENDING', stream, group, id, id, 1)
  -- the group (or the stream) vanished under the token: VANISHED, not "not pending"
  if is_err(p, 'NOGROUP') then vanished(stream) end
  if type(p) == 'table' and p.err then error(p) end
  if #p == 0 then return { 0, 0 } end
  local claimed = ccall(stream, 'XCLAIM', stream, group, p[1][2], 0, id)
  if #claimed == 0 then return { 0, 0 } end
  return { 0, 1 }
end)
