// Test helpers of @gantry/service-runtime (import from '@gantry/service-runtime/testing').
import 'reflect-metadata';
import { Module, type DynamicModule, type INestApplication, type Provider, type Type } from '@nestjs/common';
import type { Context, Naming } from '@gantry/contracts';
import { removeTestNamespace, testNaming, uniqueName } from '@gantry/testing';
import { createServiceApp } from './lib/bootstrap.js';
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
  const saved = { ...process.env };
  Object.assign(process.env, { GANTRY_DB_SCHEMA: schema, GANTRY_SUBJECT_ROOT: naming.subjectRoot, GANTRY_STREAM_PREFIX: naming.streamPrefix, ...options.env });
  let app: INestApplication;
  try {
    app = await createServiceApp(module, { nestLogs: false });
    await app.listen(0, '127.0.0.1');
  } catch (error) {
    await removeTestNamespace(naming, schema);
    throw error;
  } finally {
    process.env = saved;
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
