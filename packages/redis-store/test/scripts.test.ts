/**
 * Each script carries only the prelude's helpers it names (src/scripts.ts,
 * `preludeFor`): checked here without the loader's own parsing, so a
 * helper a script uses but was left out (an error only when that path
 * runs) fails here first.
 */
import { readFileSync } from "node:fs"
import { assert, describe, it } from "vitest"
import { preludeFor, Scripts } from "../src/scripts.js"

const prelude = readFileSync(new URL("../src/lua/prelude.lua", import.meta.url), "utf8")
const helperNames = [...prelude.matchAll(/^local function (\w+)\(/gm)].map((m) => m[1]!)
const defines = (lua: string, name: string) =>
  new RegExp(`^\\s*local function ${name}\\(`, "m").test(lua)
// a word of the code, comments left out (a comment may name a helper)
const names = (lua: string, name: string) =>
  new RegExp(`\\b${name}\\b`).test(lua.replace(/--.*$/gm, ""))

describe("Scripts and the prelude", () => {
  it("no script names a prelude helper it does not define", () => {
    assert.isAbove(helperNames.length, 10)
    for (const script of Object.values(Scripts))
      for (const name of helperNames)
        if (names(script.lua, name))
          assert.isTrue(defines(script.lua, name), `${script.name} names ${name}`)
  })

  it("a script without helpers gets none; the commit script leaves out what it does not use", () => {
    assert.isFalse(helperNames.some((name) => defines(preludeFor("return 1"), name)))
    assert.isTrue(defines(Scripts.commit.lua, "acknowledge"))
    // named only by acknowledge: brought in through it
    assert.isTrue(defines(Scripts.commit.lua, "acked_by_all"))
    assert.isTrue(defines(Scripts.commit.lua, "id_cmp"))
    assert.isFalse(defines(Scripts.commit.lua, "store_revision"))
    assert.isFalse(defines(Scripts.commit.lua, "deliveries"))
  })
})
