-- hand requests back to the group's request list: a server that popped them
-- and whose coordinator no longer leads (it answered NOT_COORDINATOR) puts
-- them back where the next pop takes them first, if another server serves
-- the group now (or left its handover mark): that server answers them,
-- instead of the member learning NOT_COORDINATOR and sending again. A paused
-- coordinator's pop takes requests that were queued for its successor
-- (docs/protocol.md rule 25). A server that still holds the presence, or
-- finds none, answers them itself.
-- KEYS[1] serving  <prefix>group:{<stream>:<group>}:hb:serving
-- KEYS[2] requests <prefix>group:{<stream>:<group>}:hb:requests (the coordinator pops the tail)
-- ARGV[1] this server's id  ARGV[2..] the envelopes, oldest first
-- -> {0, n} handed back | {1} answer them here | {2, key, msg}
return run(function()
  local serving, requests, id = KEYS[1], KEYS[2], ARGV[1]
  local current = ccall(serving, 'GET', serving)
  if not current or current == id then return { 1 } end
  -- the oldest nearest the tail, popped first
  for i = #ARGV, 2, -1 do ccall(requests, 'RPUSH', requests, ARGV[i]) end
  return { 0, #ARGV - 1 }
end)
