/**
 * Scenarios: which members start when, and which leave (gracefully) when.
 * An action is an event: `ACTION(0, slot)` starts a member (if it has no
 * process), `ACTION(1, slot)` makes it leave; the `burst` fault uses the same
 * actions.
 *
 * @module
 */
import type { Ctx } from "./ctx.js"
import { K } from "./world.js"

export const scheduleScenario = (ctx: Ctx): void => {
  const { w, options: o } = ctx
  const M = o.members
  const D = o.durationMs
  const r = w.rng.scenario
  const start = (i: number, t: number) => w.q.push(t, K.ACTION, 0, i)
  const leave = (i: number, t: number) => w.q.push(t, K.ACTION, 1, i)
  const stagger = () => r.range(0, 1000)
  switch (o.scenario) {
    case "scale-out": {
      const initial = Math.max(1, Math.ceil(M / 2))
      for (let i = 0; i < initial; i++) start(i, stagger())
      for (let i = initial; i < M; i++)
        start(i, D * 0.2 + ((i - initial + 1) * D * 0.6) / (M - initial + 1))
      break
    }
    case "scale-in": {
      for (let i = 0; i < M; i++) start(i, stagger())
      const leaving = Math.floor(M / 2)
      for (let i = 0; i < leaving; i++)
        leave(M - 1 - i, D * 0.2 + ((i + 1) * D * 0.6) / (leaving + 1))
      break
    }
    case "rolling-restart": {
      for (let i = 0; i < M; i++) start(i, stagger())
      for (let i = 0; i < M; i++) {
        const t = D * 0.1 + (i * D * 0.8) / M
        leave(i, t)
        start(i, t + 2_000)
      }
      break
    }
    case "swarm": {
      for (let i = 0; i < M; i++) start(i, stagger())
      const changes = r.int(Math.min(M, 6) + 1)
      for (let c = 0; c < changes; c++) {
        const i = r.int(M)
        const t = r.range(D * 0.1, D * 0.8)
        leave(i, t)
        start(i, t + r.range(500, 10_000))
      }
      break
    }
    default:
      for (let i = 0; i < M; i++) start(i, stagger())
  }
  ctx.layouts.schedule()
}

/** Runs one scenario (or burst) action. */
export const action = (ctx: Ctx, kind: number, i: number): void => {
  const { w, members } = ctx
  const slot = members.slots[i]!
  if (kind === 0) {
    slot.wanted = true
    if (slot.procs.length === 0) {
      w.mark("action", `start ${slot.id}`)
      members.start(slot)
    }
    return
  }
  // The liveness phase is stable: no more leaves (a burst's heal may still
  // ask for one), and some member always stays.
  if (ctx.sampler.liveness) {
    w.count("scenario:leaveIgnoredInLiveness")
    return
  }
  slot.wanted = false
  for (const p of [...slot.procs]) {
    if (p.paused) {
      members.stop(p)
      continue
    }
    const l = p.state.lifecycle
    if (l === "leaving" || l === "left") continue
    w.mark("action", `leave ${p.label}`)
    members.leave(p)
  }
}
