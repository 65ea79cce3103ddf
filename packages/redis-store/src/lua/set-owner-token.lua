-- setOwnerToken: the coordinator's fence; raises the token only (a token
-- never written is written whatever its value, 0 included: every fenced
-- call refuses a missing one). The group's first grant of the shard (ARGV[3])
-- also makes sure the group exists on the shard (XGROUP CREATE at 0, where
-- the group's first read would start): from the moment a group is granted
-- a shard, before its members get to read it, another group's xackdel
-- keeps every entry this group has not acknowledged (docs/runtime.md, "Ack
-- policies and other groups"). Past it, a missing group or stream
-- vanished: it is left for the fenced calls to report (VANISHED), never
-- re-created in silence (docs/protocol.md rule 26). A
-- shard key holding something else is left alone (reads report it); a
-- sealed shard without a stream gets none (nothing can be appended to it;
-- a retired shard is never recreated).
-- KEYS[1] owner token <prefix>{<stream>:<shard>}:owner:<group>
-- KEYS[2] shard stream <prefix>{<stream>:<shard>}   KEYS[3] seal marker <prefix>{<stream>:<shard>}:sealed
-- ARGV[1] token (decimal integer)   ARGV[2] group
-- ARGV[3] create the group where missing: "1" (the group's first grant of the
--         shard), "0" (a later grant, a re-fence: never), "" (only at the first
--         write of the token)
-- ARGV[4] where a group created here starts: '0' (or absent: the start), '$'
--         (the end: a new group's startAt "latest") or an entry id; an existing
--         group keeps its position (docs/runtime.md, "Where a new group starts")
-- -> {0} set (or equal: no-op) | {3, current} lower than stored | {2, key, msg}
return run(function()
  local key, stream, sealed, token = KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1])
  local current = stored_token(key)
  if current ~= nil and token < current then return { 3, current } end
  if current == nil or token > current then ccall(key, 'SET', key, ARGV[1]) end
  local create = ARGV[3] == '1' or ((ARGV[3] or '') == '' and current == nil)
  if not create then return { 0 } end
  local t = type_of(stream)
  if t == 'stream' or (t == 'none' and ccall(sealed, 'EXISTS', sealed) == 0) then
    local created = redis.pcall('XGROUP', 'CREATE', stream, ARGV[2], (ARGV[4] or '') == '' and '0' or ARGV[4], 'MKSTREAM')
    if is_err(created, '') and not is_err(created, 'BUSYGROUP') then error(created) end
  end
  return { 0 }
end)
