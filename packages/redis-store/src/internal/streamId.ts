/** Redis Stream entry ids, `<ms>-<seq>`; the same grammar as core's memory port accepts. */
const PATTERN = /^(\d{1,16})-(\d{1,16})$/

export const isValid = (text: string): boolean => {
  const match = PATTERN.exec(text)
  return (
    match !== null &&
    Number.isSafeInteger(Number(match[1])) &&
    Number.isSafeInteger(Number(match[2]))
  )
}
