// The dashboard: sign in with an API key (kept in sessionStorage only), then every few seconds
// ask the analytics and alerts endpoints for the chosen period and filters, and draw the answers.
import { Api, ApiError } from './api.js'
import { AgentsChart, DistributionChart, ToolsChart } from './charts.js'
import { int, ms, pct, row, usd, utc } from './format.js'

const meta = (name) => document.querySelector(`meta[name="${name}"]`).content
const API_BASE = meta('meterd-api')
const REFRESH_MS = Number(meta('meterd-refresh-seconds')) * 1000
const KEY = 'meterd.dashboard.key'
const THRESHOLD = 'meterd.dashboard.threshold'
const AMOUNT = /^\d{1,15}(\.\d{1,12})?$/

const HOUR = 3_600_000
/** Each period, and the bucket its tool chart uses (at most a few hundred points). */
const PERIODS = { '1h': [HOUR, 'minute'], '6h': [6 * HOUR, 'minute'], '24h': [24 * HOUR, 'hour'], '7d': [168 * HOUR, 'hour'], '30d': [720 * HOUR, 'day'] }
const OPERATORS = { GREATER_THAN: '>', GREATER_THAN_OR_EQUAL: '≥', LESS_THAN: '<', LESS_THAN_OR_EQUAL: '≤' }

const $ = (id) => document.getElementById(id)

const view = {
  api: undefined,
  timer: undefined,
  inFlight: undefined,
  threshold: sessionStorage.getItem(THRESHOLD) || '',
  trace: undefined,
  charts: undefined,
}

// ---- sign-in -------------------------------------------------------------------------------

function showLogin(message = '') {
  stopPolling()
  view.api = undefined
  // Nothing of one key's view is carried to the next: not its chosen trace, not its threshold.
  sessionStorage.removeItem(THRESHOLD)
  view.trace = undefined
  view.threshold = ''
  $('trace-detail').replaceChildren(Object.assign(document.createElement('p'), { className: 'muted', textContent: 'Choose a trace to see its records.' }))
  $('dashboard').hidden = true
  $('controls').hidden = true
  $('login').hidden = false
  $('login-error').textContent = message
  $('api-key').focus()
}

async function signIn(key, fromForm) {
  const api = new Api(API_BASE, key)
  try {
    await api.get('analytics/summary', { from: new Date(Date.now() - HOUR).toISOString() })
  } catch (err) {
    if (err instanceof ApiError && err.code === 'analytics_loading') {
      // The key is fine; the daemon is still reading its records back.
    } else {
      sessionStorage.removeItem(KEY)
      const why = !(err instanceof ApiError) ? `the daemon did not answer (${err.message})`
        : err.status === 401 ? 'this key is not valid'
        : err.code === 'insufficient_scope' ? 'this key lacks the analytics:read scope'
        : err.message
      return showLogin(fromForm || err.status !== 401 ? why : 'the saved key is no longer valid: sign in again')
    }
  }
  sessionStorage.setItem(KEY, key)
  view.api = api
  $('login').hidden = true
  $('controls').hidden = false
  $('dashboard').hidden = false
  view.charts ??= { agents: new AgentsChart($('chart-agents')), tools: new ToolsChart($('chart-tools')), dist: new DistributionChart($('chart-dist')) }
  $('threshold').value = view.threshold
  refresh()
}

$('login-form').addEventListener('submit', (e) => {
  e.preventDefault()
  const key = $('api-key').value.trim()
  $('api-key').value = ''
  if (key) signIn(key, true)
})

$('logout').addEventListener('click', () => {
  sessionStorage.removeItem(KEY)
  showLogin('signed out')
})

// ---- what to ask ---------------------------------------------------------------------------

function query() {
  const [span, interval] = PERIODS[$('period').value] ?? PERIODS['24h']
  // Whole seconds, so every panel of one refresh asks for the same period.
  const to = Math.floor(Date.now() / 1000) * 1000
  const q = { from: new Date(to - span).toISOString(), to: new Date(to).toISOString() }
  let n = 0
  for (const input of $('controls').querySelectorAll('.filter-grid input')) {
    const v = input.value.trim()
    if (v) (q[input.name] = v), n++
  }
  $('filter-count').textContent = n ? `(${n})` : ''
  return { q, interval }
}

let pending
function soon() {
  clearTimeout(pending)
  pending = setTimeout(refresh, 350)
}
$('period').addEventListener('change', refresh)
$('controls').addEventListener('input', (e) => e.target.closest('.filter-grid') && soon())
$('controls').addEventListener('reset', () => setTimeout(refresh, 0))
$('controls').addEventListener('submit', (e) => e.preventDefault())
$('trace-sort').addEventListener('change', refresh)
$('min-cost').addEventListener('input', soon)
$('traces-form').addEventListener('submit', (e) => e.preventDefault())

