/**
 * The context a per-message handler gets (docs/runtime.md, "Handlers"): one
 * object per message, so a callback that keeps it past the handler's return
 * never reaches the next message's signal or transaction. Its `signal` and
 * `transaction` are made only when the handler reads them (most never do:
 * the per-message path stays one small object per message). A message's
 * signal follows the turn's signal (the runner's controller: a timeout, a
 * revoke past its drain, a fence or a stop abort it) through one listener,
 * removed when the message ends, so a handler that adds an abort listener
 * per message never piles up listeners on one signal (Node warns past 10:
 * MaxListenersExceededWarning).
 *
 * Once the message ended, its transaction is closed: a call on it is
 * refused (`Closed`, docs/exactly-once.md "Refusals"), also when a late
 * callback reads `transaction` for the first time; a late first read of
 * `signal` gets one that follows nothing (aborted if the turn's already was).
 */
import type { BatchContext, Message, MessageContext } from "../Message.js"
import type { Transaction } from "../Transaction.js"
import type { TransactionHandle } from "./TransactionHandle.js"

/**
 * A handler's transaction, made when the handler first reads it (a handler
 * that never does pays nothing; docs/exactly-once.md) and closed when the
 * handler's message or batch ends: a transaction first read after that is
 * closed at once, every call on it refused.
 */
abstract class LazyTransaction {
  private tx: TransactionHandle | undefined = undefined
  /** The handler's message or batch ended. */
  protected ended = false

  constructor(private readonly makeTransaction: () => TransactionHandle) {}

  get transaction(): Transaction {
    let tx = this.tx
    if (tx === undefined) {
      tx = this.makeTransaction()
      // first read by a callback after the end: closed, every call refused
      if (this.ended) tx.close()
      this.tx = tx
    }
    return tx
  }

  /**
   * The handler's message or batch ended: its transaction closed (a later
   * call is refused), or undefined when the handler never read it.
   */
  end(): TransactionHandle | undefined {
    this.ended = true
    const tx = this.tx
    tx?.close()
    return tx
  }
}

export class PerMessageContext extends LazyTransaction implements MessageContext {
  private own: AbortController | undefined = undefined
  private unlink: (() => void) | undefined = undefined

  constructor(
    readonly stream: string,
    readonly group: string,
    readonly shard: number,
    readonly memberId: string,
    /** The turn's signal: when it aborts, so does the message's. */
    readonly parent: AbortSignal,
    /** Makes the message's transaction when the handler first reads it (docs/exactly-once.md). */
    makeTransaction: () => TransactionHandle,
  ) {
    super(makeTransaction)
  }

  get signal(): AbortSignal {
    const own = this.own
    if (own !== undefined) return own.signal
    const made = new AbortController()
    this.own = made
    const parent = this.parent
    if (parent.aborted) made.abort(parent.reason)
    else if (!this.ended) {
      const onAbort = () => made.abort(parent.reason)
      parent.addEventListener("abort", onAbort, { once: true })
      this.unlink = () => parent.removeEventListener("abort", onAbort)
    }
    return made.signal
  }

  /**
   * The message ended (handled, failed or aborted): its transaction closed
   * (a later call is refused), or undefined when the handler never read it.
   */
  override end(): TransactionHandle | undefined {
    const tx = super.end()
    if (this.unlink !== undefined) {
      this.unlink()
      this.unlink = undefined
    }
    return tx
  }
}

/**
 * The context a batch handler gets: one per batch, its `transaction` made
 * when the handler first reads it and closed once the batch's handler
 * ended (a late first read gets a closed one). A class with the getter on
 * its prototype, not an object literal with a getter: V8 makes each such
 * literal a dictionary-mode object, and with one per batch the batch's
 * messages outlived the next scavenges (17.6 MB survived per 100,000
 * messages against 1.4 MB with the class; docs/runtime.md, "Throughput:
 * Node's young generation").
 */
export class PerBatchContext extends LazyTransaction implements BatchContext {
  constructor(
    readonly stream: string,
    readonly group: string,
    readonly shard: number,
    readonly memberId: string,
    readonly signal: AbortSignal,
    readonly resolve: (message: Message | string) => void,
    /** Makes the batch's transaction when the handler first reads it. */
    makeTransaction: () => TransactionHandle,
  ) {
    super(makeTransaction)
  }
}
