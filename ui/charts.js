// The dashboard's three charts, drawn by uPlot on <canvas>: token vs tool cost per agent (stacked
// bars), tool cost over time (a line per tool), and the trace cost distribution (a histogram with
// the percentile marks and the threshold line). Each chart keeps its latest answer in `state`,
// which the axis, legend and draw callbacks read, so new data is a setData, not a new chart.
import uPlot from './vendor/uPlot.esm.js'
import { usd, usdTick } from './format.js'

export const COLORS = Object.freeze({
  token: '#4e79a7',
  tool: '#f28e2b',
  histogram: '#76b7b2',
  percentile: '#7b3294',
  threshold: '#d62728',
  lines: Object.freeze(['#e15759', '#59a14f', '#4e79a7', '#b07aa1', '#f28e2b', '#76b7b2', '#edc948', '#9c755f', '#ff9da7', '#bab0ac']),
})

const HEIGHT = 260
const AXIS = { stroke: '#374151', grid: { stroke: '#e5e7eb', width: 1 }, ticks: { stroke: '#d1d5db', width: 1 } }
const utcDate = (ts) => uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC')
const pad = (n) => String(n).padStart(2, '0')
/** Time ticks in UTC, 24-hour: `14:00`, with the date under midnight and on the first tick; `11-25` by the day. */
function timeTicks(u, splits) {
  const step = splits.length > 1 ? splits[1] - splits[0] : 0
  return splits.map((ts, i) => {
    const d = new Date(ts * 1000)
    const day = `${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`
    if (step >= 86_400) return day
    const hm = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}`
    return i === 0 || (d.getUTCHours() === 0 && d.getUTCMinutes() === 0) ? `${hm}\n${day}` : hm
  })
}
const short = (s, n = 16) => (s.length > n ? s.slice(0, n - 1) + '…' : s)

class Chart {
  constructor(el, options) {
    this.el = el
    this.options = options
    this.u = undefined
    this.shape = ''
    new ResizeObserver(() => this.u && this.u.setSize({ width: this.width(), height: HEIGHT })).observe(el)
  }

  width() {
    return Math.max(240, this.el.clientWidth)
  }

  /** New data; the chart is rebuilt only when its series change (`shape`). */
  draw(data, shape) {
    if (!this.u || shape !== this.shape) {
      if (this.u) this.u.destroy()
      this.u = new uPlot(this.options(this.width()), data, this.el)
      this.shape = shape
    } else this.u.setData(data)
  }

  clear() {
    if (this.u) this.u.destroy()
    this.u = undefined
    this.shape = ''
  }
}

/** Token vs tool cost per agent: one bar per agent, token cost at the bottom, tool cost on top. */
export class AgentsChart extends Chart {
  constructor(el) {
    const state = { agents: [] }
    const name = (a) => (a.agent === null ? '(no agent)' : a.agent)
    super(el, (width) => ({
      width,
      height: HEIGHT,
      legend: { live: true },
      cursor: { points: { show: false }, drag: { x: false, y: false } },
      scales: { x: { time: false, range: () => [-0.5, Math.max(1, state.agents.length) - 0.5] }, y: { range: (u, min, max) => [0, max > 0 ? max * 1.08 : 1] } },
      axes: [
        { ...AXIS, grid: { show: false }, splits: () => state.agents.map((_, i) => i), values: (u, splits) => splits.map((i) => (state.agents[i] ? short(name(state.agents[i])) : '')) },
        { ...AXIS, size: 64, values: (u, splits) => splits.map(usdTick) },
      ],
      series: [
        { label: 'agent', value: (u, i) => (i === null || !state.agents[i] ? '–' : name(state.agents[i])) },
        // Drawn first at the agent's total, then covered from 0 by its token cost: what shows is the tool cost.
        { label: 'tool cost', fill: COLORS.tool, stroke: COLORS.tool, width: 0, points: { show: false }, paths: uPlot.paths.bars({ size: [0.6, 72] }), value: (u, v, s, i) => (i === null ? '–' : usd(state.agents[i].toolCost)) },
        { label: 'token cost', fill: COLORS.token, stroke: COLORS.token, width: 0, points: { show: false }, paths: uPlot.paths.bars({ size: [0.6, 72] }), value: (u, v, s, i) => (i === null ? '–' : usd(state.agents[i].tokenCost)) },
      ],
    }))
    this.state = state
  }

  /** @param agents the `agents` of GET analytics/agents/cost */
  update(agents) {
    this.state.agents = agents
    const x = agents.map((_, i) => i)
    this.draw([x, agents.map((a) => Number(a.totalCost)), agents.map((a) => Number(a.tokenCost))], 'agents')
  }
}

/** Tool cost over time: a line per tool over the answer's buckets (UTC). */
export class ToolsChart extends Chart {
  constructor(el) {
    const state = { tools: [] }
    super(el, (width) => ({
      width,
      height: HEIGHT,
      tzDate: utcDate,
      cursor: { drag: { x: true, y: false } },
      scales: { y: { range: (u, min, max) => [0, max > 0 ? max * 1.08 : 1] } },
      axes: [{ ...AXIS, values: timeTicks }, { ...AXIS, size: 64, values: (u, splits) => splits.map(usdTick) }],
      series: [
        { label: 'UTC' },
        ...state.tools.map((t, k) => ({
          label: t.toolId,
          stroke: COLORS.lines[k % COLORS.lines.length],
          width: 2,
          value: (u, v, s, i) => (i === null ? '–' : usd(state.tools[k].series[i].cost)),
        })),
      ],
    }))
    this.state = state
  }

  /** @param answer GET analytics/tools/cost-over-time */
  update(answer) {
    this.state.tools = answer.tools
    const x = answer.buckets.map((b) => Date.parse(b) / 1000)
    const data = [x, ...answer.tools.map((t) => t.series.map((p) => Number(p.cost)))]
    this.draw(data, answer.tools.map((t) => t.toolId).join('\n') + '\n' + answer.interval)
  }
}

/**
 * The trace cost distribution: the histogram's buckets as bars, a dashed mark at p50, p90, p95
 * and p99, and the threshold as a solid line. Marks are whole device pixels wide so they stay
 * their exact colour.
 */
export class DistributionChart extends Chart {
  constructor(el) {
    const state = { answer: undefined, lo: 0, hi: 1 }
    super(el, (width) => ({
      width,
      height: HEIGHT,
      legend: { show: false },
      cursor: { points: { show: false }, drag: { x: false, y: false } },
      scales: { x: { time: false, range: () => [state.lo, state.hi] }, y: { range: (u, min, max) => [0, Math.max(1, max) * 1.15] } },
      axes: [
        { ...AXIS, values: (u, splits) => splits.map(usdTick) },
        { ...AXIS, size: 48, values: (u, splits) => splits.map((v) => (Number.isInteger(v) ? String(v) : '')) },
      ],
      series: [
        {},
        { label: 'traces', fill: COLORS.histogram, stroke: COLORS.histogram, width: 0, points: { show: false }, paths: uPlot.paths.bars({ align: 1, size: [1, Infinity], gap: 1 }) },
      ],
      hooks: { draw: [(u) => marks(u, state)] },
    }))
    this.state = state
  }

  /** @param answer GET analytics/traces/cost-distribution */
  update(answer) {
    const s = this.state
    s.answer = answer
    const bounds = answer.histogram.bounds.map(Number)
    s.lo = bounds[0]
    s.hi = bounds[bounds.length - 1]
    const t = answer.threshold === null ? null : Number(answer.threshold)
    // A threshold beyond the dearest trace stays in view.
    if (t !== null && t > s.hi) s.hi = t + (s.hi - s.lo) * 0.03
    if (t !== null && t < s.lo) s.lo = Math.max(0, t - (s.hi - s.lo) * 0.03)
    this.draw([bounds, [...answer.histogram.counts, null]], 'distribution')
  }
}

function marks(u, state) {
  const a = state.answer
  if (!a || a.count === 0) return
  const { ctx, bbox } = u
  const px = devicePixelRatio || 1
  const w = Math.max(2, Math.round(2 * px))
  ctx.save()
  ctx.font = `${Math.round(11 * px)}px system-ui, sans-serif`
  ctx.textBaseline = 'top'
  const xAt = (v) => Math.round(u.valToPos(v, 'x', true))
  const names = ['p50', 'p90', 'p95', 'p99']
  names.forEach((p, k) => {
    const x = xAt(Number(a.percentiles[p]))
    ctx.fillStyle = COLORS.percentile
    for (let y = bbox.top; y < bbox.top + bbox.height; y += 8 * px) ctx.fillRect(x - w / 2, y, w, Math.min(4 * px, bbox.top + bbox.height - y))
    ctx.fillText(p, x + 3 * px, bbox.top + 2 * px + k * 13 * px)
  })
  if (a.threshold !== null) {
    const x = xAt(Number(a.threshold))
    ctx.fillStyle = COLORS.threshold
    ctx.fillRect(x - w / 2, bbox.top, w, bbox.height)
    const label = `threshold ${usd(a.threshold)}`
    const tw = ctx.measureText(label).width
    const right = x + 4 * px + tw < bbox.left + bbox.width
    ctx.fillText(label, right ? x + 4 * px : x - 4 * px - tw, bbox.top + bbox.height - 16 * px)
  }
  ctx.restore()
}
