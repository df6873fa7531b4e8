/**
 * The stand-in agent: a stand-in for the `claude` CLI in tests and in the local start command.
 *
 * It takes the real CLI's flags (`-p <prompt> --model … --permission-mode … [--effort …]
 * --allowedTools … --mcp-config <file> --add-dir <dir> --output-format text`) and refuses unknown
 * ones (exit 1, like the real CLI). It finds the payload in the prompt (the first absolute path
 * ending in `.json`), talks MCP to the runner's tool server named in the `--mcp-config` file, and
 * does real git work in the first `--add-dir` directory.
 *
 * Payload format: the job payload JSON with a `standIn` section (everything else is ignored):
 *
 *   {
 *     "standIn": {
 *       "behaviour": "commit" | "nothing" | "delete_only" | "failing_tests" | "exit_nonzero"
 *                  | "hang" | "token_expired_message" | "exit_3" | "no_logs" | "crash_after_commit",
 *       "files":         { "<relative path>": "<content>" },   // written and committed (commit, failing_tests, no_logs)
 *       "delete":        ["<relative path>"],                 // removed and committed (delete_only; also allowed with commit)
 *       "commitMessage": "feat: …",                           // default "stand-in: <behaviour>"
 *       "commits":       [{ "files": {…}, "delete": […], "message": "…" }],  // several commits instead of files/delete
 *       "reportStatus":  "DONE" | "PARTIAL",                   // update_job_status at the end of commit/delete_only (default DONE)
 *       "exitCode":      1,                                    // exit_nonzero's exit code (default 1)
 *       "stderrFile":    "/abs/file",                          // exit_nonzero: its content is written to stderr before exiting
 *       "ignoreSigterm": false,                                // hang: ignore SIGTERM, so only SIGKILL ends it
 *       "logFirst":      true,                                 // hang: log_implementation before hanging (false: not a word)
 *       "heartbeatMs":   100,                                  // hang: append {beat, pid, at} to recordArgvTo this often
 *       "lifeSignMs":    100,                                  // any behaviour: append {alive, pid, at} to recordArgvTo this often from the start
 *       "leaveUnanswered": false,                              // commit: every MCP call sent without waiting for its reply; exits 500 ms after the last
 *       "finalExitCode": 0,                                    // commit, nothing, failing_tests: exit code after the reports
 *       "spawnChild":    false,                                // hang: also start a child process in the same process group
 *       "delayMs":       0,                                    // wait this long before the work (after log_implementation)
 *       "waitForFile":   "/abs/gate",                          // wait until this file exists before the first MCP call
 *       "pauseUntilFile": "/abs/gate",                         // after log_implementation (and delayMs), wait until this file exists
 *       "recordArgvTo":  "/abs/file.jsonl",                   // append {argv, pid, cwd, at} at start, {calling, pid, at} before each MCP call,
 *                                                             // {paused, pid, at} when its pauseUntilFile pause begins, {exit, pid, at} at exit
 *       "resetTo":       "origin/feat/x",                      // git reset --hard to this revision before the work
 *       "gitConfig":     { "core.fsmonitor": "/abs/script" },  // after the work, as a hostile agent: git config in its worktree
 *       "gitFiles":      { "hooks/pre-push": "#!/bin/sh …" },   // after the work, as a hostile agent: files under the git common dir
 *       "byAttempt":     { "1": { "behaviour": "crash_after_commit", … } }  // for attempt n (payload gantry.attempt): fields replacing the ones above
 *     }
 *
 *       "verdicts":      { "<model>": ["reject", "approve"], "*": ["approve"] },  // review: record_decision's verdicts per --model
 *       "verdictCounterDir": "/abs/dir",                       // review: where the n-th review of a model is counted
 *     }
 *
 * Without a `standIn` section in the payload (a REVIEW run a workflow queued carries none) the
 * section is read from the JSON file named by CLAUDE_STAND_IN_DEFAULT_SCRIPT in its environment.
 * It accepts the CLI's `--session-id <uuid>` and `--resume <id>` (recorded with the argv).
 *
 * Credentials: with ANTHROPIC_API_KEY=expired in its environment the stand-in fails like the real CLI
 * with an expired login (authentication error, exit 3) whatever the payload says, so one runner's
 * agent can be expired while another's is not.
 *   }
 *
 * Behaviours and their MCP calls:
 * - commit: log_implementation, a commit + log_commit per commit, log_test_result PASSED, update_job_status DONE|PARTIAL; exit 0
 * - nothing: log_implementation, log_test_result PASSED, update_job_status DONE; no commit; exit 0
 * - delete_only: like commit, with deletions only
 * - failing_tests: log_implementation, commits if any, log_test_result FAILED, update_job_status FAILED; exit 0
 * - exit_nonzero: log_implementation, then exit with `exitCode` without finishing
 * - hang: log_implementation, then waits until killed (prints "stand-in child pid <n>" when spawnChild)
 * - token_expired_message: prints the CLI's expired-token API error, no MCP calls; exit 1
 * - exit_3: prints an authentication error on stderr, no MCP calls; exit 3
 * - no_logs: commits the files without any MCP call; exit 0
 * - crash_after_commit: commits the files without any MCP call, then exits with `exitCode` (a crash leaving unreported commits)
 * - review: log_implementation, record_decision with the verdict for its --model and a comment, log_test_result PASSED,
 *   update_job_status DONE; exit 0
 */
