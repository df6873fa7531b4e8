import { isAlias, isMap, isNode, isScalar, isSeq, parseDocument, Parser, type Document } from 'yaml';
import { z } from 'zod';
import {
  ErrorCode,
  GantryError,
  isKnownActionType,
  issuesOf,
  jsonBytes,
  MAX_JOB_INPUT_BYTES,
  reservedKeyIssue,
  reservedKeyPath,
  TriggerNames,
  sessionCommandLineIssues,
  WorkflowDefinitionSchema,
  type Action,
  type StepDefinition,
  type ValidationIssue,
  type WorkflowDefinition,
} from '@gantry/contracts';
import { MAX_REQUEST_DEPTH } from '@gantry/service-runtime';

/*
 * A workflow as its author writes it (docs/workflow-engine.md, "Definitions"): YAML, snake_case.
 * It is checked twice with zod: once in this authored shape (what keys exist, what type each has),
 * then in the stored shape (cross references, each known action's config). Every issue is reported
 * with the path the author wrote, and a refused definition changes nothing. Reading the author's
 * YAML is the engine's edge: the domain sees only the stored shape from @gantry/contracts.
 */

/*
 * Limits of what one import may declare (docs/workflow-engine.md, "Definitions"): the definition is
 * stored and published as one event, which the bus takes only up to its message size; every entry
 * of a step walks its on_enter position by position; and an action's config goes into the requests
 * it makes (a run's payload), which every service refuses nested deeper than MAX_REQUEST_DEPTH. YAML
 * aliases make a short text a large definition, so size and depth are measured on the definition.
 */
export const MAX_ACTIONS_PER_TRIGGER = 100;
/** Over the whole definition: each unknown type is a warning in the import's answer, which must fit one message too. */
export const MAX_ACTIONS = 1000;
export const MAX_SEATS_PER_STEP = 1000;
export const MAX_DEFINITION_BYTES = 512 * 1024;
/** What the engine's own prompt may take when an action that queues a job declares none (it names the task's title and the step). */
export const DEFAULT_PROMPT_ROOM = 8 * 1024;

/**
 * The prompt and payload, as JSON, of the job an action queues (an enqueue_job request), or null for
 * an action that queues none: the declared prompt (auto_start_agent falls back to the step's), else
 * room for the engine's, and the declared payload.
 */
function jobInputOf(step: StepDefinition, action: Action): number | null {
  const config = action.config as { prompt?: unknown; payload?: unknown };
  const declared = (prompt: unknown) => (typeof prompt === 'string' ? jsonBytes(prompt) : DEFAULT_PROMPT_ROOM);
  const payload = config.payload !== null && typeof config.payload === 'object' ? jsonBytes(config.payload) : 0;
  if (action.type === 'auto_start_agent') return declared(config.prompt ?? step.prompt) + payload;
  if (action.type === 'queue_run') return declared(config.prompt) + payload;
  if (action.type === 'queue_run_for_each_participant') return DEFAULT_PROMPT_ROOM + payload;
  return null;
}

const YamlActionSchema = z.strictObject({
  type: z.string(),
  config: z.record(z.string(), z.unknown()).nullable().optional(),
  guard: z.unknown().optional(),
});

const YamlParticipantSchema = z.strictObject({
  id: z.string().optional(),
  role: z.string(),
  agent_profile_id: z.string(),
  decision_required: z.boolean(),
  position: z.number().int().min(0).optional(),
});

const actions = z.array(YamlActionSchema).max(MAX_ACTIONS_PER_TRIGGER).nullable().optional();

const YamlStepSchema = z.strictObject({
  id: z.string(),
  name: z.string(),
  wip_limit: z.number().int().nullable().optional(),
  prompt: z.string().nullable().optional(),
  agent_profile_id: z.string().nullable().optional(),
  participants: z.array(YamlParticipantSchema).max(MAX_SEATS_PER_STEP).nullable().optional(),
  on_enter: actions,
  on_turn_start: actions,
  on_turn_complete: actions,
  on_exit: actions,
});

const YamlWorkflowSchema = z.strictObject({
  name: z.string(),
  description: z.string().optional(),
  start_step: z.string().optional(),
  ceo_agent_profile_id: z.string().nullable().optional(),
  steps: z.array(YamlStepSchema),
});

type YamlStep = z.infer<typeof YamlStepSchema>;

/** An action type the engine does not know, where it was declared. */
export interface UnknownActionNotice {
  stepId: string;
  trigger: 'on_enter' | 'on_turn_start' | 'on_turn_complete' | 'on_exit';
  position: number;
  type: string;
}

