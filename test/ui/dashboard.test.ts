/**
 * The dashboard in a real headless Chromium: sign in with a key, every chart drawn from seeded
 * records (read back from the canvas pixels, against answers computed here from the seed list),
 * the threshold line moving when the threshold is edited, live refresh, no console error and no
 * request anywhere but the daemon on 127.0.0.1. Leaves a screenshot (METERD_SCREENSHOT, else in
 * the temp dir; `npm run screenshot` writes docs/dashboard.png).
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { Decimal } from 'decimal.js'
import { chromium, type Page } from 'playwright-core'
import t from 'tap'
import { API, refAgents, refDistribution, refProviders, registerTool, seed, type SeedRecord } from '../helpers/analytics.js'
import { call, startMeterd } from '../helpers/meterd.js'

const CHROMIUM = '/usr/bin/chromium'
const skip = existsSync(CHROMIUM) ? false : `no Chromium at ${CHROMIUM}: install Debian's chromium package (.ci/run does) to run the dashboard test`
const SCREENSHOT = process.env.METERD_SCREENSHOT ? resolve(process.env.METERD_SCREENSHOT) : join(tmpdir(), 'meterd-dashboard.png')

const HOUR = 3_600_000
const REGISTERED = new Set(['search', 'scrape'])

/** mulberry32, so every run seeds the same shapes. */
function prng(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let x = a
    x = Math.imul(x ^ (x >>> 15), x | 1)
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61)
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

/**
 * 60 traces over the last 20 hours whose costs grow geometrically (so the percentile marks fall
 * far apart), agents that differ in their token/tool split, one agentless tool event per few
 * traces, and a burst of `scrape` calls 5 hours ago: that hour is scrape's peak.
 */
function dataset(now: number): SeedRecord[] {
  const rnd = prng(7)
  const out: SeedRecord[] = []
  const at = (ms: number) => new Date(ms).toISOString()
  const agents = ['planner', 'writer', 'critic']
  for (let i = 0; i < 60; i++) {
    const start = now - 20 * HOUR + i * 19 * 60_000 + 7_000
    const traceId = `tr-${String(i).padStart(2, '0')}`
    const agent = agents[i % 3]
    const cost = 0.002 * Math.pow(1.07, i)
    const share = agent === 'planner' ? 0.8 : agent === 'writer' ? 0.35 : 1
    const provider = i % 4 === 0 ? 'Anthropic' : 'OpenAI'
    const model = provider === 'Anthropic' ? 'claude-sonnet-4-5' : i % 2 ? 'gpt-4o' : 'gpt-4o-mini'
    const input = 500 + Math.floor(rnd() * 3000)
    const output = 100 + Math.floor(rnd() * 600)
    out.push({
      kind: 'completion', time: at(start), cost: (cost * share).toFixed(9), traceId, agent, provider, model, durationMs: 400 + Math.floor(rnd() * 3000), ttft: 120 + Math.floor(rnd() * 300), sendTtft: true,
      error: i % 17 === 5, tokens: { input, output, reasoning: 0, cacheRead: 0, cacheCreation: 0, total: input + output },
    })
    if (share < 1) out.push({ kind: 'tool', time: at(start + 5_000), cost: (cost * (1 - share)).toFixed(9), traceId, agent, toolId: i % 2 ? 'search' : 'scrape', durationMs: 300 + Math.floor(rnd() * 2000) })
    if (i % 4 === 1) out.push({ kind: 'tool', time: at(start + 9_000), cost: '0.0015', traceId, toolId: 'search', durationMs: 250 })
  }
  const burst = Math.floor((now - 5 * HOUR) / HOUR) * HOUR + 20 * 60_000
  for (let k = 0; k < 12; k++) out.push({ kind: 'tool', time: at(burst + k * 60_000), cost: '0.02', toolId: 'scrape', agent: 'writer', durationMs: 900 })
  return out
}

