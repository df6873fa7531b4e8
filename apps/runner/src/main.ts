import 'reflect-metadata';
import { startService } from '@gantry/service-runtime';
import { AppModule } from './app.module.js';

startService(AppModule, 'runner');
