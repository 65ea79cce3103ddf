/**
 * Self-contained HTML report of one run: summary, shard ownership timeline
 * (one row per shard, coloured by owning member), shards owned per member
 * over time, and marks for faults, rebalances, fences and violations. Inline
 * SVG, no scripts or external assets. Big runs are sampled: at most
 * `MAX_SHARD_ROWS` shards and `MAX_MEMBER_ROWS` members are drawn, and marks
 * are thinned, so the file stays small (well under a few MB).
 *
 * @module
 */
import type { Mark, Segment, SimResult } from "./Simulation.js"
import { formatSummary, type Summary } from "./summary.js"

const MAX_SHARD_ROWS = 64
const MAX_MEMBER_ROWS = 32
const MAX_MARKS_PER_KIND = 400
const W = 1100
const LEFT = 90

const esc = (s: string) =>
  s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;")

const color = (member: number) => `hsl(${(member * 137.508) % 360},62%,52%)`

const markColor: Record<Mark["kind"], string> = {
  fault: "#d62728",
  heal: "#2ca02c",
  rebalance: "#1f77b4",
  fence: "#999999",
  violation: "#000000",
  action: "#9467bd",
  phase: "#ff7f0e",
}

const sampleIndexes = (n: number, max: number): Array<number> => {
  if (n <= max) return Array.from({ length: n }, (_, i) => i)
  const out: Array<number> = []
  for (let i = 0; i < max; i++) out.push(Math.floor((i * (n - 1)) / (max - 1)))
  return [...new Set(out)]
}

const thinMarks = (marks: ReadonlyArray<Mark>): Array<Mark> => {
  const byKind = new Map<string, Array<Mark>>()
  for (const m of marks) {
    const list = byKind.get(m.kind) ?? []
    list.push(m)
    byKind.set(m.kind, list)
  }
  const out: Array<Mark> = []
  for (const list of byKind.values()) {
    const idx = sampleIndexes(list.length, MAX_MARKS_PER_KIND)
    for (const i of idx) out.push(list[i]!)
  }
  return out
}

