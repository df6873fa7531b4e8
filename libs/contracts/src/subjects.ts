/** The bounded contexts that own a JetStream stream and a command namespace. */
export const Contexts = ['jobs', 'workflow', 'prs', 'worktrees'] as const;
export type Context = (typeof Contexts)[number];

export interface Naming {
  /** Root of every subject, `gantry` in production; tests use their own. */
  subjectRoot: string;
  /** Prefix of every stream name, `GANTRY_` in production. */
  streamPrefix: string;
}

export const defaultNaming: Naming = { subjectRoot: 'gantry', streamPrefix: 'GANTRY_' };

/** A subject token must not contain `.`, `*`, `>` or whitespace. */
export function isSubjectToken(token: string): boolean {
  return token.length > 0 && !/[.*>\s]/.test(token);
}

export function streamName(naming: Naming, context: Context): string {
  return `${naming.streamPrefix}${context.toUpperCase()}`;
}

export function eventSubject(naming: Naming, context: Context, type: string, streamId: string): string {
  return `${naming.subjectRoot}.${context}.evt.${type}.${streamId}`;
}

/** All events of a context, or of one type in it. */
export function eventFilter(naming: Naming, context: Context, type?: string): string {
  return type ? `${naming.subjectRoot}.${context}.evt.${type}.>` : `${naming.subjectRoot}.${context}.evt.>`;
}

export function commandSubject(naming: Naming, context: Context, name: string): string {
  return `${naming.subjectRoot}.${context}.cmd.${name}`;
}

export function commandQueueGroup(naming: Naming, context: Context): string {
  return `${naming.subjectRoot}.${context}.cmd`;
}

export function dispatchStreamName(naming: Naming): string {
  return `${naming.streamPrefix}DISPATCH`;
}

export function dispatchSubject(naming: Naming, jobKind: string): string {
  return `${naming.subjectRoot}.dispatch.${jobKind}`;
}
