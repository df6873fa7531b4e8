import type { ProductSettings } from '@gantry/contracts';
import type { ProductEvent } from './events.js';

export interface Product {
  status: 'REGISTERED';
  productId: string;
  settings: ProductSettings;
  /** 1 at registration, one higher after each update that changed something. */
  version: number;
  registeredAt: string;
  updatedAt: string;
}

export type ProductState = { status: 'ABSENT' } | Product;

export const initialProductState: ProductState = { status: 'ABSENT' };

export function productExists(state: ProductState): state is Product {
  return state.status !== 'ABSENT';
}

function settingsOf(d: ProductSettings): ProductSettings {
  return {
    repository: d.repository,
    cloneUrl: d.cloneUrl,
    targetBranch: d.targetBranch,
    prStrategy: d.prStrategy,
    mergeMethod: d.mergeMethod,
    requiredChecks: d.requiredChecks,
  };
}

export function evolveProduct(state: ProductState, event: ProductEvent): ProductState {
  switch (event.type) {
    case 'ProductRegistered':
      return {
        status: 'REGISTERED',
        productId: event.data.productId,
        settings: settingsOf(event.data),
        version: 1,
        registeredAt: event.data.registeredAt,
        updatedAt: event.data.registeredAt,
      };
    case 'ProductUpdated':
      if (!productExists(state)) return state;
      return { ...state, settings: settingsOf(event.data), version: state.version + 1, updatedAt: event.data.updatedAt };
    default:
      return assertNever(event);
  }
}

function assertNever(value: never): never {
  throw new Error(`unhandled product event ${JSON.stringify(value)}`);
}
