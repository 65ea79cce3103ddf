/**
 * The runtime's obligations toward the member machine, checked where the
 * simulated runtime executes the machine's commands (docs/member.md, Runtime
 * obligations): at most one request in flight (the machine asks for one only
 * when none is outstanding), a read loop only for a shard of a layout the
 * member knows and only while the machine's lease is valid (it may not read
 * otherwise), and a shard started again only after its previous loop ended.
 *
 * @module
 */
import { fmt, type Report } from "./types.js"

export class RuntimeChecker {
  constructor(private readonly report: Report) {}

  secondRequest(time: number, label: string, inFlight: number): void {
    this.report({
      checker: "runtime",
      time,
      message: `${label} asked to send a heartbeat at ${fmt(time)} while request ${inFlight} is still in flight`,
    })
  }

  startWithoutLayout(time: number, label: string, shard: number, known: string): void {
    this.report({
      checker: "runtime",
      time,
      shard,
      message: `${label} started shard ${shard} at ${fmt(time)} without knowing the layout (${known})`,
    })
  }

  startWithoutLease(time: number, label: string, shard: number): void {
    this.report({
      checker: "runtime",
      time,
      shard,
      message: `${label} was told to start shard ${shard} at ${fmt(time)} while its lease is not valid`,
    })
  }

  startWhileRunning(time: number, label: string, shard: number): void {
    this.report({
      checker: "runtime",
      time,
      shard,
      message: `${label} started shard ${shard} at ${fmt(time)} while its previous read loop had not ended`,
    })
  }
}
