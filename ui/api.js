// The daemon's HTTP API as the dashboard uses it: GET only, the key in x-api-key, same origin.

/** An answer that is not a 2xx, in meterd's error shape ({error:{code,message,param}}). */
export class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {}
    super(e.message || `HTTP ${status}`)
    this.status = status
    this.code = e.code || ''
    this.param = e.param
  }
}

export class Api {
  /** @param {string} base `/{api_prefix}/v2/api` @param {string} key */
  constructor(base, key) {
    this.base = base
    this.key = key
  }

  /** GET `path` under the base with the given query (empty values left out); the JSON answer. */
  async get(path, query = {}, signal) {
    const qs = new URLSearchParams()
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== '') qs.set(k, String(v))
    const url = `${this.base}/${path}${qs.size ? `?${qs}` : ''}`
    const res = await fetch(url, { headers: { 'x-api-key': this.key, accept: 'application/json' }, cache: 'no-store', signal })
    const text = await res.text()
    let body
    try {
      body = text ? JSON.parse(text) : undefined
    } catch {
      body = undefined
    }
    if (!res.ok) throw new ApiError(res.status, body)
    return body
  }
}
