/*
 * GitHub's error answers. REST errors are `{ message, documentation_url, status }` (status as a
 * string, as GitHub sends it), plus `errors` for 422 Validation Failed. GraphQL refusals are HTTP 200
 * with `errors: [{ type, message, path, locations }]`.
 */

const DOCS = 'https://docs.github.com/rest';

export const DOCUMENTATION = {
  getRepository: `${DOCS}/repos/repos#get-a-repository`,
  createPull: `${DOCS}/pulls/pulls#create-a-pull-request`,
  getPull: `${DOCS}/pulls/pulls#get-a-pull-request`,
  listPulls: `${DOCS}/pulls/pulls#list-pull-requests`,
  updatePull: `${DOCS}/pulls/pulls#update-a-pull-request`,
  mergePull: `${DOCS}/pulls/pulls#merge-a-pull-request`,
  createCheckRun: `${DOCS}/checks/runs#create-a-check-run`,
  getCheckRun: `${DOCS}/checks/runs#get-a-check-run`,
  updateCheckRun: `${DOCS}/checks/runs#update-a-check-run`,
  listCheckRuns: `${DOCS}/checks/runs#list-check-runs-for-a-git-reference`,
  createStatus: `${DOCS}/commits/statuses#create-a-commit-status`,
  combinedStatus: `${DOCS}/commits/statuses#get-the-combined-status-for-a-specific-reference`,
  protectedBranches: 'https://docs.github.com/articles/about-protected-branches',
  root: DOCS,
} as const;

export interface ValidationErrorItem {
  resource: string;
  code: 'missing' | 'missing_field' | 'invalid' | 'already_exists' | 'unprocessable' | 'custom';
  field?: string;
  message?: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly documentationUrl: string = DOCUMENTATION.root,
    readonly errors?: ValidationErrorItem[],
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'ApiError';
  }

  body(): Record<string, unknown> {
    return {
      message: this.message,
      ...(this.errors ? { errors: this.errors } : {}),
      documentation_url: this.documentationUrl,
      status: String(this.status),
    };
  }
}

export function notFound(): ApiError {
  return new ApiError(404, 'Not Found');
}

export function validationFailed(documentationUrl: string, ...errors: ValidationErrorItem[]): ApiError {
  return new ApiError(422, 'Validation Failed', documentationUrl, errors);
}

/** A GraphQL refusal: GitHub answers 200 with `errors[].type` (e.g. UNPROCESSABLE, NOT_FOUND). */
export class GraphQLFailure extends Error {
  constructor(
    readonly type: string,
    message: string,
  ) {
    super(message);
    this.name = 'GraphQLFailure';
  }
}
