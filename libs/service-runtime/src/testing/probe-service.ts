/*
 * Test-only: a small service of the `workflow` context run as its own process by the runtime's
 * process tests (logging through the real transport, readiness after a kill -9). Built to
 * dist/testing/probe-service.js.
 *
 * - command `runtime_probe_note` logs (with a secret among its fields), reads the database, logs
 *   again from a callback it scheduled, and appends `RuntimeProbeNoted`; with
 *   GANTRY_TEST_HOLD_AT=runtime-probe-note the first one waits for SIGUSR2 before it appends;
 * - durable consumer `runtime-probe` logs each `RuntimeProbeNoted`; with PROBE_HOLD=1 it holds an
 *   event whose `hold` is true for as long as the process lives (JetStream keeps it delivered to
 *   this process);
 * - a note whose text starts with `refuse-command` is refused PRECONDITION_FAILED quoting them (as a
 *   refusal that passes on GitHub's or git's message does);
 * - a note whose text starts with `fail-command` fails the command, one whose text starts with
 *   `fail-handler` fails the consumer's handler, each with a plain Error quoting credentials (as a
 *   failed git push or HTTP call does): a URL's password and PROBE_SECRET_TOKEN's value.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Controller, Inject, Module } from '@nestjs/common';
import { InjectPinoLogger, PinoLogger } from 'nestjs-pino';
import { ErrorCode, GantryError, type EventEnvelope } from '@gantry/contracts';
import { EventStore } from '@gantry/eventstore';
import { runService } from '../lib/bootstrap.js';
import { GantryRuntimeModule } from '../lib/runtime.module.js';
import { holdHereIfAsked } from '../lib/test-crash.js';
import type { CommandCallContext } from '../lib/transport/contexts.js';
import { CommandHandler, DurableConsumer } from '../lib/transport/decorators.js';
import { RuntimeProbeNote } from './probe-service-contract.js';

const holding = process.env.PROBE_HOLD === '1';

@Controller()
class ProbeHandlers {
  constructor(
    @Inject(EventStore) private readonly store: EventStore,
    @InjectPinoLogger('runtime-probe') private readonly log: PinoLogger,
  ) {}

  @CommandHandler(RuntimeProbeNote)
  async note(request: { jobId: string; text: string; hold: boolean }, context: CommandCallContext) {
    if (request.text.startsWith('fail-command')) throw failureQuotingSecrets(request.text);
    if (request.text.startsWith('refuse-command')) throw new GantryError(ErrorCode.PRECONDITION_FAILED, failureQuotingSecrets(request.text).message, { remote: `https://deploy:probe-secret-git-${request.text}@git.example.com/repo.git` });
    this.log.info(
      {
        text: request.text,
        token: `probe-secret-token-${request.text}`,
        tokenExpired: true,
        session: { password: `probe-secret-password-${request.text}`, user: 'probe' },
        headers: { authorization: `Bearer probe-secret-bearer-${request.text}` },
        databaseUrl: `postgres://probe:probe-secret-db-${request.text}@127.0.0.1:5432/probe`,
      },
      'probe noting',
    );
    await this.store.pool.query('SELECT 1');
    await holdHereIfAsked('runtime-probe-note');
    await new Promise<void>((resolve) =>
      setTimeout(() => {
        this.log.info({ text: request.text }, 'probe timer fired');
        resolve();
      }, 1),
    );
    const [event] = await this.store.append(`probe-${randomUUID()}`, 0, [{ type: 'RuntimeProbeNoted', data: request }], { correlationId: context.correlationId });
    this.log.info({ eventId: event!.eventId }, 'probe noted');
    return { eventId: event!.eventId };
  }

  @DurableConsumer({ name: 'runtime-probe', source: 'workflow', type: 'RuntimeProbeNoted' })
  async onNoted(event: EventEnvelope<{ jobId: string; text: string; hold: boolean }>): Promise<void> {
    if (holding && event.data.hold) {
      this.log.info({ eventId: event.eventId }, 'probe holding the event');
      await new Promise<never>(() => undefined);
    }
    if (event.data.text.startsWith('fail-handler')) throw failureQuotingSecrets(event.data.text);
    this.log.info({ eventId: event.eventId, text: event.data.text }, 'probe event handled');
  }
}

function failureQuotingSecrets(text: string): Error {
  return new Error(
    `push of ${text} failed: fatal: unable to access 'https://deploy:probe-secret-git-${text}@git.example.com/repo.git/' with token ${process.env.PROBE_SECRET_TOKEN ?? ''}`,
  );
}

@Module({
  imports: [GantryRuntimeModule.forRoot({ service: 'runtime-probe', context: 'workflow', defaultPort: 0 })],
  controllers: [ProbeHandlers],
})
class ProbeModule {}

await runService(ProbeModule, 'runtime-probe');
