import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ErrorCode, GantryError } from '@gantry/contracts';
import { runGit } from './git-command.js';
import { spawnGit } from './git-process.js';
import { createGitFixture, plainGitEnvironment, type GitFixture } from './testing/index.js';

/*
 * A hostile agent writes the repository's config, attributes and hooks; service-side git then runs
 * the command a service would. Per key: plain git does run the agent's program (so the test can
 * fail), @gantry/git does not — it refuses the repository before running anything (the config
 * check) — and, for the keys it overrides on the command line, the overrides alone already stop it.
 * For the keys the overrides cannot reach (the repository names them), the overrides alone do not:
 * that is why the check exists.
 */

interface Attack {
  /** The directory the command runs in. */
  dir: string;
  args: string[];
  input?: string;
  /** Whether the agent's program ran (or its push went where it wanted). */
  happened(): boolean;
  /** Puts back what a run consumed (a file a checkout restored), before each try. */
  rearm?(): void;
}

interface HostileCase {
  name: string;
  /** The repository config keys the agent wrote: the config check names them. Empty: hooks alone. */
  keys: string[];
  /** True when the command-line overrides alone stop it. */
  overridden: boolean;
  plant(fx: GitFixture, marker: string): Attack;
}

const ran = (marker: string) => () => existsSync(marker);

/** Every try commits as someone: a commit the agent's program should see must not fail for want of a name first. */
const identity = { name: 'Someone', email: 'someone@example.invalid' };

function hook(dir: string, name: string, marker: string): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, name), `#!/bin/sh\ntouch '${marker}'\ncat >/dev/null\n`);
  chmodSync(path.join(dir, name), 0o755);
}

/** A branch `work` one commit ahead of main, with `files` in that commit; returns [main, work]. */
function branchWith(fx: GitFixture, files: Record<string, string>): [string, string] {
  const base = fx.sha('HEAD', fx.seed)!;
  fx.git(fx.seed, 'checkout', '-q', '-b', 'work');
  return [base, fx.commit(files, 'work')];
}

/**
 * A file with new content before each try: a try whose filter let the add through has staged the
 * file, and git runs the filter again only for content it has not seen (or a racily clean file).
 */
function changeFile(fx: GitFixture): () => void {
  let tries = 0;
  return () => writeFileSync(path.join(fx.seed, 'new.txt'), `new ${++tries}\n`);
}

/** A second bare repository: where a rewritten URL would send a push. */
function elsewhere(fx: GitFixture): string {
  const evil = path.join(fx.dir, 'elsewhere.git');
  fx.git(fx.dir, 'init', '-q', '--bare', evil);
  return evil;
}

