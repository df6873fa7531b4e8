// A small line-based Dockerfile reader: enough to check what the images run, not a full parser
// (no heredocs, no parser directives beyond treating them as comments).

export const DOCKERFILE_INSTRUCTIONS = [
  'ADD', 'ARG', 'CMD', 'COPY', 'ENTRYPOINT', 'ENV', 'EXPOSE', 'FROM', 'HEALTHCHECK', 'LABEL',
  'ONBUILD', 'RUN', 'SHELL', 'STOPSIGNAL', 'USER', 'VOLUME', 'WORKDIR',
] as const;
export type DockerfileKeyword = (typeof DOCKERFILE_INSTRUCTIONS)[number];

export interface DockerfileInstruction {
  keyword: DockerfileKeyword;
  /** Everything after the keyword, continuation lines joined with a space. */
  args: string;
  /** 1-based line where the instruction starts. */
  line: number;
}

export interface DockerfileStage {
  /** The image (or earlier stage) after FROM, without --platform and AS. */
  base: string;
  /** The name after AS, if any. */
  name?: string;
  instructions: DockerfileInstruction[];
}

export interface Dockerfile {
  /** ARGs declared before the first FROM. */
  globalArgs: DockerfileInstruction[];
  stages: DockerfileStage[];
}

const isKeyword = (word: string): word is DockerfileKeyword =>
  (DOCKERFILE_INSTRUCTIONS as readonly string[]).includes(word);

/** Logical instructions: comments dropped, lines ending in a backslash joined with the next. */
export function readInstructions(text: string): DockerfileInstruction[] {
  const instructions: DockerfileInstruction[] = [];
  let pending: { parts: string[]; line: number } | undefined;
  const lines = text.split(/\r?\n/);

  lines.forEach((raw, index) => {
    const trimmed = raw.trim();
    if (trimmed.startsWith('#')) return; // also inside a continuation, as Docker does
    if (trimmed === '' && !pending) return;
    const continues = /\\\s*$/.test(raw);
    const content = continues ? raw.replace(/\\\s*$/, '').trim() : trimmed;
    pending ??= { parts: [], line: index + 1 };
    if (content !== '') pending.parts.push(content);
    if (continues) return;
    instructions.push(toInstruction(pending.parts.join(' '), pending.line));
    pending = undefined;
  });
  if (pending && pending.parts.length > 0) {
    instructions.push(toInstruction(pending.parts.join(' '), pending.line));
  }
  return instructions;
}

function toInstruction(text: string, line: number): DockerfileInstruction {
  const match = /^(\S+)\s*(.*)$/s.exec(text);
  const word = (match?.[1] ?? '').toUpperCase();
  if (!isKeyword(word)) throw new Error(`Dockerfile line ${line}: unknown instruction "${match?.[1] ?? text}"`);
  return { keyword: word, args: (match?.[2] ?? '').trim(), line };
}

export function parseDockerfile(text: string): Dockerfile {
  const globalArgs: DockerfileInstruction[] = [];
  const stages: DockerfileStage[] = [];

  for (const instruction of readInstructions(text)) {
    if (instruction.keyword === 'FROM') {
      stages.push({ ...parseFrom(instruction), instructions: [] });
      continue;
    }
    const current = stages.at(-1);
    if (current) current.instructions.push(instruction);
    else if (instruction.keyword === 'ARG') globalArgs.push(instruction);
    else throw new Error(`Dockerfile line ${instruction.line}: ${instruction.keyword} before the first FROM`);
  }
  if (stages.length === 0) throw new Error('Dockerfile has no FROM instruction');
  return { globalArgs, stages };
}

function parseFrom(instruction: DockerfileInstruction): { base: string; name?: string } {
  const words = instruction.args.split(/\s+/).filter((word) => !word.startsWith('--'));
  const [base, as, name, ...rest] = words;
  if (!base) throw new Error(`Dockerfile line ${instruction.line}: FROM without an image`);
  if (as === undefined) return { base };
  if (as.toUpperCase() !== 'AS' || !name || rest.length > 0) {
    throw new Error(`Dockerfile line ${instruction.line}: expected "FROM <image> [AS <name>]"`);
  }
  return { base, name };
}

/** The instructions of one keyword in a stage, in order. */
export function instructionsOf(stage: DockerfileStage, keyword: DockerfileKeyword): DockerfileInstruction[] {
  return stage.instructions.filter((instruction) => instruction.keyword === keyword);
}
