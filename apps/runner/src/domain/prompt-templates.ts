import type { JobKind } from '@gantry/contracts';

/** Where a prompt template wants the absolute path of the job's payload file. */
export const PAYLOAD_PATH_PLACEHOLDER = '$PAYLOAD_PATH';

const storyLogDuty = [
  'Report through the gantry tools, never by editing files:',
  '- at the start call log_implementation with the task, the branch and your plan;',
  '- after every commit call log_commit with the hash, the message and a summary;',
  '- at the end call log_test_result with PASSED or FAILED and a summary of the checks you ran;',
  '- call update_job_status with DONE, PARTIAL or FAILED when you stop;',
  '- call ask_question when you cannot continue without a human decision.',
].join('\n');

/** The prompt text per job kind; the runner fills in the payload path and nothing else. */
export const defaultPromptTemplates: Record<JobKind, string> = {
  IDEA_GRILL: [
    'You are grilling an idea: find its gaps, risks and open questions.',
    `The job payload (the idea and its context) is the JSON file ${PAYLOAD_PATH_PLACEHOLDER}.`,
    storyLogDuty,
  ].join('\n\n'),
  IDEA_MAKE_PLAN: [
    'You are turning an idea into an implementation plan of stories and tasks.',
    `The job payload (the idea, the grill outcome and the repository) is the JSON file ${PAYLOAD_PATH_PLACEHOLDER}.`,
    storyLogDuty,
  ].join('\n\n'),
  PLAN_CHAT: [
    "You are answering the user's questions about a plan.",
    `The job payload (the plan and the conversation so far) is the JSON file ${PAYLOAD_PATH_PLACEHOLDER}.`,
    storyLogDuty,
  ].join('\n\n'),
  TASK_IMPLEMENTATION: [
    'You are implementing one task in the git worktree you were given.',
    `The job payload (the task, its implementation plan and the branch) is the JSON file ${PAYLOAD_PATH_PLACEHOLDER}.`,
    'Before writing, compare the plan with what is already on the branch and do only what is missing. Commit your work; do not push.',
    storyLogDuty,
  ].join('\n\n'),
  SPRINT_IMPLEMENTATION: [
    'You are implementing the next task of a sprint on the sprint branch in the git worktree you were given.',
    `The job payload (the sprint, the task, its implementation plan and the branch) is the JSON file ${PAYLOAD_PATH_PLACEHOLDER}.`,
    'Before writing, compare the plan with what is already on the branch and do only what is missing. Commit your work; do not push.',
    storyLogDuty,
  ].join('\n\n'),
  REVIEW: [
    'You are reviewing the work of a task as the agent profile described in the payload.',
    `The job payload (the task, the diff to review and your review brief) is the JSON file ${PAYLOAD_PATH_PLACEHOLDER}.`,
    'Record your decision with the record_decision tool: approve, or reject with what must change, always with a comment.',
    storyLogDuty,
  ].join('\n\n'),
};
