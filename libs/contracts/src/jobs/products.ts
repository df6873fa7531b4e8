import { z } from 'zod';
import { CommandMetaSchema } from '../envelope.js';
import { defineCommand, defineEvent, type EventsOf } from '../registry.js';
import { ExternalRefSchema, GitRefSchema, IdempotencyKeySchema, TimestampSchema } from './values.js';
import { BranchNameSchema, repositoryUrlProblem } from '../worktrees/git-names.js';

/**
 * A product names the repository its work lands in and how pull requests for it are handled
 * (docs/products.md). The job service owns products: every job is resolved against its product
 * when it is enqueued, and the pr-service learns them from ProductRegistered / ProductUpdated.
 */

/** A GitHub repository as `owner/name` (GitHub's own limits: owner 39, name 100 characters). */
export const RepositorySchema = z
  .string()
  .regex(/^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})\/[A-Za-z0-9_.-]{1,100}$/, 'a repository is owner/name')
  .refine((r) => !r.endsWith('/.') && !r.endsWith('/..'), 'a repository name is not . or ..');
export type Repository = z.infer<typeof RepositorySchema>;

/**
 * Where runners clone and push: a URL (https, ssh, file) or a local path. Credentials never live in
 * it — they would reach events and logs — so a URL with a user name or password is refused; the
 * runner's git authenticates by its own configuration.
 */
export const CloneUrlSchema = z
  .string()
  .min(1)
  .max(2000)
  .regex(/^[^\s]+$/, 'a clone URL has no whitespace')
  .refine((value) => !/^-/.test(value), 'a clone URL does not start with -')
  .refine((value) => {
    if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return true;
    try {
      const url = new URL(value);
      return url.password === '' && (url.username === '' || (url.protocol === 'ssh:' && url.username === 'git'));
    } catch {
      return false;
    }
  }, 'a clone URL carries no credentials (only ssh://git@ is allowed)');

/** STORY: one PR per story branch, merged when the story's tasks are done and checks are green. SPRINT: a draft PR per sprint branch, made ready for review when the sprint run is DONE. */
export const PrStrategySchema = z.enum(['STORY', 'SPRINT']);
export type PrStrategy = z.infer<typeof PrStrategySchema>;

/** GitHub's merge methods. */
export const MergeMethodSchema = z.enum(['MERGE', 'SQUASH', 'REBASE']);
export type MergeMethod = z.infer<typeof MergeMethodSchema>;

/** The names of the checks (check runs or commit status contexts) a head must pass before it is merged. */
export const RequiredChecksSchema = z
  .array(z.string().min(1).max(200))
  .max(100)
  .refine((names) => new Set(names).size === names.length, 'required checks are distinct');

export const ProductSettingsSchema = z.object({
  repository: RepositorySchema,
  cloneUrl: CloneUrlSchema,
  /** The branch finished work is merged into. */
  targetBranch: GitRefSchema,
  prStrategy: PrStrategySchema,
  mergeMethod: MergeMethodSchema,
  requiredChecks: RequiredChecksSchema,
});
export type ProductSettings = z.infer<typeof ProductSettingsSchema>;

/**
 * The settings a product is registered or updated with: its clone URL must also be a repository URL
 * the worktree service and the runners accept (`repositoryUrlProblem`: no transport helper, no
 * leading `-` in it or in its path, https/ssh/file or an absolute path) — a product whose URL they
 * refuse would be accepted here and fail every code job at its claim. Its target branch likewise must
 * be a branch name git accepts (`branchNameProblem`). The events and views keep CloneUrlSchema and
 * GitRefSchema: what was registered before still reads back from the log.
 */
const ProductSettingsRequestSchema = ProductSettingsSchema.extend({
  targetBranch: BranchNameSchema,
  cloneUrl: CloneUrlSchema.superRefine((value, ctx) => {
    const problem = repositoryUrlProblem(value);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  }),
});

/** A product's stream in the job service's log. */
export function productStreamId(productId: string): string {
  return `product-${productId}`;
}

const at = '2026-11-30T05:00:00.000Z';
export const productExample = {
  productId: 'product-42',
  repository: 'acme/shop',
  cloneUrl: 'https://github.com/acme/shop.git',
  targetBranch: 'main',
  prStrategy: 'STORY' as const,
  mergeMethod: 'SQUASH' as const,
  requiredChecks: ['ci/test'],
};
const { productId: _p, ...settingsExample } = productExample;

// ---------------------------------------------------------------------------------------------
// commands

const ProductReply = z.object({ productId: ExternalRefSchema, version: z.number().int().positive() });

