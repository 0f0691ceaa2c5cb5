import { Metadata, status } from '@grpc/grpc-js'
import { toApiError, type ApiError } from '../../core/errors.js'
import { BadRequest, RetryInfo, RpcStatus } from '../otlp/proto.js'

/** A failed call as gRPC sends it: the status code, its message, and trailers. */
export interface GrpcFailure {
  code: status
  details: string
  metadata: Metadata
}

const RETRY_INFO_URL = 'type.googleapis.com/google.rpc.RetryInfo'
const BAD_REQUEST_URL = 'type.googleapis.com/google.rpc.BadRequest'

/**
 * The one mapping from anything thrown on an OTLP/gRPC call to its status, as the Collector's
 * OTLP receiver maps HTTP statuses: bad key UNAUTHENTICATED, missing scope PERMISSION_DENIED,
 * bad data INVALID_ARGUMENT (never retried), over the rate limit RESOURCE_EXHAUSTED and a
 * downstream failure UNAVAILABLE, both with a google.rpc.RetryInfo in `grpc-status-details-bin`
 * (OTLP exporters retry RESOURCE_EXHAUSTED only when it carries RetryInfo). The error's headers
 * (Retry-After, X-RateLimit-*) travel as trailers too.
 */
export function grpcFailure(err: unknown): GrpcFailure {
  const e = toApiError(err)
  const code = codeOf(e.status)
  const details = `${e.code}: ${e.message}`
  const metadata = new Metadata()
  for (const [k, v] of Object.entries(e.headers)) metadata.set(k.toLowerCase(), v)
  if (code === status.RESOURCE_EXHAUSTED || code === status.UNAVAILABLE) {
    const seconds = retrySeconds(e)
    metadata.set('grpc-status-details-bin', statusDetails(code, details, seconds))
  }
  return { code, details, metadata }
}

/**
 * An error as the google.rpc.Status the OTLP/HTTP specification makes the body of every 4xx and
 * 5xx answered to a protobuf request: the gRPC code of the same error, `code: message` (the gRPC
 * status message), a RetryInfo when the answer is to be retried (429, 503: as its Retry-After)
 * and a BadRequest describing the data on a 400, as the specification asks.
 */
export function rpcStatusBody(e: ApiError): Buffer {
  const code = codeOf(e.status)
  const message = `${e.code}: ${e.message}`
  if (e.status === 429 || e.status === 503) return statusDetails(code, message, retrySeconds(e))
  const details =
    e.status === 400
      ? [{ type_url: BAD_REQUEST_URL, value: BadRequest.encode(BadRequest.create({ fieldViolations: [{ field: e.param ?? '', description: e.message }] })).finish() }]
      : []
  return Buffer.from(RpcStatus.encode(RpcStatus.create({ code, message, details })).finish())
}

const retrySeconds = (e: ApiError): number => Math.max(1, Math.ceil(Number(e.headers['retry-after'] ?? 1) || 1))

function codeOf(httpStatus: number): status {
  switch (httpStatus) {
    case 400:
    case 413:
    case 415:
    case 422:
      return status.INVALID_ARGUMENT
    case 401:
      return status.UNAUTHENTICATED
    case 403:
      return status.PERMISSION_DENIED
    case 404:
      return status.UNIMPLEMENTED
    case 409:
      return status.ABORTED
    case 429:
      return status.RESOURCE_EXHAUSTED
  }
  return httpStatus >= 500 ? status.UNAVAILABLE : status.UNKNOWN
}

/** An encoded google.rpc.Status carrying one RetryInfo. */
export function statusDetails(code: status, message: string, retrySeconds: number): Buffer {
  const retry = RetryInfo.encode(RetryInfo.create({ retryDelay: { seconds: retrySeconds, nanos: 0 } })).finish()
  const s = RpcStatus.create({ code, message, details: [{ type_url: RETRY_INFO_URL, value: retry }] })
  return Buffer.from(RpcStatus.encode(s).finish())
}
