import { z } from 'zod';

const relativePath = z
  .string()
  .min(1)
  .refine((p) => !p.startsWith('/') && !p.split('/').includes('..'), 'a path relative to the worktree');

const CommitSchema = z.strictObject({
  files: z.record(relativePath, z.string()).default({}),
  delete: z.array(relativePath).default([]),
  message: z.string().min(1),
});

const ScriptSchema = z.strictObject({
  behaviour: z.enum(['commit', 'nothing', 'delete_only', 'failing_tests', 'exit_nonzero', 'hang', 'token_expired_message', 'exit_3', 'no_logs', 'crash_after_commit', 'review']),
  files: z.record(relativePath, z.string()).optional(),
  delete: z.array(relativePath).optional(),
  commitMessage: z.string().min(1).optional(),
  commits: z.array(CommitSchema).optional(),
  reportStatus: z.enum(['DONE', 'PARTIAL']).default('DONE'),
  exitCode: z.number().int().min(1).max(255).default(1),
  /** exit_nonzero: this file's content is written to stderr before exiting (what a crashing CLI prints, secrets and all). */
  stderrFile: z.string().startsWith('/').optional(),
  ignoreSigterm: z.boolean().default(false),
  /** hang: call log_implementation first (default), or hang without a word, so nothing is in the story log. */
  logFirst: z.boolean().default(true),
  /** hang: append {beat, pid, at} to recordArgvTo this often — the last beat shows when the agent was last alive. */
  heartbeatMs: z.number().int().min(10).optional(),
  /** Any behaviour: append {alive, pid, at} to recordArgvTo this often from the start, so that a run killed without a word still shows when it was last alive. */
  lifeSignMs: z.number().int().min(10).optional(),
  /** commit, nothing, failing_tests: the exit code after the MCP reports (the real CLI may exit non-zero after reporting). */
  finalExitCode: z.number().int().min(0).max(255).default(0),
  spawnChild: z.boolean().default(false),
  delayMs: z.number().int().min(0).default(0),
  /** After log_implementation (with delayMs, after it), wait until this absolute file exists: a test holds the agent mid-work as long as it needs. */
  pauseUntilFile: z.string().startsWith('/').optional(),
  /**
   * commit: send every MCP call without waiting for its reply, and exit (with finalExitCode) half a
   * second after the last: an agent whose client gave up on slow tool calls, or that never waited.
   */
  leaveUnanswered: z.boolean().default(false),
  /** Before its first MCP call, wait until this absolute file exists: a test opens the gate once it has taken a service away. */
  waitForFile: z.string().startsWith('/').optional(),
  /** An absolute file the stand-in appends one JSON line to per run: its argv, pid and cwd (tests assert the command line). */
  recordArgvTo: z.string().startsWith('/').optional(),
  /**
   * review: the verdicts record_decision gives, per `--model` (the reviewer's agent profile) or `*`;
   * the n-th review of a model takes the n-th verdict (the last one from then on), counted in files
   * under `verdictCounterDir`.
   */
  verdicts: z.record(z.string(), z.array(z.enum(['approve', 'reject'])).min(1)).default({ '*': ['approve'] }),
  verdictCounterDir: z.string().startsWith('/').optional(),
  /**
   * After its work, as a hostile agent could: `git config <key> <value>` in its worktree (which
   * writes the shared clone's config), to prove the runner's git runs nothing an agent configures.
   */
  gitConfig: z.record(z.string().regex(/^[^-]/, 'a config key, not an option'), z.string()).optional(),
  /** After its work, as a hostile agent could: files under its worktree's git common dir (`hooks/pre-push`, `info/attributes`); hooks made executable. */
  gitFiles: z.record(relativePath, z.string()).optional(),
  /** Before its work, the stand-in moves its branch to this revision (`git reset --hard`): how a branch becomes DIVERGENT. */
  resetTo: z.string().min(1).regex(/^[^-]/, 'a revision, not an option').optional(),
});

export type StandInCommit = z.infer<typeof CommitSchema>;
export type StandInBehaviour = z.infer<typeof ScriptSchema>['behaviour'];
export interface StandInScript extends Omit<z.infer<typeof ScriptSchema>, 'files' | 'delete' | 'commitMessage' | 'commits'> {
  /** `commits`, or the one commit `files` + `delete` + `commitMessage` describe (none when both are empty). */
  commits: StandInCommit[];
}

/** `byAttempt`: for attempt n of the job (the payload's `gantry.attempt`), fields that replace the section's own. */
const ByAttemptSchema = z.object({ byAttempt: z.record(z.string().regex(/^[1-9][0-9]*$/, 'an attempt number'), z.record(z.string(), z.unknown())).optional() });

/**
 * Reads the `standIn` section of a job payload (the format is documented in main.ts); `fallback` is
 * the section to use when the payload has none (a run queued by a workflow carries no stand-in section).
 */
export function parseStandInScript(payload: unknown, fallback?: unknown): StandInScript {
  const section = (payload as { standIn?: unknown } | null)?.standIn ?? fallback;
  if (section === undefined) throw new Error('the payload has no "standIn" section telling the stand-in agent what to do');
  const perAttempt = ByAttemptSchema.safeParse(section);
  if (!perAttempt.success) throw new Error(`invalid "standIn" section: ${z.prettifyError(perAttempt.error)}`);
  const attempt = (payload as { gantry?: { attempt?: unknown } }).gantry?.attempt;
  const own: Record<string, unknown> = { ...(section as Record<string, unknown>) };
  delete own.byAttempt;
  const overrides = typeof attempt === 'number' ? perAttempt.data.byAttempt?.[String(attempt)] : undefined;
  const parsed = ScriptSchema.safeParse({ ...own, ...overrides });
  if (!parsed.success) throw new Error(`invalid "standIn" section: ${z.prettifyError(parsed.error)}`);
  const { files, delete: deletions, commitMessage, commits, ...rest } = parsed.data;
  const single: StandInCommit = { files: files ?? {}, delete: deletions ?? [], message: commitMessage ?? `stand-in: ${rest.behaviour}` };
  const planned = commits ?? (Object.keys(single.files).length > 0 || single.delete.length > 0 ? [single] : []);
  if (rest.behaviour === 'delete_only' && (planned.length === 0 || planned.some((c) => Object.keys(c.files).length > 0 || c.delete.length === 0))) {
    throw new Error('behaviour delete_only needs "delete" paths and no "files"');
  }
  if ((rest.behaviour === 'commit' || rest.behaviour === 'no_logs' || rest.behaviour === 'crash_after_commit') && planned.length === 0) {
    throw new Error(`behaviour ${rest.behaviour} needs "files", "delete" or "commits"`);
  }
  return { ...rest, commits: planned };
}