export const registerProduct = defineCommand({
  context: 'jobs',
  name: 'register_product',
  request: CommandMetaSchema.extend({ productId: ExternalRefSchema, ...ProductSettingsRequestSchema.shape, idempotencyKey: IdempotencyKeySchema }),
  reply: ProductReply,
  examples: {
    valid: [
      { ...productExample, idempotencyKey: 'product-42/register:1' },
      { ...productExample, productId: 'product-7', repository: 'acme/api', cloneUrl: '/srv/git/api.git', prStrategy: 'SPRINT', mergeMethod: 'MERGE', requiredChecks: [], idempotencyKey: 'product-7/register:1' },
    ],
    invalid: [
      // a token in the clone URL would reach the log
      { ...productExample, cloneUrl: 'https://x-access-token:ghp_abc@github.com/acme/shop.git', idempotencyKey: 'p/register:1' },
      // a path git would read as an option
      { ...productExample, cloneUrl: 'git@github.com:-oProxyCommand=touch', idempotencyKey: 'p/register:1' },
      // a repository is owner/name, not a URL
      { ...productExample, repository: 'https://github.com/acme/shop', idempotencyKey: 'p/register:1' },
      // a strategy GitHub flow does not know
      { ...productExample, prStrategy: 'TRUNK', idempotencyKey: 'p/register:1' },
      // the same check twice
      { ...productExample, requiredChecks: ['ci', 'ci'], idempotencyKey: 'p/register:1' },
      // a target branch git refuses
      { ...productExample, targetBranch: 'main/', idempotencyKey: 'p/register:1' },
    ],
  },
});

export const ProductChangesSchema = ProductSettingsRequestSchema.partial().refine((c) => Object.values(c).some((v) => v !== undefined), 'an update changes at least one setting');

export const updateProduct = defineCommand({
  context: 'jobs',
  name: 'update_product',
  request: CommandMetaSchema.extend({ productId: ExternalRefSchema, changes: ProductChangesSchema, idempotencyKey: IdempotencyKeySchema }),
  reply: ProductReply.extend({ settings: ProductSettingsSchema }),
  examples: {
    valid: [
      { productId: 'product-42', changes: { requiredChecks: ['ci/test', 'ci/lint'] }, idempotencyKey: 'product-42/update:2' },
      { productId: 'product-42', changes: { prStrategy: 'SPRINT', targetBranch: 'develop' }, idempotencyKey: 'product-42/update:3' },
    ],
    invalid: [
      // an update that changes nothing
      { productId: 'product-42', changes: {}, idempotencyKey: 'p/update:1' },
      // an unknown merge method
      { productId: 'product-42', changes: { mergeMethod: 'FAST_FORWARD' }, idempotencyKey: 'p/update:1' },
    ],
  },
});

export const ProductViewSchema = z.object({
  productId: ExternalRefSchema,
  ...ProductSettingsSchema.shape,
  version: z.number().int().positive(),
  registeredAt: TimestampSchema,
  updatedAt: TimestampSchema,
});
export type ProductView = z.infer<typeof ProductViewSchema>;

export const getProduct = defineCommand({
  context: 'jobs',
  name: 'get_product',
  request: CommandMetaSchema.extend({ productId: ExternalRefSchema }),
  reply: ProductViewSchema,
  examples: {
    valid: [{ productId: 'product-42' }],
    // a product id is one token
    invalid: [{ productId: 'product 42' }],
  },
});

// ---------------------------------------------------------------------------------------------
// events

export const ProductRegistered = defineEvent({
  context: 'jobs',
  type: 'ProductRegistered',
  schemaVersion: 1,
  data: z.object({ productId: ExternalRefSchema, ...ProductSettingsSchema.shape, registeredAt: TimestampSchema }),
  examples: {
    valid: [{ ...productExample, registeredAt: at }],
    // a product without its repository has nowhere to land work
    invalid: [{ ...productExample, repository: undefined, registeredAt: at }],
  },
});

export const ProductUpdated = defineEvent({
  context: 'jobs',
  type: 'ProductUpdated',
  schemaVersion: 1,
  data: z.object({
    productId: ExternalRefSchema,
    /** Every setting after the update, so a reader needs no earlier event to know the product. */
    ...ProductSettingsSchema.shape,
    /** The settings this update changed. */
    changed: z.array(z.enum(Object.keys(ProductSettingsSchema.shape) as [keyof ProductSettings, ...(keyof ProductSettings)[]])).min(1),
    updatedAt: TimestampSchema,
  }),
  examples: {
    valid: [{ ...productExample, ...settingsExample, requiredChecks: ['ci/test', 'ci/lint'], changed: ['requiredChecks'], updatedAt: at }],
    // an update names what it changed
    invalid: [{ ...productExample, changed: [], updatedAt: at }],
  },
});

export type ProductRegisteredData = z.output<typeof ProductRegistered.data>;
export type ProductUpdatedData = z.output<typeof ProductUpdated.data>;

export const productCommandContracts = [registerProduct, updateProduct, getProduct] as const;
export const productEventContracts = [ProductRegistered, ProductUpdated] as const;
/** A product's events (one stream per product), as its decider emits them. */
export type ProductEvent = EventsOf<typeof productEventContracts>;