/**
 * A transition guarded by `n_approve:K` on a step that declares fewer than K decision-required seats
 * (its participants and its on_enter ensure_participant_seat): accepted, since seats may be added per
 * task (add_step_participant), but it holds only once they are.
 */
export interface QuorumShortfallNotice {
  stepId: string;
  trigger: UnknownActionNotice['trigger'];
  position: number;
  type: string;
  rule: string;
  approvals: number;
  declaredSeats: number;
}

export interface ParsedWorkflow {
  definition: WorkflowDefinition;
  unknownActions: UnknownActionNotice[];
  quorumShortfalls: QuorumShortfallNotice[];
}

function quorumShortfallsOf(definition: WorkflowDefinition): QuorumShortfallNotice[] {
  const notices: QuorumShortfallNotice[] = [];
  for (const step of definition.steps) {
    const ensured = step.onEnter.filter((a) => a.type === 'ensure_participant_seat' && (a.config as { decision_required?: unknown }).decision_required === true).length;
    const declaredSeats = step.participants.filter((p) => p.decisionRequired).length + ensured;
    for (const trigger of TriggerNames) {
      step[trigger].forEach((action, position) => {
        const rule = action.guard !== null && 'wait_for_quorum' in action.guard ? action.guard.wait_for_quorum : null;
        const approvals = Number(/^n_approve:(\d+)$/.exec(rule ?? '')?.[1] ?? 0);
        if (rule !== null && approvals > declaredSeats) notices.push({ stepId: step.id, trigger: TRIGGER_YAML[trigger], position, type: action.type, rule, approvals, declaredSeats });
      });
    }
  }
  return notices;
}

const AUTHORED_NAMES: Record<string, string> = {
  startStepId: 'start_step',
  ceoAgentProfileId: 'ceo_agent_profile_id',
  wipLimit: 'wip_limit',
  agentProfileId: 'agent_profile_id',
  decisionRequired: 'decision_required',
  onEnter: 'on_enter',
  onTurnStart: 'on_turn_start',
  onTurnComplete: 'on_turn_complete',
  onExit: 'on_exit',
};

const TRIGGER_YAML = { onEnter: 'on_enter', onTurnStart: 'on_turn_start', onTurnComplete: 'on_turn_complete', onExit: 'on_exit' } as const;

/** At most this many issues go into a refusal: the answer to a definition wrong in every one of thousands of places still fits one message. */
export const MAX_REPORTED_ISSUES = 100;

const clip = (text: string, max: number) => (text.length > max ? `${text.slice(0, max - 3)}...` : text);

function refuse(all: ValidationIssue[]): never {
  // A key or a value the author wrote may be long: each issue is kept short too.
  const issues = all.slice(0, MAX_REPORTED_ISSUES).map((i) => ({ ...i, message: clip(i.message, 300), path: i.path.map((p) => (typeof p === 'string' ? clip(p, 100) : p)) }));
  if (all.length > issues.length) issues.push({ path: [], message: `and ${all.length - issues.length} more issues`, code: 'too_many_issues' });
  const summary = issues.slice(0, 20).map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
  throw new GantryError(ErrorCode.INVALID_COMMAND, `invalid workflow definition: ${summary}${issues.length > 20 ? `; ... (${all.length} issues)` : ''}`, undefined, issues);
}

function normaliseStep(step: YamlStep) {
  const list = (a: YamlStep['on_enter']) => (a ?? []).map((x) => ({ type: x.type, config: x.config ?? {}, guard: (x.guard ?? null) as never }));
  return {
    id: step.id,
    name: step.name,
    wipLimit: step.wip_limit ?? null,
    prompt: step.prompt ?? null,
    agentProfileId: step.agent_profile_id ?? null,
    participants: (step.participants ?? []).map((p, i) => ({
      id: p.id ?? `${step.id}-seat-${i}`,
      role: p.role,
      agentProfileId: p.agent_profile_id,
      decisionRequired: p.decision_required,
      position: p.position ?? i,
    })),
    onEnter: list(step.on_enter),
    onTurnStart: list(step.on_turn_start),
    onTurnComplete: list(step.on_turn_complete),
    onExit: list(step.on_exit),
  };
}

const tooDeep: ValidationIssue = { path: [], message: `the definition is nested deeper than ${MAX_REQUEST_DEPTH} levels`, code: 'too_deep' };

/** Whether objects and arrays nest deeper than `limit` in the value; walked without recursion. */
function deeperThan(value: unknown, limit: number): boolean {
  const pending: [unknown, number][] = [[value, 0]];
  while (pending.length > 0) {
    const [item, depth] = pending.pop()!;
    if (item === null || typeof item !== 'object') continue;
    if (depth >= limit) return true;
    for (const child of Object.values(item)) pending.push([child, depth + 1]);
  }
  return false;
}

