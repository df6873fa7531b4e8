import 'reflect-metadata';
import { startService } from '@gantry/service-runtime';
import { AppModule, prServiceRawBodyRoutes } from './app.module.js';

startService(AppModule, 'pr-service', { rawBodyRoutes: prServiceRawBodyRoutes });
