import { z } from 'zod';

/**
 * A service's settings, validated once at boot (docs/configuration.md). A service's configuration is
 * made of parts: the runtime's, shared by every service, and the app's own. Each part declares the
 * environment variables it reads as a zod object and builds its typed configuration from them.
 */

/** One refused variable. The problem never quotes the value: it may be a secret. */
export interface SettingProblem {
  variable: string;
  problem: string;
}

/** Every refused variable of a service at once, named; the process does not start. */
export class SettingsError extends Error {
  constructor(readonly problems: SettingProblem[]) {
    super(`invalid settings: ${problems.map((p) => `${p.variable} ${p.problem}`).join('; ')} (see docs/configuration.md)`);
    this.name = 'SettingsError';
  }
}

type Shape = Record<string, z.ZodType<unknown, string | undefined>>;

/** The values of a part's variables, each as its kind makes it (a number, a flag, text or undefined). */
export type SettingValues<S extends Shape> = { [K in keyof S]: z.output<S[K]> };

/** Refuses a variable from a part's `build` (a rule between several variables, a check zod cannot state). */
export type Refuse<V extends string> = (variable: V, problem: string) => never;

export interface SettingsPart<T, S extends Shape = Shape> {
  /** The part's key in the service's configuration (`ConfigService.get('gantry.<name>')`). */
  readonly name: string;
  /** Where the built configuration is provided. */
  readonly token: symbol;
  readonly variables: S;
  build(values: SettingValues<S>, refuse: Refuse<keyof S & string>): T;
}

export function defineSettings<T, S extends Shape>(part: SettingsPart<T, S>): SettingsPart<T, S> {
  return part;
}

class Refusal extends Error {
  constructor(readonly problem: SettingProblem) {
    super(`${problem.variable} ${problem.problem}`);
  }
}

/** Unset, empty and blank are the same: the default applies. */
function presentVariables(env: Record<string, string | undefined>): Record<string, string> {
  const present: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) if (value !== undefined && value.trim() !== '') present[name] = value.trim();
  return present;
}

function problemsOf(part: SettingsPart<unknown, Shape>, env: Record<string, string>): { value?: unknown; problems: SettingProblem[] } {
  const parsed = z.object(part.variables).safeParse(env);
  if (!parsed.success) {
    // Only the variable and zod's sentence: issues can carry the input, which is never printed.
    return { problems: parsed.error.issues.map((issue) => ({ variable: String(issue.path[0] ?? part.name), problem: issue.message })) };
  }
  try {
    const refuse = (variable: string, problem: string): never => {
      throw new Refusal({ variable, problem });
    };
    return { value: part.build(parsed.data as never, refuse), problems: [] };
  } catch (error) {
    if (error instanceof Refusal) return { problems: [error.problem] };
    throw error;
  }
}

/** Every part's configuration by name, or a SettingsError naming every refused variable. */
export function readSettings(parts: ReadonlyArray<SettingsPart<unknown, Shape>>, env: Record<string, string | undefined>): Record<string, unknown> {
  const present = presentVariables(env);
  const settings: Record<string, unknown> = {};
  const problems: SettingProblem[] = [];
  for (const part of parts) {
    const result = problemsOf(part, present);
    // A variable two parts read (GANTRY_SHUTDOWN_GRACE_MS) is named once.
    problems.push(...result.problems.filter((p) => !problems.some((q) => q.variable === p.variable && q.problem === p.problem)));
    settings[part.name] = result.value;
  }
  if (problems.length > 0) throw new SettingsError(problems);
  return settings;
}

/** One part's configuration (tests, tools); throws a SettingsError like the service's start. */
export function settingsOf<T, S extends Shape>(part: SettingsPart<T, S>, env: Record<string, string | undefined>): T {
  return readSettings([part as unknown as SettingsPart<unknown, Shape>], env)[part.name] as T;
}

// ---- the kinds of variable ----------------------------------------------------------------------

