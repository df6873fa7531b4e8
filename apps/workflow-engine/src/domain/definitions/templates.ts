/**
 * The shipped template "Office Default": Work → Review → Approval → Done. Review and Approval clear
 * the previous round's decisions, queue one REVIEW run per reviewer / approver, and advance when
 * every decision-required participant approved; any rejection sends the task back to Work, and
 * entering Review again fans out again. Participants are attached per task (or added to a copy of
 * the template); a step with nobody to decide never advances (docs/workflow-engine.md).
 */
export const OFFICE_DEFAULT_YAML = `name: Office Default
start_step: work
steps:
  - id: work
    name: Work
    on_turn_complete:
      - type: move_to_next
  - id: review
    name: Review
    on_enter:
      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: reviewer, reason: review_started }
    on_turn_complete:
      - type: move_to_next
        guard: { wait_for_quorum: all_approve }
      - type: move_to_step
        config: { step_id: work }
        guard: { wait_for_quorum: any_reject }
  - id: approval
    name: Approval
    on_enter:
      - type: clear_decisions
      - type: queue_run_for_each_participant
        config: { role: approver, reason: approval_started }
    on_turn_complete:
      - type: move_to_next
        guard: { wait_for_quorum: all_approve }
      - type: move_to_step
        config: { step_id: work }
        guard: { wait_for_quorum: any_reject }
  - id: done
    name: Done
`;

export const WORKFLOW_TEMPLATES = { office_default: OFFICE_DEFAULT_YAML } as const;
