-- setPosition: fenced seek of a group on a shard (XGROUP SETID); creates the
-- group there (and the stream, MKSTREAM) when absent. Pending entries stay
-- pending (SETID keeps the PEL).
-- KEYS[1] shard stream   KEYS[2] owner token
-- ARGV[1] token  ARGV[2] group  ARGV[3] position ('0-0', '$' or an entry id)
-- The way back from a VANISHED group or stream (docs/protocol.md rule 26):
-- fenced as every call, and it creates what is missing where it says.
-- -> {0} | {1, current} | {12} | {2, key, msg} | {9, message}
return run(function()
  local stream, owner, group, position = KEYS[1], KEYS[2], ARGV[2], ARGV[3]
  fence(owner, tonumber(ARGV[1]))
  if not expect_type(stream, 'stream') then
    ccall(stream, 'XGROUP', 'CREATE', stream, group, position, 'MKSTREAM')
    return { 0 }
  end
  local moved = rcall(stream, 'XGROUP', 'SETID', stream, group, position)
  if is_err(moved, 'NOGROUP') then
    ccall(stream, 'XGROUP', 'CREATE', stream, group, position)
  elseif type(moved) == 'table' and moved.err then
    error(moved)
  end
  return { 0 }
end)
