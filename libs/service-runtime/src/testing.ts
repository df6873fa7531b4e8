// Test helpers of @gantry/service-runtime (import from '@gantry/service-runtime/testing').
import 'reflect-metadata';
import { Module, type DynamicModule, type INestApplication, type Provider, type Type } from '@nestjs/common';
import pg from 'pg';
import type { Context, Naming } from '@gantry/contracts';
import { Bus, CommandClient } from '@gantry/messaging';
import { removeTestNamespace, testDatabaseUrl, testNaming, testNatsUrl, uniqueName } from '@gantry/testing';
import { createServiceApp, type RunServiceOptions, type ServiceAppOptions } from './lib/bootstrap.js';
import { GantryRuntimeModule } from './lib/runtime.module.js';

export interface TestService {
  app: INestApplication;
  /** http://127.0.0.1:<port> */
  url: string;
  naming: Naming;
  schema: string;
  /** Stops the service (the shutdown hooks run) and removes its schema and streams. */
  close(): Promise<void>;
}

/**
 * Runs a module in-process the way `runService` does (transport connected, HTTP on a free port on
 * 127.0.0.1), in a schema, subject root and stream prefix of its own. `env` is applied while the
 * service reads its configuration.
 */
export async function startTestService(options: {
  label: string;
  /** The app module; or `context` plus `controllers` / `providers` for a service made up in the test. */
  module?: Type<unknown>;
  context?: Context;
  controllers?: Type<unknown>[];
  providers?: Provider[];
  imports?: Array<Type<unknown> | DynamicModule>;
  env?: Record<string, string>;
  /** Routes read as bytes, as the service's `main.ts` names them (`runService`'s `rawBodyRoutes`). */
  rawBodyRoutes?: RunServiceOptions['rawBodyRoutes'];
}): Promise<TestService> {
  const schema = uniqueName(options.label);
  const naming = testNaming(schema);
  let module = options.module;
  if (!module) {
    @Module({
      imports: [GantryRuntimeModule.forRoot({ service: `${options.label}-test`, context: options.context ?? 'workflow', defaultPort: 0 }), ...(options.imports ?? [])],
      controllers: options.controllers ?? [],
      providers: options.providers ?? [],
    })
    class TestServiceModule {}
    module = TestServiceModule;
  }
  let app: INestApplication;
  try {
    app = await startInProcess(module, { name: schema, naming }, options.env, { nestLogs: false, ...(options.rawBodyRoutes ? { rawBodyRoutes: options.rawBodyRoutes } : {}) });
    await app.listen(0, '127.0.0.1');
  } catch (error) {
    await removeTestNamespace(naming, schema);
    throw error;
  }
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1').replace('localhost', '127.0.0.1');
  return {
    app,
    url,
    naming,
    schema,
    close: async () => {
      await app.close();
      await removeTestNamespace(naming, schema);
    },
  };
}

/**
 * One test file's world on the shared servers: a schema, subject root and stream prefix of its own,
 * a bus and a command client on them, and a SQL pool on the schema. `close()` removes all of it.
 */
export interface TestWorld {
  /** The schema, and the root of the naming. */
  name: string;
  naming: Naming;
  bus: Bus;
  client: CommandClient;
  db: pg.Pool;
  close(): Promise<void>;
}

export async function createTestWorld(label: string, options: { poolSize?: number; /** A scratch NATS server's, for a test that takes JetStream state away. */ natsUrl?: string } = {}): Promise<TestWorld> {
  const name = uniqueName(label);
  const naming = testNaming(name);
  const bus = await Bus.connect({ servers: options.natsUrl ?? testNatsUrl, naming, name: `${label}-test-client` });
  const db = new pg.Pool({ connectionString: testDatabaseUrl, options: `-c search_path=${name}`, max: options.poolSize ?? 4 });
  return {
    name,
    naming,
    bus,
    client: new CommandClient(bus),
    db,
    async close() {
      // The namespace goes whatever became of the clients (a bus or pool that fails to close).
      try {
        await bus.close();
        await db.end();
      } finally {
        await removeTestNamespace(naming, name);
      }
    },
  };
}

/**
 * A service module created in this process (transport connected, not listening on HTTP) on the
 * world's schema and naming. `env` is applied only while the service reads its configuration.
 */
export async function startInProcess(
  module: Type<unknown>,
  world: Pick<TestWorld, 'name' | 'naming'>,
  env: Record<string, string> = {},
  options: ServiceAppOptions = {},
): Promise<INestApplication> {
  const saved = { ...process.env };
  Object.assign(process.env, { GANTRY_DB_SCHEMA: world.name, GANTRY_SUBJECT_ROOT: world.naming.subjectRoot, GANTRY_STREAM_PREFIX: world.naming.streamPrefix, ...env });
  try {
    return await createServiceApp(module, options);
  } finally {
    process.env = saved;
  }
}
