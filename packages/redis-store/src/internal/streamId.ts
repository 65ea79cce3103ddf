/** Redis Stream entry ids, `<ms>-<seq>`; the same grammar as core's memory port accepts. */
const PATTERN = /^(\d{1,16})-(\d{1,16})$/

/** Both parts at most 15 digits: always safe integers, no conversion needed (the common case). */
const SHORT = /^\d{1,15}-\d{1,15}$/

export const isValid = (text: string): boolean => {
  if (SHORT.test(text)) return true
  const match = PATTERN.exec(text)
  return (
    match !== null &&
    Number.isSafeInteger(Number(match[1])) &&
    Number.isSafeInteger(Number(match[2]))
  )
}

/** Both parts at most 15 digits, no leading zeros: valid and canonical (an id as a read returns it). */
const CANONICAL_SHORT = /^(?:0|[1-9]\d{0,14})-(?:0|[1-9]\d{0,14})$/

/** `canonical(text)` when `text` is valid (`isValid`), else undefined: one test for an id a read returned. */
export const canonicalOf = (text: string): string | undefined => {
  if (CANONICAL_SHORT.test(text)) return text
  return isValid(text) ? canonical(text) : undefined
}

/** A valid id (`isValid`) as Redis writes it: without leading zeros. */
export const canonical = (text: string): string =>
  /(^|-)0\d/.test(text) ? text.replace(/^0+(?=\d)/, "").replace(/-0+(?=\d)/, "-") : text

/** Orders two valid ids (`isValid`): negative, zero or positive as `a` is below, at or above `b`. */
export const compare = (a: string, b: string): number => {
  // the common case (both parts at most 15 digits, no leading zeros): numbers are exact
  if (SHORT.test(a) && SHORT.test(b)) {
    const dashA = a.indexOf("-")
    const dashB = b.indexOf("-")
    const ms = Number(a.slice(0, dashA)) - Number(b.slice(0, dashB))
    if (ms !== 0) return ms
    return Number(a.slice(dashA + 1)) - Number(b.slice(dashB + 1))
  }
  const dashA = a.indexOf("-")
  const dashB = b.indexOf("-")
  const ms = BigInt(a.slice(0, dashA)) - BigInt(b.slice(0, dashB))
  if (ms !== 0n) return ms < 0n ? -1 : 1
  const seq = BigInt(a.slice(dashA + 1)) - BigInt(b.slice(dashB + 1))
  return seq === 0n ? 0 : seq < 0n ? -1 : 1
}

/**
 * Orders two canonical ids (`canonical` of valid ids): as `compare`, without
 * parsing. Decimals without leading zeros order by length, then digit by digit.
 */
export const compareCanonical = (a: string, b: string): number => {
  const dashA = a.indexOf("-")
  const dashB = b.indexOf("-")
  if (dashA !== dashB) return dashA - dashB
  for (let i = 0; i < dashA; i++) {
    const d = a.charCodeAt(i) - b.charCodeAt(i)
    if (d !== 0) return d
  }
  const seqA = a.length - dashA
  const seqB = b.length - dashB
  if (seqA !== seqB) return seqA - seqB
  return a === b ? 0 : a < b ? -1 : 1
}
