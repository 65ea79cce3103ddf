-- append: the producer's XADD, refused on a shard sealed by a reshard; with
-- optional trimming (MAXLEN / MINID, exact or ~) and an idempotency window
-- per (shard, producer): an append whose message id was seen within the
-- window adds nothing and returns the id of the first one (core's
-- ShardStreams.AppendOptions; the same window as the memory port).
-- KEYS[1] shard stream <prefix>{<stream>:<shard>}   KEYS[2] seal marker <prefix>{<stream>:<shard>}:sealed
-- KEYS[3] the producer's window <prefix>{<stream>:<shard>}:idmp:<producer> (a hash; unused without ARGV[5])
-- ARGV[1] trim: '' | 'MAXLEN' | 'MINID'   ARGV[2] '=' or '~'   ARGV[3] threshold
-- ARGV[4] now (ms, the producer's clock)   ARGV[5] message id ('' = not idempotent)
-- ARGV[6] window duration ms   ARGV[7] window max size   ARGV[8..] field, value, ...
-- Window hash: field 'seq' (a counter), fields 'm:<message id>' = '<at>|<seq>|<entry id>'.
-- The window is checked before the seal: a retry of an append that landed
-- before a reshard sealed the shard returns its id instead of {8}, which
-- would send it to the next generation and store it twice.
-- -> {0, id} | {8} sealed (nothing added) | {2, key, msg}
return run(function()
  local stream, sealed, window = KEYS[1], KEYS[2], KEYS[3]
  local trim, how, threshold = ARGV[1], ARGV[2], ARGV[3]
  local now, message = tonumber(ARGV[4]), ARGV[5]
  local duration, max_size = tonumber(ARGV[6]), tonumber(ARGV[7])
  local fields = {}
  for i = 8, #ARGV do fields[#fields + 1] = ARGV[i] end

  -- the window's live entries; expired ones are forgotten only if this call adds
  local entries, expired = {}, {}
  if message ~= '' then
    expect_type(window, 'hash')
    local flat = ccall(window, 'HGETALL', window)
    for i = 1, #flat, 2 do
      local name, value = flat[i], flat[i + 1]
      if string.sub(name, 1, 2) == 'm:' then
        local at, seq, id = string.match(value, '^(%d+)|(%d+)|(.+)$')
        if at == nil then foreign(window, 'not an idempotency window entry: ' .. string.sub(value, 1, 40)) end
        if now - tonumber(at) >= duration then
          expired[#expired + 1] = name
        else
          entries[#entries + 1] = { name = name, seq = tonumber(seq), id = id }
        end
      end
    end
    for _, e in ipairs(entries) do
      if e.name == 'm:' .. message then return { 0, e.id } end
    end
  end
  if ccall(sealed, 'EXISTS', sealed) == 1 then return { 8 } end
  for _, name in ipairs(expired) do ccall(window, 'HDEL', window, name) end

  local args = { 'XADD', stream }
  if trim ~= '' then
    args[#args + 1] = trim
    args[#args + 1] = how
    args[#args + 1] = threshold
  end
  args[#args + 1] = '*'
  for _, f in ipairs(fields) do args[#args + 1] = f end
  local id = ccall(stream, unpack(args))

  if message ~= '' then
    local seq = ccall(window, 'HINCRBY', window, 'seq', 1)
    ccall(window, 'HSET', window, 'm:' .. message, string.format('%d|%d|%s', now, seq, id))
    entries[#entries + 1] = { name = 'm:' .. message, seq = seq, id = id }
    -- at most max_size ids: forget the oldest
    table.sort(entries, function(a, b) return a.seq < b.seq end)
    for i = 1, #entries - max_size do ccall(window, 'HDEL', window, entries[i].name) end
    ccall(window, 'PEXPIRE', window, duration)
  end
  return { 0, id }
end)
