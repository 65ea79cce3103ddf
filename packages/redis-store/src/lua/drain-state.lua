-- drainState: where a group stands on a shard, read in one step.
-- KEYS[1] shard stream   KEYS[2] seal marker   KEYS[3] the group's outbox on the shard
-- ARGV[1] group
-- undelivered: entries after the group's last-delivered id (XINFO GROUPS lag
-- where the server knows it, otherwise counted with XRANGE from that id);
-- pending: the group's PEL size. A group that never read has read nothing.
-- relaying: 1 while the group's outbox (Redis Cluster transactions) holds a
-- committed send not yet relayed (docs/exactly-once.md, "Resharding and the
-- outbox"): the group is not done with a sealed shard until it is relayed.
-- -> {0, sealed 0|1, undelivered, pending, relaying 0|1} | {2, key, msg}
return run(function()
  local stream, sealed, outbox, group = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
  local is_sealed = ccall(sealed, 'EXISTS', sealed)
  local relaying = 0
  if expect_type(outbox, 'stream') and #ccall(outbox, 'XRANGE', outbox, '-', '+', 'COUNT', 1) > 0 then
    relaying = 1
  end
  if not expect_type(stream, 'stream') then return { 0, is_sealed, 0, 0, relaying } end
  local last_delivered, pending, lag = '0-0', 0, nil
  local groups = ccall(stream, 'XINFO', 'GROUPS', stream)
  for _, g in ipairs(groups) do
    local info = {}
    for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
    if info['name'] == group then
      last_delivered = info['last-delivered-id']
      pending = info['pending']
      if type(info['lag']) == 'number' then lag = info['lag'] end
    end
  end
  local undelivered = lag
  if undelivered == nil then
    undelivered = 0
    local start = '(' .. last_delivered
    if last_delivered == '0-0' then start = '-' end
    while true do
      local page = ccall(stream, 'XRANGE', stream, start, '+', 'COUNT', 1000)
      undelivered = undelivered + #page
      if #page < 1000 then break end
      start = '(' .. page[#page][1]
    end
  end
  return { 0, is_sealed, undelivered, pending, relaying }
end)
