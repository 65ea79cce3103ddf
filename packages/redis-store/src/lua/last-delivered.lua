-- lastDelivered: the group's last-delivered id and whether entries follow it
-- (the first step of waitForEntries; the blocking XREAD runs outside Lua).
-- KEYS[1] shard stream   ARGV[1] group
-- -> {0, lastDeliveredId, lastEntryId} ("0-0" when absent) | {2, key, msg}
return run(function()
  local stream, group = KEYS[1], ARGV[1]
  local groups = rcall(stream, 'XINFO', 'GROUPS', stream)
  local last_delivered = '0-0'
  if type(groups) == 'table' and not groups.err then
    for _, g in ipairs(groups) do
      local name, delivered
      for i = 1, #g, 2 do
        if g[i] == 'name' then name = g[i + 1] end
        if g[i] == 'last-delivered-id' then delivered = g[i + 1] end
      end
      if name == group then last_delivered = delivered end
    end
  end
  local last = ccall(stream, 'XREVRANGE', stream, '+', '-', 'COUNT', 1)
  local last_id = '0-0'
  if #last > 0 then last_id = last[1][1] end
  return { 0, last_delivered, last_id }
end)
