/**
 * Waits until `done` holds, asking every 10 ms, for up to `withinMs`
 * (default 45 s): a deadline, not a count of tries, so a loaded machine
 * (2 cores at load 18, where ten seconds of 10 ms ticks were not enough)
 * waits as long as an idle one. `explain` adds what the state was.
 */
export const until = async (
  what: string,
  done: () => boolean | Promise<boolean>,
  options: { readonly withinMs?: number; readonly explain?: () => string } = {},
): Promise<void> => {
  const deadline = Date.now() + (options.withinMs ?? 45_000)
  for (;;) {
    if (await done()) return
    if (Date.now() > deadline)
      throw new Error(
        `not reached: ${what}${options.explain === undefined ? "" : ` (${options.explain()})`}`,
      )
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}
