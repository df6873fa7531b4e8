/** The bounded contexts that own a JetStream stream and a command namespace. */
export const Contexts = ['jobs', 'workflow', 'prs', 'worktrees'] as const;
export type Context = (typeof Contexts)[number];

export function isContext(value: string): value is Context {
  return (Contexts as readonly string[]).includes(value);
}

export interface Naming {
  /** Root of every subject, `gantry` in production; tests use their own. May hold several tokens. */
  subjectRoot: string;
  /** Prefix of every stream name, `GANTRY_` in production. */
  streamPrefix: string;
}

export const defaultNaming: Naming = { subjectRoot: 'gantry', streamPrefix: 'GANTRY_' };

/** A subject token must not be empty nor contain `.`, `*`, `>`, whitespace or control characters. */
export function isSubjectToken(token: string): boolean {
  // eslint-disable-next-line no-control-regex -- refusing control characters is the point of this pattern
  return token.length > 0 && !/[.*>\s\u0000-\u001f\u007f]/.test(token);
}

function token(value: string, what: string): string {
  if (!isSubjectToken(value)) {
    throw new RangeError(`${what} ${JSON.stringify(value)} is not a single NATS subject token (no ".", "*", ">", whitespace, empty)`);
  }
  return value;
}

function root(naming: Naming): string {
  if (!naming.subjectRoot.split('.').every(isSubjectToken)) {
    throw new RangeError(`subject root ${JSON.stringify(naming.subjectRoot)} must be dot-separated subject tokens`);
  }
  return naming.subjectRoot;
}

/** Stream names refuse what subject tokens refuse, and path separators too (they name files on the server). */
function stream(name: string): string {
  if (!isSubjectToken(name) || /[/\\]/.test(name)) throw new RangeError(`${JSON.stringify(name)} is not a valid stream name`);
  return name;
}

export function streamName(naming: Naming, context: Context): string {
  return stream(`${naming.streamPrefix}${context.toUpperCase()}`);
}

export function eventSubject(naming: Naming, context: Context, type: string, streamId: string): string {
  return `${eventSubjectPrefix(naming, context)}${token(type, 'event type')}.${token(streamId, 'stream id')}`;
}

/**
 * The event type an event subject of `context` names (see `eventSubject`), or null when the subject
 * is not one of them. `prefix` is `eventSubjectPrefix(naming, context)`, worked out once by a reader
 * of many subjects.
 */
export function eventTypeOfSubject(prefix: string, subject: string): string | null {
  if (!subject.startsWith(prefix)) return null;
  const end = subject.indexOf('.', prefix.length);
  return end > prefix.length ? subject.slice(prefix.length, end) : null;
}

/** What every event subject of a context starts with: its type token follows. */
export function eventSubjectPrefix(naming: Naming, context: Context): string {
  return `${root(naming)}.${context}.evt.`;
}

/** All events of a context, or of one type in it. */
export function eventFilter(naming: Naming, context: Context, type?: string): string {
  return type === undefined
    ? `${root(naming)}.${context}.evt.>`
    : `${root(naming)}.${context}.evt.${token(type, 'event type')}.>`;
}

export function commandSubject(naming: Naming, context: Context, name: string): string {
  return `${root(naming)}.${context}.cmd.${token(name, 'command name')}`;
}

export function commandQueueGroup(naming: Naming, context: Context): string {
  return `${root(naming)}.${context}.cmd`;
}

export function dispatchStreamName(naming: Naming): string {
  return stream(`${naming.streamPrefix}DISPATCH`);
}

export function dispatchSubject(naming: Naming, jobKind: string): string {
  return `${root(naming)}.dispatch.${token(jobKind, 'job kind')}`;
}
