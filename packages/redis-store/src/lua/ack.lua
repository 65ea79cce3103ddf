-- ack: fenced acknowledgement of entries of one shard.
-- KEYS[1] shard stream   KEYS[2] owner token
-- ARGV[1] token  ARGV[2] group  ARGV[3] mode: "ack" | "xackdel"
-- ARGV[4] "1": the server has XACKDEL ... ACKED (Redis >= 8.2)   ARGV[5..] entry ids
-- "xackdel" also deletes each entry this call acknowledged that every group
-- of the stream has acknowledged (XACKDEL ACKED semantics, prelude's
-- acknowledge): an id not pending in the group is neither acked nor deleted.
-- A group or stream missing under the token VANISHED (prelude's acknowledge).
-- -> {0, acknowledged} | {1, current} | {12} | {13, what} | {2, key, msg}
return run(function()
  local stream, owner, group = KEYS[1], KEYS[2], ARGV[2]
  fence(owner, tonumber(ARGV[1]))
  return { 0, acknowledge(stream, group, ARGV[3], ARGV[4] == '1', { unpack(ARGV, 5) }) }
end)
