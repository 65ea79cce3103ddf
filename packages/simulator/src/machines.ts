/**
 * The machines the simulator drives. Until the real coordinator and member
 * state machines are merged, this points at the temporary stand-in.
 *
 * @module
 */
import type { Machines } from "./adapter.js"
import { standinMachines } from "./internal/standin.js"

export const realMachines: Machines = standinMachines
