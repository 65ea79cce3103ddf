import { assert, describe, it } from "@effect/vitest"
import { logicalMemberIds, memberBase, newInstance, nextIncarnation } from "../src/Identity.js"

describe("member identity", () => {
  it("issue 20 finding 6: the default base id is unique per process: POD_IP, the pod name in Kubernetes, else host-pid", () => {
    assert.strictEqual(memberBase({ POD_IP: "10.9.9.9", HOSTNAME: "web-1" }, "h", 7), "10.9.9.9")
    // a pod's HOSTNAME is its (unique) pod name
    assert.strictEqual(
      memberBase({ HOSTNAME: "web-1", KUBERNETES_SERVICE_HOST: "10.0.0.1" }, "h", 7),
      "web-1",
    )
    // anywhere else two processes on one host must not share an id
    assert.strictEqual(memberBase({ HOSTNAME: "web-1" }, "laptop", 4242), "laptop-4242")
    assert.strictEqual(memberBase({ POD_IP: "  " }, "laptop", 4243), "laptop-4243")
    assert.notStrictEqual(memberBase({}, "laptop", 1), memberBase({}, "laptop", 2))
    assert.strictEqual(memberBase({}, "", 9), "localhost-9")
    // the real process: host name and pid
    assert.match(memberBase({}), new RegExp(`-${process.pid}$`))
  })

  it("issue 20 finding 4: every process start draws an instance of at least 64 random bits", () => {
    const seen = new Set<string>()
    for (let i = 0; i < 10_000; i++) {
      const instance = newInstance()
      assert.match(instance, /^[0-9a-f]{24}$/)
      seen.add(instance)
    }
    assert.strictEqual(seen.size, 10_000)
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
