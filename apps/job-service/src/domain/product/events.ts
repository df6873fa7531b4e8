import type { ProductRegisteredData, ProductUpdatedData } from '@gantry/contracts';

export type ProductEvent = { type: 'ProductRegistered'; data: ProductRegisteredData } | { type: 'ProductUpdated'; data: ProductUpdatedData };
