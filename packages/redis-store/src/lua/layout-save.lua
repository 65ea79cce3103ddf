-- layout save: compare-and-set on the layout's revision.
-- KEYS[1] layout <prefix>stream:{<stream>}:layout (hash: record JSON, revision)
-- ARGV[1] expected revision (0: none yet)   ARGV[2] record JSON
-- -> {0, revision} | {1, actual revision} stale | {2, key, msg}
return run(function()
  local layout = KEYS[1]
  local actual = 0
  if expect_type(layout, 'hash') then
    local raw = str(redis.call('HGET', layout, 'revision'))
    if not raw or not string.match(raw, '^%d+$') or #raw > 15 then
      foreign(layout, 'layout hash without an integer revision')
    end
    actual = tonumber(raw)
  end
  if actual ~= tonumber(ARGV[1]) then return { 1, actual } end
  local next_revision = actual + 1
  redis.call('HSET', layout, 'record', ARGV[2], 'revision', string.format('%d', next_revision))
  return { 0, next_revision }
end)
