-- heartbeat request: queue it for the group's coordinator, if one serves.
-- KEYS[1] requests {shardline:<stream>:<group>}:hb:requests (list; LPUSH here, the coordinator pops the tail)
-- KEYS[2] serving  {shardline:<stream>:<group>}:hb:serving  (set by serve, PX)
-- ARGV[1] envelope JSON {"id", "request"}  ARGV[2] queue cap (oldest dropped beyond it)
-- -> {0} queued | {6} nobody serves the group | {2, key, msg}
return run(function()
  local requests, serving = KEYS[1], KEYS[2]
  if ccall(serving, 'EXISTS', serving) == 0 then return { 6 } end
  ccall(requests, 'LPUSH', requests, ARGV[1])
  ccall(requests, 'LTRIM', requests, 0, tonumber(ARGV[2]) - 1)
  return { 0 }
end)
