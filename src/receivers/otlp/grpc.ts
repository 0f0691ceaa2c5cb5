import { status } from '@grpc/grpc-js'
import type { Admission, AdmissionRequest } from '../../transport/admission/index.js'
import { OtlpGrpcServer, type CallInfo } from '../../transport/grpc/server.js'
import type { DecodeOptions } from '../../transport/otlp/batch.js'
import { checkPayloadKeys, exportSignals, type ExportTarget } from './export.js'

/** The HTTP status a gRPC status stands for, as error-pattern accounting counts them. */
function httpStatusOf(code: status): number {
  switch (code) {
    case status.OK:
      return 200
    case status.INVALID_ARGUMENT:
      return 400
    case status.UNAUTHENTICATED:
      return 401
    case status.PERMISSION_DENIED:
      return 403
    case status.RESOURCE_EXHAUSTED:
      return 429
    default:
      return 503
  }
}

/** `ipv4:127.0.0.1:5000` / `ipv6:[::1]:5000` → the address alone. */
function addressOf(peer: string): string {
  const m = /^(?:ipv4:|ipv6:)?\[?([^\]]*?)\]?:\d+$/.exec(peer)
  return m ? m[1] : peer
}

export interface OtlpGrpcSettings {
  endpoint: string
  maxMessageBytes: number
  target: ExportTarget
  decode: DecodeOptions
  admission: Admission
}

/**
 * OTLP/gRPC with the same admission as HTTP (DESIGN §3): the key from `x-api-key` or
 * `authorization: Bearer` metadata, else the export's `<prefix>api_key` resource attribute;
 * the metering bucket; error-pattern accounting from every call's final status. Refusals become
 * gRPC statuses in one place (grpcFailure): 401 UNAUTHENTICATED, 403 PERMISSION_DENIED,
 * 429 RESOURCE_EXHAUSTED with RetryInfo, a downstream failure UNAVAILABLE with RetryInfo.
 */
export function otlpGrpcServer(s: OtlpGrpcSettings): OtlpGrpcServer {
  const requests = new WeakMap<CallInfo, AdmissionRequest>()
  const requestOf = (call: CallInfo, apiKey?: string): AdmissionRequest => {
    let req = requests.get(call)
    if (!req) {
      req = { header: (name) => call.metadata[name], apiKey, ip: addressOf(call.peer), bucket: 'metering', scope: 'metering:write', responseHeaders: {} }
      requests.set(call, req)
    }
    return req
  }
  return new OtlpGrpcServer({
    endpoint: s.endpoint,
    maxMessageBytes: s.maxMessageBytes,
    decode: s.decode,
    async handler(_signal, decoded, call) {
      const fromHeaders = call.metadata['x-api-key'] !== undefined || call.metadata.authorization !== undefined
      const req = requestOf(call, fromHeaders ? undefined : decoded.apiKeys[0])
      const admitted = s.admission.admit(req)
      const refused = admitted instanceof Promise ? await admitted : admitted
      if (refused) throw refused
      if (!fromHeaders) checkPayloadKeys(decoded.apiKeys)
      // The decoder's refusals are counted by the server; these are the pipeline's.
      const outcome = await exportSignals(req.principal!, [decoded], s.target)
      const r = outcome.rejected[decoded.signal]
      const pipelineRefused = (r?.count ?? 0) - decoded.rejectedCount
      return pipelineRefused > 0 ? { rejected: pipelineRefused, errorMessage: r!.message } : {}
    },
    onStatus: (_signal, code, call) => s.admission.observe(requestOf(call), httpStatusOf(code)),
  })
}
