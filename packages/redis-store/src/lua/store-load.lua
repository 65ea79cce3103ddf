-- store load: a group's bytes in one atomic read.
-- KEYS[1] revision <prefix>group:{<stream>:<group>}:store:revision (decimal string)
-- KEYS[2] snapshot ...:store:snapshot (string)   KEYS[3] batches ...:store:batches (list)
-- -> {0, revision, snapshot | false, {batch, ...}} (revision 0: nothing stored) | {2, key, msg}
return run(function()
  local revision, has_snapshot = store_revision(KEYS)
  if revision == 0 then return { 0, 0, false, {} } end
  local snapshot = false
  if has_snapshot then snapshot = redis.call('GET', KEYS[2]) end
  return { 0, revision, snapshot, redis.call('LRANGE', KEYS[3], 0, -1) }
end)
