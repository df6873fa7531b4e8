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

/**
 * The rules a subject root and a stream prefix follow, with the sentence that states each: what a
 * process refuses at start when its GANTRY_SUBJECT_ROOT or GANTRY_STREAM_PREFIX breaks one.
 */
export const namingRules = {
  subjectRoot: {
    valid: (root: string): boolean => root.split('.').every(isSubjectToken),
    rule: 'must be NATS subject tokens joined by dots (no spaces, *, > or empty tokens)',
  },
  // A stream's name is the prefix and the context's name: one subject token, and no path separator (it names files on the server).
  streamPrefix: {
    valid: (prefix: string): boolean => isStreamName(prefix),
    rule: 'must be the start of a JetStream stream name (no ., spaces, *, >, / or \\)',
  },
} as const;

/** Stream names refuse what subject tokens refuse, and path separators too (they name files on the server). */
function isStreamName(name: string): boolean {
  return isSubjectToken(name) && !/[/\\]/.test(name);
}

function root(naming: Naming): string {
  if (!namingRules.subjectRoot.valid(naming.subjectRoot)) {
    throw new RangeError(`subject root ${JSON.stringify(naming.subjectRoot)} must be dot-separated subject tokens`);
  }
  return naming.subjectRoot;
}

function stream(name: string): string {
  if (!isStreamName(name)) throw new RangeError(`${JSON.stringify(name)} is not a valid stream name`);
  return name;
}

export function streamName(naming: Naming, context: Context): string {
  return stream(`${naming.streamPrefix}${context.toUpperCase()}`);
}

/**
 * A context's events go on one of two branches of its subjects: `evt`, and `log` for the types that
 * come many times in a stream and that no other service acts on: a job's story log. NATS 2.9 gives
 * a consumer one filter subject, so a consumer of some types is sent every event on the branch its
 * filter names; with the story log on a branch of its own, a consumer of job lifecycle events is not
 * sent (and does not acknowledge) every story-log entry (docs/architecture.md, "The bus").
 */
export type EventBranch = 'evt' | 'log';

const LOG_BRANCH_TYPES: Record<Context, ReadonlySet<string>> = {
  jobs: new Set(['ImplementationLogged', 'CommitLogged', 'TestResultLogged']),
  workflow: new Set(),
  prs: new Set(),
  worktrees: new Set(),
};

/** The branch an event type's subjects are on. */
export function eventBranch(context: Context, type: string): EventBranch {
  return LOG_BRANCH_TYPES[context].has(type) ? 'log' : 'evt';
}

/** The branches a context's events are on. */
export function eventBranches(context: Context): EventBranch[] {
  return LOG_BRANCH_TYPES[context].size > 0 ? ['evt', 'log'] : ['evt'];
}

/** `<root>.<context>.<branch>.<type>.<stream-id>`, the branch being the type's (see eventBranch). */
export function eventSubject(naming: Naming, context: Context, type: string, streamId: string): string {
  return `${eventSubjectPrefix(naming, context)}${eventBranch(context, token(type, 'event type'))}.${type}.${token(streamId, 'stream id')}`;
}

/**
 * The event type an event subject of `context` names (see `eventSubject`), or null when the subject
 * is not one of them. `prefix` is `eventSubjectPrefix(naming, context)`, worked out once by a reader
 * of many subjects.
 */
export function eventTypeOfSubject(prefix: string, subject: string): string | null {
  if (!subject.startsWith(prefix)) return null;
  const branchEnd = subject.indexOf('.', prefix.length);
  if (branchEnd < 0) return null;
  const branch = subject.slice(prefix.length, branchEnd);
  if (branch !== 'evt' && branch !== 'log') return null;
  const end = subject.indexOf('.', branchEnd + 1);
  return end > branchEnd + 1 ? subject.slice(branchEnd + 1, end) : null;
}

/** What every event subject of a context starts with: its branch, then its type, follow. */
export function eventSubjectPrefix(naming: Naming, context: Context): string {
  return `${root(naming)}.${context}.`;
}

/** The subjects of a context's event stream: each branch its events are on. */
export function eventStreamSubjects(naming: Naming, context: Context): string[] {
  return eventBranches(context).map((branch) => `${eventSubjectPrefix(naming, context)}${branch}.>`);
}

/** The events of one type (on its branch), or, without a type, the `evt` branch: every event of the context but its log. */
export function eventFilter(naming: Naming, context: Context, type?: string): string {
  return type === undefined
    ? `${eventSubjectPrefix(naming, context)}evt.>`
    : `${eventSubjectPrefix(naming, context)}${eventBranch(context, token(type, 'event type'))}.${type}.>`;
}

/**
 * The one filter subject of a durable consumer of these types of a context's events (null: all of
 * them): the branch they are on, or '' (the whole stream) when they are on both. A consumer of
 * lifecycle events so reads `evt` only, and is never sent the log.
 */
export function eventFilterFor(naming: Naming, context: Context, types: readonly string[] | null): string {
  const branches = types === null ? eventBranches(context) : [...new Set(types.map((type) => eventBranch(context, type)))];
  if (branches.length > 1) return '';
  return `${eventSubjectPrefix(naming, context)}${branches[0] ?? 'evt'}.>`;
}

export function commandSubject(naming: Naming, context: Context, name: string): string {
  return `${root(naming)}.${context}.cmd.${token(name, 'command name')}`;
}

/**
 * The subject only one replica of a context's service listens on for a command (`replica`: its
 * token, which its replies carry): a caller sends there what concerns a thing that replica served
 * last, and to the queue group's subject when it does not answer.
 */
export function replicaCommandSubject(naming: Naming, context: Context, name: string, replica: string): string {
  return `${commandSubject(naming, context, name)}.${token(replica, 'replica')}`;
}

/**
 * Where a context's service says which commands it serves (each replica, in the command queue group):
 * a caller that NATS told nobody listens on a command's subject asks here whether the service runs
 * without that command (SERVED_COMMANDS_REPLY) or does not run at all.
 */
export function servedCommandsSubject(naming: Naming, context: Context): string {
  return `${root(naming)}.${context}.commands`;
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
