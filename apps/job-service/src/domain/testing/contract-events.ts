// Kept in @gantry/testing, where every service's specifications find it.
export { validatesAgainstContract } from '@gantry/testing';
