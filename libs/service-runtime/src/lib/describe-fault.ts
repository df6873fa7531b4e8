import { ErrorCode, GantryError } from '@gantry/contracts';

/** What a log line says of a fault a loop went on past: its code and its sentence, never more (no stack, no data). */
export function describeFault(error: unknown): { code: string; error: string } {
  if (error instanceof GantryError) return { code: error.code, error: error.message };
  return { code: ErrorCode.INTERNAL, error: error instanceof Error ? error.message : String(error) };
}
