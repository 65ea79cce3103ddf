/**
 * The ```ts blocks of a markdown page: test/snippets.test.ts typechecks
 * every one, and tests that run a block (test/observabilityRecipe.test.ts)
 * find theirs with it.
 */

export interface Snippet {
  /** `docs/runtime.md:13` (the line of the opening fence). */
  readonly name: string
  readonly line: number
  readonly code: string
  readonly skip: string | undefined
  /** Fenced ```ts legacy-decorators: compiled with `experimentalDecorators` and `emitDecoratorMetadata`. */
  readonly legacy: boolean
}

/** The ```ts blocks of a markdown file. */
export const extract = (file: string, text: string): Array<Snippet> => {
  const out: Array<Snippet> = []
  const lines = text.split("\n")
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(ts|typescript)\b(.*)$/.exec(lines[i]!)
    if (open === null) continue
    const start = i
    const body: Array<string> = []
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!)
    const info = open[2]!.trim()
    const skip = /^skip-check\b:?\s*(.*)$/.exec(info)
    out.push({
      name: `${file}:${start + 1}`,
      line: start + 1,
      code: body.join("\n"),
      skip: skip === null ? undefined : skip[1]!,
      legacy: /^legacy-decorators\b/.test(info),
    })
  }
  return out
}
