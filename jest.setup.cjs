// Tests log only warnings and errors unless LOG_LEVEL says otherwise.
process.env.LOG_LEVEL = process.env.LOG_LEVEL || 'warn';
