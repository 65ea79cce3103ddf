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
