-- setOwnerToken: the coordinator's fence; raises the token only. It also
-- makes sure the group exists on the shard (XGROUP CREATE at 0, where the
-- group's first read would create it): from the moment a group is granted
-- a shard, before its members get to read it, another group's xackdel keeps
-- every entry this group has not acknowledged (docs/runtime.md, "Ack
-- policies and other groups"). A shard key holding something else is left
-- alone (reads report it); a sealed shard without a stream gets none
-- (nothing can be appended to it; a retired shard is never recreated).
-- KEYS[1] owner token <prefix>{<stream>:<shard>}:owner:<group>
-- KEYS[2] shard stream <prefix>{<stream>:<shard>}   KEYS[3] seal marker <prefix>{<stream>:<shard>}:sealed
-- ARGV[1] token (decimal integer)   ARGV[2] group
-- -> {0} set (or equal: no-op) | {3, current} lower than stored | {2, key, msg}
return run(function()
  local key, stream, sealed, token = KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1])
  local current = owner_token(key)
  if token < current then return { 3, current } end
  if token > current then ccall(key, 'SET', key, ARGV[1]) end
  local t = type_of(stream)
  if t == 'stream' or (t == 'none' and ccall(sealed, 'EXISTS', sealed) == 0) then
    local created = redis.pcall('XGROUP', 'CREATE', stream, ARGV[2], '0', 'MKSTREAM')
    if is_err(created, '') and not is_err(created, 'BUSYGROUP') then error(created) end
  end
  return { 0 }
end)
