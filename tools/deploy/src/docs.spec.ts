import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { anchorsOf, brokenLinks, definedRuleIds, outsideReferences, undefinedRuleIds, unmatchedVariables, type SourceFile } from './docs-checks.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** Tracked text files, without the lock file, measured results and vendored API descriptions. */
function trackedFiles(): SourceFile[] {
  const listed = execFileSync('git', ['ls-files', '-z'], { cwd: repoRoot, encoding: 'utf8' }).split('\0').filter(Boolean);
  return listed
    .filter((file) => /\.(ts|mjs|cjs|js|sh|md|ya?ml|json)$|^Dockerfile$|^\.ci\//.test(file))
    .filter((file) => !/^(package-lock\.json|bench\/results\/|tools\/github-fake\/contract\/)/.test(file) && !file.endsWith('.snapshot.json'))
    // This file's examples of what the checks must find are not citations.
    .filter((file) => file !== 'tools/deploy/src/docs.spec.ts')
    .filter((file) => existsSync(path.join(repoRoot, file)))
    .map((file) => ({ path: file, text: readFileSync(path.join(repoRoot, file), 'utf8') }));
}

// Built from pieces, so that a search of the tree for such pointers does not find these examples.
const SECTION = '\u00a7';
const [specName, archName] = ['SP' + 'EC', 'ARCHI' + 'TECTURE'];
const BRIEFING = ['..', 'shared', `${specName}.md`].join('/');

describe('the repository explains itself', () => {
  const files = trackedFiles();
  const docs = files.filter((f) => f.path.startsWith('docs/'));
  const pages = files.filter((f) => f.path.endsWith('.md'));

  it('has the architecture and the domain in docs/', () => {
    expect(docs.map((d) => d.path)).toEqual(expect.arrayContaining(['docs/architecture.md', 'docs/domain.md']));
  });

  it('points at no document outside the repository', () => {
    expect(outsideReferences(files)).toEqual([]);
  });

  it('cites only rule and test ids that docs/ defines', () => {
    expect(undefinedRuleIds(files, definedRuleIds(docs))).toEqual([]);
  });

  it('has no relative link in a markdown page that leads nowhere', () => {
    const exists = (p: string) => existsSync(path.join(repoRoot, p));
    const read = (p: string) => readFileSync(path.join(repoRoot, p), 'utf8');
    expect(brokenLinks(pages, exists, read)).toEqual([]);
  });

  it('documents every GANTRY_ setting the code reads, and names none that no code reads', () => {
    const documentation = pages.filter((f) => f.path === 'README.md' || f.path.startsWith('docs/') || /^tools\/[^/]+\/README\.md$/.test(f.path));
    const code = files.filter(
      (f) => !f.path.endsWith('.md') && /^(apps|libs|tools|scripts)\/|^Dockerfile$|^docker-compose\.yml$/.test(f.path) && !/\.spec\.ts$|\/test\/|\/testing\/|\/testing\.ts$|^tools\/(deploy|system-tests)\//.test(f.path),
    );
    expect(unmatchedVariables(documentation, code)).toEqual([]);
  });
});

describe('the documentation checks', () => {
  it('find the briefing folder, its documents by section and issue numbers, and nothing in plain prose', () => {
    const file = {
      path: 'x.ts',
      text: [`// see ${BRIEFING}`, `// the lifecycle (${specName} ${SECTION}1)`, `// ${archName}.md says so`, `// fixed in ${'iss' + 'ue'} 4`, '// docs/jobs.md, "The lifecycle"', '// every zod issue with its path'].join('\n'),
    };
    expect(outsideReferences([file]).map((f) => f.line)).toEqual([1, 2, 3, 4]);
  });

  it('know the ids docs/ defines and report the others with their place', () => {
    const doc = {
      path: 'docs/w.md',
      text: ['- **AC-A1** one', '- **V01** (AC-A1) a test', '| PR-3 | a rule | x |', 'AC-L1 to AC-L4 are defined in [Liveness](#liveness).'].join('\n'),
    };
    const defined = definedRuleIds([doc]);
    expect([...defined].sort()).toEqual(['AC-A1', 'AC-L1', 'AC-L2', 'AC-L3', 'AC-L4', 'PR-3', 'V01']);

    const code = { path: 'a.spec.ts', text: "it('V01 (AC-A1, AC-L3) holds', () => {});\n// PR-3 and PR-16, AC-B2\nconst sha = 'V8';" };
    expect(undefinedRuleIds([code], defined)).toEqual([
      { file: 'a.spec.ts', line: 2, problem: 'cites PR-16, which docs/ does not define' },
      { file: 'a.spec.ts', line: 2, problem: 'cites AC-B2, which docs/ does not define' },
    ]);
  });

  it("make GitHub's heading anchors, repeats numbered, fenced code ignored", () => {
    const anchors = anchorsOf('# The kill -9 run\n## Group A: dispatch completeness\n```\n# not a heading\n```\n## Service-side git (`@gantry/git`)\n## Notes\n## Notes');
    expect([...anchors]).toEqual(['the-kill--9-run', 'group-a-dispatch-completeness', 'service-side-git-gantrygit', 'notes', 'notes-1']);
  });

  it('report a setting documented but never read, and one read but never documented, and take stream names for no setting', () => {
    const pages = [{ path: 'README.md', text: '| `GANTRY_A` |\nstreams GANTRY_JOBS\n| `GANTRY_GONE` |' }];
    const code = [{ path: 'a.ts', text: "env.GANTRY_A;\nenv['GANTRY_NEW'];\nGANTRY_TEST_HOLD_AT" }];
    expect(unmatchedVariables(pages, code)).toEqual([
      { file: 'README.md', line: 3, problem: 'GANTRY_GONE is documented, but no code reads it' },
      { file: 'a.ts', line: 2, problem: 'GANTRY_NEW is read, but no page documents it' },
    ]);
  });

  it('report a link to a missing file or heading, relative to the page', () => {
    const pages = [{ path: 'docs/a.md', text: '[ok](b.md#there) [gone](c.md) [no heading](b.md#elsewhere) [web](https://x.y/z) [self](#top)\n# Top' }];
    const files: Record<string, string> = { 'docs/a.md': pages[0]!.text, 'docs/b.md': '## There' };
    const findings = brokenLinks(pages, (p) => p in files, (p) => files[p]!);
    expect(findings.map((f) => f.problem)).toEqual(['links to c.md: no such file', 'links to b.md#elsewhere: no such heading']);
  });
});
