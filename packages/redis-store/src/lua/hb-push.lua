-- heartbeat requests: queue them for the group's coordinator, if one serves.
-- A member-side transport sends the requests of one event-loop turn together
-- (one call, in send order); each is still its own envelope in the list.
-- KEYS[1] requests <prefix>group:{<stream>:<group>}:hb:requests (list; LPUSH here, the coordinator pops the tail)
-- KEYS[2] serving  <prefix>group:{<stream>:<group>}:hb:serving  (set by serve, PX)
-- ARGV[1] queue cap (oldest dropped beyond it)  ARGV[2..] envelope JSON {"id", "inbox", "request"}
-- -> {0} queued | {6} nobody serves the group | {2, key, msg}
return run(function()
  local requests, serving = KEYS[1], KEYS[2]
  if ccall(serving, 'EXISTS', serving) == 0 then return { 6 } end
  ccall(requests, 'LPUSH', requests, unpack(ARGV, 2))
  ccall(requests, 'LTRIM', requests, 0, tonumber(ARGV[1]) - 1)
  return { 0 }
end)
