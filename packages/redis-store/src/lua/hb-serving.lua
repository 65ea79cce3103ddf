-- serve presence: "a coordinator serves this group", held by one server id.
-- KEYS[1] serving <prefix>group:{<stream>:<group>}:hb:serving (string: server id, PX ttl)
-- ARGV[1] server id  ARGV[2] "claim" | "refresh" | "clear" | "handover"  ARGV[3] ttl ms
-- claim: take it over (a newer serve replaces the previous one);
-- refresh: extend it only while it is still ours;
-- clear: delete it only while it is still ours;
-- handover: while still ours, leave a mark for ttl ms that nobody refreshes:
--   members' requests keep queueing for the successor, which claims it
--   (docs/protocol.md rule 20); with no successor it expires.
-- -> {0} | {7, other server id} (refresh: replaced) | {2, key, msg}
return run(function()
  local serving, id, mode = KEYS[1], ARGV[1], ARGV[2]
  if mode == 'claim' then
    ccall(serving, 'SET', serving, id, 'PX', ARGV[3])
    return { 0 }
  end
  local current = ccall(serving, 'GET', serving)
  if mode == 'refresh' then
    if current and current ~= id then return { 7, current } end
    ccall(serving, 'SET', serving, id, 'PX', ARGV[3])
  elseif current == id then
    if mode == 'handover' then
      ccall(serving, 'SET', serving, 'handover:' .. id, 'PX', ARGV[3])
    else
      ccall(serving, 'DEL', serving)
    end
  end
  return { 0 }
end)
