-- claimPending: fenced takeover of idle pending entries (XAUTOCLAIM), delivery count +1.
-- KEYS[1] shard stream   KEYS[2] owner token
-- ARGV[1] token  ARGV[2] group  ARGV[3] consumer  ARGV[4] min idle ms
-- ARGV[5] start cursor  ARGV[6] count
-- A group or stream missing under the token VANISHED (as read.lua; a shard
-- sealed without a stream has nothing to claim: the caller looks at the seal).
-- -> {0, next, {{id, {field, value, ...}, deliveryCount}, ...}, {deletedId, ...}}
--    | {1, current} | {12} | {13, what} | {2, key, msg}
return run(function()
  local stream, owner, group, consumer = KEYS[1], KEYS[2], ARGV[2], ARGV[3]
  fence(owner, tonumber(ARGV[1]))
  local reply = rcall(stream, 'XAUTOCLAIM', stream, group, consumer, ARGV[4], ARGV[5], 'COUNT', ARGV[6])
  if is_err(reply, 'NOGROUP') then
    vanished(stream)
  end
  if type(reply) == 'table' and reply.err then error(reply) end
  local messages = {}
  for _, e in ipairs(reply[2]) do
    messages[#messages + 1] = { e[1], e[2], deliveries(stream, group, e[1]) }
  end
  return { 0, reply[1], messages, reply[3] or {} }
end)
