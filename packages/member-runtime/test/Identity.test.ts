import { assert, describe, it } from "@effect/vitest"
import { logicalMemberIds, memberBase, nextIncarnation } from "../src/Identity.js"

const iface = (address: string, internal = false, family: "IPv4" | "IPv6" = "IPv4") => ({
  address,
  internal,
  family,
  netmask: "",
  mac: "",
  cidr: null,
  ...(family === "IPv6" ? { scopeid: 0 } : {}),
})

describe("member identity", () => {
  it("the base id is POD_IP, then HOSTNAME, then a non-internal interface address", () => {
    const interfaces = { lo: [iface("127.0.0.1", true)], eth0: [iface("10.1.2.3")] }
    assert.strictEqual(
      memberBase({ POD_IP: "10.9.9.9", HOSTNAME: "web-1" }, interfaces as never),
      "10.9.9.9",
    )
    assert.strictEqual(memberBase({ HOSTNAME: "web-1" }, interfaces as never), "web-1")
    assert.strictEqual(memberBase({ POD_IP: "  " }, interfaces as never), "10.1.2.3")
    assert.strictEqual(
      memberBase({}, {
        lo: [iface("127.0.0.1", true)],
        eth0: [iface("fe80::1", false, "IPv6")],
      } as never),
      "fe80::1",
    )
    assert.strictEqual(memberBase({}, { lo: [iface("127.0.0.1", true)] } as never), "localhost")
  })

  it("a listener's logical members are <base>-m0 .. <base>-m{C-1}", () => {
    assert.deepStrictEqual(logicalMemberIds("10.1.2.3", 4), [
      "10.1.2.3-m0",
      "10.1.2.3-m1",
      "10.1.2.3-m2",
      "10.1.2.3-m3",
    ])
  })

  it("incarnations are Date.now() * 1024 + 10 random bits and strictly increase in the process", () => {
    const now = 1_700_000_000_000
    const a = nextIncarnation(now)
    assert.isAtLeast(a, now * 1024)
    assert.isBelow(a, (now + 1) * 1024 + 1024)
    // the same millisecond, and a clock step backwards, still give larger numbers
    const b = nextIncarnation(now)
    const c = nextIncarnation(now - 60_000)
    assert.isAbove(b, a)
    assert.isAbove(c, b)
    assert.isTrue(Number.isSafeInteger(nextIncarnation()))
  })
})
