import { ErrorCode, GantryError } from '@gantry/contracts';

/** git failed, or was refused before it ran: the exit code and git's own words, for the effect's failure report. */
export class GitCommandError extends GantryError {
  constructor(message: string, details: { args: string[]; exitCode: number | null; stderr: string } & Record<string, unknown>, code: ErrorCode = ErrorCode.INTERNAL) {
    super(code, message, details);
    this.name = 'GitCommandError';
  }
}