/**
 * Whether the YAML text nests collections deeper than `limit`, read on the reader's syntax tree,
 * which it builds without recursion: the step that follows (the document's nodes) recurses once
 * per level and runs out of stack at some hundreds of levels.
 */
function textDeeperThan(text: string, limit: number): boolean {
  const pending: [unknown, number][] = [...new Parser().parse(text)].map((token) => [token, 0]);
  while (pending.length > 0) {
    const [token, depth] = pending.pop()!;
    if (token === null || typeof token !== 'object') continue;
    const { items, value } = token as { items?: { key?: unknown; value?: unknown }[]; value?: unknown };
    if (Array.isArray(items)) {
      if (depth >= limit) return true;
      for (const item of items) pending.push([item.key, depth + 1], [item.value, depth + 1]);
    } else if (value !== null && typeof value === 'object') {
      pending.push([value, depth]);
    }
  }
  return false;
}

const PLAIN_COLLECTION_TAGS = new Set(['tag:yaml.org,2002:map', 'tag:yaml.org,2002:seq']);

/** What a scalar holds that JSON cannot (the definition is stored and sent as JSON), or null. */
function notJson(value: unknown): string | null {
  if (typeof value === 'number' && !Number.isFinite(value)) return `${value} is not a number JSON can hold (it would be stored as null)`;
  if (typeof value === 'bigint') return 'an integer this large is not a number JSON can hold';
  if (value instanceof Uint8Array) return 'binary data (!!binary) is not a JSON value: write it as a string';
  if (value instanceof Date) return 'a timestamp (!!timestamp) is not a JSON value: write it as a string';
  if (value !== null && typeof value === 'object') return 'this is not a JSON value';
  return null;
}

/** An integer written past 2^53, which a number keeps only approximately (stored as another number), or null. */
function inexactInteger(value: unknown, source: unknown): string | null {
  if (typeof value !== 'number' || Number.isSafeInteger(value) || typeof source !== 'string' || !/^[-+]?(0x[0-9a-f]+|0o[0-7]+|[0-9]+)$/i.test(source)) return null;
  return `${source} is an integer too large to be kept exactly (it would be stored as ${value}): write it as a string`;
}

/**
 * Every value of the document JSON cannot hold, on the path the author wrote: a number that is not
 * finite (.nan, .inf) would be stored as null, an integer past 2^53 as another number, binary data
 * as an object of bytes, a set or an ordered map as {}, a timestamp as other text, a key that is a
 * list or a map as its YAML text. An alias is checked where its anchor is declared. Walked without
 * recursion.
 */
function notJsonIssues(document: Document, text: string): ValidationIssue[] {
  const issues: ValidationIssue[] = [];
  const pending: [unknown, (string | number)[]][] = [[document.contents, []]];
  while (pending.length > 0) {
    const [node, path] = pending.pop()!;
    if (isScalar(node)) {
      const problem = notJson(node.value) ?? inexactInteger(node.value, node.source);
      if (problem) issues.push({ path, message: problem, code: 'not_json' });
    } else if ((isMap(node) || isSeq(node)) && node.tag !== undefined && !PLAIN_COLLECTION_TAGS.has(node.tag)) {
      issues.push({ path, message: `a ${node.tag.replace('tag:yaml.org,2002:', '!!')} is not a JSON value: write a map or a list`, code: 'not_json' });
    } else if (isSeq(node)) {
      for (let i = node.items.length - 1; i >= 0; i--) pending.push([node.items[i], [...path, i]]);
    } else if (isMap(node)) {
      for (let i = node.items.length - 1; i >= 0; i--) {
        const { key, value } = node.items[i]!;
        const named = isAlias(key) ? key.resolve(document) : key;
        if (!isScalar(named) && named !== null && named !== undefined) {
          issues.push({ path: [...path, isNode(named) && named.range ? text.slice(named.range[0], named.range[1]) : String(named)], message: 'a key that is a list or a map is not a JSON key: write it as a string', code: 'not_json' });
          continue;
        }
        const keyValue = isScalar(named) ? named.value : null;
        const keyPath = [...path, keyValue === null ? '' : String(keyValue)];
        const keyProblem = notJson(keyValue) ?? (isScalar(named) ? inexactInteger(keyValue, named.source) : null);
        if (keyProblem) issues.push({ path: keyPath, message: `as a key: ${keyProblem}`, code: 'not_json' });
        else pending.push([value, keyPath]);
      }
    }
  }
  return issues;
}

