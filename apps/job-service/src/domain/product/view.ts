import type { ProductView } from '@gantry/contracts';
import type { Product } from './state.js';

export function productView(product: Product): ProductView {
  return {
    productId: product.productId,
    ...product.settings,
    version: product.version,
    registeredAt: product.registeredAt,
    updatedAt: product.updatedAt,
  };
}

/** What a job or sprint run records of its product when it is created: where its work lands. */
export interface ProductResolution {
  repository: string;
  cloneUrl: string;
  targetBranch: string;
}

export function productResolution(product: Product): ProductResolution {
  return { repository: product.settings.repository, cloneUrl: product.settings.cloneUrl, targetBranch: product.settings.targetBranch };
}