function setThreshold() {
  const v = $('threshold').value.trim()
  if (v !== '' && !AMOUNT.test(v)) {
    $('threshold-error').textContent = 'a USD amount such as 0.25'
    return
  }
  $('threshold-error').textContent = ''
  if (v === view.threshold) return
  view.threshold = v
  sessionStorage.setItem(THRESHOLD, v)
  refresh()
}
$('threshold-form').addEventListener('submit', (e) => {
  e.preventDefault()
  setThreshold()
})
$('threshold').addEventListener('change', setThreshold)

// ---- refreshing ----------------------------------------------------------------------------

function stopPolling() {
  clearTimeout(view.timer)
  view.timer = undefined
  if (view.inFlight) view.inFlight.abort()
}

/** Asks every panel's question at once; each panel draws its own answer or says what went wrong. */
async function refresh() {
  if (!view.api) return
  clearTimeout(view.timer)
  if (view.inFlight) view.inFlight.abort()
  const ctl = (view.inFlight = new AbortController())
  const { q, interval } = query()
  const api = view.api
  const get = (path, extra = {}) => api.get(path, { ...q, ...extra }, ctl.signal)
  const minCost = $('min-cost').value.trim()
  const asks = {
    summary: get('analytics/summary'),
    agents: get('analytics/agents/cost'),
    tools: get('analytics/tools/cost-over-time', { interval }),
    dist: get('analytics/traces/cost-distribution', { threshold: view.threshold }),
    traces: get('analytics/traces', { sort: $('trace-sort').value, size: 50, minCost: AMOUNT.test(minCost) ? minCost : undefined }),
    providers: get('analytics/providers'),
    models: get('analytics/models'),
    alerts: api.get('sources/ai/anomaly', { size: 100 }, ctl.signal),
    trace: view.trace ? api.get(`analytics/traces/${encodeURIComponent(view.trace)}`, {}, ctl.signal) : Promise.resolve(undefined),
  }
  const names = Object.keys(asks)
  const settled = await Promise.allSettled(Object.values(asks))
  if (ctl.signal.aborted) return
  view.inFlight = undefined
  const answers = {}
  const problems = []
  settled.forEach((s, i) => {
    if (s.status === 'fulfilled') answers[names[i]] = s.value
    else problems.push([names[i], s.reason])
  })
  if (problems.some(([, e]) => e instanceof ApiError && e.status === 401)) return showLogin('the key was refused: sign in again')

  const draw = { summary: drawSummary, agents: drawAgents, tools: drawTools, dist: drawDistribution, traces: drawTraces, providers: drawProviders, models: drawModels, alerts: drawAlerts, trace: drawTrace }
  for (const [name, answer] of Object.entries(answers)) draw[name](answer)
  showProblems(problems)

  // No threshold chosen yet: start at the period's p95, so the line and the share show at once.
  if (!view.threshold && answers.dist && answers.dist.count > 0) {
    view.threshold = answers.dist.percentiles.p95
    $('threshold').value = view.threshold
    return refresh()
  }
  if (view.api === api) view.timer = setTimeout(refresh, document.hidden ? REFRESH_MS * 6 : REFRESH_MS)
}

document.addEventListener('visibilitychange', () => {
  if (!document.hidden && view.api && !view.inFlight) refresh()
})

function showProblems(problems) {
  const banner = $('banner')
  const alertsDenied = problems.find(([n, e]) => n === 'alerts' && e instanceof ApiError && e.status === 403)
  if (alertsDenied) {
    $('alerts').tBodies[0].replaceChildren()
    $('alerts-note').textContent = 'This key cannot read alert rules (they need the platform:read scope).'
  }
  const rest = problems.filter(([n, e]) => !(n === 'alerts' && alertsDenied) && !(n === 'trace' && e instanceof ApiError && e.status === 404) && e.name !== 'AbortError')
  if (problems.some(([n, e]) => n === 'trace' && e instanceof ApiError && e.status === 404)) {
    view.trace = undefined
    $('trace-detail').replaceChildren(Object.assign(document.createElement('p'), { className: 'muted', textContent: 'That trace has no records any more.' }))
  }
  const loading = rest.some(([, e]) => e instanceof ApiError && e.code === 'analytics_loading')
  banner.hidden = rest.length === 0
  banner.textContent = loading ? 'meterd is reading its stored records back after a start; the charts fill in shortly.'
    : rest.map(([n, e]) => `${n}: ${e.message}${e.param ? ` (${e.param})` : ''}`).join(' · ')
  $('status').textContent = `${rest.length ? 'partly updated' : 'updated'} ${new Date().toISOString().slice(11, 19)} UTC · every ${REFRESH_MS / 1000} s`
}

