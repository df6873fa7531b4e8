import { commandMetadata } from '@gantry/service-runtime';

export const { metadataOf, idempotencyFor } = commandMetadata('workflow');