const cases: HostileCase[] = [
  {
    name: 'core.fsmonitor (status)',
    keys: ['core.fsmonitor'],
    overridden: true,
    plant: (fx, marker) => {
      fx.git(fx.seed, 'config', 'core.fsmonitor', fx.markerScript(marker));
      return { dir: fx.seed, args: ['status', '--porcelain'], happened: ran(marker) };
    },
  },
  {
    name: 'a hook in the repository’s hooks directory (update-ref runs reference-transaction)',
    keys: [],
    overridden: true,
    plant: (fx, marker) => {
      hook(path.join(fx.seed, '.git', 'hooks'), 'reference-transaction', marker);
      return { dir: fx.seed, args: ['update-ref', 'refs/heads/hooked', 'HEAD'], happened: ran(marker) };
    },
  },
  {
    name: 'core.hooksPath (update-ref runs reference-transaction)',
    keys: ['core.hookspath'],
    overridden: true,
    plant: (fx, marker) => {
      const hooks = path.join(fx.dir, 'agent-hooks');
      hook(hooks, 'reference-transaction', marker);
      fx.git(fx.seed, 'config', 'core.hooksPath', hooks);
      return { dir: fx.seed, args: ['update-ref', 'refs/heads/hooked', 'HEAD'], happened: ran(marker) };
    },
  },
  {
    name: 'core.sshCommand (ls-remote of an ssh URL)',
    keys: ['core.sshcommand'],
    overridden: true,
    plant: (fx, marker) => {
      fx.git(fx.seed, 'config', 'core.sshCommand', `touch '${marker}'; false`);
      return { dir: fx.seed, args: ['ls-remote', '--', 'ssh://git.example.invalid/acme/shop.git'], happened: ran(marker) };
    },
  },
  {
    name: 'credential.helper (git asks for credentials)',
    keys: ['credential.helper'],
    overridden: true,
    plant: (fx, marker) => {
      fx.git(fx.seed, 'config', 'credential.helper', `!touch '${marker}'`);
      return { dir: fx.seed, args: ['credential', 'fill'], input: 'protocol=https\nhost=example.com\n\n', happened: ran(marker) };
    },
  },
  {
    name: 'credential.<url>.helper (git asks for credentials for that URL)',
    keys: ['credential.<…>.helper'],
    overridden: true,
    plant: (fx, marker) => {
      fx.git(fx.seed, 'config', 'credential.https://example.com.helper', `!touch '${marker}'`);
      return { dir: fx.seed, args: ['credential', 'fill'], input: 'protocol=https\nhost=example.com\n\n', happened: ran(marker) };
    },
  },
  {
    name: 'core.askPass (git asks for a password)',
    keys: ['core.askpass'],
    overridden: true,
    plant: (fx, marker) => {
      fx.git(fx.seed, 'config', 'core.askPass', fx.markerScript(marker));
      return { dir: fx.seed, args: ['credential', 'fill'], input: 'protocol=https\nhost=example.com\n\n', happened: ran(marker) };
    },
  },
  {
    // git takes the first uploadpack / receivepack it reads (the repository's), not the command line's.
    name: 'remote.origin.uploadpack (fetch from a path origin)',
    keys: ['remote.<…>.uploadpack'],
    overridden: false,
    plant: (fx, marker) => {
      fx.git(fx.seed, 'config', 'remote.origin.uploadpack', `touch '${marker}'; git-upload-pack`);
      return { dir: fx.seed, args: ['fetch', '-q', 'origin'], happened: ran(marker) };
    },
  },
  {
    name: 'remote.origin.receivepack (push to a path origin)',
    keys: ['remote.<…>.receivepack'],
    overridden: false,
    plant: (fx, marker) => {
      fx.git(fx.seed, 'config', 'remote.origin.receivepack', `touch '${marker}'; git-receive-pack`);
      return { dir: fx.seed, args: ['push', '-q', 'origin', 'HEAD:refs/heads/pushed'], happened: ran(marker) };
    },
  },
  {
    name: 'remote.<another remote>.uploadpack (its name is the agent’s choice)',
    keys: ['remote.<…>.url', 'remote.<…>.uploadpack'],
    overridden: false,
    plant: (fx, marker) => {
      fx.git(fx.seed, 'remote', 'add', 'upstream', fx.origin);
      fx.git(fx.seed, 'config', 'remote.upstream.uploadpack', `touch '${marker}'; git-upload-pack`);
      return { dir: fx.seed, args: ['fetch', '-q', 'upstream'], happened: ran(marker) };
    },
  },
  {
    name: 'url.<x>.insteadOf (a push to the origin’s URL goes elsewhere)',
    keys: ['url.<…>.insteadof'],
    overridden: false,
    plant: (fx) => {
      const evil = elsewhere(fx);
      fx.git(fx.seed, 'config', `url.${evil}.insteadOf`, fx.origin);
      return { dir: fx.seed, args: ['push', '-q', '--', fx.origin, 'HEAD:refs/heads/landed'], happened: () => fx.sha('refs/heads/landed', evil) !== null };
    },
  },
  {
    name: 'url.<x>.pushInsteadOf (a push to the origin’s URL goes elsewhere)',
    keys: ['url.<…>.pushinsteadof'],
    overridden: false,
    plant: (fx) => {
      const evil = elsewhere(fx);
      fx.git(fx.seed, 'config', `url.${evil}.pushInsteadOf`, fx.origin);
      return { dir: fx.seed, args: ['push', '-q', '--', fx.origin, 'HEAD:refs/heads/landed'], happened: () => fx.sha('refs/heads/landed', evil) !== null };
    },
  },
  {
    name: 'remote.origin.pushurl (a push to origin goes elsewhere)',
    keys: ['remote.<…>.pushurl'],
    overridden: false,
    plant: (fx) => {
      const evil = elsewhere(fx);
      fx.git(fx.seed, 'config', 'remote.origin.pushurl', evil);
      return { dir: fx.seed, args: ['push', '-q', 'origin', 'HEAD:refs/heads/landed'], happened: () => fx.sha('refs/heads/landed', evil) !== null };
    },
  },
  {
    name: 'filter.<driver>.clean named by .gitattributes (add)',
    keys: ['filter.<…>.clean'],
    overridden: false,
    plant: (fx, marker) => {
      fx.git(fx.seed, 'config', 'filter.agent.clean', fx.markerScript(marker));
      writeFileSync(path.join(fx.seed, '.gitattributes'), '* filter=agent\n');
      return { dir: fx.seed, args: ['add', '--all', '--', '.'], happened: ran(marker), rearm: changeFile(fx) };
    },
  },
  {
    name: 'filter.<driver>.smudge named by .gitattributes (checkout)',
    keys: ['filter.<…>.smudge'],
    overridden: false,
    plant: (fx, marker) => {
      fx.commit({ '.gitattributes': '*.txt filter=agent\n', 'a.txt': 'a\n' }, 'attributes');
      fx.git(fx.seed, 'config', 'filter.agent.smudge', fx.markerScript(marker));
      const rearm = () => rmSync(path.join(fx.seed, 'a.txt'), { force: true });
      return { dir: fx.seed, args: ['checkout', '--', 'a.txt'], happened: ran(marker), rearm };
    },
  },
  {
    name: 'filter.<driver>.process named by .gitattributes (add)',
    keys: ['filter.<…>.process'],
    overridden: false,
    plant: (fx, marker) => {
      fx.git(fx.seed, 'config', 'filter.agent.process', fx.markerScript(marker));
      writeFileSync(path.join(fx.seed, '.gitattributes'), '* filter=agent\n');
      return { dir: fx.seed, args: ['add', '--all', '--', '.'], happened: ran(marker), rearm: changeFile(fx) };
    },
  },
  {
    name: 'diff.<driver>.textconv named by .gitattributes (diff)',
    keys: ['diff.<…>.textconv'],
    overridden: false,
    plant: (fx, marker) => {
      const [base, head] = branchWith(fx, { '.gitattributes': '* diff=agent\n', 'a.txt': 'a\n' });
      fx.git(fx.seed, 'config', 'diff.agent.textconv', fx.markerScript(marker));
      return { dir: fx.seed, args: ['diff', `${base}...${head}`, '--'], happened: ran(marker) };
    },
  },
  {
    name: 'diff.<driver>.command named by .gitattributes (diff)',
    keys: ['diff.<…>.command'],
    overridden: false,
    plant: (fx, marker) => {
      const [base, head] = branchWith(fx, { '.gitattributes': '* diff=agent\n', 'a.txt': 'a\n' });
      fx.git(fx.seed, 'config', 'diff.agent.command', fx.markerScript(marker));
      return { dir: fx.seed, args: ['diff', `${base}...${head}`, '--'], happened: ran(marker) };
    },
  },
  {
    name: 'diff.external (diff)',
    keys: ['diff.external'],
    overridden: false,
    plant: (fx, marker) => {
      const [base, head] = branchWith(fx, { 'a.txt': 'a\n' });
      fx.git(fx.seed, 'config', 'diff.external', fx.markerScript(marker));
      return { dir: fx.seed, args: ['diff', `${base}...${head}`, '--'], happened: ran(marker) };
    },
  },
  {
    name: 'merge.<driver>.driver named by .gitattributes (merge-tree of a conflict)',
    keys: ['merge.<…>.driver'],
    overridden: false,
    plant: (fx, marker) => {
      fx.commit({ '.gitattributes': '* merge=agent\n', 'a.txt': 'base\n' }, 'base');
      const base = fx.sha('HEAD', fx.seed)!;
      const ours = fx.commit({ 'a.txt': 'ours\n' }, 'ours');
      fx.git(fx.seed, 'checkout', '-q', '-b', 'theirs', base);
      const theirs = fx.commit({ 'a.txt': 'theirs\n' }, 'theirs');
      fx.git(fx.seed, 'config', 'merge.agent.driver', `touch '${marker}'; false`);
      return { dir: fx.seed, args: ['merge-tree', '--write-tree', ours, theirs], happened: ran(marker) };
    },
  },
  {
    name: 'commit.gpgSign with gpg.program (a commit, as the GitHub stand-in’s cherry-pick makes)',
    keys: ['commit.gpgsign', 'gpg.program'],
    overridden: true,
    plant: (fx, marker) => {
      fx.git(fx.seed, 'config', 'commit.gpgSign', 'true');
      fx.git(fx.seed, 'config', 'gpg.program', fx.markerScript(marker));
      return { dir: fx.seed, args: ['commit', '-q', '--allow-empty', '-m', 'signed?'], happened: ran(marker) };
    },
  },
  {
    name: 'include.path pulling in core.fsmonitor from another file (status)',
    keys: ['include.path', 'core.fsmonitor'],
    overridden: true,
    plant: (fx, marker) => {
      const included = path.join(fx.dir, 'included-config');
      writeFileSync(included, `[core]\n\tfsmonitor = ${fx.markerScript(marker)}\n`);
      fx.git(fx.seed, 'config', 'include.path', included);
      return { dir: fx.seed, args: ['status', '--porcelain'], happened: ran(marker) };
    },
  },
  {
    name: 'protocol.ext.allow=always with an ext:: URL (ls-remote)',
    keys: ['protocol.<…>.allow'],
    overridden: true,
    plant: (fx, marker) => {
      fx.git(fx.seed, 'config', 'protocol.ext.allow', 'always');
      return { dir: fx.seed, args: ['ls-remote', '--', `ext::sh -c touch% ${marker}`], happened: ran(marker) };
    },
  },
];

