-- heartbeat requests: queue them for the group's coordinator, if one serves;
-- and, served or not, refresh the group's last-heartbeat key: a running
-- member heartbeats at least every heartbeat interval, also while its shards
-- are idle and no coordinator serves (`shardline groups delete` reads it,
-- docs/redis.md "Dead letters and groups").
-- A member-side transport sends the requests of one event-loop turn together
-- (one call, in send order); each is still its own envelope in the list.
-- KEYS[1] requests <prefix>group:{<stream>:<group>}:hb:requests (list; LPUSH here, the coordinator pops the tail)
-- KEYS[2] serving  <prefix>group:{<stream>:<group>}:hb:serving  (set by serve, PX)
-- KEYS[3] last     <prefix>group:{<stream>:<group>}:hb:last (string: its TTL in ms, PX that TTL:
--   the time since the last push is the TTL less PTTL)
-- ARGV[1] queue cap (oldest dropped beyond it)
-- ARGV[2] its TTL ms ('0': not members' requests, e.g. a stopping coordinator's mark)
-- ARGV[3..] envelope JSON {"id", "inbox", "request"}
-- -> {0} queued | {6} nobody serves the group | {2, key, msg}
return run(function()
  local requests, serving, last = KEYS[1], KEYS[2], KEYS[3]
  local ttl = tonumber(ARGV[2])
  if ttl > 0 then ccall(last, 'SET', last, ARGV[2], 'PX', ttl) end
  if ccall(serving, 'EXISTS', serving) == 0 then return { 6 } end
  ccall(requests, 'LPUSH', requests, unpack(ARGV, 3))
  ccall(requests, 'LTRIM', requests, 0, tonumber(ARGV[1]) - 1)
  return { 0 }
end)
