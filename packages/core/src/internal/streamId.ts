/** Redis Stream entry ids, `<ms>-<seq>`, compared numerically. */
export interface StreamId {
  readonly ms: number
  readonly seq: number
}

export const ZERO: StreamId = { ms: 0, seq: 0 }

export const format = (id: StreamId): string => `${id.ms}-${id.seq}`

const PATTERN = /^(\d{1,16})-(\d{1,16})$/

export const parse = (text: string): StreamId | undefined => {
  const match = PATTERN.exec(text)
  if (match === null) return undefined
  const ms = Number(match[1])
  const seq = Number(match[2])
  return Number.isSafeInteger(ms) && Number.isSafeInteger(seq) ? { ms, seq } : undefined
}

export const compare = (a: StreamId, b: StreamId): number =>
  a.ms !== b.ms ? a.ms - b.ms : a.seq - b.seq

/** The id XADD `*` gives at wall time `now` after `last`: never goes backwards. */
export const next = (last: StreamId, now: number): StreamId =>
  now > last.ms ? { ms: now, seq: 0 } : { ms: last.ms, seq: last.seq + 1 }
