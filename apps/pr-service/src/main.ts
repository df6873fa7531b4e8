import 'reflect-metadata';
import { runService } from '@gantry/service-runtime';
import { AppModule } from './app.module.js';

// GitHub signs a webhook over its exact bytes, and sends bodies up to 25 MB.
await runService(AppModule, 'pr-service', { rawBody: { jsonLimit: '25mb' } });