describe('service-side git in a repository a hostile agent has written', () => {
  let fx: GitFixture;
  beforeEach(() => {
    fx = createGitFixture();
  });
  afterEach(() => fx.cleanup());

  function plainly(attack: Attack): void {
    try {
      const env = { ...plainGitEnvironment(), GIT_AUTHOR_NAME: identity.name, GIT_AUTHOR_EMAIL: identity.email, GIT_COMMITTER_NAME: identity.name, GIT_COMMITTER_EMAIL: identity.email };
      execFileSync('git', attack.args, { cwd: attack.dir, env, input: attack.input ?? '', stdio: ['pipe', 'ignore', 'ignore'], timeout: 30_000 });
    } catch {
      // many of these fail once the agent's program has run; what matters is that it ran
    }
  }

  it.each(cases.map((c) => [c.name, c] as const))('%s: plain git runs the agent’s program, @gantry/git does not', async (_name, hostile) => {
    const marker = fx.marker('hostile');
    const attack = hostile.plant(fx, marker);
    attack.rearm?.();
    plainly(attack);
    expect(attack.happened()).toBe(true);
    rmSync(marker, { force: true });
    // The second try must not find a push of the first one.
    for (const evil of [path.join(fx.dir, 'elsewhere.git')]) if (existsSync(evil)) fx.git(evil, 'update-ref', '-d', 'refs/heads/landed');
    expect(attack.happened()).toBe(false);

    attack.rearm?.();
    const outcome = await runGit(attack.args, { cwd: attack.dir, timeoutMs: 30_000, input: attack.input, identity }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(attack.happened()).toBe(false);
    if (hostile.keys.length > 0) {
      expect(outcome).toBeInstanceOf(GantryError);
      expect((outcome as GantryError).code).toBe(ErrorCode.PRECONDITION_FAILED);
      expect((outcome as GantryError).details).toMatchObject({ keys: expect.arrayContaining(hostile.keys) });
    }

    // The overrides alone (no config check): enough for the keys git lets the command line decide.
    attack.rearm?.();
    await spawnGit(attack.args, { cwd: attack.dir, timeoutMs: 30_000, input: attack.input, identity }).catch(() => undefined);
    expect(attack.happened()).toBe(!hostile.overridden);
  });
});
