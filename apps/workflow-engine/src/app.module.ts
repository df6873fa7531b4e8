import { Module } from '@nestjs/common';
import { PinoLogger } from 'nestjs-pino';
import { EventStore } from '@gantry/eventstore';
import { CommandClient } from '@gantry/messaging';
import { componentLogger, GantryRuntimeModule, SERVICE_CONFIG, type ServiceConfig } from '@gantry/service-runtime';
import { DecisionCommands } from './application/decision-commands.js';
import { DefinitionCommands } from './application/definition-commands.js';
import { DispatchDiagnostics } from './application/dispatch/diagnostics.js';
import { EngineActions } from './application/dispatch/engine-actions.js';
import { OnEnterDispatcher } from './application/dispatch/on-enter-dispatcher.js';
import { SessionActions } from './application/dispatch/session-actions.js';
import { ENGINE_SETTINGS, engineSettings, type EngineSettings } from './application/engine-settings.js';
import { EntryFlow } from './application/entry-flow.js';
import { JobEvents } from './application/job-events.js';
import { EngineLifecycle } from './application/lifecycle.js';
import { UnansweredMoves } from './application/unanswered-moves.js';
import { Placements } from './application/placements.js';
import { WorkflowQueries } from './application/queries.js';
import { RecoveryScan } from './application/recovery/recovery-scan.js';
import { RunRecordsRetention } from './application/run-records-retention.js';
import { TaskCommands } from './application/task-commands.js';
import { TestHooks } from './application/test-hooks.js';
import { StepExits } from './application/triggers/step-exits.js';
import { TurnTriggers } from './application/triggers/turn-triggers.js';
import { RunQueue } from './infrastructure/job-service/run-queue.js';
import { ProcessEpoch } from './infrastructure/liveness/process-epoch.js';
import { workflowEngineMigrations } from './infrastructure/persistence/migrations.js';
import { workflowEngineProjections } from './infrastructure/persistence/projections.js';

@Module({
  imports: [
    GantryRuntimeModule.forRoot({
      service: 'workflow-engine',
      context: 'workflow',
      defaultPort: 3102,
      migrations: workflowEngineMigrations,
      projections: workflowEngineProjections,
      settings: [engineSettings],
    }),
  ],
  providers: [
    { provide: TestHooks, useFactory: () => new TestHooks() },
    {
      provide: ProcessEpoch,
      inject: [SERVICE_CONFIG, EventStore, PinoLogger],
      useFactory: (config: ServiceConfig, store: EventStore, logger: PinoLogger) => {
        const log = componentLogger(logger, 'process-epoch');
        return ProcessEpoch.start({
          databaseUrl: config.databaseUrl,
          schema: config.schema,
          pool: store.pool,
          timeouts: config.databaseTimeouts,
          log,
          names: { table: 'engine_epochs', lock: 'gantry.workflow.epoch', channel: 'gantry_workflow_epochs', applicationName: 'gantry-workflow-epoch' },
          // Every claim of this process is stale to the peers from now on: it must not act under them.
          onLockLost: (error) => {
            log.error('the epoch lock connection was lost; stopping so no claim is executed twice', { error: String(error) });
            process.exit(1);
          },
        });
      },
    },
    {
      provide: RunQueue,
      inject: [CommandClient, ENGINE_SETTINGS, TestHooks],
      useFactory: (commands: CommandClient, settings: EngineSettings, hooks: TestHooks) =>
        new RunQueue(commands, { patienceMs: settings.runQueuePatienceMs, timeoutMs: settings.commandTimeoutMs }, hooks.active ? (request) => hooks.enqueueAnswer(request) : undefined),
    },
    DispatchDiagnostics,
    EngineActions,
    SessionActions,
    OnEnterDispatcher,
    Placements,
    TurnTriggers,
    StepExits,
    EntryFlow,
    UnansweredMoves,
    RecoveryScan,
    EngineLifecycle,
    RunRecordsRetention,
  ],
  // Entry points: commands (@CommandHandler) and durable consumers (@DurableConsumer).
  controllers: [DefinitionCommands, TaskCommands, DecisionCommands, WorkflowQueries, JobEvents],
})
export class AppModule {}
