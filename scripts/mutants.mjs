/**
 * Named, meaningful mutants of packages/core/src for `pnpm mutate`.
 *
 * Each mutant replaces one exact snippet (`find`, which must occur exactly
 * once in `file`) with `replace`. `hardening` names the finding of the
 * protocol-hardening review (packages/core/test/Hardening.test.ts) whose fix
 * the mutant reverts. `simulated: false` marks code the simulator does not
 * run (it drives the coordinator shell and the member machine, not the
 * Effect host or the store codec): those count for the unit tests only.
 * `broken` marks a mutant of the simulator's own model instead (a
 * `--broken` kind): no `file`, `find` or `replace`; only the simulator runs.
 *
 * A mutant whose `find` no longer matches fails the harness loudly: update
 * it with the code it mutates.
 */

const C = "coordinator/Coordinator.ts"
const M = "member/MemberMachine.ts"
const D = "coordinator/internal/Draft.ts"
const SP = "coordinator/internal/ShardSpace.ts"

export const mutants = [
  {
    name: "older-epoch-accepted",
    why: "accept any older member epoch as current (rule 7: no previous-epoch tolerance)",
    file: C,
    find: "  if (req.memberEpoch !== member.memberEpoch)\n",
    replace: "  if (req.memberEpoch > member.memberEpoch)\n",
  },
  {
    name: "free-without-revoke",
    why: "a moved shard is freed at once instead of revoked from its owner (rule 1)",
    file: C,
    find: "      draft.startRevocation(s, draft.member(cur.memberId)!)\n",
    replace: "      draft.setOwner(s, null)\n",
  },
  {
    name: "revoked-before-drain",
    why: "the member reports REVOKED as soon as it stops reading, before its in-flight batch drained",
    file: M,
    find: '        if (token === undefined || token !== entry.token) {\n          entry.status = "revoking"\n',
    replace:
      '        if (token === undefined || token !== entry.token) {\n          entry.status = "revoked"\n          entry.revokedReportedFromSeq = 0\n',
  },
  {
    name: "half-session-timeout",
    why: "the coordinator expires members after half the session timeout",
    file: C,
    find: "    at: draft.now + draft.state.config.sessionTimeoutMs,\n",
    replace: "    at: draft.now + draft.state.config.sessionTimeoutMs / 2,\n",
  },
  {
    name: "no-revoke-timeout-fence",
    why: "a revocation that is never reported REVOKED never fences its member (rule 4)",
    file: C,
    find: "    else if (state.revocations[s] != null) revokes.push(s)\n",
    replace: "    else if (state.revocations[s] != null) continue\n",
  },
  {
    name: "non-sticky-assignor",
    why: "the target is recomputed from scratch (no previous owners): stickiness dropped",
    file: C,
    find: "  const next = assignSorted(shards.length, ids, weights, previous).owners\n",
    replace: "  const next = assignSorted(shards.length, ids, weights, []).owners\n",
  },
  {
    name: "ignore-one-revoked",
    why: "the first REVOKED of each report is ignored",
    file: C,
    find: "    for (const s of checked.revoked) {\n",
    replace: "    for (const s of checked.revoked.slice(1)) {\n",
  },
  {
    name: "lease-from-arrival",
    why: "the member measures its lease from the answer's arrival, not its request's send time",
    file: M,
    find: "  state.lastSuccessAt = Math.max(state.lastSuccessAt, sentAt)\n",
    replace: "  state.lastSuccessAt = Math.max(state.lastSuccessAt, now)\n",
  },
  {
    name: "no-session-deadlines-after-failover",
    why: "a new leader arms no session deadline for the members it loads",
    file: C,
    find: "    timers.push(t)\n    state.deadlines.set(timerId(t.key), t.at)\n",
    replace: "    state.deadlines.set(timerId(t.key), t.at)\n",
  },
  {
    name: "claim-of-live-shard-accepted",
    why: "a member claiming a shard owned by another live member is not fenced (rule 2)",
    file: C,
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the snippet is source text
    find: "    } else if (cur !== null)\n      return { violation: `claims shard ${s}, owned by live member ${cur.memberId}` }\n",
    replace: "    } else if (cur !== null) continue\n",
  },
  {
    name: "no-incarnation-check",
    hardening: "finding 1",
    why: "requests of an older process of the member id are handled like the newer one's",
    file: C,
    find: "  if (member !== undefined && !sameProcess(req, member)) {\n",
    replace: "  if (member !== undefined && !sameProcess(req, member) && false) {\n",
  },
  {
    name: "revoked-whatever-token",
    hardening: "finding 2",
    why: "a REVOKED is accepted whatever owner token it names",
    file: C,
    find: "    if (own && cur.token === r.token) {\n",
    replace: "    if (own) {\n",
  },
  {
    name: "one-revoke-deadline-per-member",
    hardening: "finding 4",
    why: "a member's revocations share its earliest deadline instead of each having its own",
    file: C,
    find: "    if (at > now) next = Math.min(next, at)\n",
    replace: "    if (at > now && state.revocations[s] == null) next = Math.min(next, at)\n",
  },
  {
    name: "unconfirmed-grants-never-reclaimed",
    hardening: "finding 6",
    why: "a grant the member never confirms is never reclaimed (rule 10)",
    file: C,
    find: "    else grants.push(s)\n",
    replace: "    else continue\n",
  },
  {
    name: "late-answer-accepted",
    hardening: "finding 6",
    why: "a NONE answer that arrives after the lease it grants is applied like a fresh one",
    file: M,
    find: "      if (sentAt === undefined || now - sentAt >= lease) {\n",
    replace: "      if (sentAt === undefined) {\n",
  },
  {
    name: "ignore-leaving",
    hardening: "finding 7",
    why: "a `leaving` heartbeat does not start the leave: the leaver's reports are invalid",
    file: C,
    find: '    req.leaving === true && member.state !== "LEAVING" ? startLeaving(draft, member) : member\n',
    replace: "    member\n",
  },
  {
    name: "stale-join-accepted",
    hardening: "finding 11",
    why: "a join older than the current lifecycle's join starts a new lifecycle",
    file: C,
    find: "    if (req.seq <= handled) return standing(state, req, member)\n",
    replace:
      "    if (req.seq <= handled && !(req.memberEpoch === 0 && req.seq < handled)) return standing(state, req, member)\n",
  },
  {
    name: "duplicate-join-new-lifecycle",
    hardening: "finding 11",
    why: "the same join received twice starts a second lifecycle",
    file: C,
    find: "    if (req.seq <= handled) return standing(state, req, member)\n",
    replace:
      "    if (req.seq < handled || (req.seq === handled && req.memberEpoch !== 0)) return standing(state, req, member)\n",
  },
  {
    name: "two-requests-in-flight",
    hardening: "finding 11",
    why: "the member machine asks for a heartbeat while one is in flight",
    file: M,
    find: "  if (state.inFlightSeq !== 0) {\n    state.sendAfterInFlight = true\n    return\n  }\n",
    replace: "",
  },
  {
    name: "no-layout-on-join",
    hardening: "finding 12",
    why: "a joining member gets the layout only when its metadata version is stale",
    file: C,
    find: "    req.memberEpoch === 0 || req.metadataVersion < state.layout.generation\n",
    replace: "    req.metadataVersion < state.layout.generation\n",
  },
  {
    name: "no-revoke-deadlines-after-failover",
    hardening: "finding 4",
    why: "a new leader arms no deadline for open revocations and unconfirmed grants",
    file: C,
    find: '  for (const memberId of unfinished)\n    timers.push({ key: { _tag: "Rebalance", memberId }, at: rebalanceAt })\n',
    replace: "",
  },
  {
    name: "grant-reuses-token",
    why: "a grant does not raise the shard's owner token",
    file: D,
    find: "    const token = Math.max(this.tokenOf(shard) + 1, Math.floor(this.wall) * TOKENS_PER_MS)\n",
    replace: "    const token = Math.max(1, this.tokenOf(shard))\n",
  },
  {
    name: "no-fence-write",
    why: "a grant writes no owner token to storage",
    file: D,
    find: '    this.fences.push(\n      first\n        ? this.state.config.startAt !== undefined && this.state.config.startAt !== "earliest"\n          ? { shard, token, memberId: member.memberId, first, startAt: this.state.config.startAt }\n          : { shard, token, memberId: member.memberId, first }\n        : { shard, token, memberId: member.memberId },\n    )\n',
    replace: "",
  },
  {
    name: "no-notices",
    why: "the coordinator never pushes a look-again notice (rule 8)",
    file: D,
    find: "    if (memberId !== null && memberId !== except && this.member(memberId) !== undefined)\n",
    replace:
      "    if (false && memberId !== null && memberId !== except && this.member(memberId) !== undefined)\n",
  },
  {
    name: "session-deadline-never-moves",
    why: "a session deadline fires at its first arming: heartbeats do not extend the session",
    file: C,
    find: "    if (deadline !== undefined && deadline > now) return",
    replace: "    if (false && deadline !== undefined && deadline > now) return",
  },
  {
    name: "stale-response-applied",
    why: "the member applies responses to requests older than the last one it applied",
    file: M,
    find: "  if (seq < state.acceptFromSeq || seq !== state.nextSeq - 1) return true\n  if (response.errorCode",
    replace: "  if (response.errorCode",
  },
  {
    name: "release-keeps-revocation",
    why: "releasing a removed member's shards leaves their open revocations behind",
    file: C,
    find: "    draft.setOwner(s, null)\n    if (draft.revocationOf(s) !== null) draft.endRevocation(s)\n    draft.notify(draft.targetOf(s), except ?? memberId)\n",
    replace:
      "    draft.setOwner(s, null)\n    draft.notify(draft.targetOf(s), except ?? memberId)\n",
  },
  {
    name: "replacement-keeps-grants",
    why: "a rejoin or a newer incarnation keeps the old lifecycle's grants and tokens",
    file: C,
    find: '  const shards = replaced ? holdAll(draft, existing, "replaced") : releaseAll(draft, req.memberId)\n',
    replace: "  const shards: Array<number> = []\n",
  },
  {
    name: "assignor-ignores-weights",
    why: "the target ignores member weights",
    file: "coordinator/internal/MemberOrder.ts",
    find: 'const weightOf = (m: MemberEntry): number => (m.state === "LEAVING" ? Number.NaN : m.weight)\n',
    replace:
      'const weightOf = (m: MemberEntry): number => (m.state === "LEAVING" ? Number.NaN : 1)\n',
  },
  // Issue 20: findings 2, 3 and 4, and the classes of bug the simulator
  // missed before its token, lost-answer and lease checkers.
  {
    name: "older-request-acted-on",
    hardening: "issue 20 finding 2",
    why: "the coordinator acts on a request older than the newest it handled for that process (rule 18)",
    file: C,
    find: "    if (req.seq <= handled) return standing(state, req, member)\n",
    replace: "    if (req.seq === handled) return standing(state, req, member)\n",
  },
  {
    name: "duplicate-request-acted-on",
    hardening: "issue 20 finding 2",
    why: "the coordinator acts again on a duplicate of the newest request it handled (rule 18)",
    file: C,
    find: "    if (req.seq <= handled) return standing(state, req, member)\n",
    replace: "    if (req.seq < handled) return standing(state, req, member)\n",
  },
  {
    name: "same-incarnation-is-resend",
    hardening: "issue 20 finding 4",
    why: "a join that matches the registered incarnation but not its instance is taken for the same process (rule 24)",
    file: C,
    find: '): boolean => a.incarnation === b.incarnation && (a.instance ?? "") === (b.instance ?? "")\n',
    replace: "): boolean => a.incarnation === b.incarnation\n",
  },
  {
    name: "regrant-keeps-token",
    why: "a re-grant may keep the shard's previous owner token (no +1 over it; only the clock floor raises it)",
    file: D,
    find: "    const token = Math.max(this.tokenOf(shard) + 1, Math.floor(this.wall) * TOKENS_PER_MS)\n",
    replace:
      "    const token = Math.max(this.tokenOf(shard), Math.floor(this.wall) * TOKENS_PER_MS)\n",
  },
  {
    name: "token-from-clock-alone",
    why: "a grant's owner token is taken from the coordinator's wall clock alone (rule 16 without the +1)",
    file: D,
    find: "    const token = Math.max(this.tokenOf(shard) + 1, Math.floor(this.wall) * TOKENS_PER_MS)\n",
    replace: "    const token = Math.floor(this.wall) * TOKENS_PER_MS\n",
  },
  {
    name: "no-lost-response-tolerance",
    why: "a request whose answer was lost makes the member rejoin instead of retrying (rule 7: a lost answer costs a rebalance)",
    file: M,
    find: "      if (event.seq !== state.nextSeq - 1 || event.seq < state.acceptFromSeq) break\n      backoff(state, event.now)\n      loseLeaseIfDue(state, event.now, out)\n",
    replace:
      '      if (event.seq !== state.nextSeq - 1 || event.seq < state.acceptFromSeq) break\n      if (state.lifecycle === "active") fence(state, "unknown-member", out)\n      else backoff(state, event.now)\n',
  },
  {
    name: "unusable-lease-accepted",
    why: "a member whose lease (session minus margin) is not longer than a heartbeat interval keeps its registration and reads",
    file: M,
    find: '      if (lease <= response.heartbeatIntervalMs && state.lifecycle !== "leaving") {\n',
    replace: '      if (lease <= 0 && state.lifecycle !== "leaving") {\n',
  },
  {
    name: "late-answer-judged-against-session",
    why: "whether an answer is late is judged from the last applied answer, not from the send time of the request that caused it",
    file: M,
    find: "      if (sentAt === undefined || now - sentAt >= lease) {\n",
    replace: "      if (sentAt === undefined || now - state.lastSuccessAt >= lease) {\n",
  },
  {
    name: "xackdel-ignores-other-groups",
    hardening: "issue 20 finding 1",
    why: "xackdel deletes an acknowledged entry whatever the stream's other groups have not read or still hold pending",
    file: "ports/AckPolicy.ts",
    find: "  for (const g of groups) if (!done(g)) return false\n",
    replace: "",
  },
  {
    name: "no-hold-back",
    why: "a shard of a new layout generation is granted before the earlier shards overlapping it are drained (docs/resharding.md)",
    file: C,
    find: "      (cur === null && (draft.heldOf(s) !== null || blocked(view, s) || !grant))\n",
    replace: "      (cur === null && (draft.heldOf(s) !== null || !grant))\n",
  },
  {
    name: "hold-back-only-previous-generation",
    why: "a shard waits only for the generation just before its own, not for every earlier one (a rollback mid-migration)",
    file: SP,
    find: "  for (const g of view.generations) {\n    if (g.generation >= own.generation) break\n",
    replace:
      "  for (const g of view.generations.slice(-1)) {\n    if (g.generation >= own.generation) break\n",
  },
  {
    name: "migration-completes-early",
    why: "the migration completes once any earlier generation is drained, not every one",
    file: C,
    find: "  if (view.generations.every((g) => allDrained(draft, g))) completeMigration(draft)\n",
    replace: "  if (view.generations.some((g) => allDrained(draft, g))) completeMigration(draft)\n",
  },
  // Issue 34: the simulator's blind spots (a lost granting answer, then a
  // revoke; a stale join of a removed process; an answer applied past the
  // member's lease: the last two are `late-answer-accepted` and
  // `lease-from-arrival` above).
  {
    name: "unheld-revoke-not-reported",
    why: "a member told that a grant it never heard of (its answer lost) is being revoked does not report it REVOKED (rule 17): it is fenced at the revoke timeout",
    file: M,
    find: "  for (const grant of response.revoking ?? []) {\n",
    replace: "  for (const grant of (response.revoking ?? []).slice(0, 0)) {\n",
  },
  {
    name: "departed-join-accepted",
    why: "a join of a removed process, no newer than what the coordinator handled from it before the removal (a duplicate delivered late), starts a lifecycle (rule 18)",
    file: C,
    find: "    if (departed !== undefined && sameProcess(req, departed) && req.seq <= departed.seq)\n",
    replace:
      "    if (false && departed !== undefined && sameProcess(req, departed) && req.seq <= departed.seq)\n",
  },
  // Mutants of the simulator's model of transactional handlers (issue 24),
  // `--broken` kinds: core is not mutated, core's unit tests do not apply.
  {
    name: "tx-effects-at-handle",
    broken: "tx-effects-at-handle",
    why: "a transactional handler's effects are applied when it runs, not by the fenced commit with its ack",
  },
  {
    name: "tx-commit-without-pending-check",
    broken: "tx-commit-without-pending-check",
    why: "a transaction commits without checking that its messages are still pending (a lost commit answer's retry, a zombie with the fence off, apply twice)",
  },
  // Issue 34: the model of rule 26 (the `evict` fault), `--broken` kinds.
  {
    name: "missing-token-is-zero",
    broken: "missing-token-is-zero",
    why: "the storage fence compares a missing (evicted) owner token with 0, so every token passes (rule 26)",
  },
  {
    name: "vanished-read-as-empty",
    broken: "vanished-read-as-empty",
    why: "a read of a shard whose stream or group vanished is an empty read; the group is recreated at the stream's end in silence (rule 26)",
  },
  // Issue 34: the models of the opt-in fault kinds, `--broken` kinds.
  {
    name: "no-command-deadline",
    broken: "no-command-deadline",
    why: "a store command that never answers is waited for without a deadline: the leader holds its lock for good while its renewal loop keeps its lease (rule 27)",
  },
  {
    name: "hung-commit-keeps-shell",
    broken: "hung-commit-keeps-shell",
    why: "at a hung command's deadline the host keeps leading on its shell instead of stepping down, so the deadline whose commit hung never runs",
  },
  {
    name: "refused-ack-counted-as-acked",
    broken: "refused-ack-counted-as-acked",
    why: "a loop whose ack was refused (NOPERM) takes it as done and reads only new entries: what it handled stays pending, unread",
  },
  {
    name: "no-rewind-check",
    broken: "no-rewind-check",
    why: "a new leader does not compare storage's owner tokens with the loaded state's after a Store rewind and re-fences the lower tokens (rule 23)",
  },
  // The fence-hang fault (rules 27 and 31): a shard's storage node hangs.
  {
    name: "fence-under-lock",
    broken: "fence-under-lock",
    why: "a grant's fence write is held under the coordinator's lock, as before rule 31: every other answer waits for the hung shard's node",
  },
  {
    name: "grant-before-fence",
    broken: "grant-before-fence",
    why: "a grant is told in `assigned` before its fence write landed: its member reads under a token storage does not hold (rules 1 and 31)",
  },
  {
    name: "no-fence-wait",
    broken: "no-fence-wait",
    why: "the answer that made a grant waits for its fence write until the command deadline (or the heal), not at most fenceWaitMs (rules 27 and 31)",
  },
  {
    name: "withheld-grant-deadline",
    broken: "withheld-grant-deadline",
    why: "a withheld grant's confirmation deadline runs from the grant, not from its fence write: a node hung past the rebalance timeout fences the healthy grantee (rule 31)",
  },
  {
    name: "withhold-confirmed",
    broken: "withhold-confirmed",
    why: "a withheld grant its member reports owned (told by the previous leader) is still answered pending, which the member reads as a revocation (rule 31)",
  },
  {
    name: "host-commits-without-lease-check",
    simulated: false,
    why: "CoordinatorHost commits without checking that it still holds the lease",
    file: "CoordinatorHost.ts",
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the snippet is source text
    find: "          if (Result.isFailure(held))\n            return yield* Effect.fail(new NotServing(`lease lost before ${what}`))\n",
    replace: "",
  },
  {
    name: "store-without-cas",
    simulated: false,
    why: "the memory store appends whatever revision the commit expected",
    file: "ports/internal/memoryStoreBackend.ts",
    find: "        if (actual !== expectedRevision)\n",
    replace: "        if (false && actual !== expectedRevision)\n",
  },
]
