-- gate-burst: the gate of a multi-shard gated read (docs/redis.md, "The
-- gated fence", "Several shards in one transaction"): gate-fast.lua for N
-- shards in one call, each shard fenced on its own. For each shard i, the
-- fence (its owner token against ARGV[i]), then, only when it held, RENAMENX
-- stream -> gate. A shard whose fence fails keeps its gate key absent (the
-- transaction's ack and read of that shard touch nothing) and changes
-- nothing for the others. No shared prelude (it would cost Redis as much as
-- the work; docs/runtime.md, "Where the time goes").
-- KEYS[3i-2] shard stream <prefix>{<stream>:<shard>}   KEYS[3i-1] owner token
-- KEYS[3i] gate <prefix>{<stream>:<shard>}:gate
-- ARGV[i] shard i's token (one per shard: #KEYS == 3 * #ARGV)
-- -> one reply per shard, in order, each as gate-fast.lua's:
--    {0, 1} opened | {0, 0} no stream yet | {1, current} STALE
--    | {2, key, msg} FOREIGN | {9, message}
local function gate(stream, owner, gatekey, token)
  local raw = redis.pcall('GET', owner)
  if type(raw) == 'table' then
    local err = raw.err or 'GET failed'
    if string.find(err, 'WRONGTYPE', 1, true) then return { 2, owner, err } end
    return { 9, err }
  end
  if raw then
    if not string.match(raw, '^%d+$') or #raw > 15 then
      return { 2, owner, 'owner token is not a non-negative integer: ' .. string.sub(raw, 1, 40) }
    end
    local current = tonumber(raw)
    if tonumber(token) < current then return { 1, current } end
  end
  local moved = redis.pcall('RENAMENX', stream, gatekey)
  if moved == 1 then return { 0, 1 } end
  if moved == 0 then return { 2, gatekey, 'the gate key holds a value' } end
  if type(moved) == 'table' and moved.err ~= nil and string.sub(moved.err, 1, 15) == 'ERR no such key' then
    return { 0, 0 }
  end
  return { 9, type(moved) == 'table' and moved.err or tostring(moved) }
end

local out = {}
if #KEYS ~= 3 * #ARGV then return redis.error_reply('gate-burst: 3 keys per token') end
for i = 1, #ARGV do
  out[i] = gate(KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[i])
end
return out
