-- store replaceSnapshot (compaction): if the revision is still ARGV[1],
-- store the snapshot at that revision and drop every batch.
-- KEYS[1] revision   KEYS[2] snapshot   KEYS[3] batches
-- ARGV[1] revision the snapshot is at   ARGV[2] snapshot (JSON)
-- -> {0, 1} replaced | {0, 0} the revision moved on (nothing changed) | {2, key, msg}
return run(function()
  local revision = store_revision(KEYS)
  if revision == 0 or revision ~= tonumber(ARGV[1]) then return { 0, 0 } end
  redis.call('SET', KEYS[2], ARGV[2])
  redis.call('DEL', KEYS[3])
  return { 0, 1 }
end)
