-- dlq-replay-append: a dead letter appended to the shard it is routed to, at
-- most once whenever the replay runs (docs/redis.md, "Dead letters and
-- groups"): a mark in the target's slot, checked and set in the same script
-- as the XADD, says it already was. The mark is checked before the seal: a
-- letter that landed before a reshard sealed the shard is reported
-- appended, never routed again. The mark is removed once the dead letter is.
-- KEYS[1] target shard stream  KEYS[2] its seal marker
-- KEYS[3] the shard's replay marks <prefix>{<stream>:<target>}:dlq:replayed
--   (hash: '<group>/<dead-letter shard>/<dead-letter id>' -> the appended entry's id)
-- ARGV[1] the letter's mark  ARGV[2..] field, value, ... (routing key included)
-- -> {0, id, 1} appended | {0, id, 0} appended before | {8} sealed (nothing added) | {2, key, msg}
return run(function()
  local target, sealed, marks, mark = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
  expect_type(marks, 'hash')
  local done = ccall(marks, 'HGET', marks, mark)
  if done ~= false then return { 0, done, 0 } end
  if ccall(sealed, 'EXISTS', sealed) == 1 then return { 8 } end
  expect_type(target, 'stream')
  local id = ccall(target, 'XADD', target, '*', unpack(ARGV, 2))
  ccall(marks, 'HSET', marks, mark, id)
  return { 0, id, 1 }
end)