// ---- panels --------------------------------------------------------------------------------

function tile(label, value, note) {
  const d = document.createElement('div')
  d.className = 'tile'
  const l = document.createElement('span')
  l.className = 'label'
  l.textContent = label
  const v = document.createElement('strong')
  v.textContent = value
  d.append(l, v)
  if (note) {
    const n = document.createElement('span')
    n.className = 'note'
    n.textContent = note
    d.append(n)
  }
  return d
}

function drawSummary(s) {
  const p = s.period
  const c = s.change.cost
  const change = s.change.costPercent !== null ? `${s.change.costPercent >= 0 ? '+' : ''}${s.change.costPercent.toFixed(1)} % vs the period before`
    : `${c.startsWith('-') ? '−$' + c.slice(1) : '+$' + c.replace(/^\+/, '')} vs the period before`
  $('summary').replaceChildren(
    tile('total cost', usd(p.cost), change),
    tile('token cost', usd(p.tokenCost), `${int(p.completions)} completions`),
    tile('tool cost', usd(p.toolCost), `${int(p.toolEvents)} tool events`),
    tile('traces', int(p.traces), `${int(p.records)} records`),
    tile('error rate', pct(p.errorRate), `${int(p.errors)} errors`),
    tile('latency p50 / p95', `${ms(p.latencyMs.p50)} / ${ms(p.latencyMs.p95)}`),
  )
}

function fillList(id, values) {
  $(id).replaceChildren(...[...new Set(values)].filter(Boolean).map((v) => Object.assign(document.createElement('option'), { value: v })))
}

function drawAgents(a) {
  const empty = a.agents.length === 0
  $('empty-agents').hidden = !empty
  if (empty) view.charts.agents.clear()
  else view.charts.agents.update(a.agents)
  fillList('agents-list', a.agents.map((x) => x.agent))
}

function drawTools(t) {
  const empty = t.tools.length === 0
  $('empty-tools').hidden = !empty
  $('tools-interval').textContent = `by ${t.interval}, UTC`
  if (empty) view.charts.tools.clear()
  else view.charts.tools.update(t)
  fillList('tools-list', t.tools.map((x) => x.toolId))
}

function drawDistribution(d) {
  const empty = d.count === 0
  $('empty-dist').hidden = !empty
  if (empty) view.charts.dist.clear()
  else view.charts.dist.update(d)
  $('share').textContent = d.threshold === null ? '' : `${int(d.above.count)} of ${int(d.count)} traces (${pct(d.above.share)}) cost more than ${usd(d.threshold)}`
  const items = empty ? [] : [['traces', int(d.count)], ['p50', usd(d.percentiles.p50)], ['p90', usd(d.percentiles.p90)], ['p95', usd(d.percentiles.p95)], ['p99', usd(d.percentiles.p99)], ['mean', usd(d.mean)], ['max', usd(d.max)]]
  $('percentiles').replaceChildren(...items.flatMap(([k, v]) => [Object.assign(document.createElement('dt'), { textContent: k }), Object.assign(document.createElement('dd'), { textContent: v })]))
}

function drawTraces(t) {
  $('traces-count').textContent = `${int(t.page.totalElements)} traces${t.page.totalElements > t.traces.length ? `, the first ${t.traces.length} shown` : ''}`
  const rows = t.traces.map((tr) => {
    const r = row([tr.traceId, [usd(tr.cost), 'num'], [usd(tr.tokenCost), 'num'], [usd(tr.toolCost), 'num'], utc(tr.start), [ms(tr.durationMs), 'num'], tr.agents.join(', ') || '–'])
    r.tabIndex = 0
    r.dataset.trace = tr.traceId
    if (tr.traceId === view.trace) r.className = 'selected'
    return r
  })
  $('traces').tBodies[0].replaceChildren(...rows)
}

function pick(e) {
  const tr = e.target.closest('tr[data-trace]')
  if (!tr || (e.type === 'keydown' && e.key !== 'Enter')) return
  view.trace = tr.dataset.trace
  for (const r of $('traces').tBodies[0].rows) r.classList.toggle('selected', r === tr)
  view.api.get(`analytics/traces/${encodeURIComponent(view.trace)}`).then(drawTrace, (err) => showProblems([['trace', err]]))
}
$('traces').addEventListener('click', pick)
$('traces').addEventListener('keydown', pick)