/** Parses and validates a workflow's YAML; a refusal is INVALID_COMMAND with every zod issue. */
export function parseWorkflowYaml(text: string): ParsedWorkflow {
  let raw: unknown;
  try {
    // The reader's warnings (a tag it does not know) are refusals like its errors; left to it, it
    // printed them with the author's line through process.emitWarning, past the log and its scrubber.
    const document = parseDocument(text, { logLevel: 'error' });
    const problem = document.errors[0] ?? document.warnings[0];
    if (problem) throw problem;
    const notJsonValues = notJsonIssues(document, text);
    if (notJsonValues.length > 0) refuse(notJsonValues);
    raw = document.toJS();
  } catch (error) {
    if (error instanceof GantryError) throw error;
    // Nested too deeply for the reader (it ran out of stack): the limit is what the author is told.
    if (textDeeperThan(text, MAX_REQUEST_DEPTH)) refuse([tooDeep]);
    refuse([{ path: [], message: `not valid YAML: ${(error as Error).message.split('\n')[0]}`, code: 'invalid_yaml' }]);
  }
  // The reader keeps a `__proto__` key, which the schema below would drop (a config stored as {}).
  const reserved = reservedKeyPath(raw);
  if (reserved) refuse([reservedKeyIssue(reserved)]);
  const authored = YamlWorkflowSchema.safeParse(raw);
  if (!authored.success) refuse(issuesOf(authored.error));
  const w = authored.data;
  const declared = w.steps.reduce((n, step) => n + [step.on_enter, step.on_turn_start, step.on_turn_complete, step.on_exit].reduce((m, list) => m + (list?.length ?? 0), 0), 0);
  if (declared > MAX_ACTIONS) refuse([{ path: ['steps'], message: `the definition declares ${declared} actions; at most ${MAX_ACTIONS}`, code: 'too_many_actions' }]);
  const normalised = {
    name: w.name,
    // Only when written: a definition imported before descriptions were kept compares equal to its YAML again.
    ...(w.description !== undefined ? { description: w.description } : {}),
    startStepId: w.start_step ?? w.steps[0]?.id ?? '',
    ceoAgentProfileId: w.ceo_agent_profile_id ?? null,
    steps: w.steps.map(normaliseStep),
  };
  const authoredPath = (path: readonly (string | number)[]) => path.map((p) => (typeof p === 'string' ? (AUTHORED_NAMES[p] ?? p) : p));
  const stored = WorkflowDefinitionSchema.safeParse(normalised);
  if (!stored.success) refuse(issuesOf(stored.error).map((issue) => ({ ...issue, path: authoredPath(issue.path) })));
  const definition = stored.data;
  // A session setting the agent's command line cannot carry, refused here rather than at every job of the task.
  const commandLine = sessionCommandLineIssues(definition);
  if (commandLine.length > 0) refuse(commandLine.map((issue) => ({ ...issue, path: authoredPath(issue.path), code: 'custom' })));
  if (deeperThan(definition, MAX_REQUEST_DEPTH)) refuse([tooDeep]);
  const bytes = Buffer.byteLength(JSON.stringify(definition));
  if (bytes > MAX_DEFINITION_BYTES) {
    refuse([{ path: [], message: `the definition is ${bytes} bytes as stored (YAML aliases included); at most ${MAX_DEFINITION_BYTES}`, code: 'too_big' }]);
  }
  // A job an action would queue that the job service would refuse (docs/jobs.md, "How large a job may
  // be") is refused here, once, not at every dispatch.
  const tooLarge: ValidationIssue[] = [];
  definition.steps.forEach((step, index) => {
    for (const trigger of TriggerNames) {
      step[trigger].forEach((action, position) => {
        const bytes = jobInputOf(step, action);
        if (bytes === null || bytes <= MAX_JOB_INPUT_BYTES) return;
        tooLarge.push({
          path: ['steps', index, TRIGGER_YAML[trigger], position, 'config'],
          message: `the job this ${action.type} queues would carry ${bytes} bytes of prompt and payload as JSON; a job carries at most ${MAX_JOB_INPUT_BYTES} (MAX_JOB_INPUT_BYTES)`,
          code: 'too_big',
        });
      });
    }
  });
  if (tooLarge.length > 0) refuse(tooLarge);
  const unknownActions: UnknownActionNotice[] = [];
  for (const step of definition.steps) {
    for (const trigger of TriggerNames) {
      step[trigger].forEach((action, position) => {
        if (!isKnownActionType(action.type)) unknownActions.push({ stepId: step.id, trigger: TRIGGER_YAML[trigger], position, type: action.type });
      });
    }
  }
  return { definition, unknownActions, quorumShortfalls: quorumShortfallsOf(definition) };
}
