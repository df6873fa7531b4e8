import { contractRegistry, type Context } from '@gantry/contracts';

/** Parses a domain event with its registered contract (schema version 1), so a spec fails on an event the wire would refuse. */
export function validatesAgainstContract(context: Context) {
  return (event: { type: string; data: unknown }): void => {
    const contract = contractRegistry.event(context, event.type, 1);
    if (!contract) throw new Error(`no contract for ${context}.${event.type}@1`);
    const parsed = contract.data.safeParse(event.data);
    if (!parsed.success) {
      throw new Error(`${event.type} does not satisfy its contract: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
    }
  };
}