export const renderReport = (result: SimResult, summary: Summary): string => {
  const end = Math.max(1, result.virtualMs)
  const x = (t: number) => LEFT + ((W - LEFT - 10) * Math.min(t, end)) / end
  // every shard id (a reshard's generations number theirs after the first's)
  const shardIds = result.ackedPerShard.length
  const shardRows = sampleIndexes(shardIds, MAX_SHARD_ROWS)
  const rowOf = new Map(shardRows.map((s, i) => [s, i]))
  const rowH = 10
  const top = 20
  const marks = thinMarks(result.marks)
  const h1 = top + shardRows.length * rowH + 30

  const parts: Array<string> = []
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${h1}" font-family="monospace" font-size="9">`,
  )
  for (const [i, s] of shardRows.entries())
    parts.push(`<text x="2" y="${top + i * rowH + 8}">shard ${s}</text>`)
  for (const seg of result.segments as ReadonlyArray<Segment>) {
    const row = rowOf.get(seg.shard)
    if (row === undefined) continue
    const x0 = x(seg.start)
    const x1 = Math.max(x0 + 0.5, x(Number.isNaN(seg.end) ? end : seg.end))
    parts.push(
      `<rect x="${x0.toFixed(1)}" y="${top + row * rowH}" width="${(x1 - x0).toFixed(1)}" height="${rowH - 2}" fill="${color(seg.member)}"><title>${esc(result.memberIds[seg.member] ?? String(seg.member))} ${Math.round(seg.start)}-${Math.round(seg.end)}ms</title></rect>`,
    )
  }
  for (const m of marks) {
    const mx = x(m.time).toFixed(1)
    const width = m.kind === "violation" ? 2 : 1
    parts.push(
      `<line x1="${mx}" y1="${top - 6}" x2="${mx}" y2="${h1 - 24}" stroke="${markColor[m.kind]}" stroke-width="${width}" opacity="${m.kind === "fence" ? 0.25 : 0.7}"><title>${esc(`${Math.round(m.time)}ms ${m.kind}: ${m.label}`)}</title></line>`,
    )
  }
  for (let k = 0; k <= 10; k++) {
    const t = (end * k) / 10
    parts.push(`<text x="${x(t) - 10}" y="${h1 - 8}">${(t / 1000).toFixed(0)}s</text>`)
  }
  parts.push("</svg>")

  // Shards owned per member over time (step lines), sampled members.
  const memberRows = sampleIndexes(result.memberIds.length, MAX_MEMBER_ROWS)
  const steps = new Map<number, Array<[number, number]>>()
  for (const seg of result.segments) {
    const list = steps.get(seg.member) ?? []
    list.push([seg.start, 1], [Number.isNaN(seg.end) ? end : seg.end, -1])
    steps.set(seg.member, list)
  }
  const series: Array<{ readonly member: number; readonly pts: Array<[number, number]> }> = []
  /** [level, how long it was held]: the axis is scaled by time held, not by point count. */
  const levels: Array<[number, number]> = []
  for (const m of memberRows) {
    const ev = (steps.get(m) ?? []).sort((a, b) => a[0] - b[0] || a[1] - b[1])
    let n = 0
    const pts: Array<[number, number]> = [[0, 0]]
    for (const [t, dn] of ev) {
      n += dn
      pts.push([t, n])
    }
    pts.push([end, n])
    for (let i = 1; i < pts.length; i++) levels.push([pts[i - 1]![1], pts[i]![0] - pts[i - 1]![0]])
    series.push({ member: m, pts })
  }
  // Scale to the time-weighted 99th percentile: the first member briefly owns every shard
  // while the others join, and a linear axis up to that spike flattens the
  // steady state into the baseline. Clipped values are drawn at the top.
  levels.sort((a, b) => a[0] - b[0])
  const held = levels.reduce((sum, [, d]) => sum + d, 0)
  let p99 = 1
  for (let acc = 0, i = 0; i < levels.length && acc < held * 0.99; i++) {
    acc += levels[i]![1]
    p99 = levels[i]![0]
  }
  const fairShare = result.options.shards / Math.max(1, result.options.members)
  const maxOwned = Math.max(1, Math.ceil(fairShare) + 1, p99)
  const h2 = 220
  const y = (n: number) => h2 - 20 - ((h2 - 40) * Math.min(n, maxOwned)) / maxOwned
  const p2: Array<string> = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${h2}" font-family="monospace" font-size="9">`,
    `<text x="2" y="${y(maxOwned) + 3}">${maxOwned}+</text><text x="2" y="${y(0)}">0</text>`,
    `<line x1="${x(0)}" x2="${x(end)}" y1="${y(fairShare).toFixed(1)}" y2="${y(fairShare).toFixed(1)}" stroke="#888" stroke-dasharray="4 3"><title>fair share at the configured size: ${fairShare.toFixed(2)} shards per member</title></line>`,
  ]
  for (const { member: m, pts } of series) {
    let d = ""
    for (const [i, [t, n]] of pts.entries())
      d +=
        i === 0
          ? `M${x(t).toFixed(1)},${y(n).toFixed(1)}`
          : `H${x(t).toFixed(1)}V${y(n).toFixed(1)}`
    p2.push(
      `<path d="${d}" fill="none" stroke="${color(m)}" stroke-width="1.2"><title>${esc(result.memberIds[m] ?? "")}</title></path>`,
    )
  }
  p2.push("</svg>")

  const violations = result.violations
    .slice(0, 50)
    .map((v) => `<li><b>${esc(v.checker)}</b> at ${Math.round(v.time)}ms: ${esc(v.message)}</li>`)
    .join("")
  const legend = Object.entries(markColor)
    .map(([k, c]) => `<span style="color:${c}">&#9474; ${k}</span>`)
    .join(" &nbsp; ")
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>Shardline simulation seed ${summary.seed} (${esc(summary.scenario)})</title>
<style>body{font-family:system-ui,sans-serif;margin:20px;max-width:1150px}pre{background:#f6f6f6;padding:10px;overflow:auto}h2{margin-top:28px}</style>
</head><body>
<h1>Shardline simulation: ${esc(summary.scenario)}, seed ${summary.seed}</h1>
<pre>${esc(formatSummary(summary))}</pre>
<h2>Violations</h2>${violations === "" ? "<p>None.</p>" : `<ol>${violations}</ol>`}
<h2>Shard ownership (member-side reads)</h2>
<p>One row per shard${shardRows.length < shardIds ? ` (${shardRows.length} of ${shardIds} sampled)` : ""}; colour = member (hover for id). Marks: ${legend}${result.timelineTruncated ? " &mdash; <b>timeline truncated</b> (segment cap reached)" : ""}</p>
${parts.join("\n")}
<h2>Shards owned per member</h2>
<p>${memberRows.length < result.memberIds.length ? `${memberRows.length} of ${result.memberIds.length} members sampled.` : ""}</p>
${p2.join("\n")}
<h2>Summary (JSON)</h2>
<pre>${esc(JSON.stringify({ ...summary, around: undefined, throughputPerShard: { ...summary.throughputPerShard, perShard: undefined } }, null, 2))}</pre>
</body></html>
`
}
