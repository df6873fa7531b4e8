import { canonicalJson, ErrorCode, GantryError, leaseNamesProblem, type LeaseNames, type ProductSettings } from '@gantry/contracts';
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
 * The refusal of a job whose worktree lease the worktree service would refuse (leaseNamesProblem, its
 * own check), with the names its claims will ask for: the product's clone URL, the job's branch and the
 * base ref it starts from (the request's, else the product's target branch). Queued, such a job would
 * be refused its worktree at every claim, on every host, until its attempts ran out. A name the request
 * gave is refused as that field of it; one the product recorded (before products were held to the same
 * check) names the product. `request`: the command, as a refusal of its request names it (`jobs.enqueue_job`).
 */
export function unleasableLease(names: LeaseNames, request: string, baseRefGiven: boolean): GantryError | null {
  const refused = leaseNamesProblem(names);
  if (refused === null) return null;
  // The product's clone URL, or its target branch standing in for a base ref the request did not name.
  const products = refused.name === 'repositoryUrl' || (refused.name === 'baseRef' && !baseRefGiven);
  const field = products ? 'productId' : refused.name;
  const what = products ? `the product's ${refused.name === 'repositoryUrl' ? 'clone URL' : 'target branch'} ${names[refused.name]}, the job's ${refused.what},` : `the job's ${refused.what}`;
  return new GantryError(
    ErrorCode.INVALID_COMMAND,
    `invalid ${request} request: ${field}: ${what} cannot be leased: ${refused.problem}`,
    { [refused.name]: names[refused.name] },
    [{ path: [field], message: refused.problem, code: 'custom' }],
  );
}

export const productDecider = { initialState: initialProductState, decide: decideProduct, evolve: evolveProduct };

function assertNever(value: never): never {
  throw new Error(`unhandled product command ${JSON.stringify(value)}`);
}
