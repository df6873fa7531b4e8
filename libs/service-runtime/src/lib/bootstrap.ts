import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import type { Type } from '@nestjs/common';
import { SERVICE_CONFIG } from './runtime.module.js';
import type { ServiceConfig } from './config.js';
import { JsonLogger } from './logger.js';

/** Starts a service: HTTP for health, readiness and commands; SIGTERM/SIGINT stop it in order. */
export async function runService(module: Type<unknown>, service: string): Promise<void> {
  const logger = new JsonLogger(service);
  try {
    const app = await NestFactory.create(module, { logger, bufferLogs: false });
    app.enableShutdownHooks(['SIGTERM', 'SIGINT']);
    const config = app.get<ServiceConfig>(SERVICE_CONFIG);
    await app.listen(config.port, config.httpHost);
    logger.log({ message: 'listening', port: config.port, host: config.httpHost }, 'runtime');
  } catch (error) {
    logger.fatal({ message: 'service failed to start', error: error instanceof Error ? error.message : String(error) }, 'runtime');
    process.exit(1);
  }
}
