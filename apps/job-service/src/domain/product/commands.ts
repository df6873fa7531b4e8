import type { ProductSettings } from '@gantry/contracts';

/** The product's commands; time comes in with them. */
export type ProductCommand =
  | { type: 'RegisterProduct'; data: { productId: string; settings: ProductSettings; now: string } }
  | { type: 'UpdateProduct'; data: { productId: string; changes: Partial<ProductSettings>; now: string } };