interface Plot {
  /** The plot area inside the canvas, in canvas pixels. */
  left: number
  top: number
  width: number
  height: number
  /** Per canvas column across the plot area: how many pixels have the colour, and the highest one (-1: none). */
  count: number[]
  top_: number[]
}

/** Reads the chart's canvas back: for one colour, per column of the plot area, its pixel count and topmost pixel. */
async function columns(page: Page, chart: string, hex: string, tolerance: number): Promise<Plot> {
  return page.evaluate(
    ([chart, hex, tolerance]) => {
      const wrap = document.querySelector(`#${chart} .u-wrap`) as HTMLElement
      const canvas = wrap.querySelector('canvas') as HTMLCanvasElement
      const over = wrap.querySelector('.u-over') as HTMLElement
      const dpr = canvas.width / wrap.clientWidth
      const left = Math.round(over.offsetLeft * dpr)
      const top = Math.round(over.offsetTop * dpr)
      const width = Math.round(over.offsetWidth * dpr)
      const height = Math.round(over.offsetHeight * dpr)
      const px = canvas.getContext('2d')!.getImageData(left, top, width, height).data
      const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16))
      const count = new Array(width).fill(0)
      const top_ = new Array(width).fill(-1)
      for (let y = 0; y < height; y++)
        for (let x = 0; x < width; x++) {
          const i = (y * width + x) * 4
          if (px[i + 3] > 200 && Math.abs(px[i] - r) + Math.abs(px[i + 1] - g) + Math.abs(px[i + 2] - b) <= tolerance) {
            count[x]++
            if (top_[x] === -1) top_[x] = y
          }
        }
      return { left, top, width, height, count, top_ }
    },
    [chart, hex, tolerance] as const,
  )
}

/** The largest count over the columns around x (a mark or an edge may cross the exact one). */
const around = (p: Plot, x: number, r: number) => Math.max(...p.count.slice(Math.max(0, Math.round(x) - r), Math.round(x) + r + 1))
/** Columns whose colour covers at least `share` of the plot height: vertical lines. */
const lines = (p: Plot, share: number) => {
  const xs: number[] = []
  p.count.forEach((c, x) => {
    if (c >= share * p.height && !(xs.length && x - xs[xs.length - 1] <= 1 && (xs[xs.length - 1] = x))) xs.push(x)
  })
  return xs
}
const near = (xs: number[], x: number, tol: number) => xs.some((v) => Math.abs(v - x) <= tol)

async function waitFor(t: { pass(message: string): void }, what: string, check: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const until = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 100))
  }
  t.pass(what)
}