import { spawn } from 'node:child_process';
import { appendFileSync, existsSync } from 'node:fs';
import { appendFile, readFile, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { CliUsageError, parseStandInArguments, type StandInArguments } from './cli-arguments.js';
import { StandInGit } from './stand-in-git.js';
import { StandInReporter } from './stand-in-reporter.js';
import { parseStandInScript, type StandInCommit, type StandInScript } from './stand-in-script.js';

async function main(argv: string[]): Promise<number> {
  let args: StandInArguments;
  try {
    args = parseStandInArguments(argv);
  } catch (error) {
    if (error instanceof CliUsageError) {
      process.stderr.write(`${error.message}\n`);
      return 1;
    }
    throw error;
  }
  if (!args.print) return fail('the stand-in agent only supports print mode (-p)');
  if (!args.prompt) return fail('Error: Input must be provided either through stdin or as a prompt argument when using --print');

  const payloadPath = /(\/[^\s"'`]+\.json)/.exec(args.prompt)?.[1];
  if (!payloadPath) return fail('stand-in: the prompt names no payload file (an absolute path ending in .json)');
  const fallbackFile = process.env.CLAUDE_STAND_IN_DEFAULT_SCRIPT;
  const fallback = fallbackFile ? JSON.parse(await readFile(fallbackFile, 'utf8')) : undefined;
  const script = parseStandInScript(JSON.parse(await readFile(payloadPath, 'utf8')), fallback);
  // From the first moment, not only once it hangs: a hang that logs first is cancelled while it logs too.
  if (script.behaviour === 'hang' && script.ignoreSigterm) process.on('SIGTERM', () => process.stdout.write('stand-in: ignoring SIGTERM\n'));
  if (script.recordArgvTo) {
    const record = script.recordArgvTo;
    await appendFile(record, `${JSON.stringify({ argv, pid: process.pid, cwd: process.cwd(), at: new Date().toISOString() })}\n`);
    // The moment it exits, for the end-to-end overhead (agent exit → terminal status).
    process.once('exit', (code) => appendFileSync(record, `${JSON.stringify({ exit: code, pid: process.pid, at: new Date().toISOString() })}\n`));
    if (script.lifeSignMs) {
      let sign = 0;
      setInterval(() => appendFileSync(record, `${JSON.stringify({ alive: ++sign, pid: process.pid, at: new Date().toISOString() })}\n`), script.lifeSignMs).unref();
    }
  }
  if (script.behaviour === 'hang' && !script.logFirst) return hang(script);
  if (process.env.ANTHROPIC_API_KEY === 'expired') {
    process.stderr.write('Invalid API key · Please run /login\n');
    return 3;
  }
  if (script.resetTo) await new StandInGit(workDir(args)).resetTo(script.resetTo);

  switch (script.behaviour) {
    case 'token_expired_message':
      process.stdout.write(
        'API Error: 401 {"type":"error","error":{"type":"authentication_error","message":"OAuth token has expired. Please obtain a new token or refresh your existing token."}}\n',
      );
      return 1;
    case 'exit_3':
      process.stderr.write('Invalid API key · Please run /login\n');
      return 3;
    case 'no_logs': {
      const git = new StandInGit(workDir(args));
      for (const commit of script.commits) await git.commit(commit);
      return finish(args, 'Committed without reporting anything.');
    }
    case 'crash_after_commit': {
      const git = new StandInGit(workDir(args));
      for (const commit of script.commits) await git.commit(commit);
      process.stderr.write(`stand-in: crashing after ${script.commits.length} unreported commit(s)\n`);
      return script.exitCode;
    }
    default:
      break;
  }

  if (script.waitForFile) await waitForFile(script.waitForFile);
  const record = script.recordArgvTo;
  const reporter = await StandInReporter.fromMcpConfig(args.mcpConfig, (tool) => {
    if (record) appendFileSync(record, `${JSON.stringify({ calling: tool, pid: process.pid, at: new Date().toISOString() })}\n`);
  });
  if (script.leaveUnanswered) {
    if (script.behaviour !== 'commit') return fail('stand-in: leaveUnanswered goes with behaviour commit only');
    return leaveUnanswered(reporter, script, args);
  }
  try {
    await reporter.call('log_implementation', {
      summary: `Stand-in agent starts: behaviour ${script.behaviour}, model ${args.model ?? 'default'}.`,
      plan: `Payload ${payloadPath}`,
    });
    if (script.delayMs > 0) await sleep(script.delayMs);
    if (script.pauseUntilFile) {
      // In its pause, its report answered: what a test that kills the runner now waits for.
      if (record) appendFileSync(record, `${JSON.stringify({ paused: script.pauseUntilFile, pid: process.pid, at: new Date().toISOString() })}\n`);
      await waitForFile(script.pauseUntilFile);
    }

    switch (script.behaviour) {
      case 'commit':
      case 'delete_only':
      case 'failing_tests': {
        const git = new StandInGit(workDir(args));
        for (const commit of script.commits) {
          const hash = await git.commit(commit);
          await reporter.call('log_commit', { hash, message: commit.message, summary: describe(commit) });
        }
        await tamper(args, script);
        if (script.behaviour === 'failing_tests') {
          await reporter.call('log_test_result', { status: 'FAILED', summary: '1 of 3 checks failed: expected 2, received 3' });
          await reporter.call('update_job_status', { status: 'FAILED', summary: 'tests fail', error: 'test run failed: expected 2, received 3' });
          return finish(args, 'Tests fail.', script.finalExitCode);
        }
        await reporter.call('log_test_result', { status: 'PASSED', summary: '3 of 3 checks passed' });
        await reporter.call('update_job_status', { status: script.reportStatus, summary: 'work committed' });
        return finish(args, 'Work committed.', script.finalExitCode);
      }
      case 'review': {
        const verdict = await nextVerdict(script, args.model ?? 'default');
        await reporter.call('record_decision', { verdict, comment: `stand-in review by ${args.model ?? 'default'}: ${verdict}` });
        await reporter.call('log_test_result', { status: 'PASSED', summary: `reviewed: ${verdict}` });
        await reporter.call('update_job_status', { status: 'DONE', summary: `review recorded: ${verdict}` });
        return finish(args, `Review: ${verdict}.`, script.finalExitCode);
      }
      case 'nothing':
        await tamper(args, script);
        await reporter.call('log_test_result', { status: 'PASSED', summary: 'nothing to change' });
        await reporter.call('update_job_status', { status: 'DONE', summary: 'nothing to change' });
        return finish(args, 'Nothing to change.', script.finalExitCode);
      case 'exit_nonzero':
        await tamper(args, script);
        if (script.stderrFile) process.stderr.write(await readFile(script.stderrFile, 'utf8'));
        process.stderr.write(`stand-in: giving up with exit code ${script.exitCode}\n`);
        return script.exitCode;
      case 'hang':
        await reporter.close();
        return await hang(script);
    }
  } finally {
    await reporter.close();
  }
}

/** commit, as an agent that does not wait for the runner's answers: every report sent, none awaited. */
async function leaveUnanswered(reporter: StandInReporter, script: StandInScript, args: StandInArguments): Promise<number> {
  reporter.send('log_implementation', { summary: 'Stand-in agent starts: behaviour commit, replies not awaited.' });
  const git = new StandInGit(workDir(args));
  for (const commit of script.commits) {
    const hash = await git.commit(commit);
    reporter.send('log_commit', { hash, message: commit.message, summary: describe(commit) });
  }
  reporter.send('log_test_result', { status: 'PASSED', summary: '3 of 3 checks passed' });
  reporter.send('update_job_status', { status: script.reportStatus, summary: 'work committed' });
  // Long enough for the calls to reach the runner; their answers are not waited for.
  await sleep(500);
  return finish(args, 'Work committed; the reports were not waited for.', script.finalExitCode);
}

/** The verdict of this model's n-th review: the n-th of its list (the last once the list runs out). */
async function nextVerdict(script: StandInScript, model: string): Promise<'approve' | 'reject'> {
  const verdicts = script.verdicts[model] ?? script.verdicts['*'] ?? ['approve'];
  if (!script.verdictCounterDir) return verdicts[0]!;
  const counter = `${script.verdictCounterDir}/${model.replace(/[^A-Za-z0-9_-]/g, '_')}.count`;
  const done = Number(await readFile(counter, 'utf8').catch(() => '0')) || 0;
  await writeFile(counter, String(done + 1));
  return verdicts[Math.min(done, verdicts.length - 1)]!;
}

async function tamper(args: StandInArguments, script: StandInScript): Promise<void> {
  if (script.gitConfig || script.gitFiles) await new StandInGit(workDir(args)).tamper(script.gitConfig ?? {}, script.gitFiles ?? {});
}

function workDir(args: StandInArguments): string {
  const dir = args.addDir[0];
  if (!dir) throw new Error('stand-in: --add-dir names no directory to work in');
  return dir;
}

function describe(commit: StandInCommit): string {
  const written = Object.keys(commit.files);
  return [written.length ? `writes ${written.join(', ')}` : '', commit.delete.length ? `deletes ${commit.delete.join(', ')}` : '']
    .filter(Boolean)
    .join('; ');
}

function finish(args: StandInArguments, result: string, exitCode = 0): number {
  if (args.outputFormat === 'text') process.stdout.write(`${result}\n`);
  else process.stdout.write(`${JSON.stringify({ type: 'result', subtype: 'success', is_error: exitCode !== 0, result })}\n`);
  return exitCode;
}

function fail(message: string): number {
  process.stderr.write(`${message}\n`);
  return 1;
}

/**
 * Waits until the gate exists. A gate whose directory is gone will never open (the test that held it
 * ended and removed its world, its runner killed): the stand-in then exits instead of waiting for ever
 * as an orphan.
 */
async function waitForFile(path: string): Promise<void> {
  while (!existsSync(path)) {
    if (!existsSync(dirname(path))) throw new Error(`the gate ${path} will never open: its directory is gone`);
    await sleep(50);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function hang(script: StandInScript): Promise<number> {
  if (script.spawnChild) {
    const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
    process.stdout.write(`stand-in child pid ${child.pid}\n`);
  }
  if (script.heartbeatMs && script.recordArgvTo) {
    const record = script.recordArgvTo;
    let beat = 0;
    setInterval(() => appendFileSync(record, `${JSON.stringify({ beat: ++beat, pid: process.pid, at: new Date().toISOString() })}\n`), script.heartbeatMs);
  }
  process.stdout.write('stand-in: hanging\n');
  return new Promise(() => setInterval(() => undefined, 60_000));
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`stand-in: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
