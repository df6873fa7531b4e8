import 'reflect-metadata';
import { startService } from '@gantry/service-runtime';
import { AppModule } from './app.module.js';

// GitHub signs a webhook over its exact bytes, and sends bodies up to 25 MB: the route reads them unparsed.
startService(AppModule, 'pr-service', { rawBodyRoutes: [{ path: '/webhooks/github', limit: '25mb' }] });
