-- gate: the guard of the gated fence (docs/redis.md, "The gated fence").
-- It runs first inside MULTI; the transaction's XACK / XACKDEL and
-- XREADGROUP address the GATE key, and its last command is RENAMENX gate
-- stream. So the entries are reachable only when this script opened the
-- gate: a stale token, a foreign value, an error or a missing script leave
-- the gate key absent, the ack and the read touch nothing, and RENAMENX
-- (no such key) changes nothing. So does a missing owner token (TOKEN
-- MISSING: prelude's fence refuses every token then). An xackdel ack before Redis 8.2 (XACK, then
-- XDEL of what every group has acknowledged: prelude's acknowledge) is made
-- here instead, after the fence. When it opened, RENAMENX puts the stream back before
-- EXEC ends, so no other client ever sees it moved.
-- A read that acknowledges nothing ("if-unread") opens the gate only when
-- the group has an entry after its last-delivered id: an empty read of an
-- idle shard then renames nothing, so it neither modifies the shard's key
-- (another client's WATCH on it survives, client-side caching keeps it)
-- nor costs the two renames (docs/redis.md, "Idle shards").
-- KEYS[1] shard stream <prefix>{<stream>:<shard>}   KEYS[2] owner token
-- KEYS[3] gate <prefix>{<stream>:<shard>}:gate (same slot)
-- ARGV[1] token  ARGV[2] group
-- ARGV[3] "" (an ack, if any, is queued in the MULTI), "if-unread" (no ack
--         at all), or an ack mode ("ack" | "xackdel", as ack.lua):
--         acknowledge ARGV[5..] first (the previous batch), after the fence
--         (used for xackdel before Redis 8.2)
-- ARGV[4] "1": the server has XACKDEL ... ACKED (Redis >= 8.2)
-- A non-stream value at the shard key moves too: the XACK / XREADGROUP on
-- it fail WRONGTYPE (reported as FOREIGN) and RENAMENX moves it back.
-- -> {0, 1} opened | {0, 0} no stream or group (the read script decides what that means)
--    | {0, 2} nothing to read, not opened | {1, current} | {12} TOKEN MISSING
--    | {13, what} VANISHED (an ack's group is gone) | {2, key, msg}

-- true when `group` has an entry after its last-delivered id; nil when the
-- stream or the group does not exist
local function has_unread(stream, group)
  local groups = rcall(stream, 'XINFO', 'GROUPS', stream)
  if is_err(groups, '') then return nil end
  for _, g in ipairs(groups) do
    local name, delivered
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then delivered = g[i + 1] end
    end
    if name == group then
      return #ccall(stream, 'XRANGE', stream, '(' .. delivered, '+', 'COUNT', 1) > 0
    end
  end
  return nil
end

return run(function()
  local stream, owner, gate = KEYS[1], KEYS[2], KEYS[3]
  fence(owner, tonumber(ARGV[1]))
  if ARGV[3] == 'if-unread' then
    if has_unread(stream, ARGV[2]) == false then return { 0, 2 } end
  elseif ARGV[3] ~= '' then
    acknowledge(stream, ARGV[2], ARGV[3], ARGV[4] == '1', { unpack(ARGV, 5) })
  end
  -- RENAMENX: a value under the gate key is not ours, so it is left alone (and the gate stays shut)
  local moved = redis.pcall('RENAMENX', stream, gate)
  if moved == 1 then return { 0, 1 } end
  if moved == 0 then foreign(gate, 'the gate key holds a value') end
  if is_err(moved, 'ERR no such key') then return { 0, 0 } end
  error(moved)
end)
