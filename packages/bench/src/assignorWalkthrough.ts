/**
 * Assignor walkthrough: 64 shards, members joining one by one, one leaving,
 * then a weighted member. Per step: the owner of every shard (one letter per
 * shard), per-member counts, shards moved vs the lower bound, and balance.
 * Run with `pnpm --filter @shardline/bench assignor-walkthrough`. (It was
 * `pnpm demo` until the member runtime's live group took that command.)
 */
import type { AssignorMember } from "@shardline/core"
import { assignWithStats, movementLowerBound } from "@shardline/core"

const shardCount = 64

interface Step {
  readonly label: string
  readonly members: ReadonlyArray<AssignorMember>
}

const steps: ReadonlyArray<Step> = [
  { label: "a joins", members: [{ id: "a" }] },
  { label: "b joins", members: [{ id: "a" }, { id: "b" }] },
  { label: "c joins", members: [{ id: "a" }, { id: "b" }, { id: "c" }] },
  { label: "d joins", members: [{ id: "a" }, { id: "b" }, { id: "c" }, { id: "d" }] },
  { label: "b leaves", members: [{ id: "a" }, { id: "c" }, { id: "d" }] },
  {
    label: "e joins, weight 2",
    members: [{ id: "a" }, { id: "c" }, { id: "d" }, { id: "e", weight: 2 }],
  },
]

const pad = (s: string, n: number): string => s.padEnd(n)

const main = (): void => {
  console.log(`Sticky assignor: ${shardCount} shards; each letter below is one shard's owner.\n`)
  let previous: ReadonlyArray<string | null> = []
  for (const step of steps) {
    const input = { shardCount, members: step.members, previous }
    const { owners, moved, counts } = assignWithStats(input)
    const bound = movementLowerBound(input)
    const values = [...counts.values()]
    const totalWeight = step.members.reduce((sum, m) => sum + (m.weight ?? 1), 0)
    const withinQuota = step.members.every((m) => {
      const q = (shardCount * (m.weight ?? 1)) / totalWeight
      const c = counts.get(m.id) ?? 0
      return c === Math.floor(q) || c === Math.ceil(q)
    })
    const countsText = [...counts].map(([id, c]) => `${id}:${c}`).join(" ")
    console.log(
      `${pad(step.label, 18)} ${pad(countsText, 22)} moved ${String(moved).padStart(2)} (lower bound ${String(bound).padStart(2)})  max-min ${Math.max(...values) - Math.min(...values)}  quotas ${withinQuota ? "ok" : "VIOLATED"}`,
    )
    console.log(`${" ".repeat(18)} ${owners.map((o) => o ?? ".").join("")}`)
    previous = owners
  }
  console.log(
    "\nWith a weight of 2, e's quota is 64 * 2/5 = 25.6, so it gets 25 or 26 and max-min can exceed 1.",
  )
}

main()
