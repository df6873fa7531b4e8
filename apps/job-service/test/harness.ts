import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { registerProduct, type ProductSettings } from '@gantry/contracts';
import type { CommandClient } from '@gantry/messaging';
import { createTestWorld, startInProcess as startModule, type TestWorld } from '@gantry/service-runtime/testing';
import { AppModule } from '../src/app.module.js';

export type { TestWorld };

/** One test file's world: its schema, its subject root and stream prefix, a client and a SQL pool. */
export const createWorld = (label: string): Promise<TestWorld> => createTestWorld(label);

/** The job service in this process, on the world's schema and naming. */
export const startInProcess = (world: TestWorld, env: Record<string, string> = {}): Promise<INestApplication> => startModule(AppModule, world, env);

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
