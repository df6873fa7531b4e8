import type { CommandContract } from '@gantry/contracts';

export const COMMAND_HANDLER = Symbol('gantry:command-handler');

/**
 * Marks a provider method as the handler of one command contract. The runtime finds every such
 * method at startup and serves it over NATS and HTTP; two handlers for one command fail the start.
 */
export function CommandHandler(contract: CommandContract): MethodDecorator {
  return (target, propertyKey) => {
    Reflect.defineMetadata(COMMAND_HANDLER, contract, target, propertyKey);
  };
}
