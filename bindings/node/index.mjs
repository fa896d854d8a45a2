// The ES module entry point: the same classes as index.js.
import cjs from './index.js';

export const { Harness, Session, ErrorCode } = cjs;
export default cjs;
