// Checks that the repository explains itself: what it cites is in docs/, and its links resolve.

/**
 * A pointer at something a clone of the repository does not have: the briefing folder beside the
 * checkout, its two documents by name or section, an issue number. (Spelt so that this file does not
 * match itself: [P], [R] and \u00a7, the section sign.)
 */
const OUTSIDE_REFERENCE = /\.\.\/shared\/|\b(?:S[P]EC|A[R]CHITECTURE)(?:\.md|\s*\u00a7)|\u00a7\s*\d|\b[Ii]ssue #?\d+\b/;

/** The rule and test ids the documentation defines and code may cite. */
const RULE_ID = /\b(AC-[A-Z]\d+|PR-\d+|V\d{2})\b/g;

export interface Finding {
  file: string;
  line: number;
  problem: string;
}

export interface SourceFile {
  path: string;
  text: string;
}

function lines(file: SourceFile): [number, string][] {
  return file.text.split('\n').map((line, i) => [i + 1, line]);
}

/** Lines that point at documents outside the repository (see OUTSIDE_REFERENCE). */
export function outsideReferences(files: readonly SourceFile[]): Finding[] {
  return files.flatMap((file) =>
    lines(file)
      .filter(([, line]) => OUTSIDE_REFERENCE.test(line))
      .map(([line, text]) => ({ file: file.path, line, problem: `points outside the repository: ${text.trim()}` })),
  );
}

/**
 * The ids docs/ defines: a bold `**AC-A1**` / `**V01**`, a table row `| PR-1 |`, or a range the docs
 * name as defined elsewhere (`AC-L1 to AC-L4 are defined in …`).
 */
export function definedRuleIds(docs: readonly SourceFile[]): Set<string> {
  const defined = new Set<string>();
  for (const doc of docs) {
    for (const m of doc.text.matchAll(/\*\*([A-Z]{1,2}-?[A-Z]?\d+)\*\*|^\|\s*(PR-\d+)\s*\|/gm)) defined.add(m[1] ?? m[2]!);
    for (const m of doc.text.matchAll(/\b(AC-[A-Z])(\d+) to AC-[A-Z](\d+) are defined in \[/g)) {
      for (let n = Number(m[2]); n <= Number(m[3]); n++) defined.add(`${m[1]}${n}`);
    }
  }
  return defined;
}

/** Rule ids cited in the files that no page of docs/ defines. */
export function undefinedRuleIds(files: readonly SourceFile[], defined: ReadonlySet<string>): Finding[] {
  return files.flatMap((file) =>
    lines(file).flatMap(([line, text]) =>
      [...text.matchAll(RULE_ID)]
        .map((m) => m[1]!)
        .filter((id) => !defined.has(id))
        .map((id) => ({ file: file.path, line, problem: `cites ${id}, which docs/ does not define` })),
    ),
  );
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens; repeats get -1, -2 … */
export function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const heading = !fenced && /^#{1,6}\s+(.*)$/.exec(line);
    if (!heading) continue;
    const slug = heading[1]!
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}_\- ]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    anchors.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return anchors;
}

/**
 * Relative links of markdown pages (`[text](path#anchor)`) whose file or heading does not exist.
 * `exists` and `read` are given paths relative to the repository root.
 */
export function brokenLinks(pages: readonly SourceFile[], exists: (path: string) => boolean, read: (path: string) => string): Finding[] {
  const findings: Finding[] = [];
  for (const page of pages) {
    const dir = page.path.includes('/') ? page.path.slice(0, page.path.lastIndexOf('/')) : '';
    for (const [line, text] of lines(page)) {
      for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1]!;
        if (/^[a-z]+:/.test(target)) continue;
        const [file, anchor] = target.split('#') as [string, string | undefined];
        const resolved = file === '' ? page.path : normalise(dir === '' ? file : `${dir}/${file}`);
        if (!exists(resolved)) {
          findings.push({ file: page.path, line, problem: `links to ${target}: no such file` });
        } else if (anchor !== undefined && resolved.endsWith('.md') && !anchorsOf(read(resolved)).has(anchor)) {
          findings.push({ file: page.path, line, problem: `links to ${target}: no such heading` });
        }
      }
    }
  }
  return findings;
}

function normalise(path: string): string {
  const parts: string[] = [];
  for (const part of path.split('/')) {
    if (part === '..') parts.pop();
    else if (part !== '.' && part !== '') parts.push(part);
  }
  return parts.join('/');
}

const VARIABLE = /\bGANTRY_[A-Z0-9]+(?:_[A-Z0-9]+)*\b/g;

/**
 * Names that look like settings and are none: the JetStream streams (the stream prefix and a
 * context: GANTRY_JOBS), the scripts' own arrays, and the hooks by which tests stop a process at a
 * chosen step (GANTRY_TEST_…), which no operator sets.
 */
const NOT_SETTINGS = /^GANTRY_(?:JOBS|PRS|WORKFLOW|WORKTREES|DISPATCH|APPS|APP_PORTS|TEST_[A-Z0-9_]+)$/;

function variablesIn(files: readonly SourceFile[]): Map<string, SourceFile> {
  const found = new Map<string, SourceFile>();
  for (const file of files) for (const m of file.text.matchAll(VARIABLE)) if (!NOT_SETTINGS.test(m[0]) && !found.has(m[0])) found.set(m[0], file);
  return found;
}

/**
 * `GANTRY_*` settings the pages name that no code reads, and settings the code reads that no page
 * names: `pages` are the documentation, `code` the sources that run (not the tests).
 */
export function unmatchedVariables(pages: readonly SourceFile[], code: readonly SourceFile[]): Finding[] {
  const documented = variablesIn(pages);
  const read = variablesIn(code);
  const findingAt = (name: string, file: SourceFile, problem: string): Finding => ({
    file: file.path,
    line: file.text.slice(0, file.text.indexOf(name)).split('\n').length,
    problem: `${name} ${problem}`,
  });
  return [
    ...[...documented].filter(([name]) => !read.has(name)).map(([name, file]) => findingAt(name, file, 'is documented, but no code reads it')),
    ...[...read].filter(([name]) => !documented.has(name)).map(([name, file]) => findingAt(name, file, 'is read, but no page documents it')),
  ];
}
