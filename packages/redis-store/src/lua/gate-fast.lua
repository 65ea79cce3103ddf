-- gate-fast: the gate of the gated fence (docs/redis.md, "The gated fence")
-- for its common read, one that acknowledges nothing in the script (the
-- previous batch's XACK / XACKDEL is queued in the MULTI, on the gate key):
-- the fence, then RENAMENX stream -> gate. The same decisions and replies
-- as gate.lua with ARGV[3] = "", without the shared prelude: the prelude's
-- helpers cost Redis as much again as this script's work, once per batch
-- (docs/runtime.md, "Where the time goes"). The gate opens only when the
-- caller's token is current; anything else (a stale or foreign token, an
-- error) leaves the gate key absent, so the transaction's ack and read touch
-- nothing.
-- KEYS[1] shard stream <prefix>{<stream>:<shard>}   KEYS[2] owner token
-- KEYS[3] gate <prefix>{<stream>:<shard>}:gate (same slot)
-- ARGV[1] token
-- -> {0, 1} opened | {0, 0} no stream (the read script decides what that means)
--    | {1, current} STALE | {12} TOKEN MISSING | {2, key, msg} FOREIGN | {9, message}
local owner = KEYS[2]
local raw = redis.pcall('GET', owner)
if type(raw) == 'table' then
  local err = raw.err or 'GET failed'
  if string.find(err, 'WRONGTYPE', 1, true) then return { 2, owner, err } end
  return { 9, err }
end
-- no token at all refuses every token (docs/protocol.md rule 26), as prelude's fence
if not raw then return { 12 } end
if not string.match(raw, '^%d+$') or #raw > 15 then
  return { 2, owner, 'owner token is not a non-negative integer: ' .. string.sub(raw, 1, 40) }
end
local current = tonumber(raw)
if tonumber(ARGV[1]) < current then return { 1, current } end
-- RENAMENX: a value under the gate key is not ours, so it is left alone (and the gate stays shut)
local moved = redis.pcall('RENAMENX', KEYS[1], KEYS[3])
if moved == 1 then return { 0, 1 } end
if moved == 0 then return { 2, KEYS[3], 'the gate key holds a value' } end
if type(moved) == 'table' and moved.err ~= nil and string.sub(moved.err, 1, 15) == 'ERR no such key' then
  return { 0, 0 }
end
return { 9, type(moved) == 'table' and moved.err or tostring(moved) }
