/**
 * A network namespace of the test's own (docs/redis.md, "Test servers";
 * issue 32, item 7): one veth pair from the host to it, link-local
 * addresses on both ends (169.254.<n>.1 on the host, .2 inside), and the
 * faults an operator meets, made with iptables inside the namespace (this
 * kernel has no `tc netem`): a cut (every packet to the host dropped) and
 * random loss. Needs root (`ip netns`) and iptables; `netnsProblem()` says
 * what is missing, so that a test can say so and skip loudly.
 */
import { execFileSync } from "node:child_process"

const run = (cmd: string, args: ReadonlyArray<string>): string =>
  execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] })

/** Why namespaces cannot be made here, or undefined when they can. */
export const netnsProblem = (): string | undefined => {
  if (process.getuid?.() !== 0) return "not root (ip netns needs root; CI runs as root)"
  try {
    run("ip", ["netns", "list"])
  } catch (error) {
    return `ip netns does not work: ${String(error)}`
  }
  try {
    run("iptables", ["--version"])
  } catch {
    return "iptables is missing: apt-get install iptables"
  }
  return undefined
}

let made = 0

export interface Namespace {
  readonly name: string
  /** The host's address on the pair (bind the servers the namespace reaches to it). */
  readonly hostAddress: string
  /** The namespace's own address. */
  readonly address: string
  /** The command prefix that runs a process inside it (it execs the process). */
  readonly exec: ReadonlyArray<string>
  /** Drop every packet between the namespace and the host (both ways). */
  readonly cut: () => void
  /** Drop `percent` % of the packets the namespace sends and receives, at random. */
  readonly lose: (percent: number) => void
  /** Remove every fault. */
  readonly heal: () => void
  readonly remove: () => void
}

/** A namespace with a veth pair to the host; `remove()` deletes both. */
export const makeNamespace = (): Namespace => {
  const n = (process.pid % 200) + ++made
  const name = `shl${process.pid}-${made}`
  const hostSide = `shh${n}`
  const nsSide = `shn${n}`
  const octet = 16 + (n % 200)
  const hostAddress = `169.254.${octet}.1`
  const address = `169.254.${octet}.2`
  const inNs = (args: ReadonlyArray<string>) => run("ip", ["netns", "exec", name, ...args])
  run("ip", ["netns", "add", name])
  try {
    run("ip", ["link", "add", hostSide, "type", "veth", "peer", "name", nsSide])
    run("ip", ["link", "set", nsSide, "netns", name])
    run("ip", ["addr", "add", `${hostAddress}/30`, "dev", hostSide])
    run("ip", ["link", "set", hostSide, "up"])
    inNs(["ip", "addr", "add", `${address}/30`, "dev", nsSide])
    inNs(["ip", "link", "set", nsSide, "up"])
    inNs(["ip", "link", "set", "lo", "up"])
  } catch (error) {
    run("ip", ["netns", "del", name])
    throw error
  }
  const rules: Array<ReadonlyArray<string>> = []
  const add = (rule: ReadonlyArray<string>) => {
    inNs(["iptables", "-A", ...rule])
    rules.push(rule)
  }
  return {
    name,
    hostAddress,
    address,
    exec: ["ip", "netns", "exec", name],
    cut: () => {
      add(["OUTPUT", "-d", hostAddress, "-j", "DROP"])
      add(["INPUT", "-s", hostAddress, "-j", "DROP"])
    },
    lose: (percent) => {
      const p = String(percent / 100)
      add(["OUTPUT", "-m", "statistic", "--mode", "random", "--probability", p, "-j", "DROP"])
      add(["INPUT", "-m", "statistic", "--mode", "random", "--probability", p, "-j", "DROP"])
    },
    heal: () => {
      for (const rule of rules.splice(0)) inNs(["iptables", "-D", ...rule])
    },
    remove: () => {
      try {
        run("ip", ["link", "del", hostSide])
      } catch {
        // gone with the namespace already
      }
      run("ip", ["netns", "del", name])
    },
  }
}
