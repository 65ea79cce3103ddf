-- append: the producer's XADD, refused on a shard sealed by a reshard.
-- KEYS[1] shard stream {<stream>:<shard>}   KEYS[2] seal marker {<stream>:<shard>}:sealed
-- ARGV[1..] field, value, ...
-- -> {0, id} | {8} sealed (nothing added) | {2, key, msg}
return run(function()
  local stream, sealed = KEYS[1], KEYS[2]
  if ccall(sealed, 'EXISTS', sealed) == 1 then return { 8 } end
  return { 0, ccall(stream, 'XADD', stream, '*', unpack(ARGV)) }
end)
