/** Admission, shared by every transport (HTTP, gRPC): see admission.ts. */
export { Admission } from './admission.js'
export { presentedKey } from './key.js'
export { SCOPES, type AdmissionHook, type AdmissionRequest, type Authenticator, type Principal, type RateLimitBucket, type Scope } from './types.js'
