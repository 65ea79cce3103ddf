/**
 * The context a per-message handler gets (docs/runtime.md, "Handlers"): one
 * object per batch, whose `signal` is the message's own, made only when the
 * handler reads it (most never do: the per-message path stays as cheap as
 * it was). A message's signal follows the turn's signal (the runner's
 * controller: a timeout, a revoke past its drain, a fence or a stop abort
 * it) through one listener, removed when the message ends, so a handler that
 * adds an abort listener per message never piles up listeners on one signal
 * (Node warns past 10: MaxListenersExceededWarning).
 *
 * Read `signal` while the message is handled (destructuring `{ signal }` in
 * the parameters does): the context is the batch's, and after a message
 * ended `signal` belongs to the next one.
 */
import type { MessageContext } from "../Message.js"
import type { Transaction } from "../Transaction.js"
import type { TransactionHandle } from "./TransactionHandle.js"

export class PerMessageContext implements MessageContext {
  private own: AbortController | undefined = undefined
  private unlink: (() => void) | undefined = undefined
  private tx: TransactionHandle | undefined = undefined

  constructor(
    readonly stream: string,
    readonly group: string,
    readonly shard: number,
    readonly memberId: string,
    /** The turn's signal: when it aborts, so does the message's. */
    readonly parent: AbortSignal,
    /** Makes the message's transaction when the handler first reads it (docs/exactly-once.md). */
    private readonly makeTransaction: () => TransactionHandle,
  ) {}

  /** The message's transaction, made on first read (a handler that never reads it pays nothing). */
  get transaction(): Transaction {
    if (this.tx === undefined) this.tx = this.makeTransaction()
    return this.tx
  }

  get signal(): AbortSignal {
    const own = this.own
    if (own !== undefined) return own.signal
    const made = new AbortController()
    this.own = made
    const parent = this.parent
    if (parent.aborted) made.abort(parent.reason)
    else {
      const onAbort = () => made.abort(parent.reason)
      parent.addEventListener("abort", onAbort, { once: true })
      this.unlink = () => parent.removeEventListener("abort", onAbort)
    }
    return made.signal
  }

  /**
   * The message ended (handled, failed or aborted): the next one gets a
   * signal and a transaction of its own. Its transaction, closed (a later
   * call is refused), or undefined when the handler never read it.
   */
  next(): TransactionHandle | undefined {
    const tx = this.tx
    if (tx !== undefined) {
      tx.close()
      this.tx = undefined
    }
    if (this.own === undefined) return tx
    this.unlink?.()
    this.unlink = undefined
    this.own = undefined
    return tx
  }
}