t.test('the dashboard draws every panel from the seeded records in a real Chromium', { skip }, async (t) => {
  const m = await startMeterd(t, {
    config: {
      extensions: { alerts: { evaluation_interval_seconds: 0.5 }, dashboard: { refresh_seconds: 2 } },
    },
  })
  const key = await m.key({ team: 'team-a' })
  for (const tool of REGISTERED) await registerTool(m, key, tool)
  const now = Date.now()
  const records = dataset(now)
  await seed(m, key, records)
  const rule = (name: string, threshold: number) =>
    call(`${m.url}${API}/sources/ai/anomaly`, {
      key,
      body: { name, alertType: 'THRESHOLD', metricType: 'TOTAL_COST', operatorType: 'GREATER_THAN', threshold, periodDuration: 'DAILY', notificationAddresses: [], slackConfigurations: [], webhookConfigurations: [], enabled: true, firing: false },
    })
  t.equal((await rule('Daily spend over $1', 1)).status, 201, 'a rule that fires')
  t.equal((await rule('Daily spend over $500', 500)).status, 201, 'a rule that does not')

  // What the charts must show, from the seed list alone (the last 24 hours hold every record).
  const sel = records
  const agents = [...refAgents(sel, REGISTERED)].map(([agent, g]) => ({ agent, token: g.tokenCost.toNumber(), tool: g.toolCost.toNumber(), total: g.tokenCost.plus(g.toolCost).toNumber() }))
  agents.sort((a, b) => b.total - a.total)
  const dist = refDistribution(sel, REGISTERED)

  const profile = mkdtempSync(join(tmpdir(), 'meterd-chromium-'))
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 900 },
    deviceScaleFactor: 1,
  })
  t.teardown(async () => {
    await context.close()
    rmSync(profile, { recursive: true, force: true })
  })
  const page = context.pages()[0] ?? (await context.newPage())
  const errors: string[] = []
  const elsewhere: string[] = []
  const origin = new URL(m.url).origin
  page.on('console', (msg) => msg.type() === 'error' && errors.push(msg.text()))
  page.on('pageerror', (err) => errors.push(String(err)))
  context.on('request', (req) => new URL(req.url()).origin !== origin && elsewhere.push(req.url()))

  const started = Date.now()
  await page.goto(`${m.url}/ui`)
  await page.locator('#api-key').waitFor({ state: 'visible' })
  const timing = await page.evaluate(() => {
    const n = performance.getEntriesByType('navigation')[0] as PerformanceNavigationTiming
    return { dom: Math.round(n.domContentLoadedEventEnd), load: Math.round(n.loadEventEnd) }
  })
  t.comment(`sign-in form shown ${Date.now() - started} ms after navigation began (DOMContentLoaded ${timing.dom} ms, load ${timing.load} ms, cold)`)
  await page.fill('#api-key', 'hak_team-a_not-a-real-key-0000000000')
  await page.click('#login-form button')
  await waitFor(t, 'a wrong key is refused on the form', async () => (await page.textContent('#login-error')) === 'this key is not valid')
  // The refused request is the one console error expected: Chromium reports every 401 there.
  const refused = errors.splice(0).filter((e) => !/status of 401/.test(e))
  t.same(refused, [], 'nothing but the 401 on the console')

  await page.fill('#api-key', key)
  await page.click('#login-form button')
  await page.locator('#dashboard').waitFor({ state: 'visible' })
  t.equal(await page.evaluate(() => sessionStorage.getItem('meterd.dashboard.key')), key, 'the key is kept in sessionStorage')
  t.equal(await page.evaluate(() => localStorage.length + document.cookie.length), 0, 'and nowhere else in the browser')

  // The colours the page draws with, from the page's own module.
  const COLORS = (await page.evaluate((src) => import(src).then((c) => JSON.parse(JSON.stringify(c.COLORS))), '/ui/charts.js')) as {
    token: string; tool: string; histogram: string; percentile: string; threshold: string; lines: string[]
  }
  await waitFor(t, 'the three charts are drawn', async () => (await page.locator('.chart canvas').count()) === 3)
  // The first answer sets the threshold to p95, then the distribution is asked again with it.
  await waitFor(t, 'the share above the threshold is printed', async () => /cost more than/.test((await page.textContent('#share')) ?? ''))

  // ---- agents: one stacked bar per agent, token at the bottom, tool on top -----------------
  {
    const token = await columns(page, 'chart-agents', COLORS.token, 6)
    const tool = await columns(page, 'chart-agents', COLORS.tool, 6)
    const n = agents.length
    const heights = agents.map((_, i) => {
      const x = ((i + 0.5) / n) * token.width
      return { token: around(token, x, 3), tool: around(tool, x, 3) }
    })
    const tallest = heights[0].token + heights[0].tool
    t.ok(tallest > token.height * 0.8, `the dearest agent's bar is drawn (${tallest} of ${token.height} px)`)
    agents.forEach((a, i) => {
      const h = heights[i]
      t.ok(Math.abs(h.token + h.tool - (tallest * a.total) / agents[0].total) <= 3, `${a.agent ?? '(no agent)'}: bar height ${h.token + h.tool} px for $${a.total.toFixed(6)}`)
      t.ok(Math.abs(h.tool - (tallest * a.tool) / agents[0].total) <= 3, `${a.agent ?? '(no agent)'}: tool part ${h.tool} px for $${a.tool.toFixed(6)}`)
    })
  }

  // ---- tools over time: a line per tool, scrape's peak at its burst hour ---------------------
  {
    const burst = Math.floor((now - 5 * HOUR) / HOUR) * HOUR
    // The page asked for its own last 24 hours; should an hour turn between its question and
    // this one, the next refresh (2 s) lines the buckets up again.
    await waitFor(t, 'each tool has its line, scrape peaking at its burst hour', async () => {
      const answer = (await call(`${m.url}${API}/analytics/tools/cost-over-time?interval=hour`, { key })).body
      if (answer.tools.map((x: { toolId: string }) => x.toolId).sort().join() !== 'scrape,search') return false
      for (const [k, tool] of answer.tools.entries()) {
        const p = await columns(page, 'chart-tools', COLORS.lines[k], 60)
        // Hours without a call sit on the bottom edge, half clipped: enough columns show the colour anyway.
        if (p.count.filter((c) => c > 0).length < p.width * 0.3) return false
        if (tool.toolId !== 'scrape') continue
        let best = 0
        for (let x = 0; x < p.width; x++) if (p.top_[x] !== -1 && (p.top_[best] === -1 || p.top_[x] < p.top_[best])) best = x
        const first = Date.parse(answer.buckets[0])
        const last = Date.parse(answer.buckets[answer.buckets.length - 1])
        if (Math.abs(best - ((burst - first) / (last - first)) * p.width) > 3) return false
      }
      return true
    }, 6_000)
  }

  // ---- distribution: bars as the histogram, percentile marks, the threshold line ------------
  const distribution = async (threshold: string) => {
    const answer = (await call(`${m.url}${API}/analytics/traces/cost-distribution?threshold=${threshold}`, { key })).body
    const bounds = answer.histogram.bounds.map(Number)
    const lo = bounds[0]
    const hi = bounds[bounds.length - 1]
    const xOf = (v: number, p: Plot) => ((v - lo) / (hi - lo)) * p.width
    return { answer, bounds, xOf }
  }
  {
    t.equal((await distribution('0')).answer.count, dist.count, `the daemon sees the ${dist.count} traces`)
    const p95 = dist.p95!.toString()
    const { answer, bounds, xOf } = await distribution(p95)
    t.equal(await page.inputValue('#threshold'), new Decimal(answer.percentiles.p95).toString(), 'the threshold starts at p95')
    const bars = await columns(page, 'chart-dist', COLORS.histogram, 6)
    const counts: number[] = answer.histogram.counts
    const top = Math.max(...counts)
    const measured = counts.map((_, k) => {
      const a = xOf(bounds[k], bars)
      const b = xOf(bounds[k + 1], bars)
      return Math.max(...[0.25, 0.4, 0.6, 0.75].map((f) => around(bars, a + (b - a) * f, 0)))
    })
    const full = measured[counts.indexOf(top)]
    t.ok(full > bars.height * 0.6, `the fullest bucket is drawn (${full} px)`)
    t.ok(counts.every((c, k) => Math.abs(measured[k] - (full * c) / top) <= 3), `every bucket's bar is as tall as its count (${counts.join(',')} → ${measured.join(',')} px)`)

    const marks = lines(await columns(page, 'chart-dist', COLORS.percentile, 6), 0.3)
    const line = lines(await columns(page, 'chart-dist', COLORS.threshold, 6), 0.9)
    for (const p of ['p50', 'p90', 'p99'] as const) t.ok(near(marks, xOf(dist[p]!.toNumber(), bars), 2), `the ${p} mark is at ${dist[p]} (marks at ${marks})`)
    t.equal(line.length, 1, 'one threshold line')
    t.ok(near(line, xOf(dist.p95!.toNumber(), bars), 2), `the threshold line is at p95 = ${dist.p95} (x ${line})`)
    const before = line[0]

    // Edit the threshold: the line moves to the new amount, the share is asked again.
    const edited = new Decimal(dist.p50!).plus(dist.p90!).div(2).toDecimalPlaces(4).toString()
    const expectAbove = dist.costs.filter((c) => c.gt(edited)).length
    await page.fill('#threshold', edited)
    await page.press('#threshold', 'Enter')
    const share = `${expectAbove} of ${dist.count} traces (${((expectAbove / dist.count) * 100).toFixed(1)} %) cost more than $${edited}`
    await waitFor(t, `the share reads "${share}"`, async () => (await page.textContent('#share')) === share)
    const moved = lines(await columns(page, 'chart-dist', COLORS.threshold, 6), 0.9)
    t.equal(moved.length, 1, 'still one threshold line')
    t.ok(near(moved, xOf(Number(edited), bars), 2), `the line moved to ${edited} (x ${before} → ${moved})`)
    t.ok(moved[0] < before - 20, 'to the left, as the new threshold is lower')
    const marks2 = lines(await columns(page, 'chart-dist', COLORS.percentile, 6), 0.3)
    for (const p of ['p50', 'p90', 'p95', 'p99'] as const) t.ok(near(marks2, xOf(dist[p]!.toNumber(), bars), 2), `the ${p} mark stays at ${dist[p]}`)
    const bad = await page.fill('#threshold', '1,5').then(() => page.press('#threshold', 'Enter')).then(() => page.textContent('#threshold-error'))
    t.equal(bad, 'a USD amount such as 0.25', 'a malformed threshold is refused in the page, not sent')
    await page.fill('#threshold', edited)
    await page.press('#threshold', 'Enter')
    t.equal(await page.textContent('#threshold-error'), '', 'and the message goes once it is corrected')
  }

  // ---- tables: traces and one trace's detail, providers and models, alerts ------------------
  {
    const dearest = [...(await import('../helpers/analytics.js')).refTraceCosts(sel, REGISTERED)].sort((a, b) => b[1].comparedTo(a[1]))[0]
    const rows = page.locator('#traces tbody tr')
    t.equal(await rows.count(), Math.min(50, dist.count), 'the first 50 traces are listed')
    t.equal(await page.textContent('#traces-count'), `${dist.count} traces, the first 50 shown`)
    t.equal(await rows.first().locator('td').first().textContent(), dearest[0], 'the dearest trace first')
    t.equal(await rows.first().locator('td').nth(1).textContent(), `$${dearest[1].toString()}`, 'with its exact cost')
    // The dearest trace with a tool event: its detail lists a completion and a tool call.
    const withTool = [...(await import('../helpers/analytics.js')).refTraceCosts(sel, REGISTERED)]
      .sort((a, b) => b[1].comparedTo(a[1]))
      .map(([id]) => id)
      .find((id) => sel.some((r) => r.traceId === id && r.kind === 'tool'))!
    await page.locator(`#traces tbody tr[data-trace="${withTool}"]`).click()
    const expected = sel.filter((r) => r.traceId === withTool).sort((a, b) => Date.parse(a.time) - Date.parse(b.time))
    await waitFor(t, `the trace's ${expected.length} records are shown`, async () => (await page.locator('#trace-detail tbody tr').count()) === expected.length)
    t.equal(await page.textContent('#trace-detail h3'), withTool, 'under the trace\'s id')
    const kinds = await page.locator('#trace-detail tbody tr td:nth-child(2)').allTextContents()
    t.same(kinds, expected.map((r) => r.kind), 'in time order, completion and tool events together')
    const bars = await page.locator('#trace-detail .span').count()
    t.equal(bars, expected.length, 'each with its bar on the timeline')

    const providers = refProviders(sel, REGISTERED, 'provider')
    const shown = await page.locator('#providers tbody tr td:first-child').allTextContents()
    t.same(shown.sort(), [...providers.keys()].sort(), 'a row per provider')
    const models = refProviders(sel, REGISTERED, 'model')
    t.equal(await page.locator('#models tbody tr').count(), models.size, 'a row per model')

    await waitFor(t, 'the alerts show their state', async () => {
      const states = await page.locator('#alerts tbody tr').evaluateAll((trs) => trs.map((tr) => `${tr.children[1].textContent}: ${tr.children[0].textContent}`))
      return states.sort().join(' | ') === 'Daily spend over $1: firing | Daily spend over $500: ok'
    })
  }

  // ---- live: a new agent's record appears without a reload ----------------------------------
  const barsNow = (p: Plot) => p.count.reduce((n, c, x) => n + (c > 0 && (x === 0 || p.count[x - 1] === 0) ? 1 : 0), 0)
  {
    const before = barsNow(await columns(page, 'chart-agents', COLORS.token, 6))
    await seed(m, key, [{ kind: 'completion', time: new Date(Date.now() - 60_000).toISOString(), cost: '0.05', agent: 'latecomer', traceId: 'late-1', durationMs: 500 }])
    await waitFor(t, 'the new agent gets its bar within two refreshes', async () => barsNow(await columns(page, 'chart-agents', COLORS.token, 6)) === before + 1, 6_000)
    t.ok((await page.textContent('#status'))!.startsWith('updated'), 'the status line says when it updated')
  }

  // ---- a filter applies to every panel ----------------------------------------------------------
  {
    await page.click('#filters summary')
    await page.fill('input[name="agent"]', 'critic')
    const critic = refDistribution(sel.filter((r) => r.agent === 'critic'), REGISTERED)
    await waitFor(t, 'the agent filter narrows the distribution', async () => new RegExp(` of ${critic.count} traces`).test((await page.textContent('#share')) ?? ''))
    await waitFor(t, 'one bar, critic\'s, fills the agents chart', async () => {
      const token = await columns(page, 'chart-agents', COLORS.token, 6)
      return barsNow(token) === 1 && around(token, token.width / 2, 2) > token.height * 0.8
    })
    t.equal(await page.locator('#traces tbody tr').count(), critic.count, 'the trace list holds critic\'s traces only')
    t.ok(await page.locator('#empty-tools').isVisible(), 'and the tool chart says critic called no tool')
    await page.click('#filters button[type="reset"]')
    await page.click('#filters summary')
  }

  // The page at its top (the header is sticky), the pointer off the charts.
  await page.evaluate(() => window.scrollTo(0, 0))
  await page.mouse.move(0, 0)
  await page.screenshot({ path: SCREENSHOT, fullPage: true })
  t.comment(`screenshot: ${SCREENSHOT}`)

  // ---- another team's key, analytics only: its own (empty) data, and no alert rules ----------
  {
    await page.click('#logout')
    await page.locator('#login').waitFor({ state: 'visible' })
    t.equal(await page.evaluate(() => sessionStorage.getItem('meterd.dashboard.key')), null, 'signing out forgets the key')
    const other = await m.key({ team: 'team-b', scopes: ['analytics:read'] })
    await page.fill('#api-key', other)
    await page.click('#login-form button')
    await waitFor(t, 'team-b sees none of team-a\'s records', async () =>
      (await page.locator('#empty-agents').isVisible()) && (await page.locator('#empty-tools').isVisible()) && (await page.locator('#empty-dist').isVisible()))
    t.equal(await page.locator('.chart canvas').count(), 0, 'and no chart is drawn from nothing')
    t.equal(await page.locator('#traces tbody tr').count(), 0, 'no trace listed')
    await waitFor(t, 'the alerts panel says the key cannot read rules', async () => /platform:read/.test((await page.textContent('#alerts-note')) ?? ''))
    t.equal(await page.locator('#banner').isVisible(), false, 'which is no error banner')
    // The alerts request is refused with a 403 (Chromium reports it on the console), nothing else.
    const rest = errors.filter((e) => !/status of 403/.test(e))
    errors.length = 0
    errors.push(...rest)
  }
  t.same(errors, [], 'no console errors')
  t.same(elsewhere, [], 'no request left the daemon on 127.0.0.1')
})