const plural = (n, word) => `${int(n)} ${word}${n === 1 ? '' : 's'}`

function drawTrace(t) {
  if (!t || t.traceId !== view.trace) return
  const box = $('trace-detail')
  const h = document.createElement('h3')
  h.textContent = t.traceId
  const facts = document.createElement('p')
  facts.className = 'muted'
  facts.textContent = `${usd(t.cost)} (token ${usd(t.tokenCost)}, tool ${usd(t.toolCost)}) · ${plural(t.completions, 'completion')}, ${plural(t.toolEvents, 'tool event')} · ${ms(t.durationMs)} · agents: ${t.agents.join(', ') || '–'}`
  const start = Date.parse(t.start)
  const span = Math.max(1, Date.parse(t.end) - start)
  const table = document.createElement('table')
  table.className = 'data records'
  table.createTHead().append(row(['UTC', 'kind', 'what', 'agent', ['cost', 'num'], ['duration', 'num'], 'timeline']))
  const body = table.createTBody()
  for (const r of t.records) {
    // The record's place in the trace, as a bar (CSSOM styles: the CSP allows no style attributes).
    const track = document.createElement('div')
    track.className = 'track'
    const bar = document.createElement('div')
    bar.className = `span ${r.kind === 'tool' ? 'tool' : 'token'}${r.error ? ' error' : ''}`
    bar.style.marginLeft = `${(100 * (Date.parse(r.eventTime) - start)) / span}%`
    bar.style.width = `${Math.max(0.5, (100 * (r.durationMs ?? 0)) / span)}%`
    track.append(bar)
    const what = r.kind === 'tool' ? `${r.toolId}${r.operation ? ` · ${r.operation}` : ''}` : `${r.provider ?? ''} ${r.model ?? ''}`.trim()
    body.append(row([r.eventTime.slice(11, 23), r.kind + (r.error ? ' (error)' : ''), what, r.agent ?? '–', [usd(r.cost), 'num'], [ms(r.durationMs), 'num'], track]))
  }
  box.replaceChildren(h, facts, table)
}

const latency = (x) => `${ms(x.latencyMs.p50)} / ${ms(x.latencyMs.p95)}`
const ttft = (x) => `${ms(x.timeToFirstTokenMs.p50)} / ${ms(x.timeToFirstTokenMs.p95)}`

function drawProviders(p) {
  $('providers').tBodies[0].replaceChildren(...p.providers.map((x) => row([x.provider, [usd(x.cost), 'num'], [int(x.requests), 'num'], [pct(x.errorRate), 'num'], [int(x.tokens.input), 'num'], [int(x.tokens.output), 'num'], [latency(x), 'num'], [ttft(x), 'num']])))
  fillList('providers-list', p.providers.map((x) => x.provider))
}

function drawModels(m) {
  $('models').tBodies[0].replaceChildren(...m.models.map((x) => row([x.provider, x.model, [usd(x.cost), 'num'], [int(x.requests), 'num'], [pct(x.errorRate), 'num'], [int(x.tokens.input), 'num'], [int(x.tokens.output), 'num'], [latency(x), 'num'], [ttft(x), 'num']])))
  fillList('models-list', m.models.map((x) => x.model))
}

function drawAlerts(a) {
  const rules = (a._embedded && Object.values(a._embedded)[0]) || []
  const state = (r) => (!r.enabled ? ['off', 'badge off'] : r.firing ? ['firing', 'badge firing'] : r.evaluatedAt ? ['ok', 'badge ok'] : ['pending', 'badge'])
  const limit = (r) => (r.alertType === 'CUMULATIVE_USAGE' && r.budgetThreshold !== null ? `budget ${r.budgetThreshold} ${r.currency ?? ''}`.trim() : `${OPERATORS[r.operatorType] ?? r.operatorType} ${r.threshold}`)
  $('alerts').tBodies[0].replaceChildren(
    ...rules.map((r) => row([state(r), r.name, `${r.metricType}${r.alertType === 'RELATIVE_CHANGE' ? ' (change %)' : ''}`, limit(r), [r.currentValue === null ? '–' : String(r.currentValue), 'num'], r.windowSeconds ? `${r.windowSeconds} s` : r.periodDuration, utc(r.evaluatedAt)])),
  )
  $('alerts-note').textContent = rules.length ? '' : 'No alert rules in this team yet (docs/alerts.md).'
}

// ---- start ---------------------------------------------------------------------------------

const saved = sessionStorage.getItem(KEY)
if (saved) signIn(saved, false)
else showLogin()
