import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import pg from 'pg';
import { registerProduct, type Naming, type ProductSettings } from '@gantry/contracts';
import { Bus, CommandClient } from '@gantry/messaging';
import { createServiceApp } from '@gantry/service-runtime';
import { testDatabaseUrl, testNaming, testNatsUrl, uniqueName, removeTestNamespace } from '@gantry/testing';
import { AppModule } from '../src/app.module.js';

/** One test file's world: its schema, its subject root and stream prefix, a client and a SQL pool. */
export interface TestWorld {
  name: string;
  naming: Naming;
  bus: Bus;
  client: CommandClient;
  db: pg.Pool;
  close(): Promise<void>;
}

export async function createWorld(label: string): Promise<TestWorld> {
  const name = uniqueName(label);
  const naming = testNaming(name);
  const bus = await Bus.connect({ servers: testNatsUrl, naming, name: `${label}-test-client` });
  const db = new pg.Pool({ connectionString: testDatabaseUrl, options: `-c search_path=${name}`, max: 4 });
  return {
    name,
    naming,
    bus,
    client: new CommandClient(bus),
    db,
    async close() {
      await bus.close();
      await db.end();
      await removeTestNamespace(naming, name);
    },
  };
}

/** The job service in this process, on the world's schema and naming. */
export async function startInProcess(world: TestWorld, env: Record<string, string> = {}): Promise<INestApplication> {
  const saved = { ...process.env };
  Object.assign(process.env, {
    GANTRY_DB_SCHEMA: world.name,
    GANTRY_SUBJECT_ROOT: world.naming.subjectRoot,
    GANTRY_STREAM_PREFIX: world.naming.streamPrefix,
    ...env,
  });
  try {
    return await createServiceApp(AppModule);
  } finally {
    process.env = saved;
  }
}

export const key = (label: string) => `test/${label}:${randomUUID()}`;
export const sha = (c: string) => c.repeat(40).slice(0, 40);

/** Registers each product (once: the key is the product's, so a repeat replays), on a repository of its own name. */
export async function registerProducts(client: CommandClient, productIds: string[], settings: Partial<ProductSettings> = {}): Promise<void> {
  for (const productId of productIds) {
    await client.request(registerProduct, {
      productId,
      repository: `acme/${productId}`,
      cloneUrl: `https://github.com/acme/${productId}.git`,
      targetBranch: 'main',
      prStrategy: 'STORY',
      mergeMethod: 'SQUASH',
      requiredChecks: [],
      ...settings,
      idempotencyKey: `${productId}/register:test`,
    });
  }
}