/** A whole number in [min, max]; the default when unset. */
function wholeNumber(options: { min: number; max?: number }): z.ZodType<number | undefined, string | undefined>;
function wholeNumber(options: { min: number; max?: number; default: number }): z.ZodType<number, string | undefined>;
function wholeNumber(options: { min: number; max?: number; default?: number }): z.ZodType<number | undefined, string | undefined> {
  const max = options.max ?? Number.MAX_SAFE_INTEGER;
  const range = options.max === undefined ? `≥ ${options.min}` : `from ${options.min} to ${options.max}`;
  return z
    .string()
    .optional()
    .transform((raw, ctx) => {
      if (raw === undefined) return options.default;
      const value = /^[+-]?\d+$/.test(raw) ? Number(raw) : Number.NaN;
      if (!Number.isSafeInteger(value) || value < options.min || value > max) {
        ctx.addIssue({ code: 'custom', message: `must be a whole number ${range}` });
        return z.NEVER;
      }
      return value;
    });
}

/** Free text (a path, a name); the default when unset. */
function text(): z.ZodType<string | undefined, string | undefined>;
function text(fallback: string): z.ZodType<string, string | undefined>;
function text(fallback?: string): z.ZodType<string | undefined, string | undefined> {
  return z
    .string()
    .optional()
    .transform((raw) => raw ?? fallback);
}

/** A secret (a token, a key): like text, but nothing ever prints it. */
const secret = (): z.ZodType<string | undefined, string | undefined> => z.string().optional();

/** One of the given words. */
function oneOf<const W extends readonly [string, ...string[]]>(words: W, fallback: W[number]): z.ZodType<W[number], string | undefined> {
  return z
    .string()
    .optional()
    .transform((raw, ctx) => {
      if (raw === undefined) return fallback;
      if ((words as readonly string[]).includes(raw)) return raw as W[number];
      ctx.addIssue({ code: 'custom', message: `must be one of ${words.join(', ')}` });
      return z.NEVER;
    });
}

const ON = ['on', 'true', '1', 'yes'];
const OFF = ['off', 'false', '0', 'no'];

/** A switch: on/off (true/false, 1/0, yes/no). */
function flag(fallback: boolean): z.ZodType<boolean, string | undefined> {
  return z
    .string()
    .optional()
    .transform((raw, ctx) => {
      if (raw === undefined) return fallback;
      const word = raw.toLowerCase();
      if (ON.includes(word)) return true;
      if (OFF.includes(word)) return false;
      ctx.addIssue({ code: 'custom', message: 'must be on or off (true/false, 1/0, yes/no)' });
      return z.NEVER;
    });
}

/** A URL with one of the given schemes (`nats:`, `https:` …); `list`: several, comma-separated. */
function url(options: { protocols: readonly string[]; list?: boolean }): z.ZodType<string | undefined, string | undefined>;
function url(options: { protocols: readonly string[]; default: string; list?: boolean }): z.ZodType<string, string | undefined>;
function url(options: { protocols: readonly string[]; default?: string; list?: boolean }): z.ZodType<string | undefined, string | undefined> {
  const schemes = options.protocols.map((p) => `${p}//`).join(' or ');
  return z
    .string()
    .optional()
    .transform((raw, ctx) => {
      if (raw === undefined) return options.default;
      const entries = options.list ? raw.split(',').map((one) => one.trim()) : [raw];
      for (const entry of entries) {
        const parsed = URL.canParse(entry) ? new URL(entry) : null;
        if (!parsed || !options.protocols.includes(parsed.protocol)) {
          ctx.addIssue({ code: 'custom', message: `must be a URL (${schemes}…)${options.list ? ', several comma-separated' : ''}` });
          return z.NEVER;
        }
      }
      return raw;
    });
}

/** The kinds of variable a settings part declares; each refuses a bad value with a sentence that does not quote it. */
export const setting = { wholeNumber, text, secret, oneOf, flag, url };
