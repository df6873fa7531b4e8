import { canonicalJson, ErrorCode, GantryError, rescueFolderProblem, type ProductSettings } from '@gantry/contracts';
import type { ProductCommand } from './commands.js';
import type { ProductEvent } from './events.js';
import { evolveProduct, initialProductState, productExists, type ProductState } from './state.js';

const SETTINGS = ['repository', 'cloneUrl', 'targetBranch', 'prStrategy', 'mergeMethod', 'requiredChecks'] as const satisfies readonly (keyof ProductSettings)[];

/**
 * A product is registered once and then updated; an update records every setting afterwards plus
 * the ones it changed, and an update that changes nothing records nothing.
 */
export function decideProduct(command: ProductCommand, state: ProductState): ProductEvent[] {
  switch (command.type) {
    case 'RegisterProduct': {
      const d = command.data;
      if (productExists(state)) {
        throw new GantryError(ErrorCode.INVALID_TRANSITION, `product ${d.productId} is already registered; change it with update_product`, { productId: d.productId });
      }
      return [{ type: 'ProductRegistered', data: { productId: d.productId, ...d.settings, registeredAt: d.now } }];
    }
    case 'UpdateProduct': {
      const d = command.data;
      if (!productExists(state)) throw unknownProduct(d.productId);
      const after: ProductSettings = { ...state.settings };
      const changed: (keyof ProductSettings)[] = [];
      for (const key of SETTINGS) {
        const value = d.changes[key];
        if (value === undefined || canonicalJson(value) === canonicalJson(state.settings[key])) continue;
        (after as Record<string, unknown>)[key] = value;
        changed.push(key);
      }
      if (changed.length === 0) return [];
      return [{ type: 'ProductUpdated', data: { productId: state.productId, ...after, changed, updatedAt: d.now } }];
    }
    default:
      return assertNever(command);
  }
}

/** The refusal of anything that names a product nobody registered. */
export function unknownProduct(productId: string): GantryError {
  return new GantryError(ErrorCode.UNKNOWN_PRODUCT, `product ${productId} is not registered; register it with register_product first`, { productId });
}

/**
 * The refusal of a branch the worktree service would not lease in the product's repository
 * (`repositoryUrl`, its clone URL): one in the rescue folder of a worktree key of that repository
 * (rescueFolderProblem, the worktree service's own check). Queued, a job on it would be refused its
 * worktree at every claim until its attempts ran out. `request`: the command, as a refusal of its
 * request names it (`jobs.enqueue_job`).
 */
export function unleasableBranch(repositoryUrl: string, branch: string, request: string): GantryError | null {
  const problem = rescueFolderProblem(repositoryUrl, branch);
  if (problem === null) return null;
  return new GantryError(ErrorCode.INVALID_COMMAND, `invalid ${request} request: branch: ${problem}`, { branch }, [{ path: ['branch'], message: problem, code: 'custom' }]);
}

export const productDecider = { initialState: initialProductState, decide: decideProduct, evolve: evolveProduct };

function assertNever(value: never): never {
  throw new Error(`unhandled product command ${JSON.stringify(value)}`);
}
