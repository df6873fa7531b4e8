/** The product's events as the decider emits them: the contracts'. */
export type { ProductEvent } from '@gantry/contracts';
